// MoE experts at prefill sizes: the (token, slot) pairs are grouped by expert (count, scan,
// scatter), each expert's rows run through the grouped tensor-core GEMMs of gemm.h (gate|up fused
// with SwiGLU, then down scaled by the routing weight), and a combine adds each token's slots back
// in slot order (deterministic). Reference: moe_down / gemv_gated_experts (the decode path) and
// spec 2.5. Test: tests/kernels/prefill_moe_test.cpp
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

// Device scratch for moe_grouped(), carved by moe_grouped_workspace_bytes().
struct MoeGroupedWorkspace {
  int32_t* counts = nullptr;     // [num_groups] rows per expert
  int32_t* cursor = nullptr;     // [num_groups]
  int32_t* offsets = nullptr;    // [num_groups + 1]
  int4* tiles = nullptr;         // [max_tiles]
  int32_t* gather = nullptr;     // [num_pairs] token of each sorted row
  int32_t* pair_pos = nullptr;   // [num_pairs] sorted row of each pair
  float* row_weight = nullptr;   // [num_pairs] routing weight of each sorted row
  __nv_bfloat16* act = nullptr;  // [num_pairs, inter] SwiGLU activations, sorted
  float* y = nullptr;            // [num_pairs, hidden] weighted expert outputs, sorted
};

// Rows per GEMM tile for num_pairs rows over num_groups experts (shared-expert slices included):
// kGemmSmallTileRows when the experts average at most kMoeSmallTileMaxRows rows, as in decode
// steps of many sequences (64 tokens x 8 slots over 258 groups: ~2 rows each), where 128-row
// tiles would spend almost all of their tensor-core work on padding; kGemmTileRows otherwise
// (prefill chunks, where an expert's weights should be read by as few tiles as possible).
inline constexpr int64_t kMoeSmallTileMaxRows = 32;
inline int moe_grouped_tile_rows(int64_t num_pairs, int num_groups) {
  return num_pairs <= kMoeSmallTileMaxRows * num_groups ? kGemmSmallTileRows : kGemmTileRows;
}

// Tiles a grouping of num_pairs rows over num_groups experts can need with tiles of tile_rows.
inline int moe_grouped_max_tiles(int64_t num_pairs, int num_groups,
                                 int tile_rows = kGemmSmallTileRows) {
  return static_cast<int>((num_pairs + tile_rows - 1) / tile_rows + num_groups);
}
// Bytes of scratch for up to num_pairs pairs (256-byte aligned pieces).
int64_t moe_grouped_workspace_bytes(int64_t num_pairs, int num_groups, int64_t inter,
                                    int64_t hidden);
// Carves `base` (moe_grouped_workspace_bytes() bytes) into the pieces.
MoeGroupedWorkspace moe_grouped_workspace(void* base, int64_t num_pairs, int num_groups,
                                          int64_t inter, int64_t hidden);

// h[t, :] += sum_{j < slots} weights[t, j] * Down_e (silu(Gate_e x[t]) * Up_e x[t]), e = ids[t, j].
// x: [num_tokens, hidden] bf16 (row stride x_stride); h: [num_tokens, hidden] f32; ids, weights:
// [num_tokens, slots] (ids < gate.num_experts); gate/up: [E'] x [inter, hidden], down: [E'] x
// [hidden, inter], BF16 or NVFP4. ws: sized for num_tokens * slots pairs. tile_rows: 0 for
// moe_grouped_tile_rows(), or kGemmTileRows / kGemmSmallTileRows (tests).
void moe_grouped(float* h, int64_t h_stride, const __nv_bfloat16* x, int64_t x_stride,
                 const int32_t* ids, const float* weights, int num_tokens, int slots,
                 const LinearRef& gate, const LinearRef& up, const LinearRef& down,
                 const MoeGroupedWorkspace& ws, cudaStream_t s, int tile_rows = 0);

}  // namespace flint::cuda
