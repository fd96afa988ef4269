// Per-request logits processing as vLLM does it, in vLLM's order: min_tokens masking and
// logit_bias, then repetition/frequency/presence penalties; then log-probabilities of the processed
// logits and sampling (temperature, min_p, top_k, top_p) with a per-sequence seeded RNG. Test:
// tests/unit/engine/logits_processor_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request.h"

namespace flint::engine {

// A small, fully specified PRNG (splitmix64) so that a seed gives the same tokens on every
// platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits

 private:
  uint64_t state_;
};

// Token statistics the penalties need, kept incrementally per sequence.
struct PenaltyState {
  std::unordered_set<int32_t> prompt_tokens;
  std::unordered_map<int32_t, int> output_counts;
};

// Applies min_tokens masking (`stop_ids`: EOS unless ignore_eos, plus stop_token_ids, to -inf while
// num_output_tokens < min_tokens), logit_bias, then the penalties, in place.
void apply_logits_processors(std::span<float> logits, const SamplingParams& params,
                             const ResolvedSampling& sampling, const PenaltyState& penalties,
                             int num_output_tokens, std::span<const int32_t> stop_ids);

// log_softmax of `logits` at `token_id`, its rank (1 = best; ties share the better rank), and the
// `num_top` most likely tokens (ties broken by lower token id).
PositionLogprobs compute_logprobs(std::span<const float> logits, int32_t token_id, int num_top);

// Greedy when temperature < 1e-5; otherwise softmax(logits / temperature), then min_p relative to
// the most likely token, top_k, top_p (on the top_k-renormalized distribution), then one draw.
int32_t sample_token(std::span<const float> logits, const ResolvedSampling& sampling, Rng& rng);

}  // namespace flint::engine
