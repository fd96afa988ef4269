// FlintConfig parsing from HF config.json / generation_config.json and validation.
// Spec: ../shared/spec/flint-model.md section 1. Test partner: tests/unit/model/config_test.cpp.
#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/gguf.h"

namespace flint::model {
namespace {

using nlohmann::json;

Error field_error(const std::string& where, const std::string& field, const std::string& what) {
  return make_error(ErrorCode::kInvalidFile, "{}: field '{}' {}", where, field, what);
}

const char* json_type(const json& v) { return v.type_name(); }

// Reads an integer field. `present` is false when the key is absent or null.
Result<std::optional<int64_t>> get_int(const json& j, const std::string& key,
                                       const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<int64_t>{};
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return field_error(where, key, "is out of range");
    }
    return std::optional<int64_t>{it->get<int64_t>()};
  }
  if (it->is_number_float()) {
    double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return std::optional<int64_t>{static_cast<int64_t>(d)};
    }
  }
  return field_error(where, key, fmt::format("must be an integer, got {}", json_type(*it)));
}

Result<int64_t> require_int(const json& j, const std::string& key, const std::string& where) {
  FLINT_ASSIGN_OR_RETURN(auto v, get_int(j, key, where));
  if (!v) return make_error(ErrorCode::kInvalidFile, "{}: missing required field '{}'", where, key);
  return *v;
}

Result<std::optional<double>> get_float(const json& j, const std::string& key,
                                        const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<double>{};
  if (!it->is_number()) {
    return field_error(where, key, fmt::format("must be a number, got {}", json_type(*it)));
  }
  double d = it->get<double>();
  if (!std::isfinite(d)) return field_error(where, key, "must be finite");
  return std::optional<double>{d};
}

Result<std::optional<bool>> get_bool(const json& j, const std::string& key,
                                     const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<bool>{};
  if (!it->is_boolean()) {
    return field_error(where, key, fmt::format("must be a boolean, got {}", json_type(*it)));
  }
  return std::optional<bool>{it->get<bool>()};
}

Result<std::optional<std::string>> get_string(const json& j, const std::string& key,
                                              const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>{};
  if (!it->is_string()) {
    return field_error(where, key, fmt::format("must be a string, got {}", json_type(*it)));
  }
  return std::optional<std::string>{it->get<std::string>()};
}

// An int or a list of ints (eos_token_id). Absent or null gives an empty list.
Result<std::vector<int32_t>> get_int_or_list(const json& j, const std::string& key,
                                             const std::string& where) {
  std::vector<int32_t> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  auto one = [&](const json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return field_error(where, key, "must be a non-negative integer or a list of them");
    }
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
    return ok();
  };
  if (it->is_array()) {
    for (const auto& v : *it) FLINT_TRY(one(v));
  } else {
    FLINT_TRY(one(*it));
  }
  return out;
}

Result<std::optional<int32_t>> get_token_id(const json& j, const std::string& key,
                                            const std::string& where) {
  FLINT_ASSIGN_OR_RETURN(auto v, get_int_or_list(j, key, where));
  if (v.empty()) return std::optional<int32_t>{};
  return std::optional<int32_t>{v.front()};
}

// A list of layer indices; each must lie in [0, num_layers).
Result<std::vector<int64_t>> get_index_list(const json& j, const std::string& key,
                                            int64_t num_layers, const std::string& where) {
  std::vector<int64_t> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) return field_error(where, key, "must be a list of layer indices");
  for (const auto& v : *it) {
    if (!v.is_number_integer()) return field_error(where, key, "must be a list of layer indices");
    int64_t i = v.get<int64_t>();
    if (i < 0 || i >= num_layers) {
      return field_error(where, key, fmt::format("holds layer {}, outside [0, {})", i, num_layers));
    }
    out.push_back(i);
  }
  return out;
}

// The first present key among `keys` (accepted spellings of one field).
const char* first_present(const json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end() && !it->is_null()) return k;
  }
  return nullptr;
}

