// Logits processing, logprobs and sampling against hand-computed expectations.
#include "engine/logits_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace flint::engine {
namespace {

TEST(Rng, IsSplitMix64) {
  // Published splitmix64 outputs for seed 0.
  Rng r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ull);
  Rng a(42), b(42);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.uniform(), b.uniform());
}

TEST(LogitsProcessor, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> l = {1.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p;
  ResolvedSampling s;
  s.repetition_penalty = 2.0f;
  PenaltyState st;
  st.prompt_tokens = {1, 2};
  st.output_counts = {{3, 1}};
  apply_logits_processors(l, p, s, st, 1, {});
  EXPECT_EQ(l, (std::vector<float>{1.0f, 1.0f, -2.0f, 0.25f}));
}

TEST(LogitsProcessor, FrequencyAndPresencePenaltiesUseOutputCounts) {
  std::vector<float> l = {1.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  PenaltyState st;
  st.prompt_tokens = {0};  // prompt tokens do not count for these two
  st.output_counts = {{3, 2}, {1, 1}};
  apply_logits_processors(l, p, ResolvedSampling{}, st, 3, {});
  EXPECT_EQ(l, (std::vector<float>{1.0f, 1.25f, -1.0f, -0.75f}));
}

TEST(LogitsProcessor, LogitBiasAndMinTokensMask) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.logit_bias = {{0, 3.0f}, {2, -1.5f}};
  p.min_tokens = 2;
  std::vector<float> l = {1.0f, 2.0f, -1.0f, 0.5f};
  const std::vector<int32_t> stops = {1, 3};
  apply_logits_processors(l, p, ResolvedSampling{}, PenaltyState{}, 1, stops);
  EXPECT_EQ(l, (std::vector<float>{4.0f, -kInf, -2.5f, -kInf}));
  std::vector<float> l2 = {1.0f, 2.0f, -1.0f, 0.5f};
  apply_logits_processors(l2, p, ResolvedSampling{}, PenaltyState{}, 2, stops);  // reached
  EXPECT_EQ(l2, (std::vector<float>{4.0f, 2.0f, -2.5f, 0.5f}));
}

TEST(Logprobs, LogSoftmaxRankAndTop) {
  std::vector<float> l = {std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)};
  PositionLogprobs lp = compute_logprobs(l, 2, 3);
  EXPECT_EQ(lp.token_id, 2);
  EXPECT_NEAR(lp.logprob, std::log(0.2), 1e-6);
  EXPECT_EQ(lp.rank, 3);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, std::log(0.4), 1e-6);
  EXPECT_NEAR(lp.top[1].second, std::log(0.3), 1e-6);
  EXPECT_EQ(compute_logprobs(l, 1, 0).top.size(), 0u);
  EXPECT_EQ(compute_logprobs(l, 1, 0).rank, 1);
}

std::vector<int> histogram(const std::vector<float>& l, ResolvedSampling s, int draws,
                           uint64_t seed) {
  std::vector<int> h(l.size());
  Rng rng(seed);
  for (int i = 0; i < draws; ++i) h[sample_token(l, s, rng)]++;
  return h;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  ResolvedSampling s;
  s.temperature = 0.0f;
  Rng rng(1);
  EXPECT_EQ(sample_token(std::vector<float>{0.f, 3.f, 1.f, 3.f}, s, rng), 1);
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto h = histogram(l, ResolvedSampling{}, 20000, 7);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.015);
  EXPECT_NEAR(h[1] / 20000.0, 0.3, 0.015);
  EXPECT_NEAR(h[2] / 20000.0, 0.2, 0.015);
}

TEST(Sampler, TemperatureSharpens) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  ResolvedSampling s;
  s.temperature = 0.5f;  // p^2 renormalised: 0.25, 0.09, 0.04 over 0.38
  auto h = histogram(l, s, 20000, 8);
  EXPECT_NEAR(h[0] / 20000.0, 0.25 / 0.38, 0.015);
  EXPECT_NEAR(h[2] / 20000.0, 0.04 / 0.38, 0.015);
}

