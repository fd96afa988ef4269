// The --ktrace summary (no device needed): segment means per kernel kind from synthetic trace
// records of two replays. Partner: backends/cuda/ktrace_report.cpp.
#include "backends/cuda/ktrace_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flint::cuda {
namespace {

KTraceRecord record(KTag tag, uint32_t gx, uint32_t gy, std::initializer_list<uint64_t> t) {
  KTraceRecord r;
  r.tag = static_cast<uint32_t>(tag);
  r.grid_x = gx;
  r.grid_y = gy;
  r.grid_z = 1;
  int i = 0;
  for (uint64_t v : t) r.t[i++] = v;
  return r;
}

// One replay of gemv -> moe_down -> gemv: block 0 ends at 6000 and 12000 ns, the next waits end
// at 9000 and 15000 (end->next 3 us each).
std::vector<KTraceRecord> gemv_down_gemv() {
  return {record(KTag::kGemv, 320, 1, {1000, 2000, 3000, 0, 4000, 5000, 6000}),
          record(KTag::kMoeDown, 256, 1, {2500, 3000, 9000, 0, 10000, 11000, 12000}),
          record(KTag::kGemv, 320, 1, {11000, 11500, 15000, 0, 16000, 17000, 18000})};
}

TEST(KTraceReport, SegmentsAreMeansPerKindAndCyclesEndAtTheNextWaitEnd) {
  // Points: start, wait begin, wait end, A, B, C, end (ns; 0 = unset).
  std::vector<std::vector<KTraceRecord>> replays = {
      {record(KTag::kGemv, 640, 1, {1000, 2000, 5000, 0, 6000, 8000, 9000}),
       record(KTag::kAttention, 4, 5, {3000, 4000, 10000, 11000, 12000, 13000, 15000}),
       record(KTag::kGemv, 640, 1, {14000, 14500, 16000, 0, 17000, 18000, 19000})},
      {record(KTag::kGemv, 640, 1, {1000, 3000, 6000, 0, 8000, 9000, 10000}),
       record(KTag::kAttention, 4, 5, {5000, 6000, 13000, 14000, 16000, 17000, 18000})},
  };
  const std::vector<KTraceRow> rows = summarize_ktrace(replays);
  ASSERT_EQ(rows.size(), 2u);
  const KTraceRow& g = rows[0];
  EXPECT_EQ(g.kind, "gemv 640x1x1");
  EXPECT_DOUBLE_EQ(g.per_step, 1.5);  // three launches over two replays
  EXPECT_DOUBLE_EQ(g.prologue, (1.0 + 0.5 + 2.0) / 3);
  EXPECT_DOUBLE_EQ(g.wait, (3.0 + 1.5 + 3.0) / 3);
  EXPECT_DOUBLE_EQ(g.seg[0], 0.0);  // mark A unset: B is measured from the wait end
  EXPECT_DOUBLE_EQ(g.seg[1], (1.0 + 1.0 + 2.0) / 3);
  EXPECT_DOUBLE_EQ(g.seg[2], (2.0 + 1.0 + 1.0) / 3);
  EXPECT_DOUBLE_EQ(g.tail, 1.0);
  // Only the two launches followed by another one have a cycle.
  EXPECT_EQ(g.cycles, 2);
  EXPECT_DOUBLE_EQ(g.cycle, (5.0 + 7.0) / 2);
  EXPECT_DOUBLE_EQ(g.to_next, (1.0 + 3.0) / 2);
  const KTraceRow& a = rows[1];
  EXPECT_EQ(a.kind, "attention 4x5x1");
  EXPECT_DOUBLE_EQ(a.per_step, 1.0);
  EXPECT_DOUBLE_EQ(a.seg[0], 1.0);
  EXPECT_DOUBLE_EQ(a.seg[1], (1.0 + 2.0) / 2);
  EXPECT_DOUBLE_EQ(a.tail, (2.0 + 1.0) / 2);
  EXPECT_EQ(a.cycles, 1);
  EXPECT_DOUBLE_EQ(a.cycle, 6.0);
  EXPECT_DOUBLE_EQ(a.to_next, 1.0);
}

TEST(KTraceReport, EndToNextSplitsAtThePreviousLaunchsLastWarpEnd) {
  std::vector<std::vector<KTraceRecord>> replays = {gemv_down_gemv()};
  replays[0].push_back(
      record(KTag::kMoeDown, 256, 1, {17000, 17500, 21000, 0, 22000, 23000, 24000}));
  replays[0][1].prev_last_end = 7500;   // gemv's last warp ended 1.5 us after block 0
  replays[0][2].prev_last_end = 12000;  // moe_down's block 0 was its last
  replays[0][3].prev_last_end = 0;      // not read: the second gemv's cycle has no split
  const std::vector<KTraceRow> rows = summarize_ktrace(replays);
  ASSERT_EQ(rows.size(), 2u);
  const KTraceRow& g = rows[0];
  EXPECT_EQ(g.cycles, 2);
  EXPECT_DOUBLE_EQ(g.to_next, (3.0 + 3.0) / 2);
  EXPECT_EQ(g.split_cycles, 1);
  EXPECT_DOUBLE_EQ(g.straggle, 1.5);
  EXPECT_DOUBLE_EQ(g.handoff, 1.5);
  const KTraceRow& d = rows[1];
  EXPECT_EQ(d.split_cycles, 1);
  EXPECT_DOUBLE_EQ(d.straggle, 0.0);
  EXPECT_DOUBLE_EQ(d.handoff, 3.0);
}

TEST(KTraceReport, ALatestEndOutsideTheGapIsNotCounted) {
  // A latest end before block 0's end (a slot the earlier launches raised, this launch's warps not
  // yet in it) or after the next wait end cannot be this launch's last warp: the cycle counts in
  // to_next but not in the split.
  std::vector<std::vector<KTraceRecord>> replays = {gemv_down_gemv()};
  replays[0][1].prev_last_end = 5500;   // before the gemv's block 0 ended (6000)
  replays[0][2].prev_last_end = 15500;  // after the next launch's wait end (15000)
  const std::vector<KTraceRow> rows = summarize_ktrace(replays);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].cycles, 1);
  EXPECT_DOUBLE_EQ(rows[0].to_next, 3.0);
  EXPECT_EQ(rows[0].split_cycles, 0);
  EXPECT_DOUBLE_EQ(rows[0].straggle, 0.0);
  EXPECT_DOUBLE_EQ(rows[0].handoff, 0.0);
  EXPECT_EQ(rows[1].cycles, 1);
  EXPECT_EQ(rows[1].split_cycles, 0);
}

