// Logits processing, log-probabilities and sampling. Test:
// tests/unit/engine/logits_processor_test.cpp.
#include "engine/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "model/backend.h"

namespace flint::engine {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void apply_logits_processors(std::span<float> logits, const SamplingParams& params,
                             const ResolvedSampling& sampling, const PenaltyState& penalties,
                             int num_output_tokens, std::span<const int32_t> stop_ids) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (num_output_tokens < params.min_tokens) {
    for (int32_t id : stop_ids)
      if (id >= 0 && id < vocab) logits[id] = kNegInf;
  }
  for (const auto& [id, bias] : params.logit_bias) logits[id] += bias;

  if (sampling.repetition_penalty != 1.0f) {
    const float r = sampling.repetition_penalty;
    auto penalize = [&](int32_t id) {
      if (id < 0 || id >= vocab) return;
      logits[id] = logits[id] > 0.0f ? logits[id] / r : logits[id] * r;
    };
    for (int32_t id : penalties.prompt_tokens) penalize(id);
    for (const auto& [id, count] : penalties.output_counts)
      if (!penalties.prompt_tokens.count(id)) penalize(id);
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (const auto& [id, count] : penalties.output_counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    }
  }
}

PositionLogprobs compute_logprobs(std::span<const float> logits, int32_t token_id, int num_top) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  FLINT_CHECK(token_id >= 0 && token_id < vocab, "logprobs: token {} out of range", token_id);
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) max = std::max<double>(max, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double lse = max + std::log(sum);
  PositionLogprobs out;
  out.token_id = token_id;
  out.logprob = static_cast<float>(logits[token_id] - lse);
  int32_t rank = 1;
  for (float x : logits) rank += x > logits[token_id] ? 1 : 0;
  out.rank = rank;
  num_top = static_cast<int>(std::min<int64_t>(num_top, vocab));
  if (num_top > 0) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + num_top, ids.end(), better);
    for (int i = 0; i < num_top; ++i)
      out.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - lse));
  }
  return out;
}

int32_t sample_token(std::span<const float> logits, const ResolvedSampling& s, Rng& rng) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  FLINT_CHECK(vocab > 0, "sample: empty logits");
  int32_t best = 0;  // argmax, lowest id on ties
  float best_logit = logits[0];
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > best_logit) {
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  if (s.temperature < model::kGreedyTemperature || !std::isfinite(logits[best])) return best;
  // Unnormalised probabilities relative to the most likely token (which gets 1).
  const double inv_t = 1.0 / static_cast<double>(s.temperature);
  const double max = logits[best];
  std::vector<double> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) p[i] = std::exp((logits[i] - max) * inv_t);
  if (s.min_p > 0.0f) {
    for (double& x : p)
      if (x < static_cast<double>(s.min_p)) x = 0.0;
  }
  auto draw = [&](std::span<const int32_t> ids) {  // one draw in proportion to p over `ids`
    double mass = 0.0;
    for (int32_t id : ids) mass += p[id];
    const double u = rng.uniform() * mass;
    double cum = 0.0;
    for (int32_t id : ids) {
      cum += p[id];
      if (u < cum) return id;
    }
    return ids.back();
  };
  std::vector<int32_t> cand;
  cand.reserve(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    if (p[i] > 0.0) cand.push_back(static_cast<int32_t>(i));
  if (s.top_k <= 0 && s.top_p >= 1.0f) return draw(cand);
  // Best first: higher probability, then lower id. Only the prefix that is kept gets sorted.
  auto better = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  size_t k = cand.size();
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < k) {
    std::nth_element(cand.begin(), cand.begin() + (s.top_k - 1), cand.end(), better);
    k = static_cast<size_t>(s.top_k);
    cand.resize(k);
  }
  if (s.top_p >= 1.0f) return draw(cand);
  double mass = 0.0;
  for (int32_t id : cand) mass += p[id];
  // Keep the smallest best-first prefix whose share of the (top_k) mass reaches top_p, sorting a
  // growing prefix so that the usual case touches only a few hundred tokens.
  for (size_t m = std::min<size_t>(k, 64);; m = m * 8 >= k ? k : m * 8) {
    std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), better);
    double cum = 0.0;
    for (size_t n = 0; n < m; ++n) {
      cum += p[cand[n]] / mass;
      if (cum >= static_cast<double>(s.top_p))
        return draw(std::span<const int32_t>(cand).first(n + 1));
    }
    if (m == k) return draw(cand);
  }
}

}  // namespace flint::engine
