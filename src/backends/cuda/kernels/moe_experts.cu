// MoE down projection + weighted combine + residual add in one pass: one warp per output row of
// one token; its lanes walk the (slot, chunk) pairs of all that token's experts.
// Reference: spec section 2.5 steps 5-8.   Test: tests/kernels/moe_experts_test.cu
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/moe_experts.h"

namespace flint::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxSlots = 32;

template <DType W>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_kernel(float* __restrict__ h, int64_t h_stride, const float* __restrict__ act,
                    const int32_t* __restrict__ ids, const float* __restrict__ weights, int slots,
                    LinearRef down) {
  using C = dev::Chunk<W>;
  __shared__ float coef[kMaxSlots];
  __shared__ int32_t eid[kMaxSlots];
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [slots, padded_len(in)]: this token's act rows
  const int t = blockIdx.y;
  if (threadIdx.x < slots) {
    eid[threadIdx.x] = ids[t * slots + threadIdx.x];
    coef[threadIdx.x] = weights[t * slots + threadIdx.x];
  }
  const int64_t PK = dev::padded_len(down.in);
  for (int p = 0; p < slots; ++p) {
    const float* ar = act + (int64_t(t) * slots + p) * down.in;
    for (int64_t k = threadIdx.x; k < down.in; k += kWarps * 32)
      xs[p * PK + dev::pad_idx(k)] = ar[k];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= down.out) return;
  const int chunks = static_cast<int>(down.in / C::kElems);
  float acc = 0.0f;
  for (int i = lane; i < slots * chunks; i += 32) {
    const int p = i / chunks;
    const int c = i - p * chunks;
    const int64_t row = int64_t(eid[p]) * down.out + r;
    C w;
    w.load(down, row, c);
    const float* xp = xs + p * PK + dev::pad_idx(int64_t(c) * C::kElems);
    acc += coef[p] * dev::row_scale(down, row) * w.dot(xp, nullptr);
  }
  acc = dev::warp_sum(acc);
  if (lane == 0) h[int64_t(t) * h_stride + r] += acc;
}

}  // namespace

void moe_down(float* h, int64_t h_stride, const float* act, const int32_t* ids,
              const float* weights, int num_tokens, int slots, const LinearRef& down,
              cudaStream_t s) {
  FLINT_CHECK(slots > 0 && slots <= kMaxSlots, "moe_down: {} slots (max {})", slots, kMaxSlots);
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(down.out, kWarps)),
                  static_cast<unsigned>(num_tokens));
  const size_t smem = size_t(slots) * dev::padded_len(down.in) * sizeof(float);
  FLINT_CHECK(smem <= 48 * 1024, "moe_down: {} slots of {} do not fit in shared memory", slots,
              down.in);
  switch (down.dtype) {
    case DType::kBF16:
      FLINT_CHECK(down.in % 8 == 0, "moe_down: in {} % 8", down.in);
      moe_down_kernel<DType::kBF16>
          <<<grid, kWarps * 32, smem, s>>>(h, h_stride, act, ids, weights, slots, down);
      break;
    case DType::kNVFP4:
      FLINT_CHECK(down.in % 64 == 0, "moe_down: in {} % 64", down.in);
      moe_down_kernel<DType::kNVFP4>
          <<<grid, kWarps * 32, smem, s>>>(h, h_stride, act, ids, weights, slots, down);
      break;
    case DType::kF32:
      FLINT_CHECK(down.in % 4 == 0, "moe_down: in {} % 4", down.in);
      moe_down_kernel<DType::kF32>
          <<<grid, kWarps * 32, smem, s>>>(h, h_stride, act, ids, weights, slots, down);
      break;
    default:
      FLINT_FAIL("moe_down: unsupported weight dtype {}", down.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
