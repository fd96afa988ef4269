// GLM-4.7 tool-call parser. One parse of the whole text feeds both modes: streaming re-parses on
// every step and sends only what each segment gained, so both modes agree by construction.
#include "server/glm47_tool_parser.h"

#include <nlohmann/json.hpp>

#include "server/py_json.h"

namespace flint::server {
namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";

std::string_view strip(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// One piece of the output in order: content text, or one call with its arguments so far.
struct Segment {
  bool is_call = false;
  std::string text;  // content, or the arguments JSON prefix of a call
  std::string name;  // calls: empty until the name is complete
  bool name_done = false;
};

// Skips whitespace and literal "\n" (backslash, n) between </arg_key> and <arg_value>.
size_t skip_separator(std::string_view s, size_t p) {
  while (p < s.size()) {
    if (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n') {
      ++p;
    } else if (s[p] == '\\' && p + 1 < s.size() && s[p + 1] == 'n') {
      p += 2;
    } else {
      break;
    }
  }
  return p;
}

std::string typed_value(const ToolSchemas& schemas, const std::string& tool, const std::string& key,
                        std::string_view raw) {
  if (schemas.is_string(tool, key)) return py_json_string(raw);
  return py_typed_literal(strip(raw));
}

// Parses the body of one region (after <tool_call>). `done` means the body is complete: either
// </tool_call> was seen or the generation ended.
Segment parse_call(std::string_view body, bool closed, bool final, const ToolSchemas& schemas) {
  Segment seg;
  seg.is_call = true;
  const bool done = closed || final;
  size_t name_end = std::min(body.find('\n'), body.find(kKeyOpen));
  if (name_end == std::string_view::npos) {
    if (!done) return seg;  // name still growing
    name_end = body.size();
  }
  seg.name = std::string(strip(body.substr(0, name_end)));
  seg.name_done = true;
  std::string args = "{";
  int num_pairs = 0;
  size_t p = name_end;
  while (true) {
    size_t k = body.find(kKeyOpen, p);
    if (k == std::string_view::npos) break;
    size_t ke = body.find(kKeyClose, k);
    if (ke == std::string_view::npos) break;  // key still growing (or malformed at the end)
    std::string key(strip(body.substr(k + kKeyOpen.size(), ke - k - kKeyOpen.size())));
    size_t v = skip_separator(body, ke + kKeyClose.size());
    if (body.substr(v, kValueOpen.size()) != kValueOpen) {
      // Missing <arg_value>: either not generated yet or malformed; skip this key.
      p = ke + kKeyClose.size();
      continue;
    }
    size_t vb = v + kValueOpen.size();
    size_t ve = body.find(kValueClose, vb);
    std::string_view raw;
    bool value_done = true;
    if (ve == std::string_view::npos) {
      raw = body.substr(vb);
      if (!done) {
        value_done = false;
        raw = raw.substr(0, raw.size() - partial_tag_suffix(raw, kValueClose));
        raw = raw.substr(0, utf8_complete_prefix(raw));
      }
    } else {
      raw = body.substr(vb, ve - vb);
    }
    const std::string sep = num_pairs == 0 ? "" : ", ";
    if (value_done) {
      args += sep + py_json_string(key) + ": " + typed_value(schemas, seg.name, key, raw);
      ++num_pairs;
    } else if (schemas.is_string(seg.name, key)) {
      std::string quoted = py_json_string(raw);
      quoted.pop_back();  // the value is still open: no closing quote yet
      args += sep + py_json_string(key) + ": " + quoted;
    }
    if (ve == std::string_view::npos) break;
    p = ve + kValueClose.size();
  }
  if (done) args += "}";
  seg.text = std::move(args);
  return seg;
}

std::vector<Segment> parse_segments(std::string_view text, bool final, const ToolSchemas& schemas) {
  std::vector<Segment> segs;
  size_t pos = 0;
  while (true) {
    size_t k = text.find(kCallOpen, pos);
    Segment content;
    if (k == std::string_view::npos) {
      std::string_view rest = text.substr(pos);
      if (!final) {
        rest = rest.substr(0, rest.size() - partial_tag_suffix(rest, kCallOpen));
        rest = rest.substr(0, utf8_complete_prefix(rest));
      }
      content.text = std::string(rest);
      segs.push_back(std::move(content));
      break;
    }
    content.text = std::string(text.substr(pos, k - pos));
    segs.push_back(std::move(content));
    size_t b = k + kCallOpen.size();
    size_t e = text.find(kCallClose, b);
    if (e == std::string_view::npos) {
      std::string_view body = text.substr(b);
      if (!final) body = body.substr(0, body.size() - partial_tag_suffix(body, kCallClose));
      segs.push_back(parse_call(body, /*closed=*/false, final, schemas));
      break;
    }
    segs.push_back(parse_call(text.substr(b, e - b), /*closed=*/true, final, schemas));
    pos = e + kCallClose.size();
  }
  return segs;
}

}  // namespace

bool ToolSchemas::is_string(const std::string& tool, const std::string& key) const {
  auto it = string_args.find(tool);
  return it != string_args.end() && it->second.count(key) > 0;
}

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  size_t max_len = std::min(text.size(), tag.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  }
  return 0;
}

size_t utf8_complete_prefix(std::string_view text) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

ToolParseResult glm47_parse_tool_calls(std::string_view text, const ToolSchemas& schemas) {
  ToolParseResult result;
  std::string content;
  for (Segment& seg : parse_segments(text, /*final=*/true, schemas)) {
    if (!seg.is_call) {
      content += seg.text;
    } else if (!seg.name.empty()) {
      result.tool_calls.push_back({seg.name, std::move(seg.text)});
    }
  }
  if (result.tool_calls.empty()) content = std::string(text);  // nothing parsed: all is content
  if (!strip(content).empty()) result.content = std::move(content);
  return result;
}

ToolStreamDelta Glm47ToolStreamParser::feed(std::string_view text) {
  text_.append(text);
  return step(/*final=*/false);
}

ToolStreamDelta Glm47ToolStreamParser::finish() {
  if (finished_) return {};
  finished_ = true;
  return step(/*final=*/true);
}

ToolStreamDelta Glm47ToolStreamParser::step(bool final) {
  ToolStreamDelta delta;
  std::vector<Segment> segs = parse_segments(text_, final, schemas_);
  int call_idx = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    Segment& seg = segs[i];
    if (sent_.size() <= i) sent_.emplace_back();
    std::string& sent = sent_[i];
    if (seg.is_call) {
      if (!seg.name_done || seg.name.empty()) continue;
      const int index = call_idx++;
      bool first = false;
      if (index >= num_calls_started_) {
        num_calls_started_ = index + 1;
        first = true;
      }
      if (!first && seg.text.size() <= sent.size()) continue;
      ToolCallDelta d;
      d.index = index;
      if (first) d.name = seg.name;
      d.arguments = seg.text.substr(std::min(sent.size(), seg.text.size()));
      sent = seg.text;
      delta.tool_calls.push_back(std::move(d));
    } else if (seg.text.size() > sent.size()) {
      delta.content += seg.text.substr(sent.size());
      sent = seg.text;
    }
  }
  return delta;
}

}  // namespace flint::server
