// Prefix caching on a model with several stacked sliding layers and prompts much longer than the
// window: outputs and logprobs with the cache are bit-identical to a from-scratch computation and
// to a run without the cache, and the cache is really used.
#include <gtest/gtest.h>

#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

model::FlintConfig hybrid_config() {
  return toy_config({kFull, kSliding, kSliding, kSliding, kFull, kSliding, kSliding, kFull},
                    /*window=*/5);
}

EngineConfig cache_engine(bool prefix_caching) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 24;
  c.max_model_len = 512;
  c.page_size = 4;
  c.kv_cache_memory = 1 << 24;
  c.kv_dtype = DType::kF32;
  c.enable_prefix_caching = prefix_caching;
  c.num_ring_snapshots = 8;
  return c;
}

SamplingParams greedy_lp(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.logprobs = 5;
  return p;
}

// Shared 100-token system prefix (20 windows long), then distinct tails; plus a multi-turn
// follow-up whose prompt extends an earlier prompt.
std::vector<std::vector<int32_t>> prompts() {
  auto prefix = make_prompt(100, 77);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 3; ++i) {
    auto p = prefix;
    auto tail = make_prompt(7 + 3 * i, 200 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    out.push_back(p);
  }
  auto turn2 = out[0];
  auto more = make_prompt(13, 300);
  turn2.insert(turn2.end(), more.begin(), more.end());
  out.push_back(turn2);
  out.push_back(prefix);  // exactly the prefix: ends at a block boundary
  return out;
}

void expect_matches_reference(const model::FlintConfig& mc, const std::vector<int32_t>& prompt,
                              const Collected& c) {
  const auto want = toy_greedy(mc, prompt, 10);
  ASSERT_EQ(c.tokens.at(0), want);
  std::vector<int32_t> ctx = prompt;
  for (size_t k = 0; k < want.size(); ++k) {
    const auto row = toy_logits_row(mc, ctx);
    const auto& lp = c.logprobs.at(0)[k];
    EXPECT_NEAR(lp.logprob, ref_logprob(row, want[k]), 1e-5);
    for (auto [id, l] : lp.top) EXPECT_NEAR(l, ref_logprob(row, id), 1e-5);
    ctx.push_back(want[k]);
  }
}

TEST(PrefixCache, SlidingLayersExactOnReuse) {
  auto mc = hybrid_config();
  Harness cached = Harness::make(mc, cache_engine(true));
  Harness plain = Harness::make(mc, cache_engine(false));
  const auto ps = prompts();
  // One after another, so that each request can reuse what the earlier ones left in the cache.
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(cached.add(id, ps[i], greedy_lp(10)));
    ASSERT_TRUE(plain.add(id, ps[i], greedy_lp(10)));
    cached.run();
    plain.run();
    expect_matches_reference(mc, ps[i], cached.results[id]);
    EXPECT_EQ(cached.results[id].tokens, plain.results[id].tokens);
    for (size_t k = 0; k < cached.results[id].logprobs.at(0).size(); ++k)
      EXPECT_EQ(cached.results[id].logprobs.at(0)[k].logprob,
                plain.results[id].logprobs.at(0)[k].logprob);
  }
  // Ring snapshots: r0 (107 tokens) leaves one at 104, its last block boundary. r1 matches r0's
  // pages for the 100 shared tokens but there is no snapshot there, so it recomputes and leaves one
  // at 100; r2 reuses 100 tokens, r3 (r0's prompt extended) 104; r4 (the bare 100-token prefix) may
  // reuse at most 96 tokens and nothing snapshotted 96.
  const std::vector<int> want_cached = {0, 0, 100, 104, 0};
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(cached.results["r" + std::to_string(i)].outputs.front().num_cached_tokens,
              want_cached[i])
        << i;
  const auto st = cached.core->stats();
  EXPECT_GT(st.prefix_cache_hits, 0);
  EXPECT_GT(cached.backend->num_ring_copies, 0);
  EXPECT_EQ(st.num_pages_used, 0);
  EXPECT_EQ(plain.core->stats().prefix_cache_hits, 0);
}

