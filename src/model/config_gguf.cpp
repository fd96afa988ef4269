// FlintConfig::from_gguf: the flint.* metadata keys of a GGUF file (spec section 3.2).
// Test partner: tests/unit/model/config_test.cpp, tests/python/model/test_weights.py.
#include <algorithm>
#include <cmath>

#include "formats/gguf.h"
#include "model/config.h"

namespace flint::model {
namespace {

using formats::GgufFile;
using formats::GgufValue;

struct Reader {
  const GgufFile& f;
  std::string arch;

  std::string key(const std::string& k) const { return arch + "." + k; }

  Result<std::optional<int64_t>> opt_int(const std::string& k) const {
    const GgufValue* v = f.find(key(k));
    if (!v) return std::optional<int64_t>{};
    auto r = v->as_int();
    if (!r) return r.error().with_context("gguf: key '{}'", key(k));
    return std::optional<int64_t>{*r};
  }
  Result<int64_t> req_int(const std::string& k) const {
    FLINT_ASSIGN_OR_RETURN(auto v, opt_int(k));
    if (!v) return make_error(ErrorCode::kInvalidFile, "gguf: missing required key '{}'", key(k));
    return *v;
  }
  Result<std::optional<double>> opt_float(const std::string& k) const {
    const GgufValue* v = f.find(key(k));
    if (!v) return std::optional<double>{};
    auto r = v->as_float();
    if (!r) return r.error().with_context("gguf: key '{}'", key(k));
    return std::optional<double>{*r};
  }
  Result<std::optional<bool>> opt_bool(const std::string& k) const {
    const GgufValue* v = f.find(key(k));
    if (!v) return std::optional<bool>{};
    auto r = v->as_bool();
    if (!r) {
      auto i = v->as_int();  // some writers store flags as integers
      if (!i) return r.error().with_context("gguf: key '{}'", key(k));
      return std::optional<bool>{*i != 0};
    }
    return std::optional<bool>{*r};
  }
  // A per-layer bool array (or integers 0/1) of exactly n entries.
  Result<std::optional<std::vector<bool>>> opt_bool_array(const std::string& k, int64_t n) const {
    const GgufValue* v = f.find(key(k));
    if (!v) return std::optional<std::vector<bool>>{};
    const formats::GgufArray* a = v->as_array();
    if (!a) return make_error(ErrorCode::kInvalidFile, "gguf: key '{}' must be an array", key(k));
    if (static_cast<int64_t>(a->size()) != n) {
      return make_error(ErrorCode::kInvalidFile, "gguf: key '{}' has {} entries, expected {}",
                        key(k), a->size(), n);
    }
    std::vector<bool> out;
    for (const auto& e : *a) {
      auto b = e.as_bool();
      if (b) {
        out.push_back(*b);
        continue;
      }
      auto i = e.as_int();
      if (!i)
        return make_error(ErrorCode::kInvalidFile, "gguf: key '{}' must hold booleans", key(k));
      out.push_back(*i != 0);
    }
    return std::optional<std::vector<bool>>{std::move(out)};
  }
  Result<std::optional<int32_t>> token_id(const std::string& full_key) const {
    const GgufValue* v = f.find(full_key);
    if (!v) return std::optional<int32_t>{};
    auto r = v->as_int();
    if (!r || *r < 0 || *r > INT32_MAX) {
      return make_error(ErrorCode::kInvalidFile, "gguf: key '{}' must be a token id", full_key);
    }
    return std::optional<int32_t>{static_cast<int32_t>(*r)};
  }
};

}  // namespace

Result<FlintConfig> FlintConfig::from_gguf(const GgufFile& f) {
  const GgufValue* archv = f.find("general.architecture");
  if (!archv) {
    return make_error(ErrorCode::kInvalidFile, "gguf: missing required key 'general.architecture'");
  }
  FLINT_ASSIGN_OR_RETURN(std::string arch, archv->as_string());
  if (arch != "flint") {
    return make_error(
        ErrorCode::kUnsupported,
        "gguf: unsupported architecture '{}' in general.architecture (expected flint)", arch);
  }
  Reader r{f, arch};
  FlintConfig c;
  FLINT_ASSIGN_OR_RETURN(c.num_hidden_layers, r.req_int("block_count"));
  FLINT_ASSIGN_OR_RETURN(c.hidden_size, r.req_int("embedding_length"));
  FLINT_ASSIGN_OR_RETURN(c.num_heads, r.req_int("attention.head_count"));
  FLINT_ASSIGN_OR_RETURN(auto kv, r.opt_int("attention.head_count_kv"));
  c.num_kv_heads = kv.value_or(c.num_heads);
  FLINT_ASSIGN_OR_RETURN(auto key_len, r.opt_int("attention.key_length"));
  if (key_len) {
    c.head_dim = *key_len;
  } else if (c.num_heads > 0 && c.hidden_size % c.num_heads == 0) {
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    return make_error(ErrorCode::kInvalidFile, "gguf: missing required key '{}'",
                      r.key("attention.key_length"));
  }
  FLINT_ASSIGN_OR_RETURN(auto value_len, r.opt_int("attention.value_length"));
  if (value_len && *value_len != c.head_dim) {
    return make_error(ErrorCode::kUnsupported, "gguf: {} is {}, expected key_length {}",
                      r.key("attention.value_length"), *value_len, c.head_dim);
  }
  const int64_t n = c.num_hidden_layers;
  if (n <= 0 || n > 4096) {
    return make_error(ErrorCode::kInvalidFile, "gguf: {} must be in [1, 4096], got {}",
                      r.key("block_count"), n);
  }

  // Vocabulary: an explicit key, else the token list, else the embedding's row count.
  FLINT_ASSIGN_OR_RETURN(auto vocab, r.opt_int("vocab_size"));
  if (!vocab) {
    if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->as_array()) {
      vocab = static_cast<int64_t>(toks->as_array()->size());
    }
    if (const auto* emb = f.find_tensor("token_embd.weight"); emb && emb->ne.size() == 2) {
      vocab = emb->ne[1];
    }
  }
  if (!vocab) {
    return make_error(ErrorCode::kInvalidFile,
                      "gguf: cannot tell the vocabulary size (no {}, tokenizer.ggml.tokens or "
                      "token_embd.weight)",
                      r.key("vocab_size"));
  }
  c.vocab_size = *vocab;

