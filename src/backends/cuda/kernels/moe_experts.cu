// MoE down projection + weighted combine + residual add in one pass: each warp computes one output
// row of one token (or half of its items: one NVFP4 token); its lanes walk the (slot, chunk) pairs
// of all that token's experts, the first weight loads in flight while the activations are staged.
// Launched with PDL.
// Reference: spec section 2.5 steps 5-8 (cpu::moe).   Test: tests/kernels/moe_test.cpp
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/moe_down.cuh"
#include "backends/cuda/kernels/moe_experts.h"

namespace flint::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxSlots = 32;
// moe_down's bounded wait for the gate/up kernel's picks (`ready`) before its PDL wait, in polls
// about 100 ns apart: the picks come ~2-3 us into the gate/up kernel; past the bound the block
// reads them after the wait instead.
constexpr int kReadySpins = 4096;

// Blocks per SM the registers must allow: three for NVFP4 at two rows per warp and for U 4 (NVFP4,
// one token: 256 blocks), four for U 2 (two tokens: 512 blocks, one wave) and for BF16 at two rows
// (512 blocks at b4: at three per SM they took two waves, b4 +2.4%); BF16's U 8 (one token) is
// not capped.
template <DType W, int U, int kR>
constexpr int down_min_blocks() {
  if ((kR > 1 && W == DType::kNVFP4) || U == 4) return 3;
  return U <= 2 ? 4 : 1;
}

// kR output rows per warp: one at batch 1-2 (many light warps, see gemv_core.cuh), two from 3.
// kSplit warps share each row (kWarps rows a block of kSplit * kWarps warps): warp w takes row
// w % kWarps and half w / kWarps of each pass's items; the halves are added in shared memory.
template <DType W, int U, int kR, int kSplit = 1>
__global__ void __launch_bounds__(kSplit* kWarps * 32, kSplit > 1 ? 2 : down_min_blocks<W, U, kR>())
    moe_down_kernel(float* __restrict__ h, int64_t h_stride, const float* __restrict__ act,
                    const int32_t* __restrict__ ids, const float* __restrict__ weights, int slots,
                    LinearRef down, const int32_t* ready, int expected) {
  using C = dev::Chunk<W>;
  __shared__ float coef[kMaxSlots];
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [slots, padded_len(in)]: this token's act rows
  dev::ktrace_begin(KTag::kMoeDown);
  dev::pdl_launch_dependents();
  const int t = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int half = warp / kWarps;  // 0 unless kSplit > 1
  const int64_t r0 = (int64_t(blockIdx.x) * kWarps + warp % kWarps) * kR;
  const int chunks = static_cast<int>(down.in / C::kElems);
  const int total = slots * chunks;  // < 2^14 (moe_down's shared-memory check): small_div is exact
  const float inv_chunks = __frcp_rn(static_cast<float>(chunks));
  const int32_t* tok_ids = ids + int64_t(t) * slots;
  // Lane work item i is chunk i % chunks of slot i / chunks.
  C w[kR][U];
  int64_t ebase[U];
  auto load = [&](int base) {
    dev::load_down_chunks<W, kR, U, false, kSplit>(w, ebase, down, tok_ids, r0, base, total, chunks,
                                                   inv_chunks, half);
  };
  // With `ready`: once the gate/up kernel has counted every pick, the weights and the ids (read
  // through L2) and the first weight chunks are requested before the PDL wait, while that kernel
  // still computes.
  __shared__ int early;
  if (ready != nullptr) {
    if (threadIdx.x == 0) {
      int ok = 0;
      for (int i = 0; i < kReadySpins && !ok; ++i) {
        ok = dev::ld_acquire_gpu(ready) >= expected;
        if (!ok) __nanosleep(100);
      }
      early = ok;
    }
    __syncthreads();
  }
  const bool loaded = ready != nullptr && early != 0;
  if (loaded) {
    dev::load_down_chunks<W, kR, U, true, kSplit>(w, ebase, down, tok_ids, r0, 0, total, chunks,
                                                  inv_chunks, half);
    if (threadIdx.x < slots) coef[threadIdx.x] = __ldcg(weights + t * slots + threadIdx.x);
  }
  dev::ktrace_mark(kKtWaitBegin);
  dev::pdl_wait();  // act (and unless loaded, ids and weights) come from the gate/up kernel
  dev::ktrace_mark(kKtWaitEnd);
  // The rows' residual values, final now: read here, the store at the end does not wait for them.
  float h_old[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    h_old[r] = half == 0 && lane == r && r0 + r < down.out
                   ? __ldcg(h + int64_t(t) * h_stride + r0 + r)
                   : 0.0f;
  }
  if (!loaded) {
    load(0);  // the first weight loads fly while the activations are staged
    if (threadIdx.x < slots) coef[threadIdx.x] = weights[t * slots + threadIdx.x];
  }
  dev::ktrace_mark(kKtMarkA);
  const int64_t PK = dev::padded_len(down.in);
  // The token's act rows are contiguous: kStageVec float4 loads per thread in flight, then their
  // stores. A loop over the slots waited on L2 once per slot: 2.9 us of the kernel's 9 at batch 1
  // (decode_step_bench --ktrace, H200; NVFP4 b1 1K 2.376 -> 2.345 ms, b8 8.026 -> 7.887). The
  // indices are ints (slots * in fits the 48 KiB checked on the host), and the row of float4 i is
  // a small_div: a 64-bit division was ~25 instructions per float4 on the chain after the wait.
  constexpr int kStageVec = 4;
  const float4* ar = reinterpret_cast<const float4*>(act + int64_t(t) * slots * down.in);
  const int n4 = static_cast<int>(down.in / 4);
  const float inv_n4 = __frcp_rn(static_cast<float>(n4));
  const int total4 = slots * n4;
  for (int base = threadIdx.x; base < total4; base += kStageVec * kSplit * kWarps * 32) {
    float4 v[kStageVec];
#pragma unroll
    for (int u = 0; u < kStageVec; ++u) {
      const int i = base + u * kSplit * kWarps * 32;
      if (i < total4) v[u] = ar[i];
    }
#pragma unroll
    for (int u = 0; u < kStageVec; ++u) {
      const int i = base + u * kSplit * kWarps * 32;
      if (i >= total4) continue;
      const int p = dev::small_div(i, inv_n4), k = i - p * n4;
      *reinterpret_cast<float4*>(xs + p * PK + dev::pad_idx(4 * k)) = v[u];
    }
  }
  __syncthreads();
  dev::ktrace_mark(kKtMarkB);
  if (kSplit == 1 && r0 >= down.out) {  // split warps stay for the barrier below
    dev::ktrace_end();
    return;
  }
  float acc[kR] = {};
  if (r0 < down.out) {
    for (int base = 0; base < total; base += 32 * kSplit * U) {
      if (base > 0) load(base);
      dev::accumulate_down<W, kR, U, kSplit>(w, ebase, down, xs, PK, coef, r0, base, total, chunks,
                                             inv_chunks, acc, half);
    }
  }
  dev::ktrace_mark(kKtMarkC);
#pragma unroll
  for (int r = 0; r < kR; ++r) acc[r] = dev::warp_sum(acc[r]);
  if constexpr (kSplit > 1) {
    static_assert(kSplit == 2, "moe_down_kernel: kSplit is 1 or 2");
    __shared__ float other[kWarps][kR];  // half 1's sums, added by half 0
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (half == 1 && lane == r) other[warp % kWarps][r] = acc[r];
    }
    __syncthreads();
    if (half == 0) {
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[r] += other[warp][r];
    }
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (half == 0 && lane == r && r0 + r < down.out) {
      h[int64_t(t) * h_stride + r0 + r] = h_old[r] + acc[r];
    }
  }
  dev::ktrace_end();
}

