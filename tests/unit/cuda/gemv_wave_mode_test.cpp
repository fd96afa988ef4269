// FLINT_GEMV_WAVE's value (gemv.h's parse_gemv_wave), on the CPU: one of the one-wave GEMV's modes
// in decimal is taken as it is; anything else is refused with a message naming the variable,
// where atoi would have read 0 (off) or a prefix.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/kernels/gemv.h"

namespace flint::cuda {
namespace {

TEST(GemvWaveMode, EachModeIsTakenAsItIs) {
  for (const int m : {0, 4, 2, 5, -4, -2, -5}) EXPECT_EQ(*parse_gemv_wave(std::to_string(m)), m);
  EXPECT_EQ(*parse_gemv_wave("0"), kGemvWaveDefault);
}

TEST(GemvWaveMode, OtherValuesAreRefusedNamingTheVariable) {
  for (const std::string bad :
       {"", "x", "4x", "+4", " 4", "4.0", "1", "3", "-0", "04", "-1", "8"}) {
    SCOPED_TRACE(bad);
    const auto r = parse_gemv_wave(bad);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(
        r.error().message,
        "FLINT_GEMV_WAVE must be 0, 4, 2, 5, -4, -2 or -5 (gemv.h's kGemvWave* modes), got '" +
            bad + "'");
  }
}

}  // namespace
}  // namespace flint::cuda
