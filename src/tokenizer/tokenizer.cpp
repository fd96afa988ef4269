// Encode/decode pipeline in Hugging Face's order: added tokens on the raw text, normalizer, added
// tokens on the normalized text, pre-tokenizers, BPE per word, post-processors; decoders on the way
// back. Test partners: tests/unit/tokenizer/tokenizer_test.cpp, test_tokenizer_parity.py.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace flint::tokenizer {

// ---- added tokens ----

void AddedTokenMatcher::add(std::string_view content, int32_t token_idx) {
  int32_t node = 0;
  for (size_t i = 0; i < content.size(); ++i) {
    const auto b = static_cast<uint8_t>(content[i]);
    int32_t c = node == 0 ? root_[b] : child(node, b);
    if (c <= 0) {
      c = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_[b] = c;
      } else {
        auto& ch = nodes_[node].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::pair<uint8_t, int32_t>{b, 0}),
                  {b, c});
      }
    }
    node = c;
  }
  // The first token registered with a given content wins, like a map keyed by content.
  if (nodes_[node].token_idx < 0) nodes_[node].token_idx = token_idx;
  ++num_patterns_;
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<uint8_t, int32_t>{b, 0});
  return it != ch.end() && it->first == b ? it->second : -1;
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, size_t& begin, size_t& end,
                             int32_t& idx) const {
  for (size_t s = from; s < text.size(); ++s) {
    int32_t node = root_[static_cast<uint8_t>(text[s])];
    if (node <= 0) continue;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = s + 1;; ++i) {
      if (nodes_[node].token_idx >= 0) best = nodes_[node].token_idx, best_end = i;
      if (i >= text.size()) break;
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
    }
    if (best >= 0) {
      begin = s, end = best_end, idx = best;
      return true;
    }
  }
  return false;
}

namespace {

bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Start of the run of white space that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) --j;
    size_t k = j;
    if (!is_white_space(next_code_point(s, k))) break;
    i = j;
  }
  return i;
}

size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t k = i;
    if (!is_white_space(next_code_point(s, k))) break;
    i = k;
  }
  return i;
}

const Regex& word_char_regex() {
  static const Regex r = std::move(*Regex::compile("^\\w$"));
  return r;
}

bool is_word_char_at(std::string_view s, size_t i) {
  const size_t n = utf8_sequence_length(s, i);
  return n > 0 && word_char_regex().search(s.substr(i, n));
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t j = s.size() - 1;
  while (j > 0 && (static_cast<uint8_t>(s[j]) & 0xC0) == 0x80) --j;
  return is_word_char_at(s, j);
}

// A span of the working text: a piece still to tokenize, or an added token already decided.
struct Span {
  uint32_t b, e;
  int32_t added_id;   // -1 for text
  bool prefix_space;  // ByteLevel's add_prefix_space put a virtual ' ' before it
};

struct Work {
  std::string_view input;
  std::string owned;                   // the normalized text, when normalization changed something
  std::string_view text;               // what spans index into: `input` or `owned`
  bool aligned = false;                // src_b/src_e are filled (else text == input)
  std::vector<uint32_t> src_b, src_e;  // [text.size()] original byte range of each text byte
  std::vector<Span> spans, next;
  std::vector<std::pair<size_t, size_t>> matches;
  struct Part {
    size_t b, e;
    bool is_match;
  };
  std::vector<Part> parts;
};