template <DType W, int U, int kR, int kSplit = 1>
void launch_down(float* h, int64_t h_stride, const float* act, const int32_t* ids,
                 const float* weights, int num_tokens, int slots, const LinearRef& down,
                 size_t smem, cudaStream_t s, const int32_t* ready) {
  const dim3 grid(static_cast<unsigned>(ceil_div(down.out, kWarps * kR)),
                  static_cast<unsigned>(num_tokens));
  launch_pdl(moe_down_kernel<W, U, kR, kSplit>, grid, dim3(kSplit * kWarps * 32), smem, s, h,
             h_stride, act, ids, weights, slots, down, ready, num_tokens * slots);
}

// The dynamic shared memory, at least smem, that keeps moe_down's residency at no more than
// `blocks` blocks per SM: blocks + 1 of this size (with the 1 KiB each block reserves) pass the
// SM's shared memory, `blocks` of them stay far below it. smem itself where the padding would pass
// the 48 KiB a launch may ask for without opting in. Device attributes only (safe while a graph
// is captured), read once.
size_t residency_smem(size_t smem, int blocks) {
  struct Sm {
    int per_sm = 0, reserved = 0;
  };
  static const Sm sm = [] {
    Sm r;
    int dev = 0;
    FLINT_CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_CUDA_CHECK(
        cudaDeviceGetAttribute(&r.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    FLINT_CUDA_CHECK(
        cudaDeviceGetAttribute(&r.reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    return r;
  }();
  const int64_t pad = int64_t(sm.per_sm) / (blocks + 1) - sm.reserved + 256;
  return pad > 0 && pad <= 48 * 1024 ? std::max(smem, size_t(pad)) : smem;
}

// Chunks in flight per lane (the sums are the same for any U: each lane adds its items in the
// same order). One token: 256 blocks, too few warps to hide the loads' latency without more of
// them per lane (BF16 8; NVFP4 4, its chunks hold 4x the elements; NVFP4 now splits each row
// over two warps at U 2 instead, see below). More tokens: 2, whose 60
// registers fit four blocks per SM instead of three. H200, ms per decode step (graph, 1K context),
// U = 4 / 8 / 2:
//   NVFP4 b1 2.414 / 2.416 / 2.505, b2 3.533 / 3.599 / 3.415, b8 8.433 / 8.970 / 8.309
//   BF16  b1 3.000 / 2.885 / 3.063, b2 4.520 / 4.291 / 4.024, b8 11.105 / 11.054 / 10.321
// Two rows per warp (U 4) lost at b1 and won less at b2-b8.
// From 3 tokens, two rows per warp at U 2 (half the blocks: 2048 of them at b8 ran in four waves).
// H200, ms per step (graph; one row / two; eleventh session, scripts/gpu.sh sweep, two rounds):
//   NVFP4 1K b3 4.380 / 4.353, b4 4.873 / 4.845, b8 6.977 / 6.825 (100K b8 12.398 / 12.220)
//   BF16  1K b3 5.472 / 5.311, b4 6.147 / 5.742, b8 9.066 / 8.240 (100K b8 14.403 / 13.590)
//   b2 lost (NVFP4 3.349 / 3.433, BF16 3.981 / 4.124): it stays at one row.
template <DType W>
void launch_down_w(float* h, int64_t h_stride, const float* act, const int32_t* ids,
                   const float* weights, int num_tokens, int slots, const LinearRef& down,
                   size_t smem, cudaStream_t s, const int32_t* ready) {
  if (num_tokens >= 3) {
    launch_down<W, 2, 2>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s, ready);
  } else if (num_tokens == 2) {
    // BF16's 44 registers let five blocks per SM reside, and five were slower than four (moe_down
    // shares the SMs with the gate/up kernel's blocks under PDL), so padded shared memory holds
    // them at four. H200, ms per step (sweep, three rounds): BF16 b2 1K 3.740 -> 3.673.
    const size_t sm = W == DType::kBF16 ? residency_smem(smem, 4) : smem;
    launch_down<W, 2, 1>(h, h_stride, act, ids, weights, num_tokens, slots, down, sm, s, ready);
  } else if constexpr (W == DType::kNVFP4) {
    // One token: two warps per row, 16 warps a block, so each lane dots half the chunks (Flint:
    // 128 chunks a row, 2 per lane instead of 4); 256 blocks of 16 warps stay one wave. H200, ms
    // per step (sweep, three rounds): NVFP4 b1 1K 1.992 -> 1.957.
    launch_down<W, 2, 1, 2>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s,
                            ready);
  } else if constexpr (W == DType::kBF16) {
    launch_down<W, 8, 1>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s, ready);
  } else {
    launch_down<W, 4, 1>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s, ready);
  }
}

}  // namespace

