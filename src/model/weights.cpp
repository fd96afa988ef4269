// FlintWeights binding: HF safetensors names and GGUF names (spec section 3) to LayerWeights roles,
// with every problem collected into one report. Test partner: tests/unit/model/weights_test.cpp,
// tests/python/model/test_weights.py.
#include "model/weights.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/tensor_names.h"

namespace flint::model {
namespace {

// One tensor as the binder sees it: PyTorch-order shape and raw bytes.
struct SourceTensor {
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;
  uint64_t nbytes;
};

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }
bool is_linear_dtype(DType t) {
  return is_float(t) || t == DType::kQ8_0 || t == DType::kQ4_1 || t == DType::kNVFP4;
}

// Looks tensors up by name, remembers which were used, and collects every problem.
class Binder {
 public:
  Binder(std::string what, std::map<std::string, SourceTensor> tensors)
      : what_(std::move(what)), tensors_(std::move(tensors)) {}

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  // The first present name of `names`, or "" (nothing recorded).
  std::string find_any(const std::vector<std::string>& names) const {
    for (const auto& n : names) {
      if (has(n)) return n;
    }
    return "";
  }

  // Binds one tensor by any of `names` with shape `want`; records a problem and returns an empty
  // view on failure.
  ConstTensorView take(const std::vector<std::string>& names, const std::vector<int64_t>& want,
                       bool linear) {
    std::string name = find_any(names);
    if (name.empty()) {
      std::string alts;
      for (size_t i = 1; i < names.size(); ++i) alts += fmt::format(" or '{}'", names[i]);
      missing_.push_back(fmt::format("'{}'{}", names[0], alts));
      return {};
    }
    return bind(name, want, linear);
  }

  ConstTensorView bind(const std::string& name, const std::vector<int64_t>& want, bool linear) {
    used_.insert(name);
    const SourceTensor& t = tensors_.at(name);
    if (t.shape != want) {
      problems_.push_back(fmt::format("tensor '{}' has shape {}, expected {}", name,
                                      shape_str(t.shape), shape_str(want)));
      return {};
    }
    if (linear ? !is_linear_dtype(t.dtype) : !is_float(t.dtype)) {
      problems_.push_back(
          fmt::format("tensor '{}' has dtype {}, expected {}", name, t.dtype,
                      linear ? "F32, BF16, F16, Q8_0, Q4_1 or NVFP4" : "F32, BF16 or F16"));
      return {};
    }
    const int64_t bs = dtype_block_size(t.dtype);
    if (want.back() % bs != 0) {
      problems_.push_back(
          fmt::format("tensor '{}' ({}) has rows of {} elements, not a multiple "
                      "of the block size {}",
                      name, t.dtype, want.back(), bs));
      return {};
    }
    Shape s;
    for (int64_t d : want) s.push_back(d);
    return ConstTensorView(t.data, t.dtype, s);
  }

  // A [E, out, in] stacked tensor as E views of [out, in].
  std::vector<ConstTensorView> take_stacked(const std::string& name, int64_t experts, int64_t out,
                                            int64_t in) {
    ConstTensorView all = take({name}, {experts, out, in}, /*linear=*/true);
    std::vector<ConstTensorView> views;
    if (all.empty()) return views;
    const int64_t per = dtype_bytes_for(all.dtype(), out * in);
    for (int64_t e = 0; e < experts; ++e) {
      views.emplace_back(static_cast<const uint8_t*>(all.raw()) + e * per, all.dtype(),
                         Shape{out, in});
    }
    return views;
  }

  // The NVFP4 global scale(s) from `<base>.scale` ({1} or {count}); 1 when absent.
  std::vector<float> scales(const std::string& base, int64_t count, DType weight_dtype) {
    std::vector<float> out(count, 1.0f);
    for (const char* suffix : {".input_scale"}) {
      if (has(base + suffix)) used_.insert(base + suffix);  // W4A16: activation scales unused
    }
    const std::string name = base + ".scale";
    if (!has(name)) return out;
    used_.insert(name);
    const SourceTensor& t = tensors_.at(name);
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (weight_dtype != DType::kNVFP4) {
      problems_.push_back(fmt::format("tensor '{}' scales a {} tensor; only NVFP4 takes a scale",
                                      name, weight_dtype));
      return out;
    }
    if (t.dtype != DType::kF32 || numel != count) {
      problems_.push_back(fmt::format("tensor '{}' has dtype {} and shape {}, expected F32 [{}]",
                                      name, t.dtype, shape_str(t.shape), count));
      return out;
    }
    for (int64_t i = 0; i < count; ++i) std::memcpy(&out[i], t.data + 4 * i, 4);
    return out;
  }

