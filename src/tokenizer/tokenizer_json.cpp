// Loads a Hugging Face tokenizer.json into TokenizerImpl. Every component we do not implement is an
// error naming it. Test partners: tests/unit/tokenizer/tokenizer_test.cpp, tokenizer_fuzz.cpp.
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace flint::tokenizer {
namespace {

using nlohmann::json;

Error bad(const std::string& msg) {
  return Error{ErrorCode::kInvalidFile, "tokenizer.json: " + msg};
}
Error unsupported(const std::string& what, const std::string& type) {
  return Error{ErrorCode::kUnsupported, "tokenizer.json: unsupported " + what + " '" + type + "'"};
}

// Typed field access that never throws: missing or null gives `def`, a wrong type is an error.
template <typename T>
Result<T> get_or(const json& j, const char* key, T def, const char* where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return bad(fmt::format("{}.{} must be a boolean", where, key));
    return it->template get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return bad(fmt::format("{}.{} must be a string", where, key));
    return it->template get<std::string>();
  } else {
    if (!it->is_number_integer()) return bad(fmt::format("{}.{} must be an integer", where, key));
    return static_cast<T>(it->template get<int64_t>());
  }
}

std::string type_of(const json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != '_' && c != ' ') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Status load_model(const json& j, TokenizerImpl& t) {
  if (!j.is_object()) return bad("model must be an object");
  const std::string type = type_of(j);
  if (!type.empty() && type != "BPE") return unsupported("model", type);
  auto vocab = j.find("vocab");
  auto merges = j.find("merges");
  if (vocab == j.end() || !vocab->is_object()) return bad("model.vocab must be an object");
  if (merges != j.end() && !merges->is_null() && !merges->is_array()) {
    return bad("model.merges must be an array");
  }
  if (auto d = j.find("dropout"); d != j.end() && !d->is_null()) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      return Error{ErrorCode::kUnsupported, "tokenizer.json: BPE dropout is not supported"};
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    FLINT_ASSIGN_OR_RETURN(std::string v, get_or<std::string>(j, key, "", "model"));
    if (!v.empty()) return unsupported("BPE option", key);
  }
  BpeModel& m = t.model;
  FLINT_ASSIGN_OR_RETURN(m.ignore_merges, get_or<bool>(j, "ignore_merges", false, "model"));
  FLINT_ASSIGN_OR_RETURN(m.byte_fallback, get_or<bool>(j, "byte_fallback", false, "model"));
  FLINT_ASSIGN_OR_RETURN(m.fuse_unk, get_or<bool>(j, "fuse_unk", false, "model"));
  int32_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer())
      return bad(fmt::format("vocab['{}'] must be an integer", it.key()));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 30))
      return bad(fmt::format("vocab['{}'] = {} is out of range", it.key(), id));
    m.vocab[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  m.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : m.vocab) m.id_to_token[id] = tok;
  FLINT_ASSIGN_OR_RETURN(std::string unk, get_or<std::string>(j, "unk_token", "", "model"));
  if (!unk.empty()) {
    auto it = m.vocab.find(unk);
    if (it == m.vocab.end()) return bad(fmt::format("unk_token '{}' is not in the vocab", unk));
    m.unk_id = it->second;
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  if (merges != j.end() && merges->is_array()) {
    pairs.reserve(merges->size());
    for (const json& mj : *merges) {
      if (mj.is_string()) {
        const std::string s = mj.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return bad(fmt::format("merge '{}' must be two tokens separated by one space", s));
        }
        pairs.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
        pairs.emplace_back(mj[0].get<std::string>(), mj[1].get<std::string>());
      } else {
        return bad("each merge must be \"a b\" or [\"a\", \"b\"]");
      }
    }
  }
  return m.set_merges(pairs);
}

Status load_normalizer(const json& j, TokenizerImpl& t) {
  if (j.is_null()) return ok();
  if (!j.is_object()) return bad("normalizer must be an object");
  const std::string type = type_of(j);
  if (type == "NFC") {
    t.nfc = true;
    return ok();
  }
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return bad("Sequence normalizer needs 'normalizers'");
    if (it->size() > 1) {
      // NFC twice is NFC; any other combination would have to be run in order.
      for (const json& n : *it) {
        if (type_of(n) != "NFC") return unsupported("normalizer", type_of(n));
      }
    }
    for (const json& n : *it) FLINT_TRY(load_normalizer(n, t));
    return ok();
  }
  return unsupported("normalizer", type);
}

Result<SplitBehavior> parse_behavior(const json& j) {
  FLINT_ASSIGN_OR_RETURN(std::string b, get_or<std::string>(j, "behavior", "", "Split"));
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported("Split behavior", b);
}