TEST(PrefixCache, ConcurrentSharedPrefixIsExact) {
  auto mc = hybrid_config();
  Harness cached = Harness::make(mc, cache_engine(true));
  const auto ps = prompts();
  ASSERT_TRUE(cached.add("warm", ps[4], greedy_lp(2)));  // leaves a snapshot at 96 tokens
  cached.run();
  for (size_t i = 0; i < 3; ++i)
    ASSERT_TRUE(cached.add("c" + std::to_string(i), ps[i], greedy_lp(10)));
  cached.run();
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const Collected& c = cached.results["c" + std::to_string(i)];
    expect_matches_reference(mc, ps[i], c);
    EXPECT_EQ(c.outputs.front().num_cached_tokens, 96);  // "warm" snapshotted at (100-1)/4*4
  }
}

// A request arriving while another with its prefix is still in prefill: the first has no snapshot
// yet (its only one comes at its prompt's end), but its ring holds the sliding state of the block
// it has computed to, and the second starts from there instead of recomputing the prefix.
TEST(PrefixCache, ArrivalDuringASharedPrefillStartsFromTheRunningSequencesRing) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, cache_engine(true));
  const auto ps = prompts();
  ASSERT_TRUE(h.add("first", ps[0], greedy_lp(10)));  // 107 tokens, 24 a step
  h.core->step();
  h.core->step();
  ASSERT_TRUE(h.add("second", ps[1], greedy_lp(10)));  // the same 100-token prefix, 110 tokens
  // "second" finds no room until the fifth step, where "first" computes 96 -> 104 (its snapshot
  // boundary) and leaves room: "second" reuses the 96 tokens "first" has computed.
  h.core->step();
  h.core->step();
  EXPECT_EQ(h.core->kv().num_snapshots(), 0);
  h.core->step();
  const model::StepInput& s = h.core->last_step();
  ASSERT_EQ(s.num_seqs(), 2);
  EXPECT_EQ(s.seq_lens[0], 104);
  EXPECT_EQ(s.positions[s.query_start_loc[1]], 96);
  h.run();
  EXPECT_EQ(h.results["first"].outputs.front().num_cached_tokens, 0);
  EXPECT_EQ(h.results["second"].outputs.front().num_cached_tokens, 96);
  expect_matches_reference(mc, ps[0], h.results["first"]);
  expect_matches_reference(mc, ps[1], h.results["second"]);
  EXPECT_EQ(h.core->stats().num_pages_used, 0);
}

// The running sequence's ring is used only when it has computed exactly to a block end: "first",
// chunked beside a decoding request, is at 82 tokens when "second" is admitted, and "second"
// stops at the last real snapshot (36, left by "warm") though 80 tokens of its prefix are cached.
TEST(PrefixCache, RunningSequenceBetweenBlockEndsIsNotUsedAsASnapshot) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, cache_engine(true));
  const auto ps = prompts();
  const std::vector<int32_t> warm(ps[0].begin(), ps[0].begin() + 38);  // snapshot at 36
  ASSERT_TRUE(h.add("warm", warm, greedy_lp(2)));
  h.run();
  ASSERT_EQ(h.core->kv().num_snapshots(), 1);
  SamplingParams decoding;
  decoding.temperature = 0.0f;
  decoding.max_tokens = 30;
  decoding.ignore_eos = true;
  ASSERT_TRUE(h.add("decoding", make_prompt(4, 9), decoding));
  h.core->step();  // its prompt and first token; then one token a step
  ASSERT_TRUE(h.add("first", ps[0], greedy_lp(10)));
  ASSERT_TRUE(h.add("second", ps[1], greedy_lp(10)));
  // "first" reuses 36 and computes 23 a step: 59, 82, then 82 -> 104 (its snapshot boundary)
  // leaves one token of room, and "second" is admitted beside it.
  for (int i = 0; i < 3; ++i) h.core->step();
  EXPECT_EQ(h.core->last_step().seq_lens, (std::vector<int32_t>{7, 104, 37}));
  h.run();
  EXPECT_EQ(h.results["first"].outputs.front().num_cached_tokens, 36);
  EXPECT_EQ(h.results["second"].outputs.front().num_cached_tokens, 36);
  expect_matches_reference(mc, ps[0], h.results["first"]);
  expect_matches_reference(mc, ps[1], h.results["second"]);
  EXPECT_EQ(h.results["decoding"].tokens.at(0).size(), 30u);
}

