// OutputText: a sequence's generated text, built incrementally from token ids through the
// tokenizer's decode, with stop strings matched across token boundaries and the text held back
// while it could still be the start of a stop string. Test: tests/unit/engine/output_text_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flint::engine {

class TokenDecoder;

class OutputText {
 public:
  OutputText(const TokenDecoder* decoder, bool skip_special_tokens, std::vector<std::string> stop,
             bool include_stop_str_in_output);

  // Appends one generated token. With `check_stop`, returns true when the text now contains a stop
  // string; the text is then cut at its start (or after it, with include_stop_str_in_output).
  bool append(int32_t token_id, bool check_stop);
  // Text not yet returned. Unless `final`, text that may begin a stop string and a trailing partial
  // UTF-8 character are held back.
  std::string take_delta(bool final);

  const std::string& text() const { return text_; }
  const std::optional<std::string>& matched_stop() const { return matched_stop_; }

 private:
  const TokenDecoder* decoder_;
  bool skip_special_tokens_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t holdback_ = 0;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) decode to text already emitted
  size_t read_offset_ = 0;
  std::string text_;
  size_t num_taken_ = 0;
  bool stopped_ = false;
  std::optional<std::string> matched_stop_;
};

// Bytes at the end of `s` that form an incomplete UTF-8 sequence (0 when it ends cleanly).
size_t incomplete_utf8_suffix(const std::string& s);

}  // namespace flint::engine