  void ignore_if_present(const std::string& name) {
    if (has(name)) used_.insert(name);
  }

  // Every problem in one error, or ok.
  Status finish() const {
    std::vector<std::string> all = problems_;
    for (const auto& m : missing_) all.push_back("missing tensor " + m);
    for (const auto& [name, t] : tensors_) {
      if (!used_.count(name)) {
        all.push_back(
            fmt::format("unexpected tensor '{}' {} {}", name, t.dtype, shape_str(t.shape)));
      }
    }
    if (all.empty()) return ok();
    return make_error(ErrorCode::kInvalidFile, "{}: {} tensor problem{}: {}", what_, all.size(),
                      all.size() == 1 ? "" : "s", fmt::join(all, "; "));
  }

 private:
  std::string what_;
  std::map<std::string, SourceTensor> tensors_;
  std::set<std::string> used_;
  std::vector<std::string> missing_;
  std::vector<std::string> problems_;
};

Linear linear(ConstTensorView w, float scale = 1.0f) { return Linear{w, scale}; }

// Binds the HF names of spec 3.1, accepting the UNCONFIRMED spellings it lists.
void bind_hf(Binder& b, FlintWeights& w) {
  FlintConfig& c = w.config;
  const int64_t d = c.hidden_size, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim;
  w.embed = b.take({"model.embed_tokens.weight"}, {c.vocab_size, d}, true);
  w.final_norm = b.take({"model.norm.weight"}, {d}, false);
  if (c.tie_word_embeddings && !b.has("lm_head.weight")) {
    w.lm_head = linear(w.embed);
  } else {
    w.lm_head = linear(b.take({"lm_head.weight"}, {c.vocab_size, d}, true));
  }
  // An expert bias in any layer means every MoE layer must have one.
  bool bias = false;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    bias |= !b.find_any(hf_expert_bias_names(i)).empty();
  }
  c.has_expert_bias = bias;
  w.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    L.attn_norm = b.take({p + "input_layernorm.weight"}, {d}, false);
    L.ffn_norm = b.take({p + "post_attention_layernorm.weight"}, {d}, false);
    L.q = linear(b.take({p + "self_attn.q_proj.weight"}, {q_dim, d}, true));
    L.k = linear(b.take({p + "self_attn.k_proj.weight"}, {kv_dim, d}, true));
    L.v = linear(b.take({p + "self_attn.v_proj.weight"}, {kv_dim, d}, true));
    L.o = linear(b.take({p + "self_attn.o_proj.weight"}, {d, q_dim}, true));
    L.q_norm = b.take({p + "self_attn.q_norm.weight"}, {c.head_dim}, false);
    L.k_norm = b.take({p + "self_attn.k_norm.weight"}, {c.head_dim}, false);
    L.sinks = b.take(hf_sink_names(i), {c.num_heads}, false);
    b.ignore_if_present(p + "self_attn.rotary_emb.inv_freq");
    if (c.layer_is_dense[i]) {
      const int64_t I = c.intermediate_size;
      L.gate = linear(b.take({p + "mlp.gate_proj.weight"}, {I, d}, true));
      L.up = linear(b.take({p + "mlp.up_proj.weight"}, {I, d}, true));
      L.down = linear(b.take({p + "mlp.down_proj.weight"}, {d, I}, true));
      continue;
    }
    const int64_t E = c.num_experts, I = c.moe_intermediate_size;
    L.router = linear(b.take({p + "mlp.gate.weight", p + "mlp.router.weight"}, {E, d}, true));
    if (bias) L.expert_bias = b.take(hf_expert_bias_names(i), {E}, false);
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
      L.exp_gate.push_back(linear(b.take({q + "gate_proj.weight"}, {I, d}, true)));
      L.exp_up.push_back(linear(b.take({q + "up_proj.weight"}, {I, d}, true)));
      L.exp_down.push_back(linear(b.take({q + "down_proj.weight"}, {d, I}, true)));
    }
    if (c.shared_expert_intermediate_size > 0) {
      const int64_t S = c.shared_expert_intermediate_size;
      auto names = [&](const char* proj) {
        return std::vector<std::string>{p + "mlp.shared_expert." + proj + ".weight",
                                        p + "mlp.shared_experts." + proj + ".weight"};
      };
      L.sh_gate = linear(b.take(names("gate_proj"), {S, d}, true));
      L.sh_up = linear(b.take(names("up_proj"), {S, d}, true));
      L.sh_down = linear(b.take(names("down_proj"), {d, S}, true));
    }
  }
}

