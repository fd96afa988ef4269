// DeviceWeights::check_dummy_config, on the CPU: which configs `--load-format dummy` can generate
// on the GPU, with the dimension named when it cannot; and check_attention_shape, which every
// model (checkpoint or dummy) must pass. Partner: src/backends/cuda/weights.cpp.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/bench.h"
#include "backends/cuda/weights.h"

namespace flint::cuda {
namespace {

void expect_refused(const Status& st, ErrorCode code, const std::string& words) {
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, code);
  EXPECT_NE(st.error().message.find(words), std::string::npos) << st.error().message;
}

TEST(DummyConfig, FullFlintShapeIsAcceptedForBf16AndNvfp4) {
  const model::FlintConfig c = flint_full_config();
  EXPECT_TRUE(DeviceWeights::check_dummy_config(c, DType::kBF16));
  EXPECT_TRUE(DeviceWeights::check_dummy_config(c, DType::kNVFP4));
}

TEST(DummyConfig, OtherDtypesAreRefused) {
  const model::FlintConfig c = flint_full_config();
  expect_refused(DeviceWeights::check_dummy_config(c, DType::kF32), ErrorCode::kInvalidArgument,
                 "bf16 or nvfp4");
  expect_refused(DeviceWeights::check_dummy_config(c, DType::kF16), ErrorCode::kInvalidArgument,
                 "bf16 or nvfp4");
}

TEST(DummyConfig, InputDimsTheKernelsCannotReadNameTheDimension) {
  struct Case {
    void (*edit)(model::FlintConfig&);
    DType dtype;
    std::string words;
  };
  const Case cases[] = {
      {[](model::FlintConfig& c) { c.hidden_size = 2048 + 32; }, DType::kNVFP4,
       "hidden_size to be a positive multiple of 64, got 2080"},
      {[](model::FlintConfig& c) { c.hidden_size = 2048 + 4; }, DType::kBF16,
       "hidden_size to be a positive multiple of 8, got 2052"},
      {[](model::FlintConfig& c) { c.head_dim = 129; }, DType::kNVFP4, "num_heads x head_dim"},
      {[](model::FlintConfig& c) { c.intermediate_size = 6144 + 8; }, DType::kNVFP4,
       "intermediate_size"},
      {[](model::FlintConfig& c) { c.moe_intermediate_size = 512 + 16; }, DType::kNVFP4,
       "moe_intermediate_size"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.words);
    model::FlintConfig c = flint_full_config();
    k.edit(c);
    expect_refused(DeviceWeights::check_dummy_config(c, k.dtype), ErrorCode::kUnsupported, k.words);
  }
}

TEST(DummyConfig, DenseSizeMattersOnlyWithDenseLayers) {
  model::FlintConfig c = flint_full_config();
  c.intermediate_size = 6144 + 8;  // BF16 reads it, NVFP4 cannot
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) c.layer_is_dense[l] = false;
  EXPECT_TRUE(DeviceWeights::check_dummy_config(c, DType::kNVFP4));
}

TEST(DummyConfig, SharedExpertMustBeWholeSlices) {
  model::FlintConfig c = flint_full_config();
  c.shared_expert_intermediate_size = 768;  // 1.5 x moe_intermediate_size 512
  expect_refused(DeviceWeights::check_dummy_config(c, DType::kBF16), ErrorCode::kUnsupported,
                 "shared_expert_intermediate_size (768) to be a multiple of "
                 "moe_intermediate_size (512)");
  c.shared_expert_intermediate_size = 0;  // no shared expert
  EXPECT_TRUE(DeviceWeights::check_dummy_config(c, DType::kBF16));
}

TEST(AttentionShape, HeadDimsAndGroupsTheKernelsTakeAreAccepted) {
  model::FlintConfig c = flint_full_config();  // head_dim 128, 32 / 4 heads
  EXPECT_TRUE(DeviceWeights::check_attention_shape(c));
  for (int64_t D : {16, 32, 64}) {
    c.head_dim = D;
    EXPECT_TRUE(DeviceWeights::check_attention_shape(c)) << D;
  }
  for (int64_t Hkv : {32, 16, 8}) {  // groups of 1, 2, 4
    c.num_kv_heads = Hkv;
    EXPECT_TRUE(DeviceWeights::check_attention_shape(c)) << Hkv;
  }
}

TEST(AttentionShape, OtherShapesAreRefusedWithTheValueNamed) {
  struct Case {
    void (*edit)(model::FlintConfig&);
    std::string words;
  };
  const Case cases[] = {
      {[](model::FlintConfig& c) { c.head_dim = 96; }, "head_dim 16, 32, 64 or 128, not 96"},
      {[](model::FlintConfig& c) { c.head_dim = 256; }, "not 256"},
      {[](model::FlintConfig& c) { c.num_heads = 48; }, "not num_heads 48 over num_kv_heads 4"},
      {[](model::FlintConfig& c) { c.num_heads = 64; }, "not num_heads 64 over num_kv_heads 4"},
      {[](model::FlintConfig& c) { c.num_kv_heads = 5; }, "not num_heads 32 over num_kv_heads 5"},
      {[](model::FlintConfig& c) { c.num_kv_heads = 0; }, "not num_heads 32 over num_kv_heads 0"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.words);
    model::FlintConfig c = flint_full_config();
    k.edit(c);
    expect_refused(DeviceWeights::check_attention_shape(c), ErrorCode::kUnsupported, k.words);
    // Dummy weights refuse it too (hidden-size checks pass for these shapes).
    expect_refused(DeviceWeights::check_dummy_config(c, DType::kBF16), ErrorCode::kUnsupported,
                   k.words);
  }
}

}  // namespace
}  // namespace flint::cuda
