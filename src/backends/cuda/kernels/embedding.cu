// Embedding gather: one block per token. Test: tests/kernels/embedding_test.cu
#include <cuda_bf16.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/embedding.h"

namespace flint::cuda {
namespace {

template <typename T>
__global__ void embedding_kernel(float* __restrict__ out, const T* __restrict__ table,
                                 const int32_t* __restrict__ token_ids, int64_t hidden) {
  const int64_t id = token_ids[blockIdx.x];
  const T* row = table + id * hidden;
  float* o = out + int64_t(blockIdx.x) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    if constexpr (std::is_same_v<T, float>) {
      o[i] = row[i];
    } else {
      o[i] = __bfloat162float(row[i]);
    }
  }
}

}  // namespace

void embedding(float* out, const void* table, DType dtype, const int32_t* token_ids, int num_tokens,
               int64_t hidden, cudaStream_t s) {
  if (num_tokens == 0) return;
  switch (dtype) {
    case DType::kF32:
      embedding_kernel<float>
          <<<num_tokens, 256, 0, s>>>(out, static_cast<const float*>(table), token_ids, hidden);
      break;
    case DType::kBF16:
      embedding_kernel<__nv_bfloat16><<<num_tokens, 256, 0, s>>>(
          out, static_cast<const __nv_bfloat16*>(table), token_ids, hidden);
      break;
    default:
      FLINT_FAIL("embedding: unsupported dtype {}", dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
