// EngineCore on the ToyBackend: batching invariants, chunked prefill, preemption, cancellation, and
// outputs bit-identical to a from-scratch reference.
#include <gtest/gtest.h>

#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

model::FlintConfig hybrid_config() {
  // Several sliding layers stacked, as in Flint (full first and last, sliding runs between).
  return toy_config({kFull, kSliding, kSliding, kFull, kSliding, kSliding, kSliding, kFull},
                    /*window=*/5);
}

EngineConfig small_engine(int budget = 16, int max_seqs = 4) {
  EngineConfig c;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 256;
  c.page_size = 4;
  c.kv_cache_memory = 1 << 24;
  c.kv_dtype = DType::kF32;
  return c;
}

SamplingParams greedy(int max_tokens, int logprobs = -1) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  if (logprobs >= 0) p.logprobs = logprobs;
  return p;
}

TEST(EngineCore, GreedyOutputsMatchFromScratchReference) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, small_engine());
  const std::vector<int> lens = {1, 7, 40, 129};
  for (size_t i = 0; i < lens.size(); ++i)
    ASSERT_TRUE(
        h.add("r" + std::to_string(i), make_prompt(lens[i], static_cast<int>(i)), greedy(12, 3)));
  h.run();
  for (size_t i = 0; i < lens.size(); ++i) {
    SCOPED_TRACE(lens[i]);
    const auto prompt = make_prompt(lens[i], static_cast<int>(i));
    const Collected& c = h.results["r" + std::to_string(i)];
    ASSERT_TRUE(c.finished);
    const auto want = toy_greedy(mc, prompt, 12);
    EXPECT_EQ(c.tokens.at(0), want);
    EXPECT_EQ(c.finish.at(0), want.back() == 2 ? FinishReason::kStop : FinishReason::kLength);
    // logprobs: the sampled token's and the top 3, from the same from-scratch logits.
    std::vector<int32_t> ctx = prompt;
    ASSERT_EQ(c.logprobs.at(0).size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const auto row = toy_logits_row(mc, ctx);
      const PositionLogprobs& lp = c.logprobs.at(0)[k];
      EXPECT_EQ(lp.token_id, want[k]);
      EXPECT_NEAR(lp.logprob, ref_logprob(row, want[k]), 1e-5);
      EXPECT_EQ(lp.rank, 1);
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.top[0].first, want[k]);
      for (auto [id, l] : lp.top) EXPECT_NEAR(l, ref_logprob(row, id), 1e-5);
      EXPECT_GE(lp.top[0].second, lp.top[1].second);
      EXPECT_GE(lp.top[1].second, lp.top[2].second);
      ctx.push_back(want[k]);
    }
  }
  EXPECT_EQ(h.core->stats().num_pages_used, 0);
  EXPECT_EQ(h.core->stats().num_rings_used, 0);
}

TEST(EngineCore, StepsRespectTokenAndSequenceBudgets) {
  auto mc = hybrid_config();
  EngineConfig ec = small_engine(/*budget=*/10, /*max_seqs=*/3);
  ec.enable_prefix_caching = false;   // no chunk cuts at snapshot boundaries
  Harness h = Harness::make(mc, ec);  // the ToyBackend fails any step over the limits
  for (int i = 0; i < 7; ++i)
    ASSERT_TRUE(h.add("r" + std::to_string(i), make_prompt(9 + 5 * i, i), greedy(6)));
  h.run();
  bool mixed = false;
  int max_chunk = 0;
  for (const auto& s : h.backend->steps) {
    EXPECT_LE(s.num_tokens(), 10);
    EXPECT_LE(s.num_seqs(), 3);
    int decodes = 0, prefills = 0;
    for (int q = 0; q < s.num_seqs(); ++q) {
      const int n = s.query_start_loc[q + 1] - s.query_start_loc[q];
      max_chunk = std::max(max_chunk, n);
      (n == 1 && s.seq_lens[q] > 1 ? decodes : prefills)++;
    }
    mixed |= decodes > 0 && prefills > 0;
  }
  EXPECT_TRUE(mixed) << "no step mixed decode tokens with a prefill chunk";
  EXPECT_GT(max_chunk, 1);
  // Without preemption every token is computed exactly once: the prompt, and each sampled token
  // except the last.
  int64_t want_tokens = 0, got_tokens = 0;
  for (int i = 0; i < 7; ++i) {
    const auto& toks = h.results["r" + std::to_string(i)].tokens.at(0);
    EXPECT_EQ(toks, toy_greedy(mc, make_prompt(9 + 5 * i, i), 6));
    want_tokens += 9 + 5 * i + static_cast<int64_t>(toks.size()) - 1;
  }
  for (const auto& s : h.backend->steps) got_tokens += s.num_tokens();
  EXPECT_EQ(h.core->stats().num_preemptions, 0);
  EXPECT_EQ(got_tokens, want_tokens);
}

