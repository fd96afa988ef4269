// OpenAI request bodies turned into typed, validated values (vLLM's field names and rules). Every
// field we do not implement is rejected with a 400 naming it; wrong types, NaN, negative or absurd
// values are rejected too. Test: tests/unit/server/openai_types_test.cpp
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/request.h"

namespace flint::server {

// Limits that keep a request from asking for absurd amounts of work.
inline constexpr int kMaxChoices = 128;
inline constexpr int kMaxStopStrings = 64;
inline constexpr size_t kMaxStopStringBytes = 1024;

struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest {
  std::string model;                // empty: the first served name
  nlohmann::ordered_json messages;  // array, normalised for the chat template
  nlohmann::ordered_json tools;     // array of {"type":"function","function":{..}} or null
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_choice_name;  // kNamed
  bool parallel_tool_calls = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool stream = false;
  StreamOptions stream_options;
  bool logprobs = false;  // per-token logprobs in choices[].logprobs.content
  int top_logprobs = 0;
  bool include_reasoning = true;
  engine::SamplingParams params;
};

struct CompletionRequest {
  std::string model;
  std::optional<std::string> prompt_text;  // the prompt as text, or
  std::vector<int32_t> prompt_token_ids;   // as token ids (when prompt_text is unset)
  bool stream = false;
  StreamOptions stream_options;
  bool echo = false;
  std::optional<int> logprobs;  // top alternatives per token (0..20)
  engine::SamplingParams params;
};

struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // {"prompt": ..} or llama.cpp's {"content": ..}
  nlohmann::ordered_json messages;    // or chat messages (rendered with the template)
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  bool return_token_strs = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Each parse_* fills `param` with the offending field name on failure (empty when none applies).
// `vocab_size` bounds token ids.
Result<ChatRequest> parse_chat_request(const nlohmann::ordered_json& body, int64_t vocab_size,
                                       std::string* param);
Result<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body,
                                                   int64_t vocab_size, std::string* param);
Result<TokenizeRequest> parse_tokenize_request(const nlohmann::ordered_json& body,
                                               std::string* param);
Result<DetokenizeRequest> parse_detokenize_request(const nlohmann::ordered_json& body,
                                                   int64_t vocab_size, std::string* param);

// Parses a request body; a syntax error or a non-object is kInvalidArgument.
Result<nlohmann::ordered_json> parse_json_body(const std::string& body);

// Thinking is on unless chat_template_kwargs sets `enable_thinking` or `thinking` to false.
bool thinking_enabled(const nlohmann::ordered_json& chat_template_kwargs);

}  // namespace flint::server