// A GGUF linear with its NVFP4 global scale.
Linear gguf_linear(Binder& b, const std::string& name, int64_t out, int64_t in) {
  ConstTensorView v = b.take({name}, {out, in}, true);
  const std::string base = name.substr(0, name.size() - std::strlen(".weight"));
  if (v.empty()) {
    b.ignore_if_present(base + ".scale");
    b.ignore_if_present(base + ".input_scale");
    return {};
  }
  return linear(v, b.scales(base, 1, v.dtype())[0]);
}

std::vector<Linear> gguf_experts(Binder& b, const std::string& name, int64_t E, int64_t out,
                                 int64_t in) {
  std::vector<ConstTensorView> views = b.take_stacked(name, E, out, in);
  const std::string base = name.substr(0, name.size() - std::strlen(".weight"));
  std::vector<Linear> r;
  if (views.empty()) {
    b.ignore_if_present(base + ".scale");
    b.ignore_if_present(base + ".input_scale");
    return r;
  }
  std::vector<float> s = b.scales(base, E, views[0].dtype());
  for (int64_t e = 0; e < E; ++e) r.push_back(linear(views[e], s[e]));
  return r;
}

// Binds the GGUF names of spec 3.2.
void bind_gguf(Binder& b, FlintWeights& w) {
  FlintConfig& c = w.config;
  const int64_t d = c.hidden_size, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim;
  w.embed = b.take({"token_embd.weight"}, {c.vocab_size, d}, true);
  w.final_norm = b.take({"output_norm.weight"}, {d}, false);
  if (!b.has("output.weight") && c.tie_word_embeddings) {
    w.lm_head = linear(w.embed);
  } else {
    w.lm_head = gguf_linear(b, "output.weight", c.vocab_size, d);
  }
  bool bias = false;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    bias |= !b.find_any(gguf_expert_bias_names(i)).empty();
  }
  c.has_expert_bias = bias;
  w.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w.layers[i];
    const std::string p = fmt::format("blk.{}.", i);
    L.attn_norm = b.take({p + "attn_norm.weight"}, {d}, false);
    L.ffn_norm = b.take({p + "ffn_norm.weight"}, {d}, false);
    L.q = gguf_linear(b, p + "attn_q.weight", q_dim, d);
    L.k = gguf_linear(b, p + "attn_k.weight", kv_dim, d);
    L.v = gguf_linear(b, p + "attn_v.weight", kv_dim, d);
    L.o = gguf_linear(b, p + "attn_output.weight", d, q_dim);
    L.q_norm = b.take({p + "attn_q_norm.weight"}, {c.head_dim}, false);
    L.k_norm = b.take({p + "attn_k_norm.weight"}, {c.head_dim}, false);
    L.sinks = b.take({p + "attn_sinks.weight", p + "attn_sinks"}, {c.num_heads}, false);
    if (c.layer_is_dense[i]) {
      const int64_t I = c.intermediate_size;
      L.gate = gguf_linear(b, p + "ffn_gate.weight", I, d);
      L.up = gguf_linear(b, p + "ffn_up.weight", I, d);
      L.down = gguf_linear(b, p + "ffn_down.weight", d, I);
      continue;
    }
    const int64_t E = c.num_experts, I = c.moe_intermediate_size;
    L.router = gguf_linear(b, p + "ffn_gate_inp.weight", E, d);
    if (bias) L.expert_bias = b.take(gguf_expert_bias_names(i), {E}, false);
    L.exp_gate = gguf_experts(b, p + "ffn_gate_exps.weight", E, I, d);
    L.exp_up = gguf_experts(b, p + "ffn_up_exps.weight", E, I, d);
    L.exp_down = gguf_experts(b, p + "ffn_down_exps.weight", E, d, I);
    if (c.shared_expert_intermediate_size > 0) {
      const int64_t S = c.shared_expert_intermediate_size;
      L.sh_gate = gguf_linear(b, p + "ffn_gate_shexp.weight", S, d);
      L.sh_up = gguf_linear(b, p + "ffn_up_shexp.weight", S, d);
      L.sh_down = gguf_linear(b, p + "ffn_down_shexp.weight", d, S);
    }
  }
}

