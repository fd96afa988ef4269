// The engine on the real CPU backend and a tiny random Flint model with four stacked sliding layers
// (window 5) and prompts much longer than the window: prefix-cache reuse gives the same logits as
// computing without the cache, and chunked prompt logprobs match one whole-prompt prefill.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/forward.h"
#include "tests/support/tiny_model.h"
#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

cpu::testing::TinyModel sliding_model() {
  cpu::testing::TinyOptions o;
  o.num_layers = 6;
  o.sliding = {false, true, true, true, true, false};
  o.sliding_window = 5;
  o.vocab_size = 96;
  return cpu::testing::make_tiny_model(o);
}

EngineConfig cpu_engine(bool prefix_caching, int budget = 16) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 256;
  c.page_size = 4;
  c.kv_cache_memory = 8 << 20;
  c.kv_dtype = DType::kF32;
  c.enable_prefix_caching = prefix_caching;
  return c;
}

Harness cpu_harness(const cpu::testing::TinyModel& m, EngineConfig ec) {
  Harness h;
  auto core = EngineCore::create(ec, std::make_unique<cpu::CpuBackend>(m.weights, 1), nullptr);
  EXPECT_TRUE(core.has_value()) << (core ? "" : core.error().message);
  if (core) h.core = std::move(*core);
  return h;
}

std::vector<int32_t> prompt(int n, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = static_cast<int32_t>(toy_mix(seed * 7777 + i) % 96);
  return p;
}

TEST(CpuEngine, PrefixCacheReuseMatchesNoCache) {
  const auto m = sliding_model();
  Harness cached = cpu_harness(m, cpu_engine(true));
  Harness plain = cpu_harness(m, cpu_engine(false));
  const auto prefix = prompt(40, 1);
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 3; ++i) {
    auto p = prefix;
    auto tail = prompt(5 + 2 * i, 10 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    ps.push_back(p);
  }
  auto longer = ps[0];
  auto more = prompt(9, 20);
  longer.insert(longer.end(), more.begin(), more.end());
  ps.push_back(longer);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 6;
  sp.logprobs = 5;
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(cached.add(id, ps[i], sp));
    ASSERT_TRUE(plain.add(id, ps[i], sp));
    cached.run();
    plain.run();
    const Collected& a = cached.results[id];
    const Collected& b = plain.results[id];
    ASSERT_EQ(a.tokens.at(0), b.tokens.at(0));
    ASSERT_EQ(a.logprobs.at(0).size(), b.logprobs.at(0).size());
    for (size_t k = 0; k < a.logprobs.at(0).size(); ++k) {
      const auto& x = a.logprobs.at(0)[k];
      const auto& y = b.logprobs.at(0)[k];
      EXPECT_NEAR(x.logprob, y.logprob, 1e-4);
      ASSERT_EQ(x.top.size(), y.top.size());
      for (size_t j = 0; j < x.top.size(); ++j) {
        EXPECT_EQ(x.top[j].first, y.top[j].first);
        EXPECT_NEAR(x.top[j].second, y.top[j].second, 1e-4);
      }
    }
  }
  // r2 reuses the 40-token prefix (snapshotted by r1), r3 reuses r0's prompt up to 44.
  EXPECT_EQ(cached.results["r2"].outputs.front().num_cached_tokens, 40);
  EXPECT_EQ(cached.results["r3"].outputs.front().num_cached_tokens, 44);
  EXPECT_GT(cached.core->stats().prefix_cache_hits, 0);
}

TEST(CpuEngine, ChunkedPromptLogprobsMatchOneWholePrefill) {
  const auto m = sliding_model();
  const auto p = prompt(30, 3);
  // Reference: one prefill of the whole prompt with logits for every position.
  cpu::CpuBackend ref(m.weights, 1);
  cpu::SimpleSteps steps(1, static_cast<int64_t>(p.size()));
  ASSERT_TRUE(ref.init_kv_cache(steps.kv_spec(DType::kF32)));
  steps.add(0, p, /*all_logits=*/true);
  const int64_t v = m.weights.config.vocab_size;
  std::vector<float> logits(p.size() * v);
  ASSERT_TRUE(ref.forward(steps.take(), logits));

  Harness h = cpu_harness(m, cpu_engine(true, /*budget=*/7));
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 1;
  sp.prompt_logprobs = 2;
  ASSERT_TRUE(h.add("p", p, sp));
  h.run();
  const auto& first = h.results["p"].outputs.front();
  ASSERT_TRUE(first.prompt_logprobs.has_value());
  const auto& plp = *first.prompt_logprobs;
  ASSERT_EQ(plp.size(), p.size());
  for (size_t i = 1; i < p.size(); ++i) {
    std::vector<float> row(logits.begin() + (i - 1) * v, logits.begin() + i * v);
    EXPECT_EQ(plp[i].token_id, p[i]);
    EXPECT_NEAR(plp[i].logprob, ref_logprob(row, p[i]), 1e-4) << i;
    ASSERT_EQ(plp[i].top.size(), 2u);
    EXPECT_NEAR(plp[i].top[0].second, ref_logprob(row, plp[i].top[0].first), 1e-4);
  }
  // The sampled token is the argmax of the last row.
  std::vector<float> last(logits.end() - v, logits.end());
  EXPECT_EQ(h.results["p"].tokens.at(0)[0],
            std::max_element(last.begin(), last.end()) - last.begin());
}

}  // namespace
}  // namespace flint::engine::testing
