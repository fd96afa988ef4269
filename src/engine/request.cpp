// SamplingParams validation (vLLM's ranges) and the merge with generation_config.json defaults.
// Test: tests/unit/engine/request_test.cpp.
#include "engine/request.h"

#include <cmath>

namespace flint::engine {
namespace {

Error invalid(std::string msg) { return Error{ErrorCode::kInvalidArgument, std::move(msg)}; }

}  // namespace

Status SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1 || n > 128) return invalid(fmt::format("n must be in [1, 128], got {}", n));
  if (temperature && (!std::isfinite(*temperature) || *temperature < 0.0f))
    return invalid(fmt::format("temperature must be a finite number >= 0, got {}", *temperature));
  if (top_p && (!std::isfinite(*top_p) || *top_p <= 0.0f || *top_p > 1.0f))
    return invalid(fmt::format("top_p must be in (0, 1], got {}", *top_p));
  if (top_k && *top_k < -1)
    return invalid(fmt::format("top_k must be -1 (off) or >= 0, got {}", *top_k));
  if (min_p && (!std::isfinite(*min_p) || *min_p < 0.0f || *min_p > 1.0f))
    return invalid(fmt::format("min_p must be in [0, 1], got {}", *min_p));
  if (repetition_penalty && (!std::isfinite(*repetition_penalty) || *repetition_penalty <= 0.0f))
    return invalid(
        fmt::format("repetition_penalty must be a finite number > 0, got {}", *repetition_penalty));
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return invalid(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return invalid(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs))
    return invalid(fmt::format("logprobs must be in [0, {}], got {}", kMaxLogprobs, *logprobs));
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs))
    return invalid(
        fmt::format("prompt_logprobs must be in [0, {}], got {}", kMaxLogprobs, *prompt_logprobs));
  if (min_tokens < 0) return invalid(fmt::format("min_tokens must be >= 0, got {}", min_tokens));
  if (max_tokens && *max_tokens < 1)
    return invalid(fmt::format("max_tokens must be at least 1, got {}", *max_tokens));
  if (max_tokens && min_tokens > *max_tokens)
    return invalid(fmt::format("min_tokens must be <= max_tokens, got min_tokens={} max_tokens={}",
                               min_tokens, *max_tokens));
  for (const std::string& s : stop)
    if (s.empty()) return invalid("stop must not contain empty strings");
  if (!stop.empty() && !detokenize) return invalid("stop strings need detokenize=true");
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size)
      return invalid(
          fmt::format("stop_token_ids: token id {} is out of range [0, {})", id, vocab_size));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size)
      return invalid(
          fmt::format("logit_bias: token id {} is out of range [0, {})", id, vocab_size));
    if (!std::isfinite(bias))
      return invalid(fmt::format("logit_bias: bias for token {} must be finite, got {}", id, bias));
  }
  return ok();
}

ResolvedSampling resolve_sampling(const SamplingParams& p, const model::GenerationDefaults& d) {
  ResolvedSampling r;
  r.temperature = p.temperature.value_or(d.temperature.value_or(1.0f));
  r.top_p = p.top_p.value_or(d.top_p.value_or(1.0f));
  int k = p.top_k.value_or(d.top_k.value_or(0));
  r.top_k = k < 0 ? 0 : k;
  r.min_p = p.min_p.value_or(d.min_p.value_or(0.0f));
  r.repetition_penalty = p.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0f));
  return r;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

}  // namespace flint::engine
