// Random fills behind dummy weights and tests. Test: tests/kernels/device_test.cu
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/fill.h"

namespace flint::cuda {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__device__ __forceinline__ float unit_float(uint64_t seed, int64_t i) {
  const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* dst, int64_t n, float amp, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16((2.0f * unit_float(seed, i) - 1.0f) * amp);
  }
}

__global__ void fill_uniform_f32_kernel(float* dst, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = lo + (hi - lo) * unit_float(seed, i);
  }
}

__global__ void fill_random_bytes_kernel(uint8_t* dst, int64_t n, int lo, int span, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<uint8_t>(lo + mix64(seed * 0x9e3779b97f4a7c15ull + i) % span);
  }
}

int fill_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>(ceil_div(n, 256), 8192)); }

}  // namespace

void fill_uniform_bf16(void* dst, int64_t n, float amp, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_bf16_kernel<<<fill_blocks(n), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n, amp,
                                                          seed);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void fill_uniform_f32(float* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_f32_kernel<<<fill_blocks(n), 256, 0, s>>>(dst, n, lo, hi, seed);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void fill_random_bytes(uint8_t* dst, int64_t n, uint8_t lo, uint8_t hi, uint64_t seed,
                       cudaStream_t s) {
  if (n == 0) return;
  FLINT_CHECK(hi >= lo, "fill_random_bytes: hi {} < lo {}", hi, lo);
  fill_random_bytes_kernel<<<fill_blocks(n), 256, 0, s>>>(dst, n, lo, int(hi) - int(lo) + 1, seed);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
