// In-memory tiny models: random values in a fixed-seed generator, stored as F32 / BF16 / NVFP4.
#include "tiny_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/nvfp4.h"
#include "formats/quant.h"

namespace flint::cpu::testing {
namespace {

struct Builder {
  const TinyOptions& opt;
  std::mt19937_64 rng;
  std::vector<StoredTensor> tensors;

  std::vector<float> uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
  }

  // Stores `values` (rows x cols) as `kind` and returns its index.
  size_t store(const std::string& name, std::vector<int64_t> shape,
               const std::vector<float>& values, DType dtype) {
    StoredTensor t;
    t.name = name;
    t.shape = shape;
    const int64_t n = static_cast<int64_t>(values.size());
    if (dtype == DType::kF32) {
      t.kind = "f32";
      t.bytes.resize(static_cast<size_t>(n * 4));
      std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    } else if (dtype == DType::kBF16) {
      t.kind = "bf16";
      t.bytes.resize(static_cast<size_t>(n * 2));
      formats::quantize_row(DType::kBF16, values.data(), t.bytes.data(), n);
    } else {
      t.kind = "nvfp4";
      float amax = 0;
      for (float x : values) amax = std::max(amax, std::fabs(x));
      t.scale = formats::nvfp4_global_scale_for(amax);
      std::vector<float> scaled(values.size());
      for (size_t i = 0; i < values.size(); ++i) scaled[i] = values[i] / t.scale;
      t.bytes.resize(static_cast<size_t>(dtype_bytes_for(DType::kNVFP4, n)));
      formats::quantize_row(DType::kNVFP4, scaled.data(), t.bytes.data(), n);
    }
    tensors.push_back(std::move(t));
    return tensors.size() - 1;
  }

  size_t linear(const std::string& name, int64_t out, int64_t in, DType dtype) {
    const float a = 1.0f / std::sqrt(static_cast<float>(in));
    return store(name, {out, in}, uniform(out * in, -a, a), dtype);
  }
};

DType dtype_of(const StoredTensor& t) {
  return t.kind == "f32" ? DType::kF32 : t.kind == "bf16" ? DType::kBF16 : DType::kNVFP4;
}

}  // namespace