// A request admitted with a cache hit still stops its first chunk at its own snapshot boundaries
// past the hit: "tail" reuses the prefix's snapshot at 96 and computes 96 -> 100 (its full-block
// match), 100 -> 108 (its prompt's last block end), 108 -> 110, leaving snapshots at 100 and 108.
// Its first chunk used to be cut at the boundaries past 0 instead, and ran 96 -> 110 past both.
TEST(PrefixCache, AdmissionWithAHitStopsAtItsOwnSnapshotBoundaries) {
  auto mc = hybrid_config();
  Harness h = Harness::make(mc, cache_engine(true));
  const auto ps = prompts();
  ASSERT_TRUE(h.add("prefix", ps[4], greedy_lp(10)));  // 100 tokens: a snapshot at 96
  h.run();
  ASSERT_EQ(h.core->kv().num_snapshots(), 1);
  ASSERT_TRUE(h.add("tail", ps[1], greedy_lp(10)));  // the prefix and 10 more tokens
  h.core->step();
  EXPECT_EQ(h.core->last_step().positions.front(), 96);
  EXPECT_EQ(h.core->last_step().seq_lens, (std::vector<int32_t>{100}));
  h.run();
  EXPECT_EQ(h.core->kv().num_snapshots(), 3);
  ASSERT_TRUE(h.add("again", ps[1], greedy_lp(10)));
  h.run();
  EXPECT_EQ(h.results["tail"].outputs.front().num_cached_tokens, 96);
  EXPECT_EQ(h.results["again"].outputs.front().num_cached_tokens, 108);
  expect_matches_reference(mc, ps[4], h.results["prefix"]);
  expect_matches_reference(mc, ps[1], h.results["tail"]);
  expect_matches_reference(mc, ps[1], h.results["again"]);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedBlocksUnderPressure) {
  auto mc = hybrid_config();
  EngineConfig ec = cache_engine(true);
  ec.max_model_len = 64;
  const int64_t row = 2 * 4 * 4;                                  // K+V, one kv head of dim 4, f32
  ec.kv_cache_memory = (4 + 8) * 5 * 5 * row + 3 * 4 * row * 20;  // 20 pages
  Harness h = Harness::make(mc, ec);
  ASSERT_EQ(h.core->kv().num_pages(), 20);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "e" + std::to_string(i);
    ASSERT_TRUE(h.add(id, make_prompt(40, 500 + i), greedy_lp(10)));
    h.run();
    expect_matches_reference(mc, make_prompt(40, 500 + i), h.results[id]);
  }
  EXPECT_LE(h.core->kv().num_cached_pages(), 20);
  // The most recent prompt is still cached; the first was evicted.
  ASSERT_TRUE(h.add("again5", make_prompt(40, 505), greedy_lp(10)));
  h.run();
  ASSERT_TRUE(h.add("again0", make_prompt(40, 500), greedy_lp(10)));
  h.run();
  EXPECT_EQ(h.results["again5"].outputs.front().num_cached_tokens, 36);
  EXPECT_EQ(h.results["again0"].outputs.front().num_cached_tokens, 0);
  expect_matches_reference(mc, make_prompt(40, 500), h.results["again0"]);
  expect_matches_reference(mc, make_prompt(40, 505), h.results["again5"]);
}

}  // namespace
}  // namespace flint::engine::testing
