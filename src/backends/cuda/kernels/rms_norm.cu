// RMSNorm: one block per token row; sums in f32. Reference: tests/kernels/reference.h
// Test: tests/kernels/rms_norm_test.cu
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/rms_norm.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(float* __restrict__ out, int64_t out_stride, const float* __restrict__ x,
                    int64_t x_stride, const int32_t* __restrict__ rows,
                    const float* __restrict__ weight, int64_t hidden, float eps) {
  __shared__ float partial[kThreads / 32];
  const int64_t src = rows != nullptr ? rows[blockIdx.x] : blockIdx.x;
  const float* xr = x + src * x_stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) ss += xr[i] * xr[i];
  ss = dev::warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = rsqrtf(total / static_cast<float>(hidden) + eps);
  float* o = out + int64_t(blockIdx.x) * out_stride;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) o[i] = xr[i] * inv * weight[i];
}

}  // namespace

void rms_norm(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* weight,
              int num_tokens, int64_t hidden, float eps, cudaStream_t s) {
  if (num_tokens == 0) return;
  rms_norm_kernel<<<num_tokens, kThreads, 0, s>>>(out, out_stride, x, x_stride, nullptr, weight,
                                                  hidden, eps);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void rms_norm_rows(float* out, int64_t out_stride, const float* x, int64_t x_stride,
                   const int32_t* rows, const float* weight, int num_rows, int64_t hidden,
                   float eps, cudaStream_t s) {
  if (num_rows == 0) return;
  rms_norm_kernel<<<num_rows, kThreads, 0, s>>>(out, out_stride, x, x_stride, rows, weight, hidden,
                                                eps);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
