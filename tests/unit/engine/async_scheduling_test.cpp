// EngineCore's async scheduling (EngineConfig::async_scheduling) with a backend that can chain
// steps (model::Backend::launch_sample / wait_sample): the next decode step is queued before the
// tokens of the one in flight are read, its token ids taken from that step's samples on the
// "device". The toy runs each queued step when it is waited for, in launch order, as a stream
// would, and checks every cache read; the outputs must be those of the engine that waits for each
// step, whatever finishes a request (length, stop token, abort) while a step is queued behind it.
#include <gtest/gtest.h>

#include <deque>

#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

// SamplingToy whose launches run when waited for, in launch order.
class ChainingToy : public SamplingToy {
 public:
  using SamplingToy::SamplingToy;
  bool can_chain() const override { return true; }

  Status launch_sample(const model::StepInput& s, std::span<const model::DeviceSampling> params,
                       bool chain) override {
    EXPECT_LT(queued_.size(), 2u) << "more than two steps outstanding";
    EXPECT_EQ(params.size(), s.logits_indices.size());
    if (chain) {
      ++num_chained;
      EXPECT_EQ(static_cast<size_t>(s.num_tokens()), last_launch_rows_)
          << "a chained step's tokens are the previous launch's rows";
      EXPECT_EQ(s.num_tokens(), s.num_seqs()) << "a chained step is a decode step";
    }
    ++num_launched;
    last_launch_rows_ = params.size();
    queued_.push_back(
        Queued{s, std::vector<model::DeviceSampling>(params.begin(), params.end()), chain});
    return ok();
  }

  Status wait_sample(std::span<int32_t> tokens) override {
    if (queued_.empty()) return Error{ErrorCode::kInternal, "toy: nothing queued"};
    Queued q = std::move(queued_.front());
    queued_.pop_front();
    if (q.chain) {
      if (last_tokens_.size() != q.step.token_ids.size())
        return Error{ErrorCode::kInternal, "toy: chained rows differ"};
      q.step.token_ids = last_tokens_;
    }
    FLINT_TRY(forward_sample(q.step, q.params, tokens));
    last_tokens_.assign(tokens.begin(), tokens.begin() + static_cast<long>(q.params.size()));
    return ok();
  }

  size_t num_queued() const { return queued_.size(); }
  int num_chained = 0;
  int num_launched = 0;

 private:
  struct Queued {
    model::StepInput step;
    std::vector<model::DeviceSampling> params;
    bool chain;
  };
  std::deque<Queued> queued_;
  std::vector<int32_t> last_tokens_;
  size_t last_launch_rows_ = 0;
};

using ChainHarness = ToyHarness<ChainingToy>;

ChainHarness make_harness(const model::FlintConfig& mc, bool async, int max_num_seqs = 6) {
  EngineConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 32;
  c.max_model_len = 96;
  c.page_size = 4;
  c.kv_cache_memory = 1 << 24;
  c.kv_dtype = DType::kF32;
  c.async_scheduling = async;
  return ChainHarness::make(mc, c);
}

model::FlintConfig config() { return toy_config({kFull, kSliding, kFull}, /*window=*/5); }

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

SamplingParams seeded(int max_tokens, uint64_t seed, int n = 1) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 7;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.n = n;
  return p;
}

// The requests of the tests: greedy, seeded, two choices, a stop token met mid-stream, and
// max_tokens of 1 and 2 (no step can be queued after their last token).
std::vector<std::pair<std::string, std::pair<std::vector<int32_t>, SamplingParams>>> requests(
    const model::FlintConfig& mc) {
  SamplingParams stop = greedy(20);
  const std::vector<int32_t> stop_prompt = make_prompt(6, 7);
  stop.stop_token_ids = {toy_greedy(mc, stop_prompt, 20).at(4)};
  stop.ignore_eos = true;
  return {{"greedy", {make_prompt(9, 1), greedy(12)}},
          {"seeded", {make_prompt(5, 2), seeded(9, 77)}},
          {"two", {make_prompt(7, 3), seeded(7, 5, 2)}},
          {"stop", {stop_prompt, stop}},
          {"one", {make_prompt(4, 4), greedy(1)}},
          {"two_tokens", {make_prompt(11, 5), greedy(2)}}};
}