Status check_architecture(const json& j, const std::string& where) {
  auto arch = j.find("architectures");
  auto type = j.find("model_type");
  bool has_arch = arch != j.end() && !arch->is_null();
  bool has_type = type != j.end() && !type->is_null();
  if (!has_arch && !has_type) {
    return make_error(ErrorCode::kInvalidFile, "{}: missing required field 'architectures'", where);
  }
  if (has_arch) {
    if (!arch->is_array() || arch->empty()) {
      return field_error(where, "architectures", "must be a non-empty list of strings");
    }
    for (const auto& a : *arch) {
      if (!a.is_string()) return field_error(where, "architectures", "must be a list of strings");
      if (a.get<std::string>() != "FlintForCausalLM") {
        return make_error(ErrorCode::kUnsupported,
                          "{}: unsupported architecture '{}' in field 'architectures' (expected "
                          "FlintForCausalLM)",
                          where, a.get<std::string>());
      }
    }
  }
  if (has_type) {
    if (!type->is_string()) return field_error(where, "model_type", "must be a string");
    if (type->get<std::string>() != "flint") {
      return make_error(ErrorCode::kUnsupported, "{}: unsupported model_type '{}' (expected flint)",
                        where, type->get<std::string>());
    }
  }
  return ok();
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, "{}: cannot open file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::kIo, "{}: read failed", path);
  return ss.str();
}

Result<json> parse_json_file(const std::string& path) {
  FLINT_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kInvalidFile, "{}: invalid JSON: {}", path, e.what());
  }
}

}  // namespace

