// JSON pieces of OpenAI responses in vLLM's shapes (see response_json.h).
#include "server/response_json.h"

#include <cmath>
#include <span>

namespace flint::server {
namespace {

using ojson = nlohmann::ordered_json;
using engine::PositionLogprobs;

// vLLM writes -inf logprobs as -9999.0 (JSON has no infinity).
double finite_logprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

ojson token_bytes_json(const std::string& s) {
  ojson arr = ojson::array();
  for (unsigned char c : s) arr.push_back(static_cast<int>(c));
  return arr;
}

std::string token_text(const tokenizer::Tokenizer& tok, int32_t id) {
  return tok.decode(std::span<const int32_t>(&id, 1), /*skip_special_tokens=*/false);
}

}  // namespace

ojson chat_logprobs_json(const tokenizer::Tokenizer& tok, const std::vector<PositionLogprobs>& lps,
                         int top_n) {
  ojson content = ojson::array();
  for (const PositionLogprobs& p : lps) {
    std::string t = token_text(tok, p.token_id);
    ojson top = ojson::array();
    for (int k = 0; k < top_n && k < static_cast<int>(p.top.size()); ++k) {
      std::string tt = token_text(tok, p.top[k].first);
      top.push_back({{"token", tt},
                     {"logprob", finite_logprob(p.top[k].second)},
                     {"bytes", token_bytes_json(tt)}});
    }
    content.push_back({{"token", t},
                       {"logprob", finite_logprob(p.logprob)},
                       {"bytes", token_bytes_json(t)},
                       {"top_logprobs", top}});
  }
  return ojson{{"content", content}};
}

// Completions logprobs: parallel lists; `offset` is the text offset of the first token.
void append_completion_logprobs(const tokenizer::Tokenizer& tok,
                                const std::vector<PositionLogprobs>& lps, int top_n,
                                bool first_null, size_t* offset, ojson* out) {
  for (size_t i = 0; i < lps.size(); ++i) {
    const PositionLogprobs& p = lps[i];
    std::string t = token_text(tok, p.token_id);
    (*out)["tokens"].push_back(t);
    (*out)["text_offset"].push_back(*offset);
    *offset += t.size();
    if (first_null && i == 0) {
      (*out)["token_logprobs"].push_back(nullptr);
      (*out)["top_logprobs"].push_back(nullptr);
      continue;
    }
    (*out)["token_logprobs"].push_back(finite_logprob(p.logprob));
    ojson top = ojson::object();
    top[t] = finite_logprob(p.logprob);
    for (int k = 0; k < top_n && k < static_cast<int>(p.top.size()); ++k) {
      top[token_text(tok, p.top[k].first)] = finite_logprob(p.top[k].second);
    }
    (*out)["top_logprobs"].push_back(top);
  }
}

ojson empty_completion_logprobs() {
  return {{"text_offset", ojson::array()},
          {"token_logprobs", ojson::array()},
          {"tokens", ojson::array()},
          {"top_logprobs", ojson::array()}};
}

ojson usage_json(int prompt, int completion, int cached) {
  ojson u = {{"prompt_tokens", prompt},
             {"total_tokens", prompt + completion},
             {"completion_tokens", completion}};
  if (cached > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

ojson stop_reason_json(const engine::CompletionDelta& d) {
  if (d.stop_string) return *d.stop_string;
  if (d.stop_token_id) return *d.stop_token_id;
  return nullptr;
}

}  // namespace flint::server
