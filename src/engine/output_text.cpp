// Incremental detokenization and stop strings. Test: tests/unit/engine/output_text_test.cpp.
#include "engine/output_text.h"

#include <algorithm>

#include "engine/engine.h"

namespace flint::engine {
namespace {

bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

size_t incomplete_utf8_suffix(const std::string& s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

OutputText::OutputText(const TokenDecoder* decoder, bool skip_special_tokens,
                       std::vector<std::string> stop, bool include_stop_str_in_output)
    : decoder_(decoder),
      skip_special_tokens_(skip_special_tokens),
      stop_(std::move(stop)),
      include_stop_(include_stop_str_in_output) {
  for (const std::string& s : stop_) holdback_ = std::max(holdback_, s.size() - 1);
  if (include_stop_) holdback_ = 0;
}

bool OutputText::append(int32_t token_id, bool check_stop) {
  if (stopped_ || decoder_ == nullptr) return false;
  ids_.push_back(token_id);
  std::span<const int32_t> ids(ids_);
  const std::string prefix_text = decoder_->decode(
      ids.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = decoder_->decode(ids.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement_char(new_text) ||
      incomplete_utf8_suffix(new_text) != 0) {
    return false;  // nothing printable yet (a partial character or a skipped special token)
  }
  const size_t old_size = text_.size();
  text_ += new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (!check_stop) return false;
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stop_) {
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < best) {
      best = at;
      best_stop = &s;
    }
  }
  if (best_stop == nullptr) return false;
  text_.resize(include_stop_ ? best + best_stop->size() : best);
  num_taken_ = std::min(num_taken_, text_.size());
  matched_stop_ = *best_stop;
  stopped_ = true;
  return true;
}

std::string OutputText::take_delta(bool final) {
  size_t end = text_.size();
  if (!final) {
    end = end > holdback_ ? end - holdback_ : 0;
    end = std::max(end, num_taken_);
    // Never split a UTF-8 character: back up to the start of a partial one.
    std::string head = text_.substr(0, end);
    end -= incomplete_utf8_suffix(head);
    end = std::max(end, num_taken_);
  }
  std::string out = text_.substr(num_taken_, end - num_taken_);
  num_taken_ = end;
  return out;
}

}  // namespace flint::engine