// Splits every text span in `w.spans` on `m`, as AddedVocabulary::split_with_indices does.
void split_added(const TokenizerImpl& t, const AddedTokenMatcher& m, Work& w) {
  if (m.empty()) return;
  w.next.clear();
  for (const Span& sp : w.spans) {
    if (sp.added_id >= 0) {
      w.next.push_back(sp);
      continue;
    }
    const std::string_view s = w.text.substr(sp.b, sp.e - sp.b);
    size_t start_offset = 0, from = 0, mb = 0, me = 0;
    int32_t idx = 0;
    while (m.find(s, from, mb, me, idx)) {
      from = me;
      const AddedToken& tok = t.added[static_cast<size_t>(idx)];
      size_t start = mb, stop = me;
      if (tok.single_word) {
        const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
        const bool stop_space = stop == s.size() || !is_word_char_at(s, stop);
        if (!start_space || !stop_space) continue;  // skipped; the search goes on after it
      }
      if (tok.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
      if (tok.rstrip) stop += leading_space_length(s.substr(stop));
      if (start_offset < start) {
        w.next.push_back({sp.b + static_cast<uint32_t>(start_offset),
                          sp.b + static_cast<uint32_t>(start), -1, false});
      }
      w.next.push_back(
          {sp.b + static_cast<uint32_t>(start), sp.b + static_cast<uint32_t>(stop), tok.id, false});
      start_offset = stop;
    }
    if (start_offset < s.size()) {
      w.next.push_back({sp.b + static_cast<uint32_t>(start_offset), sp.e, -1, false});
    }
  }
  std::swap(w.spans, w.next);
}

// Applies a split behavior to `parts` (covering [0, len) of a span) and appends the pieces.
void apply_behavior(SplitBehavior behavior, const Span& sp, Work& w, bool prefixed) {
  auto& parts = w.parts;
  std::vector<std::pair<size_t, size_t>>& out = w.matches;  // reused as the piece list
  out.clear();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& p : parts) out.emplace_back(p.b, p.e);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& p : parts) {
        if (!p.is_match) out.emplace_back(p.b, p.e);
      }
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      // Contiguous joins a part to the one before it when both match or both don't;
      // MergedWithPrevious joins a match to the non-match before it.
      const bool contiguous = behavior == SplitBehavior::kContiguous;
      bool prev = false;
      for (const auto& p : parts) {
        const bool join = contiguous ? p.is_match == prev : p.is_match && !prev;
        if (join && !out.empty()) {
          out.back().second = p.e;
        } else {
          out.emplace_back(p.b, p.e);
        }
        prev = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const auto& p = parts[k];
        if (p.is_match && !prev && !out.empty()) {
          out.back().first = p.b;
        } else {
          out.emplace_back(p.b, p.e);
        }
        prev = p.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (const auto& [b, e] : out) {
    if (b == e) continue;
    if (!prefixed) {
      w.next.push_back(
          {sp.b + static_cast<uint32_t>(b), sp.b + static_cast<uint32_t>(e), -1, sp.prefix_space});
    } else {
      // Coordinates include the virtual leading space at 0.
      const uint32_t nb = sp.b + static_cast<uint32_t>(b == 0 ? 0 : b - 1);
      w.next.push_back({nb, sp.b + static_cast<uint32_t>(e - 1), -1, b == 0});
    }
  }
}

Status run_pre_tokenizer(const PreTokenizerStep& step, Work& w) {
  w.next.clear();
  std::string prefixed_buf;
  for (const Span& sp : w.spans) {
    if (sp.added_id >= 0) {
      w.next.push_back(sp);
      continue;
    }
    std::string_view s = w.text.substr(sp.b, sp.e - sp.b);
    bool prefixed = false;
    w.parts.clear();
    if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
      if (step.add_prefix_space && !sp.prefix_space && (s.empty() || s[0] != ' ')) {
        prefixed_buf.assign(1, ' ');
        prefixed_buf.append(s);
        s = prefixed_buf;
        prefixed = true;
      }
      if (!step.regex) {
        if (prefixed) {
          w.next.push_back({sp.b, sp.e, -1, true});
        } else {
          w.next.push_back(sp);
        }
        continue;
      }
    }
    w.matches.clear();
    FLINT_TRY(step.regex->find_all(s, w.matches));
    size_t prev = 0;
    const bool inv = step.kind == PreTokenizerStep::Kind::kSplit && step.invert;
    for (const auto& [b, e] : w.matches) {
      if (prev != b) w.parts.push_back({prev, b, inv});
      w.parts.push_back({b, e, !inv});
      prev = e;
    }
    if (prev != s.size()) w.parts.push_back({prev, s.size(), inv});
    const SplitBehavior behavior =
        step.kind == PreTokenizerStep::Kind::kSplit ? step.behavior : SplitBehavior::kIsolated;
    apply_behavior(behavior, sp, w, prefixed);
  }
  std::swap(w.spans, w.next);
  return ok();
}

// Original [begin, end) byte range of the character holding text byte p.
std::pair<uint32_t, uint32_t> source_range(const Work& w, uint32_t p) {
  if (w.aligned) return {w.src_b[p], w.src_e[p]};
  uint32_t b = p;
  while (b > 0 && (static_cast<uint8_t>(w.input[b]) & 0xC0) == 0x80) --b;
  uint32_t e = p + 1;
  while (e < w.input.size() && (static_cast<uint8_t>(w.input[e]) & 0xC0) == 0x80) ++e;
  return {b, e};
}

bool is_space_token_char(char32_t c) { return c == 0x120 || is_white_space(c); }

}  // namespace

