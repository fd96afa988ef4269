// UTF-8 helpers for the tokenizer: validation, lossy decoding (Rust's String::from_utf8_lossy
// rules), and GPT-2's byte <-> printable-character table. Test partner:
// tests/unit/tokenizer/utf8_test.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flint::tokenizer {

// The byte offset of the first invalid UTF-8 sequence in `s`, or nullopt when `s` is valid
// (surrogates and code points past U+10FFFF are invalid, overlong forms too).
std::optional<size_t> find_invalid_utf8(std::string_view s);

// Length of a valid UTF-8 sequence that starts at s[i] (1..4), or 0 when s[i..] does not start a
// complete valid sequence.
size_t utf8_sequence_length(std::string_view s, size_t i);

// Length of the longest prefix of s[i..] that is a valid but unfinished UTF-8 sequence, that is,
// bytes that could still become a character if more bytes followed (0 when there is none).
size_t utf8_incomplete_prefix_length(std::string_view s, size_t i);

// Length of the prefix of `s` that from_utf8_lossy can decode for good: all of `s` except a final
// valid-but-unfinished sequence, which later bytes may complete.
size_t utf8_stable_prefix_length(std::string_view s);

// Appends `s` to `out`, replacing each maximal invalid subpart with U+FFFD, exactly like Rust's
// String::from_utf8_lossy (which Hugging Face's ByteLevel decoder uses).
void append_utf8_lossy(std::string_view s, std::string& out);

// Decodes one code point at s[i] (s must be valid there); advances i.
char32_t next_code_point(std::string_view s, size_t& i);
void append_code_point(char32_t cp, std::string& out);

// GPT-2's reversible map from each byte to a printable character ("Ġ" for a space) and back.
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_str;  // UTF-8 of the character for each byte
  std::array<char32_t, 256> byte_to_cp;
  // code point -> byte, or -1 (the characters are all below U+0144).
  std::array<int16_t, 512> cp_to_byte;
};
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace flint::tokenizer
