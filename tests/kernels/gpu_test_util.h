// Helpers for the GPU tests: the skip macro, device arrays, random host data.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backends/cuda/device.h"

// Skips the test on machines without a CUDA device (CI); the GPU machine runs `ctest -L gpu`.
#define FLINT_REQUIRE_GPU()                                                   \
  do {                                                                        \
    if (!::flint::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace flint::cuda::testing {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : buf_(must_allocate(n * sizeof(T) + 16)), n_(n) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    FLINT_CUDA_CHECK(cudaMemcpy(buf_.data(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
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
