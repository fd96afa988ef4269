// FLINT_NARROW's value (gemv.h's parse_gemv_narrow), on the CPU: a decimal sum of the kNarrow*
// bits is taken as it is; anything else is refused with a message naming the variable, where
// strtoul would have read 0 (everything off) or a prefix.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/kernels/gemv.h"

namespace flint::cuda {
namespace {

TEST(GemvNarrowMode, DecimalBitSumsAreTakenAsTheyAre) {
  EXPECT_EQ(*parse_gemv_narrow("0"), 0u);
  EXPECT_EQ(*parse_gemv_narrow("36"), kNarrowDefault);
  EXPECT_EQ(*parse_gemv_narrow("45"), kNarrowAll);
  EXPECT_EQ(*parse_gemv_narrow("109"), kNarrowAll | kNarrowWarps8);
  EXPECT_EQ(*parse_gemv_narrow("005"), unsigned(kNarrowFp4One | kNarrowFp4Two));
}

TEST(GemvNarrowMode, OtherValuesAreRefusedNamingTheVariable) {
  for (const std::string bad :
       {"", "x", "4x", "-4", " 4", "4.0", "2", "16", "110", "1000", "4294967295"}) {
    SCOPED_TRACE(bad);
    const auto r = parse_gemv_narrow(bad);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message,
              "FLINT_NARROW must be a sum of gemv.h's kNarrow* bits (1, 4, 8, 32, 64), got '" +
                  bad + "'");
  }
}

}  // namespace
}  // namespace flint::cuda
