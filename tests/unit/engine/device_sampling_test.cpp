// EngineCore with a backend that samples on its device (Backend::forward_sample): steps whose rows
// need only temperature/top-k/top-p/min-p/seed go to forward_sample and use its tokens; a step
// with logprobs, penalties, logit_bias or min_tokens falls back to host logits.
#include <gtest/gtest.h>

#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

using DeviceHarness = ToyHarness<SamplingToy>;

DeviceHarness make_harness(const model::FlintConfig& mc) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.max_model_len = 256;
  c.page_size = 4;
  c.kv_cache_memory = 1 << 24;
  c.kv_dtype = DType::kF32;
  return DeviceHarness::make(mc, c);
}

model::FlintConfig config() { return toy_config({kFull, kSliding, kFull}, /*window=*/5); }

TEST(EngineDeviceSampling, GreedyRequestsUseDeviceTokens) {
  auto mc = config();
  DeviceHarness h = make_harness(mc);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 10;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.add("r" + std::to_string(i), make_prompt(9 + i, i), p));
  h.run();
  for (int i = 0; i < 3; ++i) {
    const auto& c = h.results["r" + std::to_string(i)];
    EXPECT_EQ(c.tokens.at(0), toy_greedy(mc, make_prompt(9 + i, i), 10));
  }
  int with_logits = 0;  // prefill chunks without a sampled token run through forward()
  for (const auto& st : h.toy->steps) with_logits += st.logits_indices.empty() ? 0 : 1;
  EXPECT_EQ(h.toy->num_sample_steps, with_logits);
  EXPECT_GT(with_logits, 10);
}

TEST(EngineDeviceSampling, SeedAndStepReachTheBackend) {
  DeviceHarness h = make_harness(config());
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 7;
  p.top_p = 0.8f;
  p.min_p = 0.05f;
  p.seed = 1234;
  p.max_tokens = 6;
  p.ignore_eos = true;
  ASSERT_TRUE(h.add("a", make_prompt(5, 1), p));
  ASSERT_TRUE(h.add("b", make_prompt(5, 2), p));  // same seed: the same (seed, step) stream
  h.run();
  EXPECT_EQ(h.results["a"].tokens.at(0), h.results["b"].tokens.at(0));
  ASSERT_EQ(h.toy->seen.size(), 12u);
  for (const auto& s : h.toy->seen) {
    EXPECT_FLOAT_EQ(s.temperature, 0.9f);
    EXPECT_EQ(s.top_k, 7);
    EXPECT_FLOAT_EQ(s.top_p, 0.8f);
    EXPECT_FLOAT_EQ(s.min_p, 0.05f);
    EXPECT_EQ(s.seed, h.toy->seen[0].seed);
  }
  for (size_t i = 0; i < h.toy->seen.size(); i += 2) EXPECT_EQ(h.toy->seen[i].step, i / 2);
}

TEST(EngineDeviceSampling, LogprobsPenaltiesAndMinTokensFallBackToHostLogits) {
  auto mc = config();
  SamplingParams base;
  base.temperature = 0.0f;
  base.max_tokens = 4;
  base.ignore_eos = true;
  std::vector<SamplingParams> host_only(4, base);
  host_only[0].logprobs = 2;
  host_only[1].repetition_penalty = 1.2f;
  host_only[2].logit_bias = {{5, 1.0f}};
  host_only[3].min_tokens = 2;
  for (size_t i = 0; i < host_only.size(); ++i) {
    SCOPED_TRACE(i);
    DeviceHarness h = make_harness(mc);
    ASSERT_TRUE(h.add("r", make_prompt(6, 3), host_only[i]));
    h.run();
    EXPECT_EQ(h.results["r"].tokens.at(0).size(), 4u);
    if (i == 3) {
      EXPECT_EQ(h.toy->num_sample_steps, 2);  // once min_tokens is reached
    } else {
      EXPECT_EQ(h.toy->num_sample_steps, 0);
    }
  }
}

}  // namespace
}  // namespace flint::engine::testing
