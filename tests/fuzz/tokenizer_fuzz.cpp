// libFuzzer target for the tokenizer: the first byte picks the mode. Even: the rest is a
// tokenizer.json to load (and, if it loads, to encode a fixed text with). Odd: the rest is
// arbitrary bytes to encode, decode and stream with a fixed tokenizer that uses every pipeline
// stage. Seeds: tests/fuzz/corpus/tokenizer_fuzz/.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using flint::tokenizer::StreamingDetokenizer;
using flint::tokenizer::Tokenizer;

namespace {

std::string fixed_tokenizer_json() {
  using nlohmann::json;
  const auto& a = flint::tokenizer::byte_level_alphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[a.byte_to_str[b]] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["ĠĠ"] = 259;
  auto added = [](int id, const char* content, bool special, bool lstrip, bool rstrip,
                  bool normalized, bool single_word) {
    return json{{"id", id},
                {"content", content},
                {"special", special},
                {"lstrip", lstrip},
                {"rstrip", rstrip},
                {"normalized", normalized},
                {"single_word", single_word}};
  };
  json j = {
      {"added_tokens", json::array({added(300, "<|user|>", true, false, false, false, false),
                                    added(301, "<mask>", true, true, true, false, false),
                                    added(302, "word", false, false, false, true, true),
                                    added(303, "caf\xC3\xA9", false, false, false, true, false)})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Digits"}, {"individual_digits", true}},
                      {{"type", "Split"},
                       {"pattern", {{"Regex", "\\s+(?!\\S)|\\p{L}+|[^\\s\\p{L}]+|\\s+"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}})}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         json::array({{{"type", "ByteLevel"}, {"trim_offsets", true}},
                      {{"type", "TemplateProcessing"},
                       {"single", json::array({{{"SpecialToken", {{"id", "<|user|>"}}}},
                                               {{"Sequence", {{"id", "A"}}}}})},
                       {"special_tokens", {{"<|user|>", {{"ids", {300}}}}}}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"Ġ t", "h e", "Ġt he", "Ġ Ġ"})}}}};
  return j.dump();
}

const Tokenizer& fixed_tokenizer() {
  static const Tokenizer t = std::move(*Tokenizer::from_json(fixed_tokenizer_json()));
  return t;
}

void round_trip(const Tokenizer& t, std::string_view text) {
  auto enc = t.encode_with_offsets(text, true);
  if (!enc) {
    FLINT_CHECK(flint::tokenizer::find_invalid_utf8(text).has_value(),
                "encode failed on valid UTF-8: {}", enc.error().message);
    return;
  }
  FLINT_CHECK(enc->ids.size() == enc->offsets.size(), "ids/offsets size mismatch");
  for (const auto& [b, e] : enc->offsets) {
    FLINT_CHECK(b <= e && e <= text.size(), "offset [{}, {}) outside {} bytes", b, e, text.size());
  }
  for (bool skip : {false, true}) {
    const std::string whole = t.decode(enc->ids, skip);
    FLINT_CHECK(!flint::tokenizer::find_invalid_utf8(whole), "decode produced invalid UTF-8");
    StreamingDetokenizer s(t, skip);
    std::string streamed;
    for (int32_t id : enc->ids) streamed += s.add(id);
    streamed += s.flush();
    FLINT_CHECK(streamed == whole, "streamed text differs from decode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    auto t = Tokenizer::from_json(rest);
    if (t) round_trip(*t, "Hello <|user|> w\xC3\xB6rld 123  \n\n\xF0\x9F\x98\x80 e\xCC\x81");
  } else {
    round_trip(fixed_tokenizer(), rest);
  }
  return 0;
}
