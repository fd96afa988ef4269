// The per-warp pieces of the MoE down projection + weighted combine, shared by moe_down
// (moe_experts.cu) and the persistent decode kernel (decode_persistent.cuh): lane work item
// i < slots * chunks is chunk i % chunks of slot i / chunks, for R output rows r0, r0 + 1, ...
// of that slot's expert. Reference: spec section 2.5 steps 5-8.   Test: tests/kernels/moe_test.cpp
#pragma once

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/small_div.h"

namespace flint::cuda::dev {

// Loads the pass starting at work item `base`; ids: the token's [slots] expert ids. kIdsL2: read
// them through L2 (moe_down's first pass, when it reads them while the kernel that writes them
// still runs). kSplit warps share the rows: warp `half` of them takes the items of lanes
// 32 half .. 32 half + 31 of a kSplit * 32-lane pass.
template <DType W, int R, int U, bool kIdsL2 = false, int kSplit = 1>
__device__ __forceinline__ void load_down_chunks(Chunk<W> (&w)[R][U], int64_t (&ebase)[U],
                                                 const LinearRef& down, const int32_t* ids,
                                                 int64_t r0, int base, int total, int chunks,
                                                 float inv_chunks, int half = 0) {
  const int lane = (threadIdx.x & 31) + 32 * half;
  // Every expert id first, unconditionally (a clamped item past the end, its value unused): an id
  // loaded under `i < total` cannot be hoisted, so each one waited for the previous chunk's issue.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = min(base + lane + 32 * kSplit * u, total - 1);
    const int32_t* id = ids + small_div(i, inv_chunks);
    ebase[u] = int64_t(kIdsL2 ? __ldcg(id) : *id) * down.out;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = base + lane + 32 * kSplit * u;
    if (i >= total) continue;
    const int p = small_div(i, inv_chunks);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r0 + r < down.out) w[r][u].load(down, ebase[u] + r0 + r, i - p * chunks);
    }
  }
}

// acc[r] += coef[slot] x row scale x chunk . the slot's staged activations (xs: [slots, PK]).
template <DType W, int R, int U, int kSplit = 1>
__device__ __forceinline__ void accumulate_down(const Chunk<W> (&w)[R][U],
                                                const int64_t (&ebase)[U], const LinearRef& down,
                                                const float* xs, int64_t PK, const float* coef,
                                                int64_t r0, int base, int total, int chunks,
                                                float inv_chunks, float (&acc)[R], int half = 0) {
  const int lane = (threadIdx.x & 31) + 32 * half;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = base + lane + 32 * kSplit * u;
    if (i >= total) continue;
    const int p = small_div(i, inv_chunks);
    const float* xp = xs + p * PK + pad_idx(int64_t(i - p * chunks) * Chunk<W>::kElems);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r0 + r >= down.out) continue;
      const float s = coef[p] * row_scale(down, ebase[u] + r0 + r);
      acc[r] += s * w[r][u].dot(xp, nullptr);
    }
  }
}

}  // namespace flint::cuda::dev
