// Internal representation of a loaded tokenizer: the pipeline stages of Hugging Face's tokenizers
// (added tokens, normalizer, pre-tokenizers, BPE model, post-processor, decoder) as plain data.
// Built by tokenizer_json.cpp / tokenizer_gguf.cpp, run by tokenizer.cpp and bpe.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "tokenizer/regex.h"

namespace flint::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// Leftmost-longest matcher over a set of added tokens (a byte trie).
class AddedTokenMatcher {
 public:
  void add(std::string_view content, int32_t token_idx);
  bool empty() const { return num_patterns_ == 0; }
  // Finds the leftmost-longest match starting at or after `from`; returns (begin, end, token_idx).
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, int32_t& idx) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token_idx = -1;
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{Node{}};
  std::array<int32_t, 256> root_{};  // first byte -> node (0 = none)
  size_t num_patterns_ = 0;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };  // Digits loads as a Split on \p{N}
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // Split pattern, or ByteLevel's GPT-2 pattern when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

struct DecoderStep {
  enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  std::string content;         // Strip: the character; Replace: the replacement
  std::string pattern;         // Replace: the literal searched for
  size_t start = 0, stop = 0;  // Strip counts
};

struct PostProcessorStep {
  enum class Kind { kByteLevel, kTemplate };
  Kind kind = Kind::kTemplate;
  bool trim_offsets = false;      // ByteLevel
  bool add_prefix_space = false;  // ByteLevel
  // Template: the single-sequence template as a list of pieces; an empty `ids` is "$A".
  std::vector<std::vector<int32_t>> pieces;
};

// Byte-pair encoding model: vocabulary, merge ranks, and a bounded per-word cache.
class BpeModel {
 public:
  // One token of a word: its id and how many bytes of the word it covers.
  struct Piece {
    int32_t id;
    uint32_t len;
  };
  Vocab vocab;
  std::vector<std::string> id_to_token;  // model vocabulary (gaps are empty strings)
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool byte_level = false;  // units are bytes mapped through the GPT-2 alphabet
  std::optional<int32_t> unk_id;

  // Builds the merge table from "a b" pairs; errors name a pair whose parts are not in the vocab.
  Status set_merges(const std::vector<std::pair<std::string, std::string>>& merges);
  // Precomputes per-byte unit ids; call after the vocabulary is complete.
  void finalize();
  // Appends the tokens of one pre-tokenized word (raw bytes). Thread-safe.
  void tokenize(std::string_view word, std::vector<Piece>& out) const;

 private:
  struct MergeSlot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  const MergeSlot* find_merge(int32_t a, int32_t b) const;
  void merge_word(std::string_view word, std::vector<Piece>& out) const;
  void apply_merges(std::vector<Piece>& symbols) const;

  std::vector<MergeSlot> merge_table_;
  uint64_t merge_mask_ = 0;
  std::array<int32_t, 256> byte_unit_id_{};  // byte -> id of its alphabet character, or -1

  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheEntriesPerShard = 8192;
  static constexpr size_t kMaxCachedWordBytes = 256;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<Piece>, StringHash, std::equal_to<>> map;
  };
  mutable std::unique_ptr<CacheShard[]> cache_ = std::make_unique<CacheShard[]>(kCacheShards);
};

struct TokenizerImpl {
  BpeModel model;
  std::vector<AddedToken> added;  // in file order
  std::unordered_map<int32_t, size_t> added_by_id;
  Vocab added_by_content;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true
  bool nfc = false;                      // the normalizer (NFC, possibly inside a Sequence)
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<PostProcessorStep> post_processors;
  bool has_decoder = false;
  std::vector<DecoderStep> decoders;
  bool byte_level_decoder_only = false;  // the decoder is exactly ByteLevel: streaming by bytes
  int32_t vocab_size = 0;
  std::optional<int32_t> bos_id, eos_id;

  // Registers added tokens (after the model vocabulary is loaded) and builds the matchers.
  Status finish_loading();
  // The token string for an id: added tokens first, then the model vocabulary.
  const std::string* token_string(int32_t id) const;
};

Result<std::unique_ptr<Regex>> gpt2_byte_level_regex();

// NFC normalization (normalize.cpp). Returns false and leaves `out` untouched when `text` is
// already in NFC; otherwise fills `out` and, per output byte, the [begin, end) range of `text` it
// came from.
bool nfc_normalize(std::string_view text, std::string& out, std::vector<uint32_t>& src_begin,
                   std::vector<uint32_t>& src_end);

}  // namespace flint::tokenizer
