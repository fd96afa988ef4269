// NFC normalization (Unicode UAX #15: canonical decomposition, canonical ordering, canonical
// composition) over tables generated from Python's unicodedata (gen_nfc_data.py -> nfc_data.inc).
// Test partner: tests/unit/tokenizer/normalize_test.cpp (against unicodedata.normalize).
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace flint::tokenizer {
namespace {

struct CccEntry {
  char32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  char32_t cp;
  uint32_t offset;
  uint32_t len;
};
struct ComposeEntry {
  char32_t first, second, composite;
};

#include "tokenizer/nfc_data.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t ccc_of(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::lower_bound(std::begin(kCcc), std::end(kCcc), cp,
                             [](const CccEntry& e, char32_t c) { return e.cp < c; });
  return it != std::end(kCcc) && it->cp == cp ? it->ccc : 0;
}

bool unstable(char32_t cp) {
  if (cp < 0x300) return false;
  if (cp >= kLBase && cp < 0x1200) return true;  // conjoining jamo compose into syllables
  return std::binary_search(std::begin(kNfcUnstable), std::end(kNfcUnstable), cp);
}

struct Cp {
  char32_t cp;
  uint32_t b, e;  // source byte range
};

void decompose(char32_t cp, uint32_t b, uint32_t e, std::vector<Cp>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, b, e});
    out.push_back({kVBase + (s % kNCount) / kTCount, b, e});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, b, e});
    return;
  }
  if (cp >= 0xC0) {
    auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                               [](const DecompEntry& d, char32_t c) { return d.cp < c; });
    if (it != std::end(kDecomp) && it->cp == cp) {
      for (uint32_t k = 0; k < it->len; ++k) out.push_back({kDecompPool[it->offset + k], b, e});
      return;
    }
  }
  out.push_back({cp, b, e});
}

std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = std::lower_bound(std::begin(kCompose), std::end(kCompose), std::pair{a, b},
                             [](const ComposeEntry& e, const std::pair<char32_t, char32_t>& k) {
                               return e.first != k.first ? e.first < k.first : e.second < k.second;
                             });
  if (it != std::end(kCompose) && it->first == a && it->second == b) return it->composite;
  return std::nullopt;
}

}  // namespace

bool nfc_normalize(std::string_view text, std::string& out, std::vector<uint32_t>& src_b,
                   std::vector<uint32_t>& src_e) {
  bool maybe = false;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0xCC) {  // below U+0300: never changes under NFC
      i += static_cast<uint8_t>(text[i]) < 0x80 ? 1 : 2;
      continue;
    }
    if (unstable(next_code_point(text, i))) {
      maybe = true;
      break;
    }
  }
  if (!maybe) return false;

  std::vector<Cp> cps;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint32_t>(i);
    const char32_t cp = next_code_point(text, i);
    decompose(cp, b, static_cast<uint32_t>(i), cps);
  }
  // Hugging Face aligns by position: the k-th character after decomposition keeps the source range
  // of the k-th slot, whatever reordering does, and a composite takes the slot of its starter and
  // consumes one more slot per character merged into it.
  std::vector<std::pair<uint32_t, uint32_t>> slots;
  slots.reserve(cps.size());
  for (const Cp& c : cps) slots.emplace_back(c.b, c.e);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i].cp) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j].cp) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](const Cp& x, const Cp& y) { return ccc_of(x.cp) < ccc_of(y.cp); });
    i = j;
  }
  // Canonical composition; `merged[k]` counts the characters folded into res[k].
  std::vector<Cp> res;
  std::vector<uint32_t> merged;
  res.reserve(cps.size());
  std::optional<size_t> starter;
  int last_ccc = -1;
  for (const Cp& c : cps) {
    const int cc = ccc_of(c.cp);
    if (starter) {
      const bool blocked = !(res.size() - 1 == *starter) && (last_ccc == 0 || last_ccc >= cc);
      if (!blocked) {
        if (auto comp = compose_pair(res[*starter].cp, c.cp)) {
          res[*starter].cp = *comp;
          ++merged[*starter];
          continue;
        }
      }
    }
    if (cc == 0) starter = res.size();
    last_ccc = cc;
    res.push_back(c);
    merged.push_back(0);
  }
  size_t slot = 0;
  for (size_t k = 0; k < res.size(); ++k) {
    res[k].b = slots[slot].first;
    res[k].e = slots[slot].second;
    slot += 1 + merged[k];
  }

  std::string normalized;
  std::vector<uint32_t> nb, ne;
  for (const Cp& c : res) {
    const size_t before = normalized.size();
    append_code_point(c.cp, normalized);
    for (size_t k = before; k < normalized.size(); ++k) nb.push_back(c.b), ne.push_back(c.e);
  }
  if (normalized == text) return false;
  out = std::move(normalized);
  src_b = std::move(nb);
  src_e = std::move(ne);
  return true;
}

}  // namespace flint::tokenizer