Result<std::unique_ptr<Regex>> gpt2_byte_level_regex() {
  auto r = Regex::compile(
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  if (!r) return r.error();
  return std::make_unique<Regex>(std::move(*r));
}

Status TokenizerImpl::finish_loading() {
  model.finalize();
  int32_t max_id = static_cast<int32_t>(model.id_to_token.size()) - 1;
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    if (added_by_content.count(a.content)) continue;
    added_by_id.emplace(a.id, i);
    added_by_content.emplace(a.content, a.id);
    max_id = std::max(max_id, a.id);
    if (a.normalized && nfc) {
      std::string norm;
      std::vector<uint32_t> sb, se;
      normalized_matcher.add(nfc_normalize(a.content, norm, sb, se) ? norm : a.content,
                             static_cast<int32_t>(i));
    } else {
      (a.normalized ? normalized_matcher : raw_matcher).add(a.content, static_cast<int32_t>(i));
    }
  }
  vocab_size = max_id + 1;
  byte_level_decoder_only =
      has_decoder && decoders.size() == 1 && decoders[0].kind == DecoderStep::Kind::kByteLevel;
  return ok();
}

const std::string* TokenizerImpl::token_string(int32_t id) const {
  if (auto it = added_by_id.find(id); it != added_by_id.end()) return &added[it->second].content;
  if (id >= 0 && static_cast<size_t>(id) < model.id_to_token.size() &&
      !model.id_to_token[id].empty()) {
    return &model.id_to_token[id];
  }
  return nullptr;
}