TEST(EngineCore, LongPromptIsPrefilledInChunks) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, small_engine(/*budget=*/7));
  ASSERT_TRUE(h.add("long", make_prompt(50, 9), greedy(3)));
  h.run();
  // 50 prompt tokens at 7 per step: 8 chunk steps (the last one of 1 token), then 2 decodes.
  ASSERT_GE(h.backend->steps.size(), 8u);
  int pos = 0;
  for (size_t i = 0; i < 8; ++i) {
    const auto& s = h.backend->steps[i];
    ASSERT_EQ(s.num_seqs(), 1);
    EXPECT_EQ(s.positions.front(), pos);
    pos += s.num_tokens();
    EXPECT_EQ(s.seq_lens[0], pos);
    EXPECT_EQ(s.logits_indices.size(), pos == 50 ? 1u : 0u);
  }
  EXPECT_EQ(pos, 50);
  EXPECT_EQ(h.results["long"].tokens.at(0), toy_greedy(mc, make_prompt(50, 9), 3));
}

TEST(EngineCore, PreemptionUnderKvPressureLosesNoRequest) {
  auto mc = hybrid_config();
  EngineConfig ec = small_engine(/*budget=*/32, /*max_seqs=*/6);
  ec.max_model_len = 64;
  ec.enable_prefix_caching = false;
  // 16 pages of 4 tokens (one max_model_len sequence) plus 6 rings: far less than 6 x 60 tokens.
  const int64_t row = 2 * 1 * 4 * 4;
  ec.kv_cache_memory = 6 * 5 * row * 5 + 3 * 4 * row * 16;
  Harness h = Harness::make(mc, ec);
  ASSERT_EQ(h.core->kv().num_pages(), 16);
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(h.add("r" + std::to_string(i), make_prompt(20 + i, 30 + i), greedy(30)));
  h.run();
  EXPECT_GT(h.core->stats().num_preemptions, 0);
  for (int i = 0; i < 6; ++i) {
    const Collected& c = h.results["r" + std::to_string(i)];
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.tokens.at(0), toy_greedy(mc, make_prompt(20 + i, 30 + i), 30)) << i;
  }
  EXPECT_EQ(h.core->stats().num_pages_used, 0);
  EXPECT_EQ(h.core->stats().num_rings_used, 0);
}

TEST(EngineCore, AbortFreesPagesAndRingWithinOneStep) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, small_engine(/*budget=*/64));
  ASSERT_TRUE(h.add("a", make_prompt(30, 1), greedy(100)));
  ASSERT_TRUE(h.add("b", make_prompt(20, 2), greedy(100)));
  for (int i = 0; i < 3; ++i) h.core->step();
  const auto before = h.core->stats();
  EXPECT_EQ(before.num_running, 2);
  EXPECT_GT(before.num_pages_used, 0);
  EXPECT_TRUE(h.core->abort("a"));
  EXPECT_FALSE(h.core->abort("unknown"));
  ASSERT_TRUE(h.results["a"].finished);
  EXPECT_EQ(h.results["a"].finish.at(0), FinishReason::kAbort);
  const auto mid = h.core->stats();
  EXPECT_EQ(mid.num_running, 1);
  EXPECT_EQ(mid.num_rings_used, 1);
  EXPECT_EQ(mid.num_pages_used, 6);  // b has 22 tokens computed: ceil(22 / 4) pages
  h.core->step();
  EXPECT_EQ(h.backend->steps.back().num_seqs(), 1);  // a is gone from the very next step
  h.core->abort_all();
  EXPECT_TRUE(h.results["b"].finished);
  EXPECT_FALSE(h.core->has_work());
  const auto after = h.core->stats();
  EXPECT_EQ(after.num_pages_used, 0);
  EXPECT_EQ(after.num_rings_used, 0);
  EXPECT_EQ(after.kv_usage, 0.0);
}

