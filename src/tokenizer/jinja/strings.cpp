// Python str operations by code point. Case mapping covers ASCII, Latin-1, Greek and Cyrillic.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#include "tokenizer/jinja/strings.h"

#include <algorithm>

namespace flint::tokenizer::jinja {
namespace {

uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x100 && c <= 0x17F && (c & 1) && c != 0x131 && c != 0x138 && c != 0x149) {
    // Latin Extended-A pairs are mostly (even upper, odd lower), with a shifted run in the middle.
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c;
    return c - 1;
  }
  if (((c >= 0x13A && c <= 0x148) || (c >= 0x17A && c <= 0x17E)) && !(c & 1)) return c - 1;
  return c;
}

uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x138 && c != 0x149) {
    bool shifted = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (shifted ? (c & 1) : !(c & 1)) return c + 1;
  }
  return c;
}

bool is_cased(uint32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c; }

std::string map_cps(const std::string& s, uint32_t (*f)(uint32_t)) {
  if (is_ascii(s)) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(f(static_cast<unsigned char>(c)));
    return out;
  }
  std::string out;
  for (uint32_t cp : decode_utf8(s)) append_utf8(out, f(cp));
  return out;
}

bool is_linebreak(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

}  // namespace

size_t py_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> py_chars(const std::string& s) {
  std::vector<std::string> out;
  for (uint32_t cp : decode_utf8(s)) {
    std::string ch;
    append_utf8(ch, cp);
    out.push_back(std::move(ch));
  }
  return out;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  auto cps = decode_utf8(s);
  std::vector<uint32_t> set;
  if (chars) set = decode_utf8(*chars);
  auto strip_it = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode_utf8(cps, b, e);
}

std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t p = s.find(sep, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + sep.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t p = s.rfind(sep, end - sep.size());
    if (p == std::string::npos) break;
    out.push_back(s.substr(p + sep.size(), end - p - sep.size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit, bool from_right) {
  auto cps = decode_utf8(s);
  std::vector<std::string> out;
  if (!from_right) {
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(encode_utf8(cps, k, cps.size()));
        break;
      }
      size_t b = k;
      while (k < cps.size() && !is_py_space(cps[k])) ++k;
      out.push_back(encode_utf8(cps, b, k));
    }
    return out;
  }
  size_t k = cps.size();
  while (k > 0) {
    while (k > 0 && is_py_space(cps[k - 1])) --k;
    if (k == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(encode_utf8(cps, 0, k));
      break;
    }
    size_t e = k;
    while (k > 0 && !is_py_space(cps[k - 1])) --k;
    out.push_back(encode_utf8(cps, k, e));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  auto cps = decode_utf8(s);
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (!is_linebreak(cps[k])) continue;
    size_t e = k;
    if (cps[k] == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
    out.push_back(encode_utf8(cps, b, keepends ? k + 1 : e));
    b = k + 1;
  }
  if (b < cps.size()) out.push_back(encode_utf8(cps, b, cps.size()));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s,
                       int64_t count) {
  std::string out;
  int64_t n = 0;
  if (old_s.empty()) {
    auto chars = py_chars(s);
    for (size_t k = 0; k <= chars.size(); ++k) {
      if (count < 0 || n < count) {
        out += new_s;
        ++n;
      }
      if (k < chars.size()) out += chars[k];
    }
    return out;
  }
  size_t start = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(old_s, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += new_s;
    start = p + old_s.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string py_upper(const std::string& s) { return map_cps(s, to_upper_cp); }
std::string py_lower(const std::string& s) { return map_cps(s, to_lower_cp); }

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : decode_utf8(s)) {
    append_utf8(out, prev_cased ? to_lower_cp(cp) : to_upper_cp(cp));
    prev_cased = is_cased(cp);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  auto cps = decode_utf8(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k)
    append_utf8(out, k == 0 ? to_upper_cp(cps[k]) : to_lower_cp(cps[k]));
  return out;
}

std::string jinja_title(const std::string& s) {
  // Words start after runs of '-', whitespace, '(', '{', '[' or '<'.
  auto cps = decode_utf8(s);
  std::string out;
  bool at_start = true;
  for (uint32_t cp : cps) {
    bool sep = cp == '-' || is_py_space(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      append_utf8(out, cp);
      at_start = true;
    } else {
      append_utf8(out, at_start ? to_upper_cp(cp) : to_lower_cp(cp));
      at_start = false;
    }
  }
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(py_len(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  size_t p = from_right ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return -1;
  return static_cast<int64_t>(py_len(s.substr(0, p)));
}

bool py_is(const std::string& s, const std::string& which) {
  auto cps = decode_utf8(s);
  if (cps.empty()) return false;
  auto alpha = [](uint32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= 0xC0 && c != 0xD7 && c != 0xF7 && !is_py_space(c) &&
            !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
            !(c >= 0xFF00 && c <= 0xFF20) && c < 0x1F000);
  };
  auto digit = [](uint32_t c) { return c >= '0' && c <= '9'; };
  if (which == "isdigit" || which == "isnumeric" || which == "isdecimal") {
    return std::all_of(cps.begin(), cps.end(), digit);
  }
  if (which == "isalpha") return std::all_of(cps.begin(), cps.end(), alpha);
  if (which == "isalnum") {
    return std::all_of(cps.begin(), cps.end(), [&](uint32_t c) { return alpha(c) || digit(c); });
  }
  if (which == "isspace") return std::all_of(cps.begin(), cps.end(), is_py_space);
  bool any_cased = false;
  for (uint32_t c : cps) {
    if (!is_cased(c)) continue;
    any_cased = true;
    bool upper = to_lower_cp(c) != c;
    if ((which == "isupper") != upper) return false;
  }
  return any_cased;
}

std::string py_pad(const std::string& s, int64_t width, const std::string& fill,
                   const std::string& how) {
  int64_t n = static_cast<int64_t>(py_len(s));
  if (width <= n) return s;
  int64_t total = width - n;
  int64_t left = how == "rjust" ? total : how == "ljust" ? 0 : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < total - left; ++k) out += fill;
  return out;
}

std::string py_zfill(const std::string& s, int64_t width) {
  int64_t n = static_cast<int64_t>(py_len(s));
  if (width <= n) return s;
  std::string pad(static_cast<size_t>(width - n), '0');
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) return s.substr(0, 1) + pad + s.substr(1);
  return pad + s;
}

Result<Value> py_format(const std::string& s, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (c == '}' && k + 1 < s.size() && s[k + 1] == '}') {
      out += '}';
      ++k;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < s.size() && s[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    size_t e = s.find('}', k);
    if (e == std::string::npos) {
      return make_error(ErrorCode::kInvalidArgument, "Single '{{' encountered in format string");
    }
    std::string field = s.substr(k + 1, e - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return make_error(ErrorCode::kUnsupported, "format specs in str.format are not supported");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx < args.args.size()) v = &args.args[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t idx = std::stoul(field);
      if (idx < args.args.size()) v = &args.args[idx];
    } else {
      for (const auto& [name, val] : args.kwargs) {
        if (name == field) v = &val;
      }
    }
    if (!v) return make_error(ErrorCode::kInvalidArgument, "format: missing argument '{}'", field);
    out += to_str(*v);
    k = e;
  }
  return Value::string(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool truthy_or(const Value* v) { return v && truthy(*v); }

}  // namespace flint::tokenizer::jinja
