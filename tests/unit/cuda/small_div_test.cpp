// dev::small_div, the f32 floor division moe_down uses to find a work item's slot, against integer
// division: every i below 2^16 for every n up to 1024, then i up to its 2^22 bound for some n.
#include "backends/cuda/kernels/small_div.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace flint::cuda {
namespace {

int64_t mismatches(int n, int i_end, int i_step) {
  const float inv = 1.0f / static_cast<float>(n);  // rounded to nearest, as __frcp_rn
  int64_t bad = 0;
  for (int i = 0; i < i_end; i += i_step) bad += dev::small_div(i, inv) != i / n;
  return bad;
}

TEST(SmallDiv, MatchesIntegerDivisionBelowTwoToThe16) {
  for (int n = 1; n <= 1024; ++n) ASSERT_EQ(mismatches(n, 1 << 16, 1), 0) << "n = " << n;
}

TEST(SmallDiv, MatchesIntegerDivisionUpToItsBound) {
  for (int n : {3, 7, 24, 48, 96, 100, 127, 1000, 3072, 4093, 65535, 1 << 20, (1 << 22) - 1}) {
    EXPECT_EQ(mismatches(n, 1 << 22, 1), 0) << "n = " << n;
  }
  EXPECT_EQ(mismatches(1, 1 << 22, 1), 0);
}

// Far past the bound (i above 2^24 is not even exact in f32) the same check finds mismatches: the
// checks above can fail.
TEST(SmallDiv, DiffersFromIntegerDivisionFarPastItsBound) {
  int64_t bad = 0;
  for (int n : {3, 7, 11, 13}) bad += mismatches(n, 1 << 27, 7);
  EXPECT_GT(bad, 0);
}

}  // namespace
}  // namespace flint::cuda
