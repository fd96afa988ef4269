// GLM-4.7 reasoning parser: splits `...</think>content` (the template opens <think> in the prompt)
// into reasoning and content, whole-text and streaming. Test:
// tests/unit/server/glm47_reasoning_parser_test.cpp
#pragma once

#include <string>
#include <string_view>

namespace flint::server {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// With thinking enabled the text starts inside the think block: everything up to </think> is
// reasoning (a leading <think> is swallowed), a <tool_call> before </think> also ends reasoning
// (the call stays in content), and stray </think> tags in content are dropped. With thinking
// disabled the whole text is content.
ReasoningSplit glm47_split_reasoning(std::string_view text, bool thinking_enabled);

// Streaming form: feed() returns what each side gained; partial tags are held back until they
// resolve. The concatenation of all deltas equals glm47_split_reasoning on the whole text.
// Not thread-safe (one per choice).
class Glm47ReasoningStreamParser {
 public:
  explicit Glm47ReasoningStreamParser(bool thinking_enabled) : enabled_(thinking_enabled) {}
  ReasoningSplit feed(std::string_view text);
  ReasoningSplit finish();
  // True once reasoning has ended (</think> or a tool call seen).
  bool reasoning_ended() const { return ended_; }

 private:
  ReasoningSplit step(bool final);
  bool enabled_;
  bool ended_ = false;
  std::string text_;
  size_t sent_reasoning_ = 0;
  size_t sent_content_ = 0;
};

}  // namespace flint::server