void expect_same_outputs(const ChainHarness& a, const ChainHarness& b) {
  ASSERT_EQ(a.results.size(), b.results.size());
  for (const auto& [id, want] : b.results) {
    SCOPED_TRACE(id);
    const Collected& got = a.results.at(id);
    EXPECT_TRUE(got.finished);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.finish, want.finish);
  }
}

TEST(EngineAsyncScheduling, QueuedStepsGiveTheOutputsOfWaitingForEachStep) {
  const auto mc = config();
  ChainHarness async = make_harness(mc, true);
  ChainHarness sync = make_harness(mc, false);
  for (ChainHarness* h : {&async, &sync}) {
    for (const auto& [id, r] : requests(mc)) ASSERT_TRUE(h->add(id, r.first, r.second));
    h->run();
  }
  expect_same_outputs(async, sync);
  EXPECT_EQ(async.results.at("greedy").tokens.at(0), toy_greedy(mc, make_prompt(9, 1), 12));
  EXPECT_EQ(async.results.at("one").tokens.at(0).size(), 1u);
  EXPECT_EQ(async.results.at("two_tokens").tokens.at(0).size(), 2u);
  EXPECT_EQ(async.results.at("stop").finish.at(0), FinishReason::kStop);
  EXPECT_EQ(async.results.at("stop").tokens.at(0).size(), 5u);
  // Steps were queued behind others (not while a sequence was at its last token: a step is queued
  // for all of its sequences or none); the waiting engine queued none.
  EXPECT_GT(async.toy->num_chained, 0);
  EXPECT_EQ(sync.toy->num_chained, 0);
  EXPECT_EQ(async.toy->num_queued(), 0u);
  EXPECT_EQ(async.core->kv().num_used_pages(), 0);
}

TEST(EngineAsyncScheduling, EveryDecodeStepOfALoneRequestIsQueuedBehindTheLast) {
  const auto mc = config();
  ChainHarness h = make_harness(mc, true);
  SamplingParams p = greedy(12);
  p.ignore_eos = true;
  ASSERT_TRUE(h.add("a", make_prompt(5, 6), p));
  h.run();
  ASSERT_EQ(h.results.at("a").tokens.at(0).size(), 12u);
  // The prompt's step samples token 1 and is waited for only after token 2's step is queued, and
  // so on: tokens 2 .. 12 come from chained steps, and none is launched past the last.
  EXPECT_EQ(h.toy->num_launched, 12);
  EXPECT_EQ(h.toy->num_chained, 11);
  ChainHarness sync = make_harness(mc, false);
  ASSERT_TRUE(sync.add("a", make_prompt(5, 6), p));
  sync.run();
  EXPECT_EQ(h.results.at("a").tokens, sync.results.at("a").tokens);
}

TEST(EngineAsyncScheduling, ArrivalsWhileAStepIsQueuedAreAdmittedAndChangeNoOutput) {
  const auto mc = config();
  ChainHarness async = make_harness(mc, true);
  ChainHarness sync = make_harness(mc, false);
  for (ChainHarness* h : {&async, &sync}) {
    ASSERT_TRUE(h->add("a", make_prompt(8, 11), greedy(25)));
    ASSERT_TRUE(h->add("b", make_prompt(3, 12), seeded(20, 9)));
    for (int i = 0; i < 6; ++i) h->core->step();
    ASSERT_TRUE(h->add("c", make_prompt(13, 13), greedy(10)));
    for (int i = 0; i < 3; ++i) h->core->step();
    ASSERT_TRUE(h->add("d", make_prompt(2, 14), seeded(6, 3, 2)));
    h->run();
  }
  expect_same_outputs(async, sync);
  EXPECT_GT(async.toy->num_chained, 10);
}

