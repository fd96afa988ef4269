// Unit tests for flint::tokenizer on small hand-built tokenizers whose expected output follows from
// the BPE rules by hand. Parity with Hugging Face on real corpora: tests/python/tokenizer/.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/utf8.h"

namespace flint::tokenizer {
namespace {

using nlohmann::json;

// A byte-level BPE: the 256 alphabet characters get ids 0..255, then merges "h e" -> 256,
// "l l" -> 257, "he ll" -> 258, "Ġ w" -> 259, plus the specials <|user|> (300) and <think> (301).
json tiny_tokenizer_json() {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[a.byte_to_str[b]] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["Ġw"] = 259;
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({{{"id", 300},
                                     {"content", "<|user|>"},
                                     {"special", true},
                                     {"normalized", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"single_word", false}},
                                    {{"id", 301},
                                     {"content", "<think>"},
                                     {"special", false},
                                     {"normalized", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"single_word", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|user|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens",
         {{"<|user|>", {{"id", "<|user|>"}, {"ids", {300}}, {"tokens", {"<|user|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"h e", json::array({"l", "l"}), "he ll", "Ġ w"})}}}};
  return j;
}

Tokenizer tiny() {
  auto t = Tokenizer::from_json(tiny_tokenizer_json().dump());
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().message);
  return std::move(*t);
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> out;
  for (char c : s) out.push_back(static_cast<uint8_t>(c));
  return out;
}

TEST(Tokenizer, MergesFollowRankOrder) {
  Tokenizer t = tiny();
  // "hello": h e l l o -> he l l o -> he ll o -> hell o.
  EXPECT_EQ(*t.encode("hello", false), (std::vector<int32_t>{258, 'o'}));
  // " world" is one pre-token: Ġ w o r l d -> Ġw o r l d.
  EXPECT_EQ(*t.encode("hello world", false),
            (std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd'}));
}

TEST(Tokenizer, AddedTokensAreMatchedBeforeBpe) {
  Tokenizer t = tiny();
  EXPECT_EQ(*t.encode("<|user|>hell<think>", false), (std::vector<int32_t>{300, 258, 301}));
  // A partial special token is plain text.
  EXPECT_EQ(*t.encode("<|user", false), bytes_of("<|user"));
}

TEST(Tokenizer, TemplateAddsBosOnlyWithAddSpecialTokens) {
  Tokenizer t = tiny();
  EXPECT_EQ(*t.encode("he", true), (std::vector<int32_t>{300, 256}));
  EXPECT_EQ(*t.encode("he", false), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.bos_id(), 300);
}

TEST(Tokenizer, OffsetsAreByteRanges) {
  Tokenizer t = tiny();
  auto enc = t.encode_with_offsets("<|user|>hello é", true);
  ASSERT_TRUE(enc.has_value());
  // bos, <|user|>, hell, o, Ġ, é's two bytes (both cover the whole character).
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{0, 0},   {0, 8},   {8, 12}, {12, 13},
                                                           {13, 14}, {14, 16}, {14, 16}};
  EXPECT_EQ(enc->offsets, want);
}

TEST(Tokenizer, DecodeSkipsSpecialTokensOnRequest) {
  Tokenizer t = tiny();
  const std::vector<int32_t> ids = {300, 258, 'o', 301, 259};
  EXPECT_EQ(t.decode(ids, false), "<|user|>hello<think> w");
  EXPECT_EQ(t.decode(ids, true), "hello<think> w");  // <think> is added but not special
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.token_to_id("Ġw"), 259);
  EXPECT_EQ(t.id_to_token(259), "Ġw");
  EXPECT_EQ(t.vocab_size(), 302);
}

TEST(Tokenizer, DecodeReplacesInvalidBytesLikeFromUtf8Lossy) {
  Tokenizer t = tiny();
  // "é" is C3 A9; a lone C3 followed by 'a' is one U+FFFD then 'a'.
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xC3, 0xA9}, false), "é");
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xC3, 'a'}, false),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(t.decode(std::vector<int32_t>{99999, 'a'}, false), "a");  // unknown ids are dropped
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  Tokenizer t = tiny();
  auto r = t.encode("ab\xED\xA0\x80", false);  // an encoded surrogate
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("not valid UTF-8 at byte 2"), std::string::npos);
}

TEST(Tokenizer, UnsupportedComponentIsNamed) {
  json j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  auto r = Tokenizer::from_json(j.dump());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("Metaspace"), std::string::npos) << r.error().message;
}

TEST(Tokenizer, MalformedFilesAreErrors) {
  for (const char* text : {"", "{", "[]", "{\"model\": 3}", "{\"model\": {\"vocab\": []}}"}) {
    SCOPED_TRACE(text);
    EXPECT_FALSE(Tokenizer::from_json(text).has_value());
  }
  json j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("x qq");
  auto r = Tokenizer::from_json(j.dump());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("'x qq'"), std::string::npos) << r.error().message;
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  Tokenizer t = tiny();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "hello world <|user|> é ";
  const auto want = *t.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] { ok[k] = *t.encode(text, true) == want; });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

TEST(StreamingDetokenizer, HoldsBackUnfinishedCharacters) {
  Tokenizer t = tiny();
  StreamingDetokenizer s(t, false);
  // "€" is E2 82 AC: nothing until the last byte arrives.
  EXPECT_EQ(s.add(0xE2), "");
  EXPECT_EQ(s.add(0x82), "");
  EXPECT_EQ(s.add(0xAC), "€");
  EXPECT_EQ(s.add(258), "hell");
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamingDetokenizer, ConcatenationEqualsDecode) {
  Tokenizer t = tiny();
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Mostly high bytes (pieces of multi-byte characters), some merges and specials.
      const uint32_t r = rng() % 10;
      ids.push_back(r < 6   ? static_cast<int32_t>(0x80 + rng() % 128)
                    : r < 8 ? static_cast<int32_t>(rng() % 128)
                            : 256 + rng() % 46);
    }
    for (bool skip : {false, true}) {
      StreamingDetokenizer s(t, skip);
      std::string got;
      for (int32_t id : ids) {
        const std::string piece = s.add(id);
        EXPECT_FALSE(find_invalid_utf8(piece).has_value());
        got += piece;
      }
      got += s.flush();
      EXPECT_EQ(got, t.decode(ids, skip));
    }
  }
}

TEST(Utf8, LossyDecodingReplacesMaximalSubparts) {
  // Unicode 15, section 3.9, table 3-8: each maximal subpart becomes one U+FFFD.
  std::string out;
  append_utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", out);
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD\xEF\xBF\xBD"
            "d");
  EXPECT_EQ(utf8_stable_prefix_length("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_stable_prefix_length("ab\xE2\x41"), 4u);
  EXPECT_FALSE(find_invalid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80").has_value());
  EXPECT_EQ(find_invalid_utf8("ab\xC0\xAF"), 2u);  // overlong
}

TEST(Tokenizer, FromGgufRejectsUnknownPreTokenizer) {
  formats::GgufWriter w;
  w.set("tokenizer.ggml.model", formats::GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", formats::GgufValue::string("no-such-pre"));
  w.set("tokenizer.ggml.tokens", formats::GgufValue::array(formats::GgufValueType::kString,
                                                           {formats::GgufValue::string("a")}));
  const std::string path = testing::TempDir() + "/tok_pre.gguf";
  ASSERT_TRUE(w.write(path).has_value());
  auto g = formats::GgufFile::open(path);
  ASSERT_TRUE(g.has_value());
  auto t = Tokenizer::from_gguf(*g);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("'no-such-pre'"), std::string::npos) << t.error().message;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace flint::tokenizer
