// The values exchanged with the engine: SamplingParams (vLLM's names and meanings), Request, and
// the per-step RequestOutput. Plain data, no behaviour beyond validation. Test: request_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "model/config.h"

namespace flint::engine {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxLogprobs = 20;  // vLLM's default max_logprobs

// vLLM's SamplingParams. Optional fields left unset take the model's generation_config.json value,
// then vLLM's default (temperature 1, top_p 1, top_k off, min_p 0, repetition_penalty 1).
struct SamplingParams {
  int n = 1;                                // independent choices sampled from one prompt
  std::optional<float> temperature;         // 0: greedy
  std::optional<float> top_p;               // (0, 1]
  std::optional<int> top_k;                 // 0 or -1: off
  std::optional<float> min_p;               // [0, 1]
  std::optional<float> repetition_penalty;  // > 0; 1: off (prompt and output tokens)
  float presence_penalty = 0.0f;            // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;           // [-2, 2] (output tokens)
  std::optional<uint64_t> seed;             // per-request RNG; unset: from the engine seed
  // Top log-probabilities per generated token (vLLM `logprobs`; OpenAI chat `top_logprobs`). The
  // sampled token's own logprob is always returned when this is set; 0 means only that one.
  std::optional<int> logprobs;
  std::optional<int> prompt_logprobs;   // same, per prompt token (the first has none)
  std::vector<std::string> stop;        // stop strings (matched across token boundaries)
  std::vector<int32_t> stop_token_ids;  // finish when one is sampled (it is not in the text)
  bool ignore_eos = false;
  int min_tokens = 0;             // EOS and stop_token_ids are masked until reached
  std::optional<int> max_tokens;  // unset: up to max_model_len
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit before sampling
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  bool detokenize = true;  // false: no text deltas, stop strings rejected

  // Checks ranges the way vLLM does; the message names the parameter (e.g. "top_p must be in (0,
  // 1], got 1.5"). `vocab_size` bounds token ids in logit_bias and stop_token_ids.
  Status validate(int64_t vocab_size) const;
};

// The sampling values actually used for one request after merging the generation defaults.
struct ResolvedSampling {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0: off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
};
ResolvedSampling resolve_sampling(const SamplingParams& p, const model::GenerationDefaults& d);

struct Request {
  std::string request_id;                 // unique among live requests
  std::vector<int32_t> prompt_token_ids;  // [num_prompt_tokens], at least one
  SamplingParams params;
  Clock::time_point arrival_time = Clock::now();
};

enum class FinishReason { kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error" (vLLM's strings).
const char* finish_reason_name(FinishReason r);

// Log-probabilities at one position: the chosen (sampled or prompt) token, its rank among all
// tokens (1 = most likely), and the top-k alternatives in descending order.
struct PositionLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<std::pair<int32_t, float>> top;  // [k] (token_id, logprob), most likely first
};

// What one choice produced since its last output.
struct CompletionDelta {
  int index = 0;                           // choice index in [0, n)
  std::vector<int32_t> new_token_ids;      // tokens sampled since the last output
  std::string text;                        // new text (held back while it may start a stop string)
  std::vector<PositionLogprobs> logprobs;  // one per new token, when requested
  std::optional<FinishReason> finish_reason;  // set once, on the choice's last delta
  std::optional<int32_t> stop_token_id;       // stop_reason when a stop token (not EOS) finished it
  std::optional<std::string> stop_string;     // stop_reason when a stop string finished it
  int num_output_tokens = 0;                  // cumulative tokens of this choice
};

// One message to the caller for one request. The first one for a request carries
// prompt_logprobs (if asked) and num_cached_tokens; the last one has `finished` set.
struct RequestOutput {
  std::string request_id;
  std::vector<CompletionDelta> outputs;  // choices with news this step (possibly none)
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;  // [num_prompt_tokens]; [0] empty
  bool finished = false;                                         // every choice has finished
  std::optional<Error> error;  // set (with finished) when the engine failed the request
  // Timing, filled on the finished output: seconds from arrival to the first token and to the end.
  double ttft_s = 0.0;
  double e2e_s = 0.0;
};

}  // namespace flint::engine