Result<bool> is_gguf_path(const std::string& path) {
  try {
    std::filesystem::path p(path);
    if (std::filesystem::is_directory(p)) return false;
    if (p.extension() == ".gguf") return true;
    if (p.extension() == ".json") return false;
    if (!std::filesystem::exists(p))
      return make_error(ErrorCode::kNotFound, "{}: no such file", path);
  } catch (const std::filesystem::filesystem_error& e) {
    return make_error(ErrorCode::kIo, "{}: {}", path, e.what());
  }
  return true;  // any other file: let the GGUF reader check the magic
}

}  // namespace

Result<FlintWeights> FlintWeights::load_hf(const std::string& path,
                                           const FlintConfig* config_override) {
  std::filesystem::path dir_path(path);
  try {
    if (!std::filesystem::is_directory(dir_path)) {
      dir_path = dir_path.parent_path();
      if (dir_path.empty()) dir_path = ".";
    }
  } catch (const std::filesystem::filesystem_error& e) {
    return make_error(ErrorCode::kIo, "{}: {}", path, e.what());
  }
  const std::string dir = dir_path.string();
  FlintWeights w;
  if (config_override) {
    w.config = *config_override;
  } else {
    FLINT_ASSIGN_OR_RETURN(w.config, FlintConfig::from_hf_path(path));
  }
  auto model = formats::SafetensorsModel::open(dir);
  if (!model) return model.error();
  auto owned = std::make_shared<formats::SafetensorsModel>(std::move(*model));
  std::map<std::string, SourceTensor> tensors;
  for (const auto& [name, t] : owned->tensors()) {
    tensors.emplace(name, SourceTensor{t.dtype, t.shape, t.data, t.nbytes});
  }
  Binder b(dir, std::move(tensors));
  bind_hf(b, w);
  FLINT_TRY(b.finish());
  if (auto st = w.config.validate(); !st) return st.error().with_context("{}", dir);
  w.storage.push_back(owned);
  return w;
}

Result<FlintWeights> FlintWeights::load_hf(const std::string& dir) { return load_hf(dir, nullptr); }

Result<FlintWeights> FlintWeights::load_gguf(const std::string& path,
                                             const FlintConfig* config_override) {
  auto file = formats::GgufFile::open(path);
  if (!file) return file.error();
  auto owned = std::make_shared<formats::GgufFile>(std::move(*file));
  FlintWeights w;
  if (config_override) {
    w.config = *config_override;
  } else {
    auto cfg = FlintConfig::from_gguf(*owned);
    if (!cfg) return cfg.error().with_context("{}", path);
    w.config = std::move(*cfg);
  }
  std::map<std::string, SourceTensor> tensors;
  for (const auto& t : owned->tensors()) {
    tensors.emplace(t.name, SourceTensor{t.dtype, t.torch_shape(), t.data, t.nbytes});
  }
  Binder b(path, std::move(tensors));
  bind_gguf(b, w);
  FLINT_TRY(b.finish());
  w.storage.push_back(owned);
  return w;
}

Result<FlintWeights> FlintWeights::load(const std::string& path,
                                        const FlintConfig* config_override) {
  FLINT_ASSIGN_OR_RETURN(bool gguf, is_gguf_path(path));
  if (gguf) return load_gguf(path, config_override);
  return load_hf(path, config_override);
}

}  // namespace flint::model
