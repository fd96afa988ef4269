// Grouped MoE for prefill and decode steps of many sequences: count pairs per expert, scan into
// offsets and GEMM tiles (moe_grouped_tile_rows), scatter the pairs into expert order, two grouped
// GEMMs, then a per-token combine in slot order.
// Reference: the decode path (gemv_gated_experts + moe_down).  Test:
// tests/kernels/prefill_moe_test.cpp
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/moe_grouped.h"

namespace flint::cuda {
namespace {

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

__global__ void count_kernel(int32_t* counts, const int32_t* ids, int num_pairs) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p < num_pairs) atomicAdd(counts + ids[p], 1);
}

// One block: exclusive scan of the counts, then the tile list (thread 0; a few hundred entries).
__global__ void scan_kernel(int32_t* offsets, int4* tiles, int max_tiles, int tile_rows,
                            const int32_t* counts, int num_groups) {
  if (threadIdx.x != 0) return;
  int off = 0, t = 0;
  for (int e = 0; e < num_groups; ++e) {
    offsets[e] = off;
    const int n = counts[e];
    for (int r = 0; r < n && t < max_tiles; r += tile_rows) {
      tiles[t++] = make_int4(e, off + r, off + min(n, r + tile_rows), 0);
    }
    off += n;
  }
  offsets[num_groups] = off;
  for (; t < max_tiles; ++t) tiles[t] = make_int4(-1, 0, 0, 0);
}

__global__ void scatter_kernel(int32_t* gather, int32_t* pair_pos, float* row_weight,
                               int32_t* cursor, const int32_t* offsets, const int32_t* ids,
                               const float* weights, int num_pairs, int slots) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= num_pairs) return;
  const int e = ids[p];
  const int pos = offsets[e] + atomicAdd(cursor + e, 1);
  gather[pos] = p / slots;
  pair_pos[p] = pos;
  row_weight[pos] = weights[p];
}

// h[t, :] += sum_j y[pair_pos[t * slots + j], :], slots in order.
__global__ void combine_kernel(float* h, int64_t h_stride, const float* y, const int32_t* pair_pos,
                               int slots, int64_t hidden) {
  const int t = blockIdx.x;
  float* hr = h + int64_t(t) * h_stride;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float acc = hr[i];
    for (int j = 0; j < slots; ++j) acc += y[int64_t(pair_pos[t * slots + j]) * hidden + i];
    hr[i] = acc;
  }
}

}  // namespace

int64_t moe_grouped_workspace_bytes(int64_t num_pairs, int num_groups, int64_t inter,
                                    int64_t hidden) {
  const int64_t tiles = moe_grouped_max_tiles(num_pairs, num_groups);
  return align256(4 * num_groups) * 2 + align256(4 * (num_groups + 1)) + align256(16 * tiles) +
         align256(4 * num_pairs) * 3 + align256(2 * num_pairs * inter) +
         align256(4 * num_pairs * hidden);
}

MoeGroupedWorkspace moe_grouped_workspace(void* base, int64_t num_pairs, int num_groups,
                                          int64_t inter, int64_t hidden) {
  auto* p = static_cast<unsigned char*>(base);
  auto take = [&](int64_t bytes) {
    void* r = p;
    p += align256(bytes);
    return r;
  };
  MoeGroupedWorkspace w;
  w.counts = static_cast<int32_t*>(take(4 * num_groups));
  w.cursor = static_cast<int32_t*>(take(4 * num_groups));
  w.offsets = static_cast<int32_t*>(take(4 * (num_groups + 1)));
  w.tiles = static_cast<int4*>(take(16 * int64_t(moe_grouped_max_tiles(num_pairs, num_groups))));
  w.gather = static_cast<int32_t*>(take(4 * num_pairs));
  w.pair_pos = static_cast<int32_t*>(take(4 * num_pairs));
  w.row_weight = static_cast<float*>(take(4 * num_pairs));
  w.act = static_cast<__nv_bfloat16*>(take(2 * num_pairs * inter));
  w.y = static_cast<float*>(take(4 * num_pairs * hidden));
  return w;
}

void moe_grouped(float* h, int64_t h_stride, const __nv_bfloat16* x, int64_t x_stride,
                 const int32_t* ids, const float* weights, int num_tokens, int slots,
                 const LinearRef& gate, const LinearRef& up, const LinearRef& down,
                 const MoeGroupedWorkspace& ws, cudaStream_t s, int tile_rows) {
  const int groups = static_cast<int>(gate.num_experts);
  FLINT_CHECK(down.num_experts == groups && down.in == gate.out && down.out == gate.in,
              "moe_grouped: gate [{}] x [{}, {}] vs down [{}] x [{}, {}]", gate.num_experts,
              gate.out, gate.in, down.num_experts, down.out, down.in);
  const int pairs = num_tokens * slots;
  if (pairs == 0) return;
  if (tile_rows == 0) tile_rows = moe_grouped_tile_rows(pairs, groups);
  FLINT_CHECK(tile_rows == kGemmTileRows || tile_rows == kGemmSmallTileRows,
              "moe_grouped: tiles of {} rows ({} or {})", tile_rows, kGemmTileRows,
              kGemmSmallTileRows);
  const int max_tiles = moe_grouped_max_tiles(pairs, groups, tile_rows);
  FLINT_CUDA_CHECK(cudaMemsetAsync(ws.counts, 0, 4 * groups, s));
  FLINT_CUDA_CHECK(cudaMemsetAsync(ws.cursor, 0, 4 * groups, s));
  const int blocks = static_cast<int>(ceil_div(pairs, 256));
  count_kernel<<<blocks, 256, 0, s>>>(ws.counts, ids, pairs);
  scan_kernel<<<1, 32, 0, s>>>(ws.offsets, ws.tiles, max_tiles, tile_rows, ws.counts, groups);
  scatter_kernel<<<blocks, 256, 0, s>>>(ws.gather, ws.pair_pos, ws.row_weight, ws.cursor,
                                        ws.offsets, ids, weights, pairs, slots);
  FLINT_CUDA_CHECK(cudaGetLastError());
  GemmGroups g;
  g.tiles = ws.tiles;
  g.num_tiles = max_tiles;
  g.tile_rows = tile_rows;
  g.gather = ws.gather;
  grouped_gemm_gated(ws.act, gate.out, x, x_stride, g, gate, up, s);
  g.gather = nullptr;
  g.row_weight = ws.row_weight;
  grouped_gemm(ws.y, down.out, ws.act, gate.out, g, down, s);
  combine_kernel<<<num_tokens, 256, 0, s>>>(h, h_stride, ws.y, ws.pair_pos, slots, down.out);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