TEST(Sampler, TopKTopPMinPTruncate) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  ResolvedSampling k;
  k.top_k = 2;
  auto hk = histogram(l, k, 8000, 9);
  EXPECT_EQ(hk[2] + hk[3], 0);
  EXPECT_NEAR(hk[0] / 8000.0, 0.5 / 0.8, 0.02);
  ResolvedSampling p;
  p.top_p = 0.79f;  // 0.5 + 0.3 reaches 0.79: two tokens
  auto hp = histogram(l, p, 8000, 10);
  EXPECT_EQ(hp[2] + hp[3], 0);
  EXPECT_GT(hp[1], 0);
  ResolvedSampling p2;
  p2.top_p = 0.81f;  // needs the third
  auto hp2 = histogram(l, p2, 8000, 11);
  EXPECT_GT(hp2[2], 0);
  EXPECT_EQ(hp2[3], 0);
  ResolvedSampling m;
  m.min_p = 0.29f;  // threshold 0.145: keeps 0.5, 0.3, 0.15
  auto hm = histogram(l, m, 8000, 12);
  EXPECT_EQ(hm[3], 0);
  EXPECT_GT(hm[2], 0);
  ResolvedSampling kp;  // top_p applies to the top_k-renormalised distribution: 0.5/0.8 >= 0.6
  kp.top_k = 2;
  kp.top_p = 0.6f;
  auto hkp = histogram(l, kp, 2000, 13);
  EXPECT_EQ(hkp[0], 2000);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = static_cast<float>(i % 7) * 0.3f;
  EXPECT_EQ(histogram(l, ResolvedSampling{}, 100, 5), histogram(l, ResolvedSampling{}, 100, 5));
  Rng a(5), b(5), c(6);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 20; ++i) {
    ta.push_back(sample_token(l, ResolvedSampling{}, a));
    tb.push_back(sample_token(l, ResolvedSampling{}, b));
    tc.push_back(sample_token(l, ResolvedSampling{}, c));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(SamplingParams, ValidateNamesTheParameter) {
  auto msg = [](SamplingParams p) {
    Status s = p.validate(100);
    return s ? std::string() : s.error().message;
  };
  SamplingParams p;
  EXPECT_EQ(msg(p), "");
  p.temperature = -1.0f;
  EXPECT_EQ(msg(p), "temperature must be a finite number >= 0, got -1");
  p = {};
  p.temperature = std::nanf("");
  EXPECT_NE(msg(p).find("temperature"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(msg(p).find("top_k"), std::string::npos);
  p = {};
  p.logit_bias = {{100, 1.0f}};
  EXPECT_EQ(msg(p), "logit_bias: token id 100 is out of range [0, 100)");
  p = {};
  p.n = 0;
  EXPECT_NE(msg(p).find("n must be"), std::string::npos);
  p = {};
  p.min_tokens = 5;
  p.max_tokens = 4;
  EXPECT_NE(msg(p).find("min_tokens must be <= max_tokens"), std::string::npos);
  p = {};
  p.logprobs = 21;
  EXPECT_NE(msg(p).find("logprobs must be in [0, 20]"), std::string::npos);
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_NE(msg(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.stop = {""};
  EXPECT_NE(msg(p).find("stop"), std::string::npos);
}

TEST(SamplingParams, DefaultsComeFromGenerationConfig) {
  model::GenerationDefaults d;
  d.temperature = 0.6f;
  d.top_p = 0.95f;
  d.top_k = 40;
  SamplingParams p;
  ResolvedSampling r = resolve_sampling(p, d);
  EXPECT_EQ(r.temperature, 0.6f);
  EXPECT_EQ(r.top_p, 0.95f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.min_p, 0.0f);
  EXPECT_EQ(r.repetition_penalty, 1.0f);
  p.temperature = 0.0f;
  p.top_k = -1;
  r = resolve_sampling(p, d);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.top_k, 0);
}

}  // namespace
}  // namespace flint::engine
