// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json or from GGUF
// `tokenizer.ggml.*` metadata, plus a streaming detokenizer. Test partners:
// tests/unit/tokenizer/tokenizer_test.cpp and tests/python/tokenizer/test_tokenizer_parity.py (ids
// and text identical to the `tokenizers` package).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "formats/gguf.h"

namespace flint::tokenizer {

// An encoding with one byte range [begin, end) of the input text per token. Tokens added by the
// post-processor (bos/eos) have the empty range {0, 0}, as in Hugging Face.
struct Encoding {
  std::vector<int32_t> ids;                            // [num_tokens]
  std::vector<std::pair<uint32_t, uint32_t>> offsets;  // [num_tokens] byte offsets into the input
};

struct TokenizerImpl;

// Immutable after loading: encode/decode and every accessor are const and safe to call from any
// number of threads at once. Move-only; share one instance by const reference.
class Tokenizer {
 public:
  // Loads a tokenizer.json. Unsupported components are errors naming the component.
  static Result<Tokenizer> from_json_file(const std::string& path);
  static Result<Tokenizer> from_json(std::string_view json_text);
  // Loads `tokenizer.ggml.*` metadata (model "gpt2": tokens, merges, token_type, bos/eos ids,
  // tokenizer.ggml.pre); an unknown pre-tokenizer name is an error naming it.
  static Result<Tokenizer> from_gguf(const formats::GgufFile& gguf);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes UTF-8 text. Invalid UTF-8 is an error (kInvalidArgument) naming the byte offset: the
  // reference implementation only accepts valid strings, so we refuse rather than guess.
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  Result<Encoding> encode_with_offsets(std::string_view text, bool add_special_tokens) const;

  // Decodes ids to text exactly as Hugging Face does (invalid byte sequences become U+FFFD; ids out
  // of range are dropped). Never fails.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's vocabulary string (byte-level form, e.g. "Ġthe"); empty for an unknown id.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id (model vocabulary plus added tokens).
  int32_t vocab_size() const;
  // From the post-processor / GGUF metadata when known.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  // The raw bytes a token stands for after the decoder (used by the streaming detokenizer and by
  // stop-string matching); empty when skipped or unknown.
  std::string token_bytes(int32_t id, bool skip_special_tokens) const;

 private:
  explicit Tokenizer(std::unique_ptr<const TokenizerImpl> impl);
  std::unique_ptr<const TokenizerImpl> impl_;
  friend class StreamingDetokenizer;
};

// Turns generated ids into text incrementally. add() returns only complete UTF-8 text (possibly
// empty); flush() returns the rest, so that the concatenation of every add() and the final flush()
// equals tokenizer.decode(all_ids, skip_special_tokens) exactly. Not thread-safe (one per
// sequence); the Tokenizer must outlive it.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string add(int32_t id);
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string take(const std::string& text);

  std::string pending_;       // ByteLevel decoder: bytes of an unfinished UTF-8 sequence at most
  std::vector<int32_t> ids_;  // other decoders: ids since the last clean segment boundary
  bool emitted_any_ = false;
};

}  // namespace flint::tokenizer