// max_num_seqs 2 and three requests: the third waits for a slot while the first two decode. It
// cannot be admitted before one of them finishes, so their steps are queued meanwhile: a's tokens
// 2 .. 12 with b's 2 .. 12 (11 chained steps). Then c is admitted: its prompt's first chunk (to
// the snapshot boundary at 4) samples nothing, so b's token 13 runs unqueued; its last chunk
// samples c's token 1 beside b's 14, and c's tokens 2 .. 7 are chained with b's 15 .. 20 (6
// more), b's last token ending the queue. Outputs as the waiting engine's.
TEST(EngineAsyncScheduling, ARequestWaitingForASlotDoesNotStopTheQueue) {
  const auto mc = config();
  ChainHarness async = make_harness(mc, true, /*max_num_seqs=*/2);
  ChainHarness sync = make_harness(mc, false, /*max_num_seqs=*/2);
  for (ChainHarness* h : {&async, &sync}) {
    SamplingParams a = greedy(12), b = seeded(20, 3), c = greedy(8);
    a.ignore_eos = c.ignore_eos = true;
    ASSERT_TRUE(h->add("a", make_prompt(5, 51), a));
    ASSERT_TRUE(h->add("b", make_prompt(5, 52), b));
    ASSERT_TRUE(h->add("c", make_prompt(5, 53), c));
    h->run();
  }
  expect_same_outputs(async, sync);
  EXPECT_EQ(async.results.at("c").tokens.at(0).size(), 8u);
  EXPECT_EQ(async.toy->num_chained, 11 + 6);
}

// Requests admitted from a running sequence's ring (KvManager::LiveRing): "b" while "a" is in
// prefill, at the block end "a" has computed to; "c", whose prompt is a's prompt and first output
// tokens, while "a" decodes with steps queued. Admission waits for the queue to drain, so the ring
// holds exactly what "a" has computed: outputs as the waiting engine's, and the reference.
TEST(EngineAsyncScheduling, AdmissionFromARunningSequencesRingGivesTheOutputsOfWaiting) {
  const auto mc = config();
  ChainHarness async = make_harness(mc, true);
  ChainHarness sync = make_harness(mc, false);
  const std::vector<int32_t> prefix = make_prompt(70, 61);
  std::vector<int32_t> a = prefix, b = prefix;
  const std::vector<int32_t> a_tail = make_prompt(9, 62), b_tail = make_prompt(5, 63);
  a.insert(a.end(), a_tail.begin(), a_tail.end());  // 79 tokens
  b.insert(b.end(), b_tail.begin(), b_tail.end());  // 75 tokens
  SamplingParams p = greedy(16);
  p.ignore_eos = true;
  const std::vector<int32_t> a_out = toy_greedy(mc, a, 16);
  std::vector<int32_t> c = a;
  c.insert(c.end(), a_out.begin(), a_out.begin() + 4);
  for (ChainHarness* h : {&async, &sync}) {
    SCOPED_TRACE(h == &async ? "async" : "sync");
    ASSERT_TRUE(h->add("a", a, p));
    h->core->step();  // 32 of a's 79 tokens
    ASSERT_TRUE(h->add("b", b, greedy(6)));
    // a computes 64, then 64 -> 76 (its snapshot boundary) beside b, which reuses a's 64; then
    // 76 -> 79 samples a's token 1. With steps queued, the one computing position 79 (token 2) is
    // in flight when token 1 is recorded, and c's arrival stops the queue behind it: either way c
    // is admitted with a at 80 tokens, a block end past a's snapshot at 76.
    const size_t tokens_seen = h == &async ? 1 : 2;
    while (h->results["a"].tokens[0].size() < tokens_seen) h->core->step();
    ASSERT_TRUE(h->add("c", c, greedy(6)));
    h->run();
    EXPECT_EQ(h->results.at("b").outputs.front().num_cached_tokens, 64);
    EXPECT_EQ(h->results.at("c").outputs.front().num_cached_tokens, 80);
  }
  expect_same_outputs(async, sync);
  EXPECT_EQ(async.results.at("a").tokens.at(0), a_out);
  EXPECT_EQ(async.results.at("b").tokens.at(0), toy_greedy(mc, b, 6));
  EXPECT_EQ(async.results.at("c").tokens.at(0), toy_greedy(mc, c, 6));
  EXPECT_GT(async.toy->num_chained, 0);
  EXPECT_EQ(async.core->kv().num_used_pages(), 0);
}