Result<FlintConfig> FlintConfig::from_hf_json(const json& j) {
  const std::string where = "config.json";
  if (!j.is_object()) {
    return make_error(ErrorCode::kInvalidFile, "{}: expected a JSON object, got {}", where,
                      json_type(j));
  }
  FLINT_TRY(check_architecture(j, where));
  FlintConfig c;
  FLINT_ASSIGN_OR_RETURN(c.vocab_size, require_int(j, "vocab_size", where));
  FLINT_ASSIGN_OR_RETURN(c.hidden_size, require_int(j, "hidden_size", where));
  FLINT_ASSIGN_OR_RETURN(c.num_hidden_layers, require_int(j, "num_hidden_layers", where));
  FLINT_ASSIGN_OR_RETURN(c.num_heads, require_int(j, "num_attention_heads", where));
  FLINT_ASSIGN_OR_RETURN(auto kv, get_int(j, "num_key_value_heads", where));
  c.num_kv_heads = kv.value_or(c.num_heads);
  FLINT_ASSIGN_OR_RETURN(auto head_dim, get_int(j, "head_dim", where));
  if (head_dim) {
    c.head_dim = *head_dim;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
      return make_error(ErrorCode::kInvalidFile,
                        "{}: missing field 'head_dim' and hidden_size {} is not a multiple of "
                        "num_attention_heads {}",
                        where, c.hidden_size, c.num_heads);
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_hidden_layers <= 0 || c.num_hidden_layers > 4096) {
    return field_error(where, "num_hidden_layers",
                       fmt::format("must be in [1, 4096], got {}", c.num_hidden_layers));
  }
  const int64_t n = c.num_hidden_layers;

  if (auto act = get_string(j, "hidden_act", where); !act) {
    return act.error();
  } else if (*act && **act != "silu") {
    return make_error(ErrorCode::kUnsupported, "{}: field 'hidden_act' is '{}', expected 'silu'",
                      where, **act);
  }
  if (auto bias = get_bool(j, "attention_bias", where); !bias) {
    return bias.error();
  } else if (*bias && **bias) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: field 'attention_bias' is true; Flint has no attention biases", where);
  }
  if (auto sf = get_string(j, "scoring_func", where); !sf) {
    return sf.error();
  } else if (*sf && **sf != "sigmoid") {
    return make_error(ErrorCode::kUnsupported,
                      "{}: field 'scoring_func' is '{}', expected 'sigmoid'", where, **sf);
  }
  if (auto ng = get_int(j, "n_group", where); !ng) {
    return ng.error();
  } else if (*ng && **ng > 1) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: field 'n_group' is {}; grouped routing is not supported", where, **ng);
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    std::string type;
    if (rs->is_object()) {
      for (const char* k : {"rope_type", "type"}) {
        if (rs->contains(k) && (*rs)[k].is_string()) type = (*rs)[k].get<std::string>();
      }
    }
    if (type != "default") {
      return make_error(ErrorCode::kUnsupported, "{}: field 'rope_scaling' ({}) is not supported",
                        where, rs->dump());
    }
  }

  // Layer kinds.
  auto lt = j.find("layer_types");
  if (lt == j.end() || lt->is_null()) {
    return make_error(ErrorCode::kInvalidFile, "{}: missing required field 'layer_types'", where);
  }
  if (!lt->is_array()) return field_error(where, "layer_types", "must be a list of strings");
  for (const auto& t : *lt) {
    std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    if (s == "full_attention") {
      c.layer_types.push_back(LayerType::kFullAttention);
    } else if (s == "sliding_attention") {
      c.layer_types.push_back(LayerType::kSlidingAttention);
    } else {
      return field_error(
          where, "layer_types",
          fmt::format("holds '{}', expected full_attention or sliding_attention", s));
    }
  }
  if (static_cast<int64_t>(c.layer_types.size()) != n) {
    return field_error(
        where, "layer_types",
        fmt::format("has {} entries, expected num_hidden_layers = {}", c.layer_types.size(), n));
  }

  const char* no_rope_key = first_present(j, {"no_rope_layer_indices", "no_rope_layers"});
  c.layer_uses_rope.assign(n, true);
  if (no_rope_key) {
    FLINT_ASSIGN_OR_RETURN(auto idx, get_index_list(j, no_rope_key, n, where));
    for (int64_t i : idx) c.layer_uses_rope[i] = false;
  } else {
    // Flint's full-attention layers are its NoPE layers (spec 2.3).
    for (int64_t i = 0; i < n; ++i) c.layer_uses_rope[i] = c.is_sliding(i);
  }

  c.layer_is_dense.assign(n, false);
  FLINT_ASSIGN_OR_RETURN(auto dense, get_index_list(j, "mlp_only_layers", n, where));
  for (int64_t i : dense) c.layer_is_dense[i] = true;
  FLINT_ASSIGN_OR_RETURN(auto first_dense, get_int(j, "first_k_dense_replace", where));
  if (first_dense) {
    if (*first_dense < 0 || *first_dense > n) {
      return field_error(where, "first_k_dense_replace",
                         fmt::format("must be in [0, {}], got {}", n, *first_dense));
    }
    for (int64_t i = 0; i < *first_dense; ++i) c.layer_is_dense[i] = true;
  }
  FLINT_ASSIGN_OR_RETURN(auto sparse_step, get_int(j, "decoder_sparse_step", where));
  if (sparse_step && *sparse_step != 1) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: field 'decoder_sparse_step' is {}; only 1 (dense layers form a prefix) "
                      "is supported",
                      where, *sparse_step);
  }
  bool any_moe = false, any_dense = false;
  for (int64_t i = 0; i < n; ++i) (c.layer_is_dense[i] ? any_dense : any_moe) = true;

  // MLP sizes.
  FLINT_ASSIGN_OR_RETURN(auto inter, get_int(j, "intermediate_size", where));
  if (any_dense && !inter) {
    return make_error(ErrorCode::kInvalidFile,
                      "{}: missing required field 'intermediate_size' (mlp_only_layers is not "
                      "empty)",
                      where);
  }
  c.intermediate_size = inter.value_or(0);
  const char* experts_key =
      first_present(j, {"num_experts", "n_routed_experts", "num_local_experts"});
  if (any_moe) {
    if (!experts_key) {
      return make_error(ErrorCode::kInvalidFile,
                        "{}: missing required field 'num_experts' (or 'n_routed_experts')", where);
    }
    FLINT_ASSIGN_OR_RETURN(c.num_experts, require_int(j, experts_key, where));
    FLINT_ASSIGN_OR_RETURN(c.num_experts_per_tok, require_int(j, "num_experts_per_tok", where));
    FLINT_ASSIGN_OR_RETURN(c.moe_intermediate_size, require_int(j, "moe_intermediate_size", where));
    FLINT_ASSIGN_OR_RETURN(auto shared, get_int(j, "shared_expert_intermediate_size", where));
    FLINT_ASSIGN_OR_RETURN(auto n_shared, get_int(j, "n_shared_experts", where));
    if (shared) {
      c.shared_expert_intermediate_size = *shared;
    } else if (n_shared) {
      c.shared_expert_intermediate_size = *n_shared * c.moe_intermediate_size;
    }
  } else if (experts_key) {
    FLINT_ASSIGN_OR_RETURN(c.num_experts, require_int(j, experts_key, where));
    FLINT_ASSIGN_OR_RETURN(auto k, get_int(j, "num_experts_per_tok", where));
    c.num_experts_per_tok = k.value_or(0);
  }
  FLINT_ASSIGN_OR_RETURN(auto norm_topk, get_bool(j, "norm_topk_prob", where));
  c.norm_topk_prob = norm_topk.value_or(true);
  FLINT_ASSIGN_OR_RETURN(auto rsf, get_float(j, "routed_scaling_factor", where));
  c.routed_scaling_factor = static_cast<float>(rsf.value_or(1.0));

  // Attention.
  FLINT_ASSIGN_OR_RETURN(auto window, get_int(j, "sliding_window", where));
  c.sliding_window = window.value_or(0);
  bool any_sliding = false;
  for (int64_t i = 0; i < n; ++i) any_sliding |= c.is_sliding(i);
  if (any_sliding && !window) {
    return make_error(ErrorCode::kInvalidFile,
                      "{}: missing required field 'sliding_window' (layer_types has sliding "
                      "layers)",
                      where);
  }
  FLINT_ASSIGN_OR_RETURN(auto theta, get_float(j, "rope_theta", where));
  if (!theta) {
    if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
      FLINT_ASSIGN_OR_RETURN(theta, get_float(*rp, "rope_theta", "config.json rope_parameters"));
    }
  }
  c.rope_theta = theta.value_or(10000.0);
  FLINT_ASSIGN_OR_RETURN(auto eps, get_float(j, "rms_norm_eps", where));
  c.rms_norm_eps = static_cast<float>(eps.value_or(1e-6));
  FLINT_ASSIGN_OR_RETURN(auto scale, get_float(j, "attention_scale", where));
  if (scale) {
    if (*scale <= 0) return field_error(where, "attention_scale", "must be > 0");
    c.attention_scale = static_cast<float>(*scale);
  }
  FLINT_ASSIGN_OR_RETURN(auto max_pos, get_int(j, "max_position_embeddings", where));
  c.max_position_embeddings = max_pos.value_or(0);
  FLINT_ASSIGN_OR_RETURN(auto tie, get_bool(j, "tie_word_embeddings", where));
  c.tie_word_embeddings = tie.value_or(false);

  // Token ids.
  FLINT_ASSIGN_OR_RETURN(c.bos_token_id, get_token_id(j, "bos_token_id", where));
  FLINT_ASSIGN_OR_RETURN(c.eos_token_ids, get_int_or_list(j, "eos_token_id", where));
  FLINT_ASSIGN_OR_RETURN(c.pad_token_id, get_token_id(j, "pad_token_id", where));

  FLINT_TRY(c.validate());
  return c;
}

