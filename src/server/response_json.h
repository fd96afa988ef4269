// JSON pieces of OpenAI responses in vLLM's shapes: logprobs (chat and completions), usage and
// stop_reason. Used by routes.cpp; test partner: tests/python/server/test_openai_client.py.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace flint::server {

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}...]}.
nlohmann::ordered_json chat_logprobs_json(const tokenizer::Tokenizer& tok,
                                          const std::vector<engine::PositionLogprobs>& lps,
                                          int top_n);
// Completions logprobs: appends to the parallel lists of `out`; `offset` is the text offset of the
// first token and advances. With `first_null`, the first position has null logprobs (echo).
void append_completion_logprobs(const tokenizer::Tokenizer& tok,
                                const std::vector<engine::PositionLogprobs>& lps, int top_n,
                                bool first_null, size_t* offset, nlohmann::ordered_json* out);
nlohmann::ordered_json empty_completion_logprobs();
nlohmann::ordered_json usage_json(int prompt, int completion, int cached);
nlohmann::ordered_json stop_reason_json(const engine::CompletionDelta& d);

}  // namespace flint::server