TEST(EngineAsyncScheduling, AbortWithAStepQueuedDropsItsRowsOnly) {
  const auto mc = config();
  ChainHarness async = make_harness(mc, true);
  ChainHarness sync = make_harness(mc, false);
  for (ChainHarness* h : {&async, &sync}) {
    ASSERT_TRUE(h->add("gone", make_prompt(6, 21), seeded(40, 4)));
    ASSERT_TRUE(h->add("kept", make_prompt(6, 22), seeded(30, 8)));
    for (int i = 0; i < 5; ++i) h->core->step();
    EXPECT_TRUE(h->core->abort("gone"));
    h->run();
  }
  ASSERT_GT(async.toy->num_chained, 0);
  EXPECT_EQ(async.results.at("gone").finish.at(0), FinishReason::kAbort);
  const std::vector<int32_t>& gone = async.results.at("gone").tokens.at(0);
  EXPECT_LT(gone.size(), 40u);
  // What it got is the start of what it would have got.
  ChainHarness full = make_harness(mc, false);
  ASSERT_TRUE(full.add("gone", make_prompt(6, 21), seeded(40, 4)));
  full.run();
  const std::vector<int32_t>& all = full.results.at("gone").tokens.at(0);
  ASSERT_LE(gone.size(), all.size());
  EXPECT_TRUE(std::equal(gone.begin(), gone.end(), all.begin()));
  EXPECT_EQ(async.results.at("kept").tokens, sync.results.at("kept").tokens);
  EXPECT_EQ(async.results.at("kept").tokens.at(0).size(), 30u);
  EXPECT_EQ(async.toy->num_queued(), 0u);
  EXPECT_EQ(async.core->kv().num_used_pages(), 0);
}

TEST(EngineAsyncScheduling, ShutdownWithAStepQueuedWaitsForIt) {
  const auto mc = config();
  ChainHarness h = make_harness(mc, true);
  ASSERT_TRUE(h.add("a", make_prompt(5, 31), greedy(50)));
  for (int i = 0; i < 4; ++i) h.core->step();
  ASSERT_EQ(h.toy->num_queued(), 1u) << "a decode step is queued behind the one in flight";
  h.core->abort_all();
  EXPECT_EQ(h.toy->num_queued(), 0u);
  EXPECT_FALSE(h.core->has_work());
  EXPECT_EQ(h.results.at("a").finish.at(0), FinishReason::kAbort);
}

TEST(EngineAsyncScheduling, HostOnlySamplingIsNeverQueued) {
  const auto mc = config();
  ChainHarness h = make_harness(mc, true);
  SamplingParams p = greedy(8);
  p.logprobs = 2;  // the logits come to the host: forward(), not launch_sample
  ASSERT_TRUE(h.add("lp", make_prompt(6, 41), p));
  h.run();
  EXPECT_EQ(h.toy->num_launched, 0);
  EXPECT_EQ(h.results.at("lp").tokens.at(0), toy_greedy(mc, make_prompt(6, 41), 8));
}

}  // namespace
}  // namespace flint::engine::testing
