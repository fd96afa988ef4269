// LinearRef::experts: a run of experts of a stacked weight seen as one matrix (host-side pointer
// arithmetic; moe_route_shared reads the shared expert's slices through it). No device needed:
// the pointers are only compared.
#include "backends/cuda/kernels/linear_ref.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace flint::cuda {
namespace {

const uint8_t* base_at(uintptr_t a) { return reinterpret_cast<const uint8_t*>(a); }

// A stack of `n` experts of [out, in] at fake addresses (only compared, never read).
LinearRef stack_of(DType dt, int64_t out, int64_t in, int64_t n, uintptr_t w, uintptr_t sc = 0) {
  LinearRef stack;
  stack.dtype = dt;
  stack.out = out;
  stack.in = in;
  stack.num_experts = n;
  stack.w = base_at(w);
  if (sc != 0) stack.sc = base_at(sc);
  return stack;
}

TEST(LinearRefExperts, Nvfp4SliceOffsetsCodesScalesAndRowScales) {
  LinearRef stack = stack_of(DType::kNVFP4, 512, 2048, 258, 0x100000, 0x900000);
  stack.row_scale = reinterpret_cast<const float*>(0xA00000);
  const LinearRef s = stack.experts(256, 2);
  const int64_t row0 = 256 * 512;
  EXPECT_EQ(s.dtype, DType::kNVFP4);
  EXPECT_EQ(s.out, 1024);
  EXPECT_EQ(s.in, 2048);
  EXPECT_EQ(s.num_experts, 1);
  EXPECT_EQ(static_cast<const uint8_t*>(s.w), base_at(0x100000) + row0 * 1024);  // in / 2 bytes
  EXPECT_EQ(s.sc, base_at(0x900000) + row0 * 128);                               // in / 16 scales
  EXPECT_EQ(s.row_scale, stack.row_scale + row0);
}

// I8: the greedy head's int8 copy (a byte a weight; bench.cpp counts its bytes with these).
TEST(LinearRefExperts, Bf16F32AndI8SlicesStepWholeRowsAndKeepNullScales) {
  for (auto [dt, row_bytes] : {std::pair{DType::kBF16, 2 * 96}, std::pair{DType::kF32, 4 * 96},
                               std::pair{DType::kI8, 96}}) {
    const LinearRef stack = stack_of(dt, 7, 96, 5, 0x2000);
    const LinearRef s = stack.experts(3, 2);
    EXPECT_EQ(s.out, 14);
    EXPECT_EQ(s.num_experts, 1);
    EXPECT_EQ(static_cast<const uint8_t*>(s.w), base_at(0x2000) + 3 * 7 * row_bytes);
    EXPECT_EQ(s.sc, nullptr);
    EXPECT_EQ(s.row_scale, nullptr);
    EXPECT_EQ(s.matrix_bytes(), 14 * row_bytes);
  }
}

TEST(LinearRefExperts, FirstExpertIsTheStackItself) {
  const LinearRef stack = stack_of(DType::kNVFP4, 64, 128, 4, 0x4000, 0x8000);
  const LinearRef s = stack.experts(0, 4);
  EXPECT_EQ(s.w, stack.w);
  EXPECT_EQ(s.sc, stack.sc);
  EXPECT_EQ(s.out, 256);
  EXPECT_EQ(s.matrix_bytes(), stack.matrix_bytes() * 4);
}

TEST(LinearRefExpertsDeathTest, RangeOutsideTheStackAborts) {
  const LinearRef stack = stack_of(DType::kBF16, 8, 16, 4, 0x4000);
  EXPECT_DEATH((void)stack.experts(3, 2), "outside a stack of 4 experts");
  EXPECT_DEATH((void)stack.experts(-1, 1), "outside a stack of 4 experts");
  EXPECT_DEATH((void)stack.experts(0, 0), "outside a stack of 4 experts");
}

}  // namespace
}  // namespace flint::cuda
