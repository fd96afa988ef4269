// Row arg max: one block per row, a (value, index) reduction. Test: tests/kernels/argmax_test.cu
#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/argmax.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void take_better(float& v, int64_t& i, float ov, int64_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(int32_t* __restrict__ ids, const float* __restrict__ logits, int64_t vocab) {
  __shared__ float sv[kThreads / 32];
  __shared__ int64_t si[kThreads / 32];
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  float v = -FLT_MAX;
  int64_t idx = vocab;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) take_better(v, idx, row[j], j);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    take_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  if ((threadIdx.x & 31) == 0) {
    sv[threadIdx.x >> 5] = v;
    si[threadIdx.x >> 5] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) take_better(v, idx, sv[w], si[w]);
    ids[blockIdx.x] = static_cast<int32_t>(idx < vocab ? idx : 0);
  }
}

}  // namespace

void argmax(int32_t* ids, const float* logits, int num_rows, int64_t vocab, cudaStream_t s) {
  if (num_rows == 0) return;
  argmax_kernel<<<num_rows, kThreads, 0, s>>>(ids, logits, vocab);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