TEST(EngineCore, BackendFailureFailsTheStepsRequestsAndFreesKv) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, small_engine());
  ASSERT_TRUE(h.add("a", make_prompt(5, 1), greedy(4)));
  h.backend->fail_next = true;
  h.core->step();
  ASSERT_TRUE(h.results["a"].finished);
  EXPECT_EQ(h.results["a"].finish.at(0), FinishReason::kError);
  ASSERT_TRUE(h.results["a"].outputs.back().error.has_value());
  EXPECT_NE(h.results["a"].outputs.back().error->message.find("injected"), std::string::npos);
  EXPECT_EQ(h.core->stats().num_pages_used, 0);
  ASSERT_TRUE(h.add("b", make_prompt(5, 1), greedy(4)));  // the engine keeps serving
  h.run();
  EXPECT_EQ(h.results["b"].tokens.at(0), toy_greedy(mc, make_prompt(5, 1), 4));
}

TEST(EngineCore, RejectsBadRequestsWithNamedReasons) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, small_engine());
  auto msg = [&](std::vector<int32_t> prompt, SamplingParams p) {
    Status s = h.add("x" + std::to_string(h.results.size()) + std::to_string(rand()), prompt, p);
    return s ? std::string() : s.error().message;
  };
  EXPECT_NE(msg({}, {}).find("at least one token"), std::string::npos);
  EXPECT_NE(msg({1, 64}, {}).find("token id 64"), std::string::npos);
  EXPECT_NE(msg(make_prompt(256, 1), {}).find("maximum context length is 256"), std::string::npos);
  SamplingParams p;
  p.max_tokens = 250;
  EXPECT_NE(msg(make_prompt(10, 1), p).find("(10 in the prompt, 250 in the completion)"),
            std::string::npos);
  SamplingParams q;
  q.top_p = 1.5f;
  EXPECT_NE(msg({5}, q).find("top_p"), std::string::npos);
  ASSERT_TRUE(h.add("dup", {5}, greedy(1)));
  Status dup = h.add("dup", {5}, greedy(1));
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("already in use"), std::string::npos);
}

TEST(EngineCore, KvBudgetTooSmallIsAClearError) {
  auto mc = hybrid_config();
  EngineConfig ec = small_engine();
  ec.kv_cache_memory = 1000;
  auto core = EngineCore::create(ec, std::make_unique<ToyBackend>(mc), nullptr);
  ASSERT_FALSE(core);
  EXPECT_EQ(core.error().code, ErrorCode::kOutOfMemory);
  EXPECT_NE(core.error().message.find("kv_cache_memory 1000 bytes is too small"),
            std::string::npos);
}

// Host sampling draws the rows of a step in parallel; each sequence has its own generator, so a
// seeded request's tokens and logprobs are the same whether it runs alone or among eleven others
// (some with penalties, min_tokens or logit_bias, which sample from a processed copy of the row).
TEST(EngineCore, SeededHostSamplingDoesNotDependOnTheBatch) {
  auto mc = hybrid_config();
  auto params = [](int i) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = i % 3 == 0 ? 0.8f : 1.0f;
    p.top_k = i % 4 == 1 ? 3 : 0;
    p.max_tokens = 10;
    p.seed = 1000 + i;
    p.logprobs = 2;
    if (i % 5 == 2) p.presence_penalty = 0.7f;
    if (i % 5 == 3) p.min_tokens = 6;
    if (i % 5 == 4) p.logit_bias = {{3, 2.5f}};
    return p;
  };
  constexpr int kRequests = 12;
  Harness together = Harness::make(mc, small_engine(/*budget=*/256, /*max_seqs=*/kRequests));
  for (int i = 0; i < kRequests; ++i)
    ASSERT_TRUE(together.add("r" + std::to_string(i), make_prompt(3 + i, i), params(i)));
  together.run();
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    Harness alone = Harness::make(mc, small_engine(/*budget=*/256, /*max_seqs=*/1));
    ASSERT_TRUE(alone.add("r", make_prompt(3 + i, i), params(i)));
    alone.run();
    const Collected& a = alone.results["r"];
    const Collected& t = together.results["r" + std::to_string(i)];
    ASSERT_TRUE(a.finished && t.finished);
    EXPECT_EQ(t.tokens.at(0), a.tokens.at(0));
    ASSERT_EQ(t.logprobs.at(0).size(), a.logprobs.at(0).size());
    for (size_t k = 0; k < a.logprobs.at(0).size(); ++k) {
      EXPECT_EQ(t.logprobs.at(0)[k].token_id, a.logprobs.at(0)[k].token_id);
      EXPECT_EQ(t.logprobs.at(0)[k].logprob, a.logprobs.at(0)[k].logprob);
      EXPECT_EQ(t.logprobs.at(0)[k].top, a.logprobs.at(0)[k].top);
    }
  }
}

}  // namespace
}  // namespace flint::engine::testing