TinyModel make_tiny_model(const TinyOptions& opt) {
  model::FlintConfig c;
  c.vocab_size = opt.vocab_size;
  c.hidden_size = opt.hidden_size;
  c.num_hidden_layers = opt.num_layers;
  c.num_heads = opt.num_heads;
  c.num_kv_heads = opt.num_kv_heads;
  c.head_dim = opt.head_dim;
  c.intermediate_size = opt.intermediate_size;
  c.moe_intermediate_size = opt.moe_intermediate_size;
  c.shared_expert_intermediate_size = opt.shared_intermediate_size;
  c.num_experts = opt.num_experts;
  c.num_experts_per_tok = opt.num_experts_per_tok;
  c.norm_topk_prob = opt.norm_topk_prob;
  c.routed_scaling_factor = opt.routed_scaling_factor;
  c.has_expert_bias = opt.expert_bias;
  c.sliding_window = opt.sliding_window;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6f;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
  c.max_position_embeddings = opt.max_position_embeddings;
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    const bool sliding = opt.sliding.empty() ? (l != 0 && l != opt.num_layers - 1) : opt.sliding[l];
    c.layer_types.push_back(sliding ? model::LayerType::kSlidingAttention
                                    : model::LayerType::kFullAttention);
    c.layer_uses_rope.push_back(sliding);
    c.layer_is_dense.push_back(l < opt.num_dense);
  }

  Builder b{opt, std::mt19937_64(opt.seed), {}};
  const int64_t d = opt.hidden_size, D = opt.head_dim;
  const DType lin = opt.linear_dtype;
  const DType embed_dtype = lin == DType::kBF16 ? DType::kBF16 : DType::kF32;
  struct LayerIdx {
    size_t attn_norm, ffn_norm, q, k, v, o, q_norm, k_norm, sinks, gate, up, down, router, bias;
    std::vector<size_t> eg, eu, ed;
    size_t sg, su, sd;
  };
  const size_t embed = b.store("model.embed_tokens.weight", {opt.vocab_size, d},
                               b.uniform(opt.vocab_size * d, -1, 1), embed_dtype);
  std::vector<LayerIdx> idx(static_cast<size_t>(opt.num_layers));
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerIdx& x = idx[l];
    x.attn_norm = b.store(p + "input_layernorm.weight", {d}, b.uniform(d, 0.8f, 1.2f), DType::kF32);
    x.q = b.linear(p + "self_attn.q_proj.weight", opt.num_heads * D, d, lin);
    x.k = b.linear(p + "self_attn.k_proj.weight", opt.num_kv_heads * D, d, lin);
    x.v = b.linear(p + "self_attn.v_proj.weight", opt.num_kv_heads * D, d, lin);
    x.o = b.linear(p + "self_attn.o_proj.weight", d, opt.num_heads * D, lin);
    x.q_norm = b.store(p + "self_attn.q_norm.weight", {D}, b.uniform(D, 0.8f, 1.2f), DType::kF32);
    x.k_norm = b.store(p + "self_attn.k_norm.weight", {D}, b.uniform(D, 0.8f, 1.2f), DType::kF32);
    std::vector<float> sinks = b.uniform(opt.num_heads, -1, 1);
    for (float& s : sinks) s = s * opt.sink_scale + 1.0f;
    x.sinks = b.store(p + "self_attn.sinks", {opt.num_heads}, sinks, DType::kF32);
    x.ffn_norm =
        b.store(p + "post_attention_layernorm.weight", {d}, b.uniform(d, 0.8f, 1.2f), DType::kF32);
    if (l < opt.num_dense) {
      x.gate = b.linear(p + "mlp.gate_proj.weight", opt.intermediate_size, d, lin);
      x.up = b.linear(p + "mlp.up_proj.weight", opt.intermediate_size, d, lin);
      x.down = b.linear(p + "mlp.down_proj.weight", d, opt.intermediate_size, lin);
      continue;
    }
    // A wide router so the sigmoid scores spread out and top-k is never a near tie.
    x.router = b.store(p + "mlp.gate.weight", {opt.num_experts, d},
                       b.uniform(opt.num_experts * d, -0.5f, 0.5f), DType::kF32);
    if (opt.expert_bias)
      x.bias = b.store(p + "mlp.gate.e_score_correction_bias", {opt.num_experts},
                       b.uniform(opt.num_experts, -0.3f, 0.3f), DType::kF32);
    for (int64_t e = 0; e < opt.num_experts; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      x.eg.push_back(b.linear(q + "gate_proj.weight", opt.moe_intermediate_size, d, lin));
      x.eu.push_back(b.linear(q + "up_proj.weight", opt.moe_intermediate_size, d, lin));
      x.ed.push_back(b.linear(q + "down_proj.weight", d, opt.moe_intermediate_size, lin));
    }
    if (opt.shared_intermediate_size > 0) {
      const int64_t si = opt.shared_intermediate_size;
      x.sg = b.linear(p + "mlp.shared_expert.gate_proj.weight", si, d, lin);
      x.su = b.linear(p + "mlp.shared_expert.up_proj.weight", si, d, lin);
      x.sd = b.linear(p + "mlp.shared_expert.down_proj.weight", d, si, lin);
    }
  }
  const size_t final_norm =
      b.store("model.norm.weight", {d}, b.uniform(d, 0.8f, 1.2f), DType::kF32);
  const size_t head = b.linear("lm_head.weight", opt.vocab_size, d, DType::kF32);

  TinyModel m;
  m.tensors = std::move(b.tensors);
  auto view = [&](size_t i) {
    const StoredTensor& t = m.tensors[i];
    Shape s;
    for (int64_t x : t.shape) s.push_back(x);
    return ConstTensorView(t.bytes.data(), dtype_of(t), s);
  };
  auto lin_of = [&](size_t i) { return model::Linear{view(i), m.tensors[i].scale}; };
  model::FlintWeights& w = m.weights;
  w.config = c;
  w.embed = view(embed);
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    const LayerIdx& x = idx[l];
    model::LayerWeights lw;
    lw.attn_norm = view(x.attn_norm);
    lw.ffn_norm = view(x.ffn_norm);
    lw.q = lin_of(x.q);
    lw.k = lin_of(x.k);
    lw.v = lin_of(x.v);
    lw.o = lin_of(x.o);
    lw.q_norm = view(x.q_norm);
    lw.k_norm = view(x.k_norm);
    lw.sinks = view(x.sinks);
    if (l < opt.num_dense) {
      lw.gate = lin_of(x.gate);
      lw.up = lin_of(x.up);
      lw.down = lin_of(x.down);
    } else {
      lw.router = lin_of(x.router);
      if (opt.expert_bias) lw.expert_bias = view(x.bias);
      for (int64_t e = 0; e < opt.num_experts; ++e) {
        lw.exp_gate.push_back(lin_of(x.eg[e]));
        lw.exp_up.push_back(lin_of(x.eu[e]));
        lw.exp_down.push_back(lin_of(x.ed[e]));
      }
      if (opt.shared_intermediate_size > 0) {
        lw.sh_gate = lin_of(x.sg);
        lw.sh_up = lin_of(x.su);
        lw.sh_down = lin_of(x.sd);
      }
    }
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = view(final_norm);
  w.lm_head = lin_of(head);
  return m;  // tensor byte vectors move with `m`, so the views stay valid
}

