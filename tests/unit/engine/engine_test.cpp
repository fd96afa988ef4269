// Engine: the engine thread, OutputStream, callbacks, abort from another thread, stats.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/unit/engine/engine_test_util.h"

namespace flint::engine::testing {
namespace {

std::unique_ptr<Engine> make_engine(int max_waiting = 0, int step_delay_ms = 0) {
  auto mc = toy_config({kFull, kSliding, kSliding, kFull}, 5);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 32;
  c.max_model_len = 512;
  c.page_size = 4;
  c.kv_cache_memory = 1 << 22;
  c.kv_dtype = DType::kF32;
  c.max_num_waiting = max_waiting;
  auto backend = std::make_unique<ToyBackend>(mc);
  backend->step_delay_ms = step_delay_ms;
  auto e = Engine::create(c, std::move(backend), nullptr);
  EXPECT_TRUE(e.has_value());
  return std::move(*e);
}

Request req(const std::string& id, int prompt_len, int max_tokens, int n = 1) {
  Request r;
  r.request_id = id;
  r.prompt_token_ids = make_prompt(prompt_len, prompt_len);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.n = n;
  r.params.ignore_eos = max_tokens > 100;  // long requests must not end early
  return r;
}

std::vector<RequestOutput> collect(OutputStream& s) {
  std::vector<RequestOutput> all;
  while (auto o = s.next(std::chrono::seconds(10))) {
    all.push_back(std::move(*o));
    if (all.back().finished) break;
  }
  return all;
}

TEST(Engine, StreamsOutputsFromItsThread) {
  auto mc = toy_config({kFull, kSliding, kSliding, kFull}, 5);
  auto engine = make_engine();
  engine->start();
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = engine->add_request(req("s" + std::to_string(i), 5 + i * 9, 8));
    ASSERT_TRUE(s.has_value());
    streams.push_back(*s);
  }
  for (int i = 0; i < 6; ++i) {
    auto outs = collect(*streams[i]);
    ASSERT_FALSE(outs.empty());
    EXPECT_TRUE(outs.back().finished);
    EXPECT_TRUE(streams[i]->done());
    std::vector<int32_t> toks;
    for (auto& o : outs)
      for (auto& d : o.outputs)
        toks.insert(toks.end(), d.new_token_ids.begin(), d.new_token_ids.end());
    EXPECT_EQ(toks, toy_greedy(mc, make_prompt(5 + i * 9, 5 + i * 9), 8));
    EXPECT_EQ(outs.front().num_prompt_tokens, 5 + i * 9);
  }
  const auto samples = engine->take_latency_samples();
  EXPECT_EQ(samples.ttft_s.size(), 6u);
  EXPECT_EQ(samples.e2e_s.size(), 6u);
  EXPECT_GT(samples.itl_s.size(), 0u);
  engine->stop();
  const auto st = engine->stats();
  EXPECT_EQ(st.num_requests_finished, 6);
  EXPECT_EQ(st.prompt_tokens_total, 5 * 6 + 9 * 15);
  EXPECT_EQ(st.num_pages_used, 0);
}

TEST(Engine, AbortFromAnotherThreadFinishesAndFreesKv) {
  auto engine = make_engine(0, /*step_delay_ms=*/2);
  engine->start();
  auto s = engine->add_request(req("long", 20, 400, /*n=*/2));
  ASSERT_TRUE(s.has_value());
  auto first = (*s)->next(std::chrono::seconds(10));
  ASSERT_TRUE(first.has_value());
  engine->abort("long");
  auto rest = collect(**s);
  ASSERT_FALSE(rest.empty());
  const RequestOutput& last = rest.back();
  EXPECT_TRUE(last.finished);
  int aborted = 0;
  for (auto& o : rest)
    for (auto& d : o.outputs) aborted += d.finish_reason == FinishReason::kAbort ? 1 : 0;
  EXPECT_EQ(aborted, 2);  // both choices
  // Stats are published after each step; the engine is idle now.
  for (int i = 0; i < 100 && engine->stats().num_pages_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->stats().num_pages_used, 0);
  EXPECT_EQ(engine->stats().kv_usage, 0.0);
  EXPECT_EQ(engine->stats().num_running, 0);
  engine->stop();
}

TEST(Engine, CallbackDeliveryAndErrors) {
  auto engine = make_engine(/*max_waiting=*/1000);
  Status before = engine->add_request(req("x", 5, 2), [](RequestOutput) {});
  ASSERT_FALSE(before);
  EXPECT_EQ(before.error().code, ErrorCode::kUnavailable);
  engine->start();
  std::atomic<int> finished{0};
  std::atomic<int> tokens{0};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(engine->add_request(req("c" + std::to_string(i), 4 + i, 5), [&](RequestOutput o) {
      for (auto& d : o.outputs) tokens += static_cast<int>(d.new_token_ids.size());
      if (o.finished) ++finished;
    }));
  }
  Status bad = engine->add_request(req("bad", 0, 5), [](RequestOutput) {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  for (int i = 0; i < 500 && finished < 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(finished, 10);
  EXPECT_GT(tokens, 10);
  engine->stop();
  Status after = engine->add_request(req("y", 5, 2), [](RequestOutput) {});
  EXPECT_FALSE(after);
}

TEST(Engine, DuplicateLiveIdIsRejected) {
  auto engine = make_engine(0, /*step_delay_ms=*/2);
  engine->start();
  auto a = engine->add_request(req("same", 5, 300));
  ASSERT_TRUE(a.has_value());
  auto b = engine->add_request(req("same", 5, 3));
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("already in use"), std::string::npos);
  engine->abort("same");
  collect(**a);
  auto c = engine->add_request(req("same", 5, 3));  // free again once finished
  ASSERT_TRUE(c.has_value());
  collect(**c);
  engine->stop();
}

TEST(Engine, StopAbortsWhatIsInFlight) {
  auto engine = make_engine(0, /*step_delay_ms=*/2);
  engine->start();
  auto a = engine->add_request(req("inflight", 10, 500));
  ASSERT_TRUE(a.has_value());
  (*a)->next(std::chrono::seconds(10));
  engine->stop();
  auto rest = (*a)->drain();
  ASSERT_FALSE(rest.empty());
  EXPECT_TRUE(rest.back().finished);
  ASSERT_FALSE(rest.back().outputs.empty());
  EXPECT_EQ(rest.back().outputs.back().finish_reason, FinishReason::kAbort);
}

// vLLM's `vllm serve` default: 8192 tokens a step on a GPU of at least 70 GiB that is not an A100,
// 2048 on smaller GPUs, A100s (any case of the name) and the CPU.
TEST(DefaultMaxNumBatchedTokens, IsVllmsServeDefaultForTheDevice) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(default_max_num_batched_tokens(true, 143771ull << 20, "NVIDIA H200"), 8192);
  EXPECT_EQ(default_max_num_batched_tokens(true, 80 * kGiB, "NVIDIA H100 80GB HBM3"), 8192);
  EXPECT_EQ(default_max_num_batched_tokens(true, 70 * kGiB, "AMD Instinct MI300X"), 8192);
  EXPECT_EQ(default_max_num_batched_tokens(true, 70 * kGiB - 1, "NVIDIA H100"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(true, 80 * kGiB, "NVIDIA A100-SXM4-80GB"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(true, 80 * kGiB, "nvidia a100 80gb pcie"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(true, 24 * kGiB, "NVIDIA L4"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(false, 0, ""), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(false, 512 * kGiB, "NVIDIA H200"), 2048);
}

}  // namespace
}  // namespace flint::engine::testing
