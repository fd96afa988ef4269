// Helpers for engine tests: run an EngineCore to completion and collect outputs, and greedy
// generation computed from scratch with toy_reference().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "tests/unit/engine/toy_backend.h"

namespace flint::engine::testing {

using model::LayerType;
inline constexpr LayerType kFull = LayerType::kFullAttention;
inline constexpr LayerType kSliding = LayerType::kSlidingAttention;

struct Collected {
  std::vector<RequestOutput> outputs;
  // Per choice: all tokens, all text, finish reason, logprobs.
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::string> text;
  std::map<int, std::vector<PositionLogprobs>> logprobs;
  std::map<int, FinishReason> finish;
  std::map<int, CompletionDelta> last;
  bool finished = false;
};

struct Harness {
  std::unique_ptr<EngineCore> core;
  ToyBackend* backend = nullptr;  // owned by core
  std::map<std::string, Collected> results;

  static Harness make(model::FlintConfig mc, EngineConfig ec, ToyBackend::Limits limits = {},
                      std::shared_ptr<const TokenDecoder> decoder = nullptr) {
    Harness h;
    if (limits.max_num_tokens == (1 << 30)) limits.max_num_tokens = ec.max_num_batched_tokens;
    if (limits.max_num_seqs == (1 << 30)) limits.max_num_seqs = ec.max_num_seqs;
    auto b = std::make_unique<ToyBackend>(std::move(mc), limits);
    h.backend = b.get();
    auto core = EngineCore::create(ec, std::move(b), std::move(decoder));
    EXPECT_TRUE(core.has_value()) << (core ? "" : core.error().message);
    if (core) h.core = std::move(*core);
    return h;
  }

  Status add(const std::string& id, std::vector<int32_t> prompt, SamplingParams p = {}) {
    Request r;
    r.request_id = id;
    r.prompt_token_ids = std::move(prompt);
    r.params = std::move(p);
    return core->add_request(std::move(r), [this, id](RequestOutput out) {
      Collected& c = results[id];
      EXPECT_FALSE(c.finished) << "output after the final one for " << id;
      for (const CompletionDelta& d : out.outputs) {
        auto& t = c.tokens[d.index];
        t.insert(t.end(), d.new_token_ids.begin(), d.new_token_ids.end());
        c.text[d.index] += d.text;
        auto& lp = c.logprobs[d.index];
        lp.insert(lp.end(), d.logprobs.begin(), d.logprobs.end());
        if (d.finish_reason) c.finish[d.index] = *d.finish_reason;
        c.last[d.index] = d;
      }
      c.finished = out.finished;
      c.outputs.push_back(std::move(out));
    });
  }

  void run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && core->has_work(); ++i) core->step();
    ASSERT_FALSE(core->has_work()) << "engine did not finish";
  }
};

// A toy that samples on its "device" (Backend::forward_sample): greedy rows get the toy's arg max,
// other rows a token that is a function of (seed, step), so a test can check which parameters
// reached the backend.
class SamplingToy : public ToyBackend {
 public:
  using ToyBackend::ToyBackend;
  bool can_sample() const override { return true; }
  Status forward_sample(const model::StepInput& s, std::span<const model::DeviceSampling> params,
                        std::span<int32_t> tokens) override {
    ++num_sample_steps;
    EXPECT_EQ(params.size(), s.logits_indices.size());
    const int64_t v = config().vocab_size;
    std::vector<float> logits(s.logits_indices.size() * v);
    FLINT_TRY(forward(s, logits));
    for (size_t r = 0; r < params.size(); ++r) {
      const float* row = logits.data() + r * v;
      if (params[r].temperature < model::kGreedyTemperature) {
        tokens[r] = static_cast<int32_t>(std::max_element(row, row + v) - row);
      } else {
        tokens[r] = static_cast<int32_t>(3 + (params[r].seed + params[r].step) % (v - 3));
      }
      seen.push_back(params[r]);
    }
    return ok();
  }
  int num_sample_steps = 0;
  std::vector<model::DeviceSampling> seen;
};

// A Harness over a toy backend of type T, limited as `c` asks.
template <typename T>
struct ToyHarness : Harness {
  T* toy = nullptr;
  static ToyHarness make(const model::FlintConfig& mc, const EngineConfig& c) {
    ToyHarness h;
    auto b = std::make_unique<T>(mc, ToyLimits{c.max_num_batched_tokens, c.max_num_seqs});
    h.toy = b.get();
    h.backend = b.get();
    auto core = EngineCore::create(c, std::move(b), nullptr);
    EXPECT_TRUE(core.has_value()) << (core ? "" : core.error().message);
    if (core) h.core = std::move(*core);
    return h;
  }
};

inline std::vector<float> toy_logits_row(const model::FlintConfig& c,
                                         const std::vector<int32_t>& tokens) {
  const uint64_t x = toy_reference(c, tokens).back();
  std::vector<float> row(c.vocab_size);
  for (int64_t v = 0; v < c.vocab_size; ++v) row[v] = toy_logit(x, v);
  return row;
}

inline double ref_logprob(const std::vector<float>& row, int32_t id) {
  double m = -INFINITY;
  for (float x : row) m = std::max<double>(m, x);
  double s = 0;
  for (float x : row) s += std::exp(x - m);
  return row[id] - m - std::log(s);
}

// Greedy continuation from scratch: stops after EOS (token 2, included) or max_tokens.
inline std::vector<int32_t> toy_greedy(const model::FlintConfig& c, std::vector<int32_t> tokens,
                                       int max_tokens) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    std::vector<float> row = toy_logits_row(c, tokens);
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(row.size()); ++v)
      if (row[v] > row[best]) best = v;
    out.push_back(best);
    tokens.push_back(best);
    if (best == 2) break;
  }
  return out;
}

inline std::vector<int32_t> make_prompt(int n, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 3 + static_cast<int32_t>(toy_mix(seed * 1000 + i) % 60);
  return p;
}

}  // namespace flint::engine::testing
