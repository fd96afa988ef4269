// How the grouped MoE cuts its rows into GEMM tiles, decided on the host (no device needed).
// Partner: kernels/moe_grouped.cu (the tiles themselves are checked on the GPU by
// tests/kernels/prefill_moe_test.cpp).
#include <gtest/gtest.h>

#include "backends/cuda/kernels/moe_grouped.h"

namespace flint::cuda {
namespace {

constexpr int kFlintGroups = 258;  // 256 routed experts + the shared expert's two slices
constexpr int kFlintSlots = 8;     // top-6 + 2 shared slices

TEST(MoeGroupedPlan, DecodeStepsOfManySequencesUseSmallTiles) {
  // 33-64 sequences with one token each: ~1-2 rows per routed expert.
  EXPECT_EQ(moe_grouped_tile_rows(33 * kFlintSlots, kFlintGroups), kGemmSmallTileRows);
  EXPECT_EQ(moe_grouped_tile_rows(64 * kFlintSlots, kFlintGroups), kGemmSmallTileRows);
  // A 1K-token prompt averages 32 rows per group: still small tiles.
  EXPECT_EQ(moe_grouped_tile_rows(1024 * kFlintSlots, kFlintGroups), kGemmSmallTileRows);
}

TEST(MoeGroupedPlan, PrefillChunksUseFullTiles) {
  // 8K and 2K (serve's default --max-num-batched-tokens) chunks: ~254 and ~64 rows per group.
  EXPECT_EQ(moe_grouped_tile_rows(8192 * kFlintSlots, kFlintGroups), kGemmTileRows);
  EXPECT_EQ(moe_grouped_tile_rows(2048 * kFlintSlots, kFlintGroups), kGemmTileRows);
}

TEST(MoeGroupedPlan, SwitchesAboveThirtyTwoRowsPerGroup) {
  EXPECT_EQ(moe_grouped_tile_rows(32 * 10, 10), kGemmSmallTileRows);
  EXPECT_EQ(moe_grouped_tile_rows(32 * 10 + 1, 10), kGemmTileRows);
}

TEST(MoeGroupedPlan, MaxTilesCoverEveryGroupsRemainder) {
  // Each group can end in a partial tile, so ceil(pairs / rows) + groups bounds the tiles.
  EXPECT_EQ(moe_grouped_max_tiles(512, kFlintGroups, kGemmSmallTileRows), 16 + kFlintGroups);
  EXPECT_EQ(moe_grouped_max_tiles(513, kFlintGroups, kGemmSmallTileRows), 17 + kFlintGroups);
  EXPECT_EQ(moe_grouped_max_tiles(512, kFlintGroups, kGemmTileRows), 4 + kFlintGroups);
  // The workspace is sized with the small tiles, the larger count of the two.
  EXPECT_EQ(moe_grouped_max_tiles(65536, kFlintGroups), 2048 + kFlintGroups);
}

}  // namespace
}  // namespace flint::cuda
