// TokenizerDecoder: the engine's TokenDecoder over a tokenizer::Tokenizer (which must outlive it).
// Tokenizer::decode is const and thread-safe, so one instance may serve every request.
#pragma once

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace flint::engine {

class TokenizerDecoder final : public TokenDecoder {
 public:
  explicit TokenizerDecoder(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string decode(std::span<const int32_t> token_ids, bool skip_special_tokens) const override {
    return tokenizer_.decode(token_ids, skip_special_tokens);
  }

 private:
  const tokenizer::Tokenizer& tokenizer_;
};

}  // namespace flint::engine
