// copy_words: one small grid, a word per thread (see copy_words.h).
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/copy_words.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    copy_words_kernel(int32_t* __restrict__ dst, const int32_t* __restrict__ src, int64_t n,
                      const int32_t* __restrict__ overlay, int64_t overlay_n) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    dst[i] = i < overlay_n ? overlay[i] : src[i];
  }
}

}  // namespace

void copy_words(int32_t* dst, const int32_t* src, int64_t n, cudaStream_t s, const int32_t* overlay,
                int64_t overlay_n) {
  if (n <= 0) return;
  if (overlay == nullptr) overlay_n = 0;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 64);
  copy_words_kernel<<<static_cast<int>(blocks), kThreads, 0, s>>>(dst, src, n, overlay, overlay_n);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