  FLINT_ASSIGN_OR_RETURN(auto ff, r.opt_int("feed_forward_length"));
  c.intermediate_size = ff.value_or(0);
  FLINT_ASSIGN_OR_RETURN(auto leading, r.opt_int("leading_dense_block_count"));
  int64_t num_dense = leading.value_or(0);
  if (num_dense < 0 || num_dense > n) {
    return make_error(ErrorCode::kInvalidFile, "gguf: {} is {}, expected [0, {}]",
                      r.key("leading_dense_block_count"), num_dense, n);
  }
  c.layer_is_dense.assign(n, false);
  for (int64_t i = 0; i < num_dense; ++i) c.layer_is_dense[i] = true;
  if (num_dense < n) {
    FLINT_ASSIGN_OR_RETURN(c.num_experts, r.req_int("expert_count"));
    FLINT_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.req_int("expert_used_count"));
    FLINT_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.req_int("expert_feed_forward_length"));
    FLINT_ASSIGN_OR_RETURN(auto sh, r.opt_int("expert_shared_feed_forward_length"));
    FLINT_ASSIGN_OR_RETURN(auto sh_count, r.opt_int("expert_shared_count"));
    if (sh) {
      c.shared_expert_intermediate_size = *sh;
    } else if (sh_count) {
      c.shared_expert_intermediate_size = *sh_count * c.moe_intermediate_size;
    }
    FLINT_ASSIGN_OR_RETURN(auto gating, r.opt_int("expert_gating_func"));
    if (gating && *gating != 2) {  // llama.cpp: 1 softmax, 2 sigmoid
      return make_error(ErrorCode::kUnsupported, "gguf: {} is {}, expected 2 (sigmoid)",
                        r.key("expert_gating_func"), *gating);
    }
  }
  FLINT_ASSIGN_OR_RETURN(auto norm, r.opt_bool("expert_weights_norm"));
  c.norm_topk_prob = norm.value_or(true);
  FLINT_ASSIGN_OR_RETURN(auto wscale, r.opt_float("expert_weights_scale"));
  c.routed_scaling_factor = static_cast<float>(wscale.value_or(1.0));

  FLINT_ASSIGN_OR_RETURN(auto window, r.opt_int("attention.sliding_window"));
  c.sliding_window = window.value_or(0);
  FLINT_ASSIGN_OR_RETURN(auto swa, r.opt_bool_array("attention.sliding_window_pattern", n));
  if (!swa && window && *window > 0) {
    return make_error(ErrorCode::kInvalidFile, "gguf: {} is set but {} is missing",
                      r.key("attention.sliding_window"), r.key("attention.sliding_window_pattern"));
  }
  c.layer_types.assign(n, LayerType::kFullAttention);
  if (swa) {
    for (int64_t i = 0; i < n; ++i) {
      if ((*swa)[i]) c.layer_types[i] = LayerType::kSlidingAttention;
    }
  }
  // The rope pattern's key name is UNCONFIRMED (spec 3.2); without one, Flint's rule applies:
  // sliding layers rotate, full layers are NoPE.
  std::optional<std::vector<bool>> rope;
  for (const char* k : {"rope.pattern", "rope_pattern", "attention.rope_pattern"}) {
    FLINT_ASSIGN_OR_RETURN(rope, r.opt_bool_array(k, n));
    if (rope) break;
  }
  c.layer_uses_rope.assign(n, false);
  for (int64_t i = 0; i < n; ++i) c.layer_uses_rope[i] = rope ? (*rope)[i] : c.is_sliding(i);

  FLINT_ASSIGN_OR_RETURN(auto theta, r.opt_float("rope.freq_base"));
  c.rope_theta = theta.value_or(10000.0);
  FLINT_ASSIGN_OR_RETURN(auto eps, r.opt_float("attention.layer_norm_rms_epsilon"));
  c.rms_norm_eps = static_cast<float>(eps.value_or(1e-6));
  FLINT_ASSIGN_OR_RETURN(auto scale, r.opt_float("attention.scale"));
  c.attention_scale = static_cast<float>(scale.value_or(0.0));
  FLINT_ASSIGN_OR_RETURN(auto ctx, r.opt_int("context_length"));
  c.max_position_embeddings = ctx.value_or(0);
  c.tie_word_embeddings =
      f.find_tensor("output.weight") == nullptr && f.find_tensor("token_embd.weight") != nullptr;

  FLINT_ASSIGN_OR_RETURN(c.bos_token_id, r.token_id("tokenizer.ggml.bos_token_id"));
  FLINT_ASSIGN_OR_RETURN(auto eos, r.token_id("tokenizer.ggml.eos_token_id"));
  FLINT_ASSIGN_OR_RETURN(auto eot, r.token_id("tokenizer.ggml.eot_token_id"));
  FLINT_ASSIGN_OR_RETURN(auto eom, r.token_id("tokenizer.ggml.eom_token_id"));
  for (auto id : {eos, eot, eom}) {
    if (id &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(*id);
    }
  }
  c.generation.eos_token_ids = c.eos_token_ids;
  FLINT_ASSIGN_OR_RETURN(c.pad_token_id, r.token_id("tokenizer.ggml.padding_token_id"));

  if (auto st = c.validate(); !st) return st.error().with_context("gguf");
  return c;
}

}  // namespace flint::model
