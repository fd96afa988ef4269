// Helpers for the GPU tests: the skip macro, device arrays, random host data.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/kernels/gemv.h"
#include "core/dtype.h"

// Skips the test on machines without a CUDA device (CI); the GPU machine runs `ctest -L gpu`.
#define FLINT_REQUIRE_GPU()                                                   \
  do {                                                                        \
    if (!::flint::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace flint::cuda::testing {

// Sets a GEMV experiment mode through its setter (which returns the mode it replaced) for a
// scope, and puts back what was there.
template <typename T, T (*kSet)(T)>
struct ScopedMode {
  T before;
  explicit ScopedMode(T mode) : before(kSet(mode)) {}
  ~ScopedMode() { kSet(before); }
  ScopedMode(const ScopedMode&) = delete;
  ScopedMode& operator=(const ScopedMode&) = delete;
};
// Where the GEMVs take the narrow tensor-core path (gemv.h's kNarrow* bits).
using NarrowMode = ScopedMode<unsigned, set_gemv_narrow>;
// Where the one-row GEMV runs as one wave (gemv.h's kGemvWave* modes).
using WaveMode = ScopedMode<int, set_gemv_wave>;

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : buf_(must_allocate(n * sizeof(T) + 16)), n_(n) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    FLINT_CUDA_CHECK(cudaMemcpy(buf_.data(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    // A pageable copy may return before its DMA has landed; kernels on a non-blocking stream
    // would not wait for it (DecodeAttention.FusedMatchesSeparateKernels, whose early-dependents
    // case runs on such a stream, failed 6-9 checks in 15 repeats under four concurrent test
    // processes, none alone; none with this wait).
    FLINT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  T* get() const { return buf_.as<T>(); }
  std::vector<T> to_host() const {
    std::vector<T> h(n_);
    FLINT_CUDA_CHECK(cudaDeviceSynchronize());
    FLINT_CUDA_CHECK(cudaMemcpy(h.data(), buf_.data(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  DeviceBuffer buf_;
  size_t n_;
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Random weight bytes for W[out, in] in `dt`: F32 and BF16 uniform in [-0.5, 0.5); NVFP4 valid ggml
// blocks (4 UE4M3 scale bytes in [scale_lo, scale_lo + scale_span), then random E2M1 codes).
inline std::vector<uint8_t> random_weight(DType dt, int64_t out, int64_t in, uint64_t seed,
                                          uint8_t scale_lo = 0x20, int scale_span = 0x20) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> bytes(dtype_bytes_for(dt, out * in));
  if (dt == DType::kF32) {
    auto f = random_floats(out * in, seed, -0.5f, 0.5f);
    std::memcpy(bytes.data(), f.data(), bytes.size());
  } else if (dt == DType::kBF16) {
    auto f = random_floats(out * in, seed, -0.5f, 0.5f);
    for (int64_t i = 0; i < out * in; ++i) {
      const uint16_t h = f32_to_bf16(f[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = (i % 36) < 4 ? static_cast<uint8_t>(scale_lo + g() % scale_span)
                              : static_cast<uint8_t>(g());
    }
  }
  return bytes;
}

// Largest |a - b| / (atol + rtol |b|); <= 1 means within tolerance.
inline double worst_ratio(const std::vector<float>& a, const std::vector<float>& b, double atol,
                          double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (atol + rtol * std::abs(double(b[i]))));
  }
  return worst;
}

}  // namespace flint::cuda::testing
