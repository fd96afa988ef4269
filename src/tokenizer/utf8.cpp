// UTF-8 helpers; the lossy decoder follows the "maximal subpart" rule of Unicode chapter 3, which
// is what Rust's from_utf8_lossy implements. Test partner: tests/unit/tokenizer/utf8_test.cpp.
#include "tokenizer/utf8.h"

namespace flint::tokenizer {
namespace {

// How many valid bytes of a sequence start at s[i] (the "maximal subpart" length), and whether the
// sequence is complete. Table 3-7 of the Unicode standard.
struct Prefix {
  size_t valid = 0;
  bool complete = false;
};

Prefix scan(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {1, true};
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {0, false};
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {k, false};
  }
  return {need + 1, true};
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const Prefix p = scan(s, i);
  return p.complete ? p.valid : 0;
}

std::optional<size_t> find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

size_t utf8_incomplete_prefix_length(std::string_view s, size_t i) {
  const Prefix p = scan(s, i);
  if (p.complete || p.valid == 0) return 0;
  // Valid so far and cut off by the end of the string: more bytes could complete it.
  return i + p.valid == s.size() ? p.valid : 0;
}

size_t utf8_stable_prefix_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Prefix p = scan(s, i);
    if (p.complete) {
      i += p.valid;
    } else if (p.valid > 0 && i + p.valid == s.size()) {
      return i;
    } else {
      i += p.valid == 0 ? 1 : p.valid;
    }
  }
  return i;
}

void append_utf8_lossy(std::string_view s, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    const Prefix p = scan(s, i);
    if (p.complete) {
      out.append(s.data() + i, p.valid);
      i += p.valid;
    } else {
      out.append("\xEF\xBF\xBD");
      i += p.valid == 0 ? 1 : p.valid;
    }
  }
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
  i += n;
  return cp;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

ByteLevelAlphabet make_alphabet() {
  ByteLevelAlphabet a;
  a.cp_to_byte.fill(-1);
  // Printable Latin-1 bytes keep their code point; the other 68 bytes get U+0100 upwards in order.
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next++;
    a.byte_to_cp[b] = cp;
    a.cp_to_byte[cp] = static_cast<int16_t>(b);
    append_code_point(cp, a.byte_to_str[b]);
  }
  return a;
}

}  // namespace

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet = make_alphabet();
  return alphabet;
}

}  // namespace flint::tokenizer