Status FlintConfig::apply_generation_config(const json& g) {
  const std::string where = "generation_config.json";
  if (!g.is_object()) {
    return make_error(ErrorCode::kInvalidFile, "{}: expected a JSON object, got {}", where,
                      json_type(g));
  }
  auto set_float = [&](const char* key, std::optional<float>& dst) -> Status {
    FLINT_ASSIGN_OR_RETURN(auto v, get_float(g, key, where));
    if (v) dst = static_cast<float>(*v);
    return ok();
  };
  auto set_int = [&](const char* key, std::optional<int>& dst) -> Status {
    FLINT_ASSIGN_OR_RETURN(auto v, get_int(g, key, where));
    if (v) {
      if (*v < INT32_MIN || *v > INT32_MAX) return field_error(where, key, "is out of range");
      dst = static_cast<int>(*v);
    }
    return ok();
  };
  GenerationDefaults gen = generation;
  FLINT_TRY(set_float("temperature", gen.temperature));
  FLINT_TRY(set_float("top_p", gen.top_p));
  FLINT_TRY(set_int("top_k", gen.top_k));
  FLINT_TRY(set_float("min_p", gen.min_p));
  FLINT_TRY(set_float("repetition_penalty", gen.repetition_penalty));
  FLINT_TRY(set_int("max_new_tokens", gen.max_new_tokens));
  FLINT_ASSIGN_OR_RETURN(auto eos, get_int_or_list(g, "eos_token_id", where));
  if (!eos.empty()) gen.eos_token_ids = eos;
  for (int32_t id : gen.eos_token_ids) {
    if (vocab_size > 0 && id >= vocab_size) {
      return field_error(where, "eos_token_id",
                         fmt::format("holds {}, outside the vocabulary of {}", id, vocab_size));
    }
  }
  if (gen.temperature && *gen.temperature < 0) {
    return field_error(where, "temperature", "must be >= 0");
  }
  if (gen.top_p && (*gen.top_p <= 0 || *gen.top_p > 1)) {
    return field_error(where, "top_p", "must be in (0, 1]");
  }
  generation = std::move(gen);
  return ok();
}