Status load_pre_tokenizer(const json& j, TokenizerImpl& t) {
  if (j.is_null()) return ok();
  if (!j.is_object()) return bad("pre_tokenizer must be an object");
  const std::string type = type_of(j);
  if (!t.pre_tokenizers.empty() &&
      t.pre_tokenizers.back().kind == PreTokenizerStep::Kind::kByteLevel) {
    return unsupported("pre-tokenizer after ByteLevel", type);
  }
  PreTokenizerStep step;
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array())
      return bad("Sequence pre_tokenizer needs 'pretokenizers'");
    for (const json& p : *it) FLINT_TRY(load_pre_tokenizer(p, t));
    return ok();
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    auto p = j.find("pattern");
    if (p == j.end() || !p->is_object()) return bad("Split needs a 'pattern' object");
    std::string regex;
    if (auto r = p->find("Regex"); r != p->end() && r->is_string()) {
      regex = r->get<std::string>();
    } else if (auto s = p->find("String"); s != p->end() && s->is_string()) {
      regex = escape_regex(s->get<std::string>());
    } else {
      return bad("Split pattern must have 'Regex' or 'String'");
    }
    if (find_invalid_utf8(regex)) return bad("Split pattern is not valid UTF-8");
    auto compiled = Regex::compile(regex);
    if (!compiled) return compiled.error().with_context("tokenizer.json: Split");
    step.regex = std::make_unique<Regex>(std::move(*compiled));
    FLINT_ASSIGN_OR_RETURN(step.behavior, parse_behavior(j));
    FLINT_ASSIGN_OR_RETURN(step.invert, get_or<bool>(j, "invert", false, "Split"));
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    FLINT_ASSIGN_OR_RETURN(step.add_prefix_space,
                           get_or<bool>(j, "add_prefix_space", true, "ByteLevel"));
    FLINT_ASSIGN_OR_RETURN(bool use_regex, get_or<bool>(j, "use_regex", true, "ByteLevel"));
    if (use_regex) {
      FLINT_ASSIGN_OR_RETURN(step.regex, gpt2_byte_level_regex());
    }
    t.model.byte_level = true;
  } else if (type == "Digits") {
    // Digits splits on Rust's char::is_numeric (categories Nd, Nl, No), one character per match;
    // runs are merged back unless individual_digits.
    step.kind = PreTokenizerStep::Kind::kSplit;
    FLINT_ASSIGN_OR_RETURN(bool individual, get_or<bool>(j, "individual_digits", false, "Digits"));
    auto compiled = Regex::compile("\\p{N}");
    if (!compiled) return compiled.error();
    step.regex = std::make_unique<Regex>(std::move(*compiled));
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else {
    return unsupported("pre-tokenizer", type);
  }
  t.pre_tokenizers.push_back(std::move(step));
  return ok();
}

Status load_post_processor(const json& j, TokenizerImpl& t) {
  if (j.is_null()) return ok();
  if (!j.is_object()) return bad("post_processor must be an object");
  const std::string type = type_of(j);
  PostProcessorStep step;
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return bad("Sequence post_processor needs 'processors'");
    for (const json& p : *it) FLINT_TRY(load_post_processor(p, t));
    return ok();
  } else if (type == "ByteLevel") {
    step.kind = PostProcessorStep::Kind::kByteLevel;
    FLINT_ASSIGN_OR_RETURN(step.trim_offsets, get_or<bool>(j, "trim_offsets", true, "ByteLevel"));
    FLINT_ASSIGN_OR_RETURN(step.add_prefix_space,
                           get_or<bool>(j, "add_prefix_space", true, "ByteLevel"));
  } else if (type == "TemplateProcessing") {
    step.kind = PostProcessorStep::Kind::kTemplate;
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array()) return bad("TemplateProcessing needs 'single'");
    bool seen_a = false;
    for (const json& piece : *single) {
      if (auto s = piece.find("Sequence"); s != piece.end()) {
        const std::string id = s->is_object() ? s->value("id", "") : "";
        if (id != "A") return unsupported("TemplateProcessing single sequence", id);
        step.pieces.emplace_back();
        seen_a = true;
      } else if (auto sp = piece.find("SpecialToken"); sp != piece.end() && sp->is_object()) {
        const std::string name = sp->value("id", "");
        if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
          return bad(fmt::format("TemplateProcessing special token '{}' is not defined", name));
        }
        const json& def = (*specials)[name];
        auto ids = def.find("ids");
        if (ids == def.end() || !ids->is_array() || ids->empty()) {
          return bad(fmt::format("TemplateProcessing special token '{}' has no ids", name));
        }
        std::vector<int32_t> v;
        for (const json& id : *ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30)) {
            return bad(fmt::format("TemplateProcessing special token '{}' has a bad id", name));
          }
          v.push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
        // The first special token before $A is the bos, the first after it the eos.
        std::optional<int32_t>& slot = seen_a ? t.eos_id : t.bos_id;
        if (v.size() == 1 && !slot) slot = v[0];
        step.pieces.push_back(std::move(v));
      } else {
        return bad("TemplateProcessing pieces must be Sequence or SpecialToken");
      }
    }
    if (!seen_a) return bad("TemplateProcessing single template has no $A");
  } else {
    return unsupported("post-processor", type);
  }
  t.post_processors.push_back(std::move(step));
  return ok();
}

