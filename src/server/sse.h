// Server-sent events framing as OpenAI and vLLM write it: `data: <json>\n\n`, ending `data:
// [DONE]`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flint::server {

// One event; invalid UTF-8 in strings is replaced rather than throwing.
std::string sse_event(const nlohmann::ordered_json& data);
std::string sse_event_raw(std::string_view json_text);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// JSON text with invalid UTF-8 replaced (never throws).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace flint::server