Result<FlintConfig> FlintConfig::from_hf_path(const std::string& path) {
  std::string config_path = path;
  std::string gen_path;
  try {
    std::filesystem::path p(path);
    if (std::filesystem::is_directory(p)) {
      config_path = (p / "config.json").string();
      gen_path = (p / "generation_config.json").string();
    } else {
      gen_path = (p.parent_path() / "generation_config.json").string();
    }
    if (!std::filesystem::exists(config_path)) {
      return make_error(ErrorCode::kNotFound, "{}: no such file", config_path);
    }
    if (!std::filesystem::exists(gen_path)) gen_path.clear();
  } catch (const std::filesystem::filesystem_error& e) {
    return make_error(ErrorCode::kIo, "{}: {}", path, e.what());
  }
  FLINT_ASSIGN_OR_RETURN(json j, parse_json_file(config_path));
  auto cfg = from_hf_json(j);
  if (!cfg) return cfg.error().with_context("{}", config_path);
  if (!gen_path.empty()) {
    FLINT_ASSIGN_OR_RETURN(json g, parse_json_file(gen_path));
    if (auto st = cfg->apply_generation_config(g); !st)
      return st.error().with_context("{}", gen_path);
  }
  return cfg;
}

Status FlintConfig::validate() {
  auto bad = [](const char* field, const std::string& what) {
    return make_error(ErrorCode::kInvalidFile, "config: {} {}", field, what);
  };
  auto positive = [&](const char* field, int64_t v, int64_t max) -> Status {
    if (v <= 0 || v > max) return bad(field, fmt::format("must be in [1, {}], got {}", max, v));
    return ok();
  };
  FLINT_TRY(positive("vocab_size", vocab_size, int64_t{1} << 26));
  FLINT_TRY(positive("hidden_size", hidden_size, int64_t{1} << 20));
  FLINT_TRY(positive("num_hidden_layers", num_hidden_layers, 4096));
  FLINT_TRY(positive("num_attention_heads", num_heads, 4096));
  FLINT_TRY(positive("num_key_value_heads", num_kv_heads, 4096));
  FLINT_TRY(positive("head_dim", head_dim, 8192));
  if (num_heads % num_kv_heads != 0) {
    return bad(
        "num_attention_heads",
        fmt::format("({}) is not a multiple of num_key_value_heads ({})", num_heads, num_kv_heads));
  }
  const auto n = static_cast<size_t>(num_hidden_layers);
  if (layer_types.size() != n) {
    return bad("layer_types", fmt::format("has {} entries, expected num_hidden_layers = {}",
                                          layer_types.size(), n));
  }
  if (layer_uses_rope.size() != n) {
    return bad("no_rope_layer_indices",
               fmt::format("covers {} layers, expected {}", layer_uses_rope.size(), n));
  }
  if (layer_is_dense.size() != n) {
    return bad("mlp_only_layers",
               fmt::format("covers {} layers, expected {}", layer_is_dense.size(), n));
  }
  bool any_moe = false, any_dense = false, any_sliding = false, any_rope = false;
  for (size_t i = 0; i < n; ++i) {
    if (layer_is_dense[i] && i > 0 && !layer_is_dense[i - 1]) {
      return bad("mlp_only_layers",
                 fmt::format("must be a prefix of the layers, but layer {} is dense and layer {} "
                             "is not",
                             i, i - 1));
    }
    (layer_is_dense[i] ? any_dense : any_moe) = true;
    any_sliding |= layer_types[i] == LayerType::kSlidingAttention;
    any_rope |= static_cast<bool>(layer_uses_rope[i]);
  }
  if (any_sliding && sliding_window <= 0) {
    return bad("sliding_window", fmt::format("must be > 0, got {}", sliding_window));
  }
  if (sliding_window < 0)
    return bad("sliding_window", fmt::format("must be >= 0, got {}", sliding_window));
  if (any_dense) FLINT_TRY(positive("intermediate_size", intermediate_size, int64_t{1} << 22));
  if (any_moe) {
    FLINT_TRY(positive("num_experts", num_experts, 1 << 16));
    FLINT_TRY(positive("moe_intermediate_size", moe_intermediate_size, int64_t{1} << 22));
    if (num_experts_per_tok <= 0 || num_experts_per_tok > num_experts) {
      return bad("num_experts_per_tok", fmt::format("must be in [1, num_experts = {}], got {}",
                                                    num_experts, num_experts_per_tok));
    }
    if (shared_expert_intermediate_size < 0 || shared_expert_intermediate_size > (1 << 22)) {
      return bad(
          "shared_expert_intermediate_size",
          fmt::format("must be in [0, {}], got {}", 1 << 22, shared_expert_intermediate_size));
    }
    if (!std::isfinite(routed_scaling_factor) || routed_scaling_factor <= 0) {
      return bad("routed_scaling_factor",
                 fmt::format("must be > 0, got {}", routed_scaling_factor));
    }
  }
  if (!std::isfinite(rms_norm_eps) || rms_norm_eps <= 0 || rms_norm_eps >= 1) {
    return bad("rms_norm_eps", fmt::format("must be in (0, 1), got {}", rms_norm_eps));
  }
  if (any_rope && !(std::isfinite(rope_theta) && rope_theta > 1)) {
    return bad("rope_theta", fmt::format("must be > 1, got {}", rope_theta));
  }
  if (!std::isfinite(attention_scale) || attention_scale < 0) {
    return bad("attention_scale", fmt::format("must be > 0, got {}", attention_scale));
  }
  if (attention_scale == 0) attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (max_position_embeddings < 0) {
    return bad("max_position_embeddings",
               fmt::format("must be >= 0, got {}", max_position_embeddings));
  }
  auto check_id = [&](const char* field, int64_t id) -> Status {
    if (id < 0 || id >= vocab_size) {
      return bad(field, fmt::format("is {}, outside the vocabulary of {}", id, vocab_size));
    }
    return ok();
  };
  if (bos_token_id) FLINT_TRY(check_id("bos_token_id", *bos_token_id));
  if (pad_token_id) FLINT_TRY(check_id("pad_token_id", *pad_token_id));
  for (int32_t id : eos_token_ids) FLINT_TRY(check_id("eos_token_id", id));
  // Parameter totals must fit in int64 (absurd dimensions are rejected here, not overflowed).
  double approx =
      static_cast<double>(num_hidden_layers) *
          (static_cast<double>(num_experts) * 3.0 * hidden_size * moe_intermediate_size +
           3.0 * hidden_size * (intermediate_size + shared_expert_intermediate_size) +
           4.0 * hidden_size * num_heads * head_dim) +
      2.0 * static_cast<double>(vocab_size) * hidden_size;
  if (approx > 1e18)
    return bad("hidden_size", "and the other dimensions give over 1e18 parameters");
  return ok();
}