Status load_decoder(const json& j, TokenizerImpl& t) {
  if (j.is_null()) return ok();
  if (!j.is_object()) return bad("decoder must be an object");
  t.has_decoder = true;
  const std::string type = type_of(j);
  DecoderStep step;
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return bad("Sequence decoder needs 'decoders'");
    for (const json& d : *it) FLINT_TRY(load_decoder(d, t));
    return ok();
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    FLINT_ASSIGN_OR_RETURN(step.content, get_or<std::string>(j, "content", " ", "Strip"));
    FLINT_ASSIGN_OR_RETURN(int64_t start, get_or<int64_t>(j, "start", 0, "Strip"));
    FLINT_ASSIGN_OR_RETURN(int64_t stop, get_or<int64_t>(j, "stop", 0, "Strip"));
    if (start < 0 || stop < 0) return bad("Strip start/stop must be >= 0");
    if (step.content.empty() || utf8_sequence_length(step.content, 0) != step.content.size()) {
      return bad("Strip content must be one character");
    }
    step.start = static_cast<size_t>(start);
    step.stop = static_cast<size_t>(stop);
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    auto p = j.find("pattern");
    if (p == j.end() || !p->is_object() || !p->contains("String") || !(*p)["String"].is_string()) {
      return unsupported("Replace decoder pattern", p == j.end() ? "null" : p->dump());
    }
    step.pattern = (*p)["String"].get<std::string>();
    FLINT_ASSIGN_OR_RETURN(step.content, get_or<std::string>(j, "content", "", "Replace"));
  } else {
    return unsupported("decoder", type);
  }
  t.decoders.push_back(std::move(step));
  return ok();
}

Status load_added_tokens(const json& j, TokenizerImpl& t) {
  if (j.is_null()) return ok();
  if (!j.is_array()) return bad("added_tokens must be an array");
  for (const json& a : j) {
    if (!a.is_object()) return bad("each added token must be an object");
    AddedToken tok;
    FLINT_ASSIGN_OR_RETURN(int64_t id, get_or<int64_t>(a, "id", -1, "added_tokens"));
    if (id < 0 || id >= (1 << 30)) return bad("added token id out of range");
    tok.id = static_cast<int32_t>(id);
    FLINT_ASSIGN_OR_RETURN(tok.content, get_or<std::string>(a, "content", "", "added_tokens"));
    if (tok.content.empty()) return bad(fmt::format("added token {} has empty content", id));
    FLINT_ASSIGN_OR_RETURN(tok.special, get_or<bool>(a, "special", false, "added_tokens"));
    FLINT_ASSIGN_OR_RETURN(tok.lstrip, get_or<bool>(a, "lstrip", false, "added_tokens"));
    FLINT_ASSIGN_OR_RETURN(tok.rstrip, get_or<bool>(a, "rstrip", false, "added_tokens"));
    FLINT_ASSIGN_OR_RETURN(tok.normalized, get_or<bool>(a, "normalized", false, "added_tokens"));
    FLINT_ASSIGN_OR_RETURN(tok.single_word, get_or<bool>(a, "single_word", false, "added_tokens"));
    t.added.push_back(std::move(tok));
  }
  return ok();
}

Status load_all(const json& j, TokenizerImpl& t) {
  if (!j.is_object()) return bad("top level must be an object");
  for (const char* key : {"truncation", "padding"}) {
    if (auto it = j.find(key); it != j.end() && !it->is_null()) {
      return unsupported("option", key);
    }
  }
  auto model = j.find("model");
  if (model == j.end()) return bad("missing 'model'");
  auto section = [&](const char* key) -> const json& {
    static const json kNull;
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  FLINT_TRY(load_normalizer(section("normalizer"), t));
  FLINT_TRY(load_pre_tokenizer(section("pre_tokenizer"), t));
  FLINT_TRY(load_model(*model, t));
  FLINT_TRY(load_post_processor(section("post_processor"), t));
  FLINT_TRY(load_decoder(section("decoder"), t));
  FLINT_TRY(load_added_tokens(section("added_tokens"), t));
  return t.finish_loading();
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text) {
  auto impl = std::make_unique<TokenizerImpl>();
  Status st = [&]() -> Status {
    try {
      const json j = json::parse(json_text);
      return load_all(j, *impl);
    } catch (const std::exception& e) {
      return bad(std::string("parse error: ") + e.what());
    }
  }();
  if (!st) return st.error();
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, "tokenizer: cannot open '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto t = from_json(ss.str());
  if (!t) return t.error().with_context("{}", path);
  return t;
}

}  // namespace flint::tokenizer
