// Jinja lexer with Hugging Face's settings: trim_blocks, lstrip_blocks, keep_trailing_newline off,
// newlines normalised to "\n". Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace flint::tokenizer::jinja {

enum class TokType {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokType type = TokType::kEof;
  std::string text;  // data text, name, operator, or the unescaped string literal
  int line = 1;
  int col = 1;
};

// Newlines normalised and one trailing newline dropped, as Jinja2 does before lexing.
std::string normalize_source(const std::string& source);

// Tokenises normalised source. Errors name the line and column.
Result<std::vector<Token>> tokenize(const std::string& source);

}  // namespace flint::tokenizer::jinja
