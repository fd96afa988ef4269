// RMSNorm over the last dim, f32 in and out, f32 weight. Test: tests/kernels/rms_norm_test.cu
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight. x, out: [num_tokens, hidden] f32
// (row strides x_stride / out_stride); weight: [hidden] f32.
void rms_norm(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* weight,
              int num_tokens, int64_t hidden, float eps, cudaStream_t s);

// The same over gathered rows: out[i, :] = rmsnorm(x[rows[i], :]). rows: [num_rows] int32 (device).
void rms_norm_rows(float* out, int64_t out_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, const float* weight, int num_rows, int64_t hidden,
                   float eps, cudaStream_t s);

}  // namespace flint::cuda
