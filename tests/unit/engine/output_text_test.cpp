// OutputText: incremental detokenization with a piece-table decoder, stop strings across token
// boundaries, hold-back, and UTF-8 safety.
#include "engine/output_text.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"

namespace flint::engine {
namespace {

// Byte-level decoder: each id stands for fixed bytes; ids >= 100 are special ("<sN>").
class PieceDecoder : public TokenDecoder {
 public:
  explicit PieceDecoder(std::map<int32_t, std::string> pieces) : pieces_(std::move(pieces)) {}
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id >= 100) {
        if (!skip_special) s += "<s" + std::to_string(id) + ">";
        continue;
      }
      s += pieces_.at(id);
    }
    return s;
  }

 private:
  std::map<int32_t, std::string> pieces_;
};

const PieceDecoder kDecoder({{0, "he"},
                             {1, "llo"},
                             {2, " wo"},
                             {3, "rld"},
                             {4, "\xC3"},
                             {5, "\xA9"},
                             {6, "!"},
                             {7, "\xE2\x82"},
                             {8, "\xAC"}});

std::string feed(OutputText& t, std::vector<int32_t> ids, std::vector<std::string>* deltas) {
  for (int32_t id : ids) {
    if (t.append(id, true)) break;
    deltas->push_back(t.take_delta(false));
  }
  deltas->push_back(t.take_delta(true));
  std::string all;
  for (auto& d : *deltas) all += d;
  return all;
}

TEST(OutputText, StopStringAcrossTokensIsCutAndHeldBack) {
  OutputText t(&kDecoder, true, {"lo w"}, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 1, 2, 3}, &deltas), "hel");
  EXPECT_EQ(t.matched_stop(), std::optional<std::string>("lo w"));
  // "lo w" is 4 bytes, so 3 are held back: nothing after "he", "he" after "hello".
  EXPECT_EQ(deltas, (std::vector<std::string>{"", "he", "l"}));
}

TEST(OutputText, IncludeStopStrKeepsTheStopString) {
  OutputText t(&kDecoder, true, {"lo w"}, true);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 1, 2, 3}, &deltas), "hello w");
  EXPECT_EQ(deltas, (std::vector<std::string>{"he", "llo", " w"}));
}

TEST(OutputText, EarliestOfSeveralStopStringsWins) {
  OutputText t(&kDecoder, true, {"world", "o w"}, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 1, 2, 3}, &deltas), "hell");
  EXPECT_EQ(t.matched_stop(), std::optional<std::string>("o w"));
}

TEST(OutputText, NoStopStreamsEverything) {
  OutputText t(&kDecoder, true, {}, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 1, 2, 3, 6}, &deltas), "hello world!");
  EXPECT_EQ(deltas, (std::vector<std::string>{"he", "llo", " wo", "rld", "!", ""}));
  EXPECT_FALSE(t.matched_stop());
}

TEST(OutputText, SplitUtf8CharacterIsEmittedWhole) {
  OutputText t(&kDecoder, true, {}, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 4, 5, 7, 8}, &deltas), "he\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(deltas, (std::vector<std::string>{"he", "", "\xC3\xA9", "", "\xE2\x82\xAC", ""}));
}

TEST(OutputText, HoldBackNeverSplitsUtf8) {
  OutputText t(&kDecoder, true, {"zz"}, false);  // holds back 1 byte
  ASSERT_FALSE(t.append(4, true));
  ASSERT_FALSE(t.append(5, true));  // "é" (2 bytes): holding 1 byte back must hold both
  EXPECT_EQ(t.take_delta(false), "");
  ASSERT_FALSE(t.append(6, true));
  EXPECT_EQ(t.take_delta(false), "\xC3\xA9");
  EXPECT_EQ(t.take_delta(true), "!");
}

TEST(OutputText, SpecialTokensSkippedOrShown) {
  OutputText skip(&kDecoder, true, {}, false);
  std::vector<std::string> d1;
  EXPECT_EQ(feed(skip, {0, 101, 1}, &d1), "hello");
  OutputText show(&kDecoder, false, {}, false);
  std::vector<std::string> d2;
  EXPECT_EQ(feed(show, {0, 101, 1}, &d2), "he<s101>llo");
}

TEST(OutputText, StopInsideASingleToken) {
  OutputText t(&kDecoder, true, {"ll"}, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(feed(t, {0, 1, 2}, &deltas), "he");
}

TEST(Utf8, IncompleteSuffix) {
  EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xC3"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xC3\xA9"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix(""), 0u);
}

}  // namespace
}  // namespace flint::engine
