// FLINT_CUDA_CHECK and small helpers for kernel files. Kept free of core/result.h so that .cu files
// never parse fmt's consteval format strings (nvcc 13 rejects some of them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"

// A CUDA fault is a bug or a dead device: log file:line and abort.
#define FLINT_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t flint_cuda_err_ = (expr);                                                 \
    if (flint_cuda_err_ != cudaSuccess) [[unlikely]] {                                          \
      ::flint::detail::check_failed(                                                            \
          __FILE__, __LINE__, #expr,                                                            \
          ::fmt::format(::fmt::runtime("cuda error {}: {}"), cudaGetErrorName(flint_cuda_err_), \
                        cudaGetErrorString(flint_cuda_err_)));                                  \
    }                                                                                           \
  } while (0)

namespace flint::cuda {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace flint::cuda
