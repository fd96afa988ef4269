// floor(i / n) for small non-negative ints by one f32 multiply, shared by host tests and kernels.
// Test: tests/unit/cuda/small_div_test.cpp
#pragma once

#if defined(__CUDACC__)
#define FLINT_HOST_DEVICE __host__ __device__
#else
#define FLINT_HOST_DEVICE
#endif

namespace flint::cuda::dev {

// floor(i / n) for 0 <= i < 2^22 and n >= 1, with inv_n = 1 / n rounded to nearest (1.0f / n on
// the host, __frcp_rn on the device): (i + 0.5) / n is at least 0.5 / n from an integer, and the
// f32 sum (exact) and two roundings err by less than (i + 0.5) / n x 2^-23. About four
// instructions where a signed integer division took fifteen (scripts/sass-mix.sh).
FLINT_HOST_DEVICE inline int small_div(int i, float inv_n) {
  return static_cast<int>((static_cast<float>(i) + 0.5f) * inv_n);
}

}  // namespace flint::cuda::dev
