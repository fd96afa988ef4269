// Read-only bandwidth probe: 16-byte loads, grid-stride, one f32 sum per block.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/read_stream.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocks = 132 * 8;

__global__ void __launch_bounds__(kThreads)
    read_stream_kernel(const uint4* __restrict__ src, int64_t n, float* __restrict__ sink) {
  uint32_t x = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(kBlocks) * kThreads) {
    const uint4 v = __ldcs(src + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  const float f = dev::warp_sum(static_cast<float>(x & 0xffff));
  if (threadIdx.x == 0) sink[blockIdx.x] = f;
}

}  // namespace

int read_stream_blocks() { return kBlocks; }

void read_stream(const void* src, int64_t bytes, float* sink, cudaStream_t s) {
  FLINT_CHECK(bytes % 16 == 0, "read_stream: {} bytes is not a multiple of 16", bytes);
  read_stream_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