void write_reference_case(const TinyModel& m, const std::string& dir,
                          const std::vector<std::vector<int32_t>>& sequences) {
  const model::FlintConfig& c = m.weights.config;
  nlohmann::json cfg;
  cfg["vocab_size"] = c.vocab_size;
  cfg["hidden_size"] = c.hidden_size;
  cfg["num_hidden_layers"] = c.num_hidden_layers;
  cfg["num_attention_heads"] = c.num_heads;
  cfg["num_key_value_heads"] = c.num_kv_heads;
  cfg["head_dim"] = c.head_dim;
  cfg["intermediate_size"] = c.intermediate_size;
  cfg["moe_intermediate_size"] = c.moe_intermediate_size;
  cfg["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  cfg["num_experts"] = c.num_experts;
  cfg["num_experts_per_tok"] = c.num_experts_per_tok;
  cfg["norm_topk_prob"] = c.norm_topk_prob;
  cfg["routed_scaling_factor"] = c.routed_scaling_factor;
  cfg["sliding_window"] = c.sliding_window;
  cfg["rope_theta"] = c.rope_theta;
  cfg["rms_norm_eps"] = c.rms_norm_eps;
  nlohmann::json types = nlohmann::json::array(), no_rope = nlohmann::json::array(),
                 dense = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    types.push_back(c.is_sliding(l) ? "sliding_attention" : "full_attention");
    if (!c.layer_uses_rope[l]) no_rope.push_back(l);
    if (c.layer_is_dense[l]) dense.push_back(l);
  }
  cfg["layer_types"] = types;
  cfg["no_rope_layer_indices"] = no_rope;
  cfg["mlp_only_layers"] = dense;
  std::ofstream(dir + "/config.json") << cfg.dump(1);
  std::ofstream(dir + "/tokens.json") << nlohmann::json{{"sequences", sequences}}.dump();

  // safetensors: 8-byte little-endian header size, JSON header, then the data.
  nlohmann::json header;
  nlohmann::json meta;
  std::vector<uint8_t> data;
  auto add = [&](const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                 const void* bytes, size_t n) {
    header[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + n}}};
    data.insert(data.end(), static_cast<const uint8_t*>(bytes),
                static_cast<const uint8_t*>(bytes) + n);
  };
  for (const StoredTensor& t : m.tensors) {
    meta[t.name] = t.kind;
    if (t.kind == "f32") {
      add(t.name, "F32", t.shape, t.bytes.data(), t.bytes.size());
    } else if (t.kind == "bf16") {
      add(t.name, "U16", t.shape, t.bytes.data(), t.bytes.size());
    } else {
      meta[t.name] = "nvfp4:" + std::to_string(t.shape[0]) + ":" + std::to_string(t.shape[1]);
      add(t.name, "U8", {t.shape[0], t.shape[1] / 64 * 36}, t.bytes.data(), t.bytes.size());
      add(t.name + ".scale", "F32", {1}, &t.scale, 4);
    }
  }
  header["__metadata__"] = meta;
  const std::string h = header.dump();
  const uint64_t hn = h.size();
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&hn), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

}  // namespace flint::cpu::testing