void moe_down(float* h, int64_t h_stride, const float* act, const int32_t* ids,
              const float* weights, int num_tokens, int slots, const LinearRef& down,
              cudaStream_t s, const int32_t* ready) {
  FLINT_CHECK(slots > 0 && slots <= kMaxSlots, "moe_down: {} slots (max {})", slots, kMaxSlots);
  if (num_tokens == 0) return;
  const size_t smem = size_t(slots) * dev::padded_len(down.in) * sizeof(float);
  FLINT_CHECK(smem <= 48 * 1024, "moe_down: {} slots of {} do not fit in shared memory", slots,
              down.in);
  FLINT_CHECK(reinterpret_cast<uintptr_t>(act) % 16 == 0, "moe_down: unaligned act");
  switch (down.dtype) {
    case DType::kBF16:
      FLINT_CHECK(down.in % 8 == 0, "moe_down: in {} % 8", down.in);
      launch_down_w<DType::kBF16>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s,
                                  ready);
      break;
    case DType::kNVFP4:
      FLINT_CHECK(down.in % 64 == 0, "moe_down: in {} % 64", down.in);
      launch_down_w<DType::kNVFP4>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s,
                                   ready);
      break;
    case DType::kF32:
      FLINT_CHECK(down.in % 4 == 0, "moe_down: in {} % 4", down.in);
      launch_down_w<DType::kF32>(h, h_stride, act, ids, weights, num_tokens, slots, down, smem, s,
                                 ready);
      break;
    default:
      FLINT_FAIL("moe_down: unsupported weight dtype {}", down.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