int64_t FlintConfig::num_full_layers() const {
  int64_t k = 0;
  for (auto t : layer_types) k += t == LayerType::kFullAttention;
  return k;
}

int64_t FlintConfig::num_sliding_layers() const {
  return static_cast<int64_t>(layer_types.size()) - num_full_layers();
}

namespace {

// Parameters of one layer, counting `experts` routed experts.
int64_t layer_params(const FlintConfig& c, int64_t layer, int64_t experts) {
  const int64_t d = c.hidden_size;
  int64_t p = 2 * d;                         // input / post-attention norms
  p += 2 * c.num_heads * c.head_dim * d;     // q, o
  p += 2 * c.num_kv_heads * c.head_dim * d;  // k, v
  p += 2 * c.head_dim + c.num_heads;         // q/k norms, sinks
  if (c.layer_is_dense[layer]) return p + 3 * d * c.intermediate_size;
  p += c.num_experts * d;  // router
  if (c.has_expert_bias) p += c.num_experts;
  p += experts * 3 * d * c.moe_intermediate_size;
  p += 3 * d * c.shared_expert_intermediate_size;
  return p;
}

}  // namespace

int64_t FlintConfig::total_params() const {
  int64_t p = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2) + hidden_size;
  for (int64_t i = 0; i < num_hidden_layers; ++i) p += layer_params(*this, i, num_experts);
  return p;
}

int64_t FlintConfig::active_params() const {
  // The input embedding is a lookup, not compute; a tied head still counts once as the head.
  int64_t p = vocab_size * hidden_size + hidden_size;
  for (int64_t i = 0; i < num_hidden_layers; ++i) p += layer_params(*this, i, num_experts_per_tok);
  return p;
}

int64_t FlintConfig::kv_bytes_per_token(int kv_bytes) const {
  return num_full_layers() * 2 * num_kv_heads * head_dim * kv_bytes;
}

}  // namespace flint::model
