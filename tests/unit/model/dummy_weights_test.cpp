// FlintWeights::dummy (--load-format dummy): every tensor of the config's shape, deterministic per
// seed, and a clear error when the weights cannot fit. Partner: src/model/dummy_weights.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/weights.h"

namespace flint::model {
namespace {

FlintConfig small_config() {
  auto c = FlintConfig::from_hf_path(std::string(FLINT_SOURCE_DIR) + "/models/flint-tiny");
  EXPECT_TRUE(c) << c.error().message;
  return *c;
}

TEST(DummyWeights, HaveTheConfigShapes) {
  const FlintConfig cfg = small_config();
  auto w = FlintWeights::dummy(cfg, DType::kBF16, 7);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->embed.shape(), (Shape{cfg.vocab_size, cfg.hidden_size}));
  EXPECT_EQ(w->lm_head.w.shape(), (Shape{cfg.vocab_size, cfg.hidden_size}));
  ASSERT_EQ(static_cast<int64_t>(w->layers.size()), cfg.num_hidden_layers);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerWeights& L = w->layers[l];
    EXPECT_EQ(L.q.w.shape(), (Shape{cfg.num_heads * cfg.head_dim, cfg.hidden_size}));
    EXPECT_EQ(L.k.w.shape(), (Shape{cfg.num_kv_heads * cfg.head_dim, cfg.hidden_size}));
    EXPECT_EQ(L.o.w.shape(), (Shape{cfg.hidden_size, cfg.num_heads * cfg.head_dim}));
    EXPECT_EQ(L.q.w.dtype(), DType::kBF16);
    EXPECT_EQ(L.sinks.numel(), cfg.num_heads);
    if (cfg.layer_is_dense[l]) {
      EXPECT_EQ(L.gate.w.shape(), (Shape{cfg.intermediate_size, cfg.hidden_size}));
      EXPECT_TRUE(L.exp_gate.empty());
    } else {
      ASSERT_EQ(static_cast<int64_t>(L.exp_down.size()), cfg.num_experts);
      EXPECT_EQ(L.exp_down[0].w.shape(), (Shape{cfg.hidden_size, cfg.moe_intermediate_size}));
      EXPECT_EQ(L.router.w.shape(), (Shape{cfg.num_experts, cfg.hidden_size}));
      EXPECT_EQ(L.expert_bias.empty(), !cfg.has_expert_bias);
    }
  }
}

TEST(DummyWeights, AreDeterministicPerSeed) {
  const FlintConfig cfg = small_config();
  auto a = FlintWeights::dummy(cfg, DType::kF32, 1);
  auto b = FlintWeights::dummy(cfg, DType::kF32, 1);
  auto c = FlintWeights::dummy(cfg, DType::kF32, 2);
  ASSERT_TRUE(a && b && c);
  const size_t bytes = static_cast<size_t>(a->layers[2].q.w.nbytes());
  EXPECT_EQ(std::memcmp(a->layers[2].q.w.raw(), b->layers[2].q.w.raw(), bytes), 0);
  EXPECT_NE(std::memcmp(a->layers[2].q.w.raw(), c->layers[2].q.w.raw(), bytes), 0);
}

TEST(DummyWeights, RefuseWhatCannotFit) {
  auto cfg =
      FlintConfig::from_hf_path(std::string(FLINT_SOURCE_DIR) + "/tests/data/flint-config.json");
  ASSERT_TRUE(cfg) << cfg.error().message;
  cfg->num_experts = 256 * 64;  // ~2.4 PB of experts: never fits
  auto w = FlintWeights::dummy(*cfg, DType::kBF16, 1);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::kOutOfMemory);
  EXPECT_NE(w.error().message.find("GB of memory"), std::string::npos) << w.error().message;
}

TEST(DummyWeights, RejectQuantizedTypes) {
  auto w = FlintWeights::dummy(small_config(), DType::kNVFP4, 1);
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("NVFP4"), std::string::npos);
}

}  // namespace
}  // namespace flint::model
