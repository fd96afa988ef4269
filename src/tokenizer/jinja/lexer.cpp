// Jinja lexer: data, {{ }}, {% %}, {# #}, raw blocks, whitespace control and expression tokens.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#include "tokenizer/jinja/lexer.h"

#include <algorithm>

#include "tokenizer/jinja/value.h"

namespace flint::tokenizer::jinja {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python str.rstrip() for the ASCII and common Unicode whitespace.
std::string rstrip_ws(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && is_ws(s[end - 1])) --end;
  return s.substr(0, end);
}

// The data before a tag, trimmed as the tag asks: `{%-` strips its trailing whitespace; otherwise,
// with `lstrip` and unless `{%+`, the spaces that indent the tag on its own line go
// (`line_starting`: the data starts a line).
std::string trim_before_tag(std::string text, char mod, bool lstrip, bool line_starting) {
  if (mod == '-') return rstrip_ws(text);
  if (mod == '+' || !lstrip) return text;
  size_t l_pos = text.rfind('\n');
  l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
  if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
      std::all_of(text.begin() + static_cast<long>(l_pos), text.end(), is_ws)) {
    text.resize(l_pos);
  }
  return text;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t p = find_tag(pos);
      std::string text = src_.substr(pos, (p == std::string::npos ? src_.size() : p) - pos);
      if (p == std::string::npos) {
        emit(TokType::kData, std::move(text), pos);
        break;
      }
      char kind = src_[p + 1];
      char mod = p + 2 < src_.size() ? src_[p + 2] : '\0';
      text = trim_before_tag(std::move(text), mod, /*lstrip=*/kind != '{', starts_line(pos));
      if (!text.empty()) emit(TokType::kData, std::move(text), pos);
      size_t after = p + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      Result<size_t> next = kind == '#'   ? comment(p, after)
                            : kind == '%' ? block(p, after)
                                          : variable(p, after);
      if (!next) return next.error();
      pos = *next;
    }
    Token eof;
    eof.type = TokType::kEof;
    set_pos(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  bool starts_line(size_t pos) const { return pos == 0 || src_[pos - 1] == '\n'; }

  void set_pos(Token& t, size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(idx + 1);
    t.col = static_cast<int>(pos - line_starts_[idx] + 1);
  }

  void emit(TokType type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    set_pos(t, pos);
    tokens_.push_back(std::move(t));
  }

  Error error_at(size_t pos, const std::string& msg) const {
    Token t;
    set_pos(t, std::min(pos, src_.size()));
    return make_error(ErrorCode::kInvalidArgument, "line {}, column {}: {}", t.line, t.col, msg);
  }

  // Position after a closing delimiter at `p` (of length `len`), applying '-' and trim_blocks.
  size_t after_end(size_t p, size_t len, char mod, bool trim) const {
    size_t q = p + len;
    if (mod == '-') {
      while (q < src_.size() && is_ws(src_[q])) ++q;
    } else if (mod != '+' && trim && q < src_.size() && src_[q] == '\n') {
      ++q;
    }
    return q;
  }

  Result<size_t> comment(size_t begin, size_t after) {
    size_t e = src_.find("#}", after);
    if (e == std::string::npos) return error_at(begin, "missing end of comment tag");
    char mod = e > after && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : '\0';
    return after_end(e, 2, mod, true);
  }

  // `{% raw %}` ... `{% endraw %}`: returns 0 when the block is not a raw block.
  Result<size_t> raw_block(size_t begin, size_t after) {
    size_t q = after;
    while (q < src_.size() && is_ws(src_[q])) ++q;
    if (src_.compare(q, 3, "raw") != 0 || (q + 3 < src_.size() && is_name_char(src_[q + 3]))) {
      return size_t{0};
    }
    q += 3;
    while (q < src_.size() && is_ws(src_[q])) ++q;
    if (src_.compare(q, 3, "-%}") == 0) {
      q = after_end(q + 1, 2, '-', false);
    } else if (src_.compare(q, 2, "%}") == 0) {
      q += 2;
    } else {
      return size_t{0};
    }
    // Find "{%[-+]? endraw [-+]?%}".
    size_t s = q;
    while (true) {
      size_t p = src_.find("{%", s);
      if (p == std::string::npos) return error_at(begin, "missing end of raw directive");
      size_t r = p + 2;
      char mod = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : '\0';
      while (r < src_.size() && is_ws(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) {
        s = p + 2;
        continue;
      }
      r += 6;
      while (r < src_.size() && is_ws(src_[r])) ++r;
      char emod = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) emod = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) {
        s = p + 2;
        continue;
      }
      std::string text = src_.substr(q, p - q);
      text = trim_before_tag(std::move(text), mod, /*lstrip=*/true, starts_line(q));
      if (!text.empty()) emit(TokType::kData, std::move(text), q);
      return after_end(r, 2, emod, true);
    }
  }

  Result<size_t> block(size_t begin, size_t after) {
    auto raw = raw_block(begin, after);
    if (!raw) return raw.error();
    if (*raw != 0) return *raw;
    emit(TokType::kBlockBegin, "", begin);
    return tag(begin, after, '%', TokType::kBlockEnd);
  }

  Result<size_t> variable(size_t begin, size_t after) {
    emit(TokType::kVarBegin, "", begin);
    return tag(begin, after, '}', TokType::kVarEnd);
  }

  // Expression tokens up to the closing "%}" or "}}" (outside brackets).
  Result<size_t> tag(size_t begin, size_t pos, char close, TokType end_type) {
    int depth = 0;
    while (true) {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        return error_at(begin, close == '%' ? "unexpected end of template, missing '%}'"
                                            : "unexpected end of template, missing '}}'");
      }
      if (depth == 0) {
        char c = src_[pos];
        if ((c == '-' || c == '+') && pos + 2 < src_.size() + 0 && src_[pos + 1] == close &&
            src_[pos + 2] == '}') {
          emit(end_type, "", pos);
          return after_end(pos + 1, 2, c, close == '%');
        }
        if (c == close && pos + 1 < src_.size() && src_[pos + 1] == '}') {
          emit(end_type, "", pos);
          return after_end(pos, 2, '\0', close == '%');
        }
      }
      auto next = expr_token(pos, depth);
      if (!next) return next.error();
      pos = *next;
    }
  }

  Result<size_t> expr_token(size_t pos, int& depth) {
    char c = src_[pos];
    if (is_digit(c)) return number(pos);
    if (is_name_start(c)) {
      size_t e = pos;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      emit(TokType::kName, src_.substr(pos, e - pos), pos);
      return e;
    }
    if (c == '\'' || c == '"') return string_literal(pos);
    static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2) {
      if (src_.compare(pos, 2, op) == 0) {
        emit(TokType::kOp, op, pos);
        return pos + 2;
      }
    }
    static const std::string kOps1 = "+-*/%~[](){}<>=.:|,;";
    if (kOps1.find(c) != std::string::npos) {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) return error_at(pos, fmt::format("unexpected '{}'", c));
        --depth;
      }
      emit(TokType::kOp, std::string(1, c), pos);
      return pos + 1;
    }
    return error_at(pos, fmt::format("unexpected char '{}'", c));
  }

  Result<size_t> number(size_t pos) {
    auto digits = [&](size_t p) {
      size_t e = p;
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() &&
                                                       is_digit(src_[e + 1]) && e > p))) {
        ++e;
      }
      return e;
    };
    size_t e = digits(pos);
    bool is_float = false;
    bool after_dot = pos > 0 && src_[pos - 1] == '.';  // x.1.0 is two integer subscripts
    if (after_dot) {
    } else if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos; k < e; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    emit(is_float ? TokType::kFloat : TokType::kInt, std::move(text), pos);
    return e;
  }

  Result<size_t> string_literal(size_t pos) {
    char q = src_[pos];
    std::string out;
    size_t k = pos + 1;
    while (k < src_.size() && src_[k] != q) {
      char c = src_[k];
      if (c != '\\') {
        out += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) break;
      char e = src_[k + 1];
      k += 2;
      auto hex = [&](int n) -> long {
        if (k + static_cast<size_t>(n) > src_.size()) return -1;
        long v = 0;
        for (int m = 0; m < n; ++m) {
          char h = src_[k + static_cast<size_t>(m)];
          int d = is_digit(h)              ? h - '0'
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                           : -1;
          if (d < 0) return -1;
          v = v * 16 + d;
        }
        k += static_cast<size_t>(n);
        return v;
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          long v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (v < 0 || v > 0x10FFFF) return error_at(k, "invalid escape in string literal");
          append_utf8(out, static_cast<uint32_t>(v));
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int m = 0; m < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++m) {
              v = v * 8 + static_cast<uint32_t>(src_[k++] - '0');
            }
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    if (k >= src_.size()) return error_at(pos, "unterminated string literal");
    emit(TokType::kString, std::move(out), pos);
    return k + 1;
  }

  const std::string& src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace flint::tokenizer::jinja
