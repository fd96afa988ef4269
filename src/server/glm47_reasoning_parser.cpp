// GLM-4.7 reasoning parser. Like the tool parser, streaming re-splits the whole text and sends the
// growth of each side, so both modes agree.
#include "server/glm47_reasoning_parser.h"

#include <algorithm>

#include "server/glm47_tool_parser.h"

namespace flint::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";

std::string remove_all(std::string_view s, std::string_view tag) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t k = s.find(tag, pos);
    if (k == std::string_view::npos) break;
    out.append(s.substr(pos, k - pos));
    pos = k + tag.size();
  }
  out.append(s.substr(pos));
  return out;
}

// Splits `text`; when !final, drops any tail that could still turn into a tag or is incomplete
// UTF-8, so both sides only ever grow. `ended` reports whether reasoning is over.
ReasoningSplit split(std::string_view text, bool enabled, bool final, bool* ended) {
  ReasoningSplit out;
  *ended = !enabled;
  if (!enabled) {
    size_t n = final ? text.size() : utf8_complete_prefix(text);
    out.content = std::string(text.substr(0, n));
    return out;
  }
  size_t start = 0;
  if (text.substr(0, kThinkOpen.size()) == kThinkOpen) {
    start = kThinkOpen.size();
  } else if (!final && kThinkOpen.substr(0, text.size()) == text) {
    return out;  // could still become <think>
  }
  std::string_view body = text.substr(start);
  size_t close = body.find(kThinkClose);
  size_t call = body.find(kCallOpen);
  size_t end = std::min(close, call);
  if (end == std::string_view::npos) {
    size_t n = body.size();
    if (!final) {
      n -= std::max(partial_tag_suffix(body, kThinkClose), partial_tag_suffix(body, kCallOpen));
      n = utf8_complete_prefix(body.substr(0, n));
    }
    out.reasoning = std::string(body.substr(0, n));
    return out;
  }
  *ended = true;
  out.reasoning = std::string(body.substr(0, end));
  std::string_view rest = body.substr(end == close ? end + kThinkClose.size() : end);
  if (!final) {
    size_t n = rest.size() - partial_tag_suffix(rest, kThinkClose);
    rest = rest.substr(0, utf8_complete_prefix(rest.substr(0, n)));
  }
  out.content = remove_all(rest, kThinkClose);
  return out;
}

}  // namespace

ReasoningSplit glm47_split_reasoning(std::string_view text, bool thinking_enabled) {
  bool ended = false;
  return split(text, thinking_enabled, /*final=*/true, &ended);
}

ReasoningSplit Glm47ReasoningStreamParser::feed(std::string_view text) {
  text_.append(text);
  return step(/*final=*/false);
}

ReasoningSplit Glm47ReasoningStreamParser::finish() { return step(/*final=*/true); }

ReasoningSplit Glm47ReasoningStreamParser::step(bool final) {
  ReasoningSplit whole = split(text_, enabled_, final, &ended_);
  ReasoningSplit delta;
  if (whole.reasoning.size() > sent_reasoning_) {
    delta.reasoning = whole.reasoning.substr(sent_reasoning_);
    sent_reasoning_ = whole.reasoning.size();
  }
  if (whole.content.size() > sent_content_) {
    delta.content = whole.content.substr(sent_content_);
    sent_content_ = whole.content.size();
  }
  return delta;
}

}  // namespace flint::server
