// BPE model: Hugging Face's merge order (lowest merge rank first, leftmost on ties), byte fallback,
// unknown-token fusing and ignore_merges, with a sharded bounded cache of word -> tokens.
// Test partner: tests/python/tokenizer/test_tokenizer_parity.py.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace flint::tokenizer {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

Status BpeModel::set_merges(const std::vector<std::pair<std::string, std::string>>& merges) {
  size_t cap = 16;
  while (cap < merges.size() * 2 + 16) cap <<= 1;
  merge_table_.assign(cap, MergeSlot{});
  merge_mask_ = cap - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab.find(a), ib = vocab.find(b);
    if (ia == vocab.end() || ib == vocab.end()) {
      return make_error(ErrorCode::kInvalidFile, "bpe: merge '{} {}' uses a token not in the vocab",
                        a, b);
    }
    auto in = vocab.find(a + b);
    if (in == vocab.end()) {
      return make_error(ErrorCode::kInvalidFile,
                        "bpe: merge '{} {}' makes '{}{}', not in the vocab", a, b, a, b);
    }
    const uint64_t key = pair_key(ia->second, ib->second);
    for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
      MergeSlot& s = merge_table_[h];
      if (s.key == key) break;  // a repeated merge keeps its first (lowest) rank
      if (s.key == ~uint64_t{0}) {
        s = MergeSlot{key, static_cast<int32_t>(rank), in->second};
        break;
      }
    }
  }
  return ok();
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t a, int32_t b) const {
  if (merge_table_.empty()) return nullptr;
  const uint64_t key = pair_key(a, b);
  for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
    const MergeSlot& s = merge_table_[h];
    if (s.key == key) return &s;
    if (s.key == ~uint64_t{0}) return nullptr;
  }
}

void BpeModel::finalize() {
  const ByteLevelAlphabet& alpha = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(alpha.byte_to_str[b]);
    byte_unit_id_[b] = it == vocab.end() ? -1 : it->second;
  }
}

// The initial symbols of a word, as Hugging Face's merge_word builds them: one per unit (a byte's
// alphabet character for byte-level models, else a UTF-8 character), then byte fallback or unk.
void BpeModel::merge_word(std::string_view word, std::vector<Piece>& symbols) const {
  const ByteLevelAlphabet& alpha = byte_level_alphabet();
  std::optional<Piece> unk;
  size_t i = 0;
  while (i < word.size()) {
    std::string_view key;
    uint32_t len = 1;
    int32_t id = -1;
    if (byte_level) {
      const auto b = static_cast<uint8_t>(word[i]);
      id = byte_unit_id_[b];
      key = alpha.byte_to_str[b];
    } else {
      const size_t n = utf8_sequence_length(word, i);
      len = static_cast<uint32_t>(n == 0 ? 1 : n);
      key = word.substr(i, len);
      auto it = vocab.find(key);
      if (it != vocab.end()) id = it->second;
    }
    i += len;
    if (id >= 0) {
      if (unk) symbols.push_back(*unk), unk.reset();
      symbols.push_back({id, len});
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      const size_t first = symbols.size();
      for (char c : key) {
        auto it = vocab.find(fmt::format("<0x{:02X}>", static_cast<uint8_t>(c)));
        if (it == vocab.end()) {
          all = false;
          break;
        }
        // Each fallback byte covers one byte of the unit; byte-level units are one input byte.
        symbols.push_back({it->second, byte_level ? 0u : 1u});
      }
      if (all) {
        if (byte_level) symbols[first].len = 1;
        continue;
      }
      symbols.resize(first);
    }
    if (unk_id) {
      if (unk && fuse_unk) {
        unk->len += len;
      } else {
        if (unk) symbols.push_back(*unk);
        unk = Piece{*unk_id, len};
      }
    }
  }
  if (unk) symbols.push_back(*unk);
}

// Merges adjacent symbols, always taking the pair of lowest rank and, on ties, the leftmost one.
void BpeModel::apply_merges(std::vector<Piece>& sym) const {
  const size_t n = sym.size();
  if (n < 2) return;
  if (n <= 48) {
    // Short words: a direct scan is faster than a heap and gives the same order.
    size_t len = n;
    while (len > 1) {
      int32_t best_rank = INT32_MAX, best_id = 0;
      size_t best = 0;
      for (size_t k = 0; k + 1 < len; ++k) {
        const MergeSlot* m = find_merge(sym[k].id, sym[k + 1].id);
        if (m != nullptr && m->rank < best_rank) best_rank = m->rank, best = k, best_id = m->new_id;
      }
      if (best_rank == INT32_MAX) break;
      sym[best] = Piece{best_id, sym[best].len + sym[best + 1].len};
      std::copy(sym.begin() + best + 2, sym.begin() + len, sym.begin() + best + 1);
      --len;
    }
    sym.resize(len);
    return;
  }
  // Long words: a heap of candidate merges over a linked list of symbols.
  std::vector<int32_t> prev(n), next(n);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = static_cast<int32_t>(k) - 1;
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
  }
  struct Cand {
    int32_t rank, pos, new_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const MergeSlot* m = find_merge(sym[pos].id, sym[next[pos]].id);
    if (m != nullptr) heap.push({m->rank, pos, m->new_id, sym[next[pos]].id});
  };
  for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (dead[c.pos] || next[c.pos] < 0) continue;
    const int32_t r = next[c.pos];
    const MergeSlot* m = find_merge(sym[c.pos].id, sym[r].id);
    if (m == nullptr || m->rank != c.rank || m->new_id != c.new_id || sym[r].id != c.right_id) {
      continue;  // stale: one of the two symbols has changed since the candidate was pushed
    }
    sym[c.pos] = Piece{c.new_id, sym[c.pos].len + sym[r].len};
    dead[r] = true;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (size_t k = 0; k < n; ++k) {
    if (!dead[k]) sym[w++] = sym[k];
  }
  sym.resize(w);
}

void BpeModel::tokenize(std::string_view word, std::vector<Piece>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    // The whole word as one token, when it is in the vocabulary (its byte-level spelling).
    if (byte_level) {
      std::string spelled;
      const ByteLevelAlphabet& alpha = byte_level_alphabet();
      for (char c : word) spelled += alpha.byte_to_str[static_cast<uint8_t>(c)];
      auto it = vocab.find(spelled);
      if (it != vocab.end()) {
        out.push_back({it->second, static_cast<uint32_t>(word.size())});
        return;
      }
    } else if (auto it = vocab.find(word); it != vocab.end()) {
      out.push_back({it->second, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  CacheShard* shard = nullptr;
  if (cacheable) {
    shard = &cache_[StringHash{}(word) % kCacheShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->map.find(word);
    if (it != shard->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  std::vector<Piece> symbols;
  symbols.reserve(word.size());
  merge_word(word, symbols);
  apply_merges(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(shard->mu);
    if (shard->map.size() < kCacheEntriesPerShard) {
      shard->map.emplace(std::string(word), std::vector<Piece>(out.begin() + first, out.end()));
    }
  }
}

}  // namespace flint::tokenizer
