// GLM-4.7 tool-call parser:
// `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>` to OpenAI tool
// calls, whole-text and streaming. Test: tests/unit/server/glm47_tool_parser_test.cpp
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace flint::server {

// Per tool name, the argument keys its JSON schema declares `"type": "string"`: their values are
// kept verbatim; every other value is stripped and typed (JSON, then Python literal, else string).
struct ToolSchemas {
  std::map<std::string, std::set<std::string>> string_args;
  bool is_string(const std::string& tool, const std::string& key) const;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON object text, Python json.dumps separators (", " and ": ")
};

struct ToolParseResult {
  std::optional<std::string> content;  // text outside the calls; nullopt when blank
  std::vector<ParsedToolCall> tool_calls;
};

// Parses a complete generation. Text outside <tool_call> regions is content; a region cut off by
// the end of the text (max_tokens) still yields its call with what was generated.
ToolParseResult glm47_parse_tool_calls(std::string_view text, const ToolSchemas& schemas);

struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> name;  // set on the first delta of a call only
  std::string arguments;            // fragment; concatenated fragments give the final JSON
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

// Streaming parser: feed() text as it is generated and get OpenAI-style deltas. Partial tags and
// incomplete UTF-8 are held back; string values stream inside an open quote; other values appear
// once complete; the closing `}` comes with </tool_call>. The concatenation of all deltas equals
// glm47_parse_tool_calls on the whole text. Not thread-safe (one per choice).
class Glm47ToolStreamParser {
 public:
  explicit Glm47ToolStreamParser(ToolSchemas schemas) : schemas_(std::move(schemas)) {}
  ToolStreamDelta feed(std::string_view text);
  ToolStreamDelta finish();  // end of generation: releases held text, closes an open call
  int num_calls() const { return num_calls_started_; }

 private:
  ToolStreamDelta step(bool final);
  ToolSchemas schemas_;
  std::string text_;
  std::vector<std::string> sent_;  // per segment (content or call arguments) what was emitted
  int num_calls_started_ = 0;
  bool finished_ = false;
};

// Helpers shared with the reasoning parser and the server.
// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag);
// Length of `text` without a trailing incomplete UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view text);

}  // namespace flint::server