Tokenizer::Tokenizer(std::unique_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Encoding> Tokenizer::encode_with_offsets(std::string_view text,
                                                bool add_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  if (auto bad = find_invalid_utf8(text)) {
    return make_error(ErrorCode::kInvalidArgument, "tokenizer: input is not valid UTF-8 at byte {}",
                      *bad);
  }
  if (text.size() >= (1u << 31)) {
    return make_error(ErrorCode::kInvalidArgument, "tokenizer: input of {} bytes is too long",
                      text.size());
  }
  Work w;
  w.input = text;
  w.text = text;
  w.spans.push_back({0, static_cast<uint32_t>(text.size()), -1, false});
  split_added(t, t.raw_matcher, w);

  if (t.nfc) {
    // Normalize each text span; the working text becomes the concatenation, aligned byte by byte.
    std::string norm;
    std::vector<uint32_t> nb, ne;
    bool changed = false;
    std::vector<Span> spans;
    for (const Span& sp : w.spans) {
      const size_t base = w.owned.size();
      norm.clear(), nb.clear(), ne.clear();
      if (sp.added_id < 0 && nfc_normalize(text.substr(sp.b, sp.e - sp.b), norm, nb, ne)) {
        changed = true;
        w.owned += norm;
        for (size_t k = 0; k < norm.size(); ++k) {
          w.src_b.push_back(sp.b + nb[k]);
          w.src_e.push_back(sp.b + ne[k]);
        }
      } else {
        w.owned.append(text.substr(sp.b, sp.e - sp.b));
        for (uint32_t p = sp.b; p < sp.e; ++p) {
          w.text = text;
          const auto [b, e] = source_range(w, p);
          w.src_b.push_back(b);
          w.src_e.push_back(e);
        }
      }
      spans.push_back(
          {static_cast<uint32_t>(base), static_cast<uint32_t>(w.owned.size()), sp.added_id, false});
    }
    if (changed) {
      w.text = w.owned;
      w.aligned = true;
      w.spans = std::move(spans);
    } else {
      w.owned.clear(), w.src_b.clear(), w.src_e.clear();
      w.text = text;
    }
  }
  split_added(t, t.normalized_matcher, w);
  for (const PreTokenizerStep& step : t.pre_tokenizers) FLINT_TRY(run_pre_tokenizer(step, w));

  Encoding enc;
  enc.ids.reserve(text.size() / 3 + 8);
  enc.offsets.reserve(text.size() / 3 + 8);
  std::vector<BpeModel::Piece> pieces;
  std::string word;
  for (const Span& sp : w.spans) {
    if (sp.added_id >= 0) {
      enc.ids.push_back(sp.added_id);
      const auto first = w.aligned ? source_range(w, sp.b).first : sp.b;
      const auto last = w.aligned ? source_range(w, sp.e - 1).second : sp.e;
      enc.offsets.emplace_back(first, last);
      continue;
    }
    std::string_view s = w.text.substr(sp.b, sp.e - sp.b);
    if (sp.prefix_space) {
      word.assign(1, ' ');
      word.append(s);
      s = word;
    }
    pieces.clear();
    t.model.tokenize(s, pieces);
    // Byte positions inside the span; the virtual space sits at -1.
    int64_t pos = sp.prefix_space ? -1 : 0;
    for (const BpeModel::Piece& p : pieces) {
      enc.ids.push_back(p.id);
      const int64_t first = std::max<int64_t>(pos, 0);
      const int64_t last = pos + static_cast<int64_t>(p.len) - 1;
      uint32_t ob, oe;
      if (p.len == 0 || last < 0) {
        // Only the virtual space (or a zero-width fallback piece). Hugging Face aligns the space to
        // the first byte of the character it was put before.
        ob = source_range(w, sp.b + static_cast<uint32_t>(first)).first;
        oe = p.len == 0 ? ob : ob + 1;
      } else {
        ob = source_range(w, sp.b + static_cast<uint32_t>(first)).first;
        oe = source_range(w, sp.b + static_cast<uint32_t>(last)).second;
      }
      enc.offsets.emplace_back(ob, oe);
      pos += p.len;
    }
  }

  for (const PostProcessorStep& pp : t.post_processors) {
    if (pp.kind == PostProcessorStep::Kind::kByteLevel) {
      if (!pp.trim_offsets) continue;
      for (size_t i = 0; i < enc.ids.size(); ++i) {
        const std::string* tok = t.token_string(enc.ids[i]);
        if (tok == nullptr) continue;
        size_t lead = 0, trail = 0;
        for (size_t k = 0; k < tok->size();) {
          if (!is_space_token_char(next_code_point(*tok, k))) break;
          ++lead;
        }
        std::vector<char32_t> cps;
        for (size_t k = 0; k < tok->size();) cps.push_back(next_code_point(*tok, k));
        for (size_t k = cps.size(); k-- > 0 && is_space_token_char(cps[k]);) ++trail;
        auto& [ob, oe] = enc.offsets[i];
        if (lead > 0) {
          const bool is_first = i == 0 || ob == 0;
          if (!(is_first && pp.add_prefix_space && lead == 1)) {
            ob = std::min<uint32_t>(ob + static_cast<uint32_t>(lead), oe);
          }
        }
        if (trail > 0 && oe >= trail)
          oe = std::max<uint32_t>(oe - static_cast<uint32_t>(trail), ob);
      }
    } else if (add_special_tokens) {
      Encoding out;
      for (const auto& piece : pp.pieces) {
        if (piece.empty()) {
          out.ids.insert(out.ids.end(), enc.ids.begin(), enc.ids.end());
          out.offsets.insert(out.offsets.end(), enc.offsets.begin(), enc.offsets.end());
        } else {
          for (int32_t id : piece) {
            out.ids.push_back(id);
            out.offsets.emplace_back(0, 0);
          }
        }
      }
      enc = std::move(out);
    }
  }
  return enc;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
  auto enc = encode_with_offsets(text, add_special_tokens);
  if (!enc) return enc.error();
  return std::move(enc->ids);
}

namespace {

// Parses "<0xAB>" into its byte.
std::optional<uint8_t> byte_fallback_value(const std::string& tok) {
  if (tok.size() != 6 || tok.compare(0, 3, "<0x") != 0 || tok[5] != '>') return std::nullopt;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = tok[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + d;
  }
  return static_cast<uint8_t>(v);
}

// The bytes of one token under the ByteLevel decoder: its alphabet characters mapped back to bytes,
// or its own UTF-8 when some character is outside the alphabet.
void append_byte_level(const std::string& tok, std::string& out) {
  const ByteLevelAlphabet& alpha = byte_level_alphabet();
  const size_t start = out.size();
  for (size_t k = 0; k < tok.size();) {
    const char32_t cp = next_code_point(tok, k);
    const int b = cp < alpha.cp_to_byte.size() ? alpha.cp_to_byte[cp] : -1;
    if (b < 0) {
      out.resize(start);
      out += tok;
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

void run_decoder(const DecoderStep& d, std::vector<std::string>& toks) {
  switch (d.kind) {
    case DecoderStep::Kind::kByteLevel: {
      std::string bytes;
      for (const std::string& t : toks) append_byte_level(t, bytes);
      std::string text;
      append_utf8_lossy(bytes, text);
      toks.assign(1, std::move(text));
      break;
    }
    case DecoderStep::Kind::kByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      auto flush = [&] {
        if (pending.empty()) return;
        if (find_invalid_utf8(pending)) {
          std::string r;
          for (size_t k = 0; k < pending.size(); ++k) r += "\xEF\xBF\xBD";
          out.push_back(std::move(r));
        } else {
          out.push_back(pending);
        }
        pending.clear();
      };
      for (std::string& t : toks) {
        if (auto b = byte_fallback_value(t)) {
          pending.push_back(static_cast<char>(*b));
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      toks = std::move(out);
      break;
    }
    case DecoderStep::Kind::kFuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
      break;
    }
    case DecoderStep::Kind::kStrip:
      for (std::string& t : toks) {
        size_t b = 0, e = t.size();
        for (size_t n = 0; n < d.start && t.compare(b, d.content.size(), d.content) == 0; ++n) {
          b += d.content.size();
        }
        for (size_t n = 0; n < d.stop && e >= b + d.content.size() &&
                           t.compare(e - d.content.size(), d.content.size(), d.content) == 0;
             ++n) {
          e -= d.content.size();
        }
        t = t.substr(b, e - b);
      }
      break;
    case DecoderStep::Kind::kReplace:
      if (d.pattern.empty()) break;
      for (std::string& t : toks) {
        std::string r;
        size_t k = 0;
        for (size_t f; (f = t.find(d.pattern, k)) != std::string::npos; k = f + d.pattern.size()) {
          r.append(t, k, f - k);
          r += d.content;
        }
        r.append(t, k);
        t = std::move(r);
      }
      break;
  }
}

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  if (t.byte_level_decoder_only) {
    std::string bytes;
    for (int32_t id : ids) {
      const std::string* tok = t.token_string(id);
      if (tok == nullptr || (skip_special_tokens && is_special(id))) continue;
      append_byte_level(*tok, bytes);
    }
    std::string text;
    append_utf8_lossy(bytes, text);
    return text;
  }
  std::vector<std::string> toks;
  for (int32_t id : ids) {
    const std::string* tok = t.token_string(id);
    if (tok == nullptr || (skip_special_tokens && is_special(id))) continue;
    toks.push_back(*tok);
  }
  if (!t.has_decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  for (const DecoderStep& d : t.decoders) run_decoder(d, toks);
  std::string out;
  for (const std::string& s : toks) out += s;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const TokenizerImpl& t = *impl_;
  if (auto it = t.added_by_content.find(token); it != t.added_by_content.end()) return it->second;
  if (auto it = t.model.vocab.find(token); it != t.model.vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->token_string(id);
  return s == nullptr ? std::string() : *s;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }

std::string Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  const std::string* tok = impl_->token_string(id);
  if (tok == nullptr || (skip_special_tokens && is_special(id))) return {};
  if (impl_->byte_level_decoder_only) {
    std::string out;
    append_byte_level(*tok, out);
    return out;
  }
  const int32_t one[1] = {id};
  return decode(one, skip_special_tokens);
}

// ---- streaming ----

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::add(int32_t id) {
  const TokenizerImpl& t = *tokenizer_->impl_;
  std::string out;
  if (t.byte_level_decoder_only) {
    pending_ += tokenizer_->token_bytes(id, skip_special_tokens_);
    const size_t stable = utf8_stable_prefix_length(pending_);
    append_utf8_lossy(std::string_view(pending_).substr(0, stable), out);
    pending_.erase(0, stable);
    return out;
  }
  // Other decoders: re-decode the ids since the last clean boundary. A boundary is clean when the
  // text does not end in U+FFFD and the last token is not a byte-fallback byte (a later byte could
  // still change how the run of bytes decodes).
  ids_.push_back(id);
  const std::string text = tokenizer_->decode(ids_, skip_special_tokens_);
  const std::string tok = tokenizer_->id_to_token(id);
  const bool byte_token = tok.size() == 6 && tok.compare(0, 3, "<0x") == 0;
  const bool dangling = text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
  if (dangling || byte_token) return out;
  return take(text);
}

// Returns decoded text of a finished segment; without a decoder, segments are joined by " ".
std::string StreamingDetokenizer::take(const std::string& text) {
  ids_.clear();
  if (text.empty()) return text;
  std::string out = !tokenizer_->impl_->has_decoder && emitted_any_ ? " " + text : text;
  emitted_any_ = true;
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  if (tokenizer_->impl_->byte_level_decoder_only) {
    append_utf8_lossy(pending_, out);
    pending_.clear();
    return out;
  }
  return take(tokenizer_->decode(ids_, skip_special_tokens_));
}

}  // namespace flint::tokenizer