TEST(KTraceReport, StartIsSignedAgainstThePreviousLaunchsLastWarpEnd) {
  std::vector<std::vector<KTraceRecord>> replays = {gemv_down_gemv()};
  replays[0].push_back(
      record(KTag::kMoeDown, 256, 1, {19000, 19500, 21000, 0, 22000, 23000, 24000}));
  replays[0][1].prev_last_end = 7500;   // moe_down's block started 5 us before the gemv ended
  replays[0][2].prev_last_end = 12000;  // the second gemv's, 1 us before moe_down ended
  replays[0][3].prev_last_end = 18500;  // a block that got its SM 0.5 us after the gemv ended
  const std::vector<KTraceRow> rows = summarize_ktrace(replays);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].start_cycles, 1);  // the first gemv read no latest end
  EXPECT_DOUBLE_EQ(rows[0].start_after_prev, -1.0);
  EXPECT_EQ(rows[1].start_cycles, 2);
  EXPECT_DOUBLE_EQ(rows[1].start_after_prev, (-5.0 + 0.5) / 2);
}

TEST(KTraceReport, NoReplaysGiveNoRows) { EXPECT_TRUE(summarize_ktrace({}).empty()); }

TEST(KTraceReport, EveryTaggedKernelKindHasItsOwnName) {
  const std::vector<std::string> want = {"gemv",     "gemv_gated", "routed_gate_up", "router",
                                         "moe_down", "attention",  "gemv_mma"};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(ktag_name(static_cast<KTag>(i + 1)), want[i]) << "tag " << i + 1;
  }
  EXPECT_STREQ(ktag_name(KTag::kNone), "untagged");
  EXPECT_STREQ(ktag_name(static_cast<KTag>(want.size() + 1)), "untagged");
}

}  // namespace
}  // namespace flint::cuda
