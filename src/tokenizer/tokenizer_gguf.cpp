// Loads a byte-level BPE tokenizer from GGUF `tokenizer.ggml.*` metadata (model "gpt2"). The
// `tokenizer.ggml.pre` name selects the pre-tokenizer regex that the model's tokenizer.json uses.
// Test partner: tests/python/tokenizer/test_tokenizer_parity.py (GGUF written with the gguf
// package).
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace flint::tokenizer {
namespace {

Error bad(const std::string& msg) {
  return Error{ErrorCode::kInvalidFile, "gguf tokenizer: " + msg};
}

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The Split regexes (in order) for a pre-tokenizer name, plus whether the tokenizer.json of that
// family normalizes with NFC. "gpt-2" has no Split: ByteLevel's own regex does the work.
struct PreSpec {
  std::vector<std::string> regexes;
  bool nfc = false;
};

std::optional<PreSpec> pre_spec(const std::string& name) {
  if (name == "gpt-2") return PreSpec{{}, false};
  if (name == "llama3" || name == "llama-bpe" || name == "glm4" || name == "chatglm-bpe") {
    return PreSpec{{kLlama3Regex}, false};
  }
  if (name == "qwen2") return PreSpec{{kQwen2Regex}, true};
  if (name == "deepseek-v3") {
    return PreSpec{
        {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
         "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?["
         "\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
        false};
  }
  return std::nullopt;
}

Result<std::vector<std::string>> string_array(const formats::GgufFile& g, const char* key) {
  const formats::GgufValue* v = g.find(key);
  if (v == nullptr) return bad(fmt::format("missing '{}'", key));
  const formats::GgufArray* a = v->as_array();
  if (a == nullptr) return bad(fmt::format("'{}' must be an array", key));
  std::vector<std::string> out;
  out.reserve(a->size());
  for (const formats::GgufValue& e : *a) {
    auto s = e.as_string();
    if (!s) return bad(fmt::format("'{}' must be an array of strings", key));
    out.push_back(std::move(*s));
  }
  return out;
}

Result<std::optional<int32_t>> optional_id(const formats::GgufFile& g, const char* key,
                                           size_t num_tokens) {
  const formats::GgufValue* v = g.find(key);
  if (v == nullptr) return std::optional<int32_t>();
  auto id = v->as_uint();
  if (!id || *id >= num_tokens) {
    return bad(fmt::format("'{}' must be a token id below {}", key, num_tokens));
  }
  return std::optional<int32_t>(static_cast<int32_t>(*id));
}

Result<bool> optional_bool(const formats::GgufFile& g, const char* key) {
  const formats::GgufValue* v = g.find(key);
  if (v == nullptr) return false;
  auto b = v->as_bool();
  if (!b) return bad(fmt::format("'{}' must be a bool", key));
  return *b;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const formats::GgufFile& g) {
  const formats::GgufValue* model = g.find("tokenizer.ggml.model");
  if (model == nullptr) return bad("missing 'tokenizer.ggml.model'");
  auto model_name = model->as_string();
  if (!model_name) return bad("'tokenizer.ggml.model' must be a string");
  if (*model_name != "gpt2") {
    return Error{ErrorCode::kUnsupported,
                 fmt::format("gguf tokenizer: unsupported model '{}' (only 'gpt2')", *model_name)};
  }
  std::string pre_name = "gpt-2";
  if (const formats::GgufValue* pre = g.find("tokenizer.ggml.pre")) {
    auto s = pre->as_string();
    if (!s) return bad("'tokenizer.ggml.pre' must be a string");
    pre_name = *s;
  }
  const std::optional<PreSpec> spec = pre_spec(pre_name);
  if (!spec) {
    return Error{ErrorCode::kUnsupported,
                 fmt::format("gguf tokenizer: unsupported pre-tokenizer '{}'", pre_name)};
  }

  auto impl = std::make_unique<TokenizerImpl>();
  FLINT_ASSIGN_OR_RETURN(std::vector<std::string> tokens, string_array(g, "tokenizer.ggml.tokens"));
  if (tokens.empty() || tokens.size() >= (1u << 30)) return bad("bad token count");
  BpeModel& m = impl->model;
  m.byte_level = true;
  m.id_to_token = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) m.vocab.emplace(tokens[i], static_cast<int32_t>(i));

  std::vector<int64_t> types(tokens.size(), 1);
  if (const formats::GgufValue* tt = g.find("tokenizer.ggml.token_type")) {
    const formats::GgufArray* a = tt->as_array();
    if (a == nullptr || a->size() != tokens.size()) {
      return bad(fmt::format("'tokenizer.ggml.token_type' must have {} entries", tokens.size()));
    }
    for (size_t i = 0; i < a->size(); ++i) {
      auto v = (*a)[i].as_int();
      if (!v) return bad("'tokenizer.ggml.token_type' must hold integers");
      types[i] = *v;
    }
  }
  // Control (3) and user-defined (4) tokens are matched in the text before BPE, as added tokens.
  for (size_t i = 0; i < tokens.size(); ++i) {
    if ((types[i] == 3 || types[i] == 4) && !tokens[i].empty()) {
      impl->added.push_back(AddedToken{tokens[i], static_cast<int32_t>(i), types[i] == 3, false,
                                       false, false, false});
    }
  }

  FLINT_ASSIGN_OR_RETURN(std::vector<std::string> merge_lines,
                         string_array(g, "tokenizer.ggml.merges"));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merge_lines.size());
  for (const std::string& line : merge_lines) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
      return bad(fmt::format("merge '{}' must be two tokens separated by one space", line));
    }
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  if (Status st = m.set_merges(merges); !st) return st.error().with_context("gguf tokenizer");

  impl->nfc = spec->nfc;
  for (const std::string& re : spec->regexes) {
    auto r = Regex::compile(re);
    if (!r) return r.error();
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kSplit;
    step.regex = std::make_unique<Regex>(std::move(*r));
    impl->pre_tokenizers.push_back(std::move(step));
  }
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::Kind::kByteLevel;
  if (spec->regexes.empty()) {
    FLINT_ASSIGN_OR_RETURN(byte_level.regex, gpt2_byte_level_regex());
  }
  impl->pre_tokenizers.push_back(std::move(byte_level));

  FLINT_ASSIGN_OR_RETURN(impl->bos_id,
                         optional_id(g, "tokenizer.ggml.bos_token_id", tokens.size()));
  FLINT_ASSIGN_OR_RETURN(impl->eos_id,
                         optional_id(g, "tokenizer.ggml.eos_token_id", tokens.size()));
  FLINT_ASSIGN_OR_RETURN(bool add_bos, optional_bool(g, "tokenizer.ggml.add_bos_token"));
  FLINT_ASSIGN_OR_RETURN(bool add_eos, optional_bool(g, "tokenizer.ggml.add_eos_token"));
  if ((add_bos && impl->bos_id) || (add_eos && impl->eos_id)) {
    PostProcessorStep tp;
    tp.kind = PostProcessorStep::Kind::kTemplate;
    if (add_bos && impl->bos_id) tp.pieces.push_back({*impl->bos_id});
    tp.pieces.emplace_back();
    if (add_eos && impl->eos_id) tp.pieces.push_back({*impl->eos_id});
    impl->post_processors.push_back(std::move(tp));
  }
  impl->has_decoder = true;
  impl->decoders.push_back(DecoderStep{});  // ByteLevel
  FLINT_TRY(impl->finish_loading());
  return Tokenizer(std::move(impl));
}

}  // namespace flint::tokenizer
