// A compiled PCRE2 pattern (UTF + UCP, JIT when available) with the match iteration Hugging Face's
// Oniguruma wrapper uses. Test partner: tests/unit/tokenizer/pretokenize_test.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace flint::tokenizer {

class Regex {
 public:
  static Result<Regex> compile(const std::string& pattern);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Appends the [begin, end) byte ranges of all matches in `text` (valid UTF-8) to `out`. An empty
  // match right after the previous match is skipped, as Oniguruma's find_iter does. Thread-safe.
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Whether the pattern matches anywhere in `text`.
  bool search(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace flint::tokenizer
