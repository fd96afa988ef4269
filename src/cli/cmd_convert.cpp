// `flint convert HF_DIR OUT.gguf --type bf16|nvfp4`: an HF Flint checkpoint to a GGUF file with the
// flint.* keys, tokenizer and chat template (spec sections 3.2 and 4.3).
// Test: tests/python/model/test_convert.py (read back with the gguf package and compared).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "formats/gguf.h"
#include "formats/nvfp4.h"
#include "formats/quant.h"
#include "model/weights.h"

namespace flint::cli {
namespace {

using formats::GgufArray;
using formats::GgufValue;
using formats::GgufValueType;
using nlohmann::json;

enum class Kind { kF32, kFloat, kLinear };  // kLinear: NVFP4 candidate

class Converter {
 public:
  explicit Converter(bool nvfp4) : nvfp4_(nvfp4) {}

  void add(const std::string& name, ConstTensorView v, Kind kind, float scale = 1.0f) {
    add_stacked(name, {v}, {scale}, kind, /*stacked=*/false);
  }
  void add_experts(const std::string& name, const std::vector<model::Linear>& ls) {
    std::vector<ConstTensorView> vs;
    std::vector<float> scales;
    for (const auto& l : ls) {
      vs.push_back(l.w);
      scales.push_back(l.scale);
    }
    add_stacked(name, vs, scales, Kind::kLinear, /*stacked=*/true);
  }
  const std::vector<std::string>& names() const { return names_; }
  formats::GgufWriter& writer() { return writer_; }

  // Progress: `done` of `total` tensors, on a TTY only.
  void progress(size_t done, size_t total) const {
    if (!isatty(fileno(stderr)) || total == 0) return;
    const int width = 40;
    int filled = static_cast<int>(width * done / total);
    fmt::print(stderr, "\r[{}{}] {}/{} tensors", std::string(filled, '#'),
               std::string(width - filled, ' '), done, total);
    if (done == total) fmt::print(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  static std::vector<float> to_f32(ConstTensorView v, float scale) {
    std::vector<float> out(v.numel());
    formats::dequantize_row(v.dtype(), v.raw(), out.data(), v.numel());
    if (scale != 1.0f) {
      for (float& x : out) x *= scale;
    }
    return out;
  }

  void add_stacked(const std::string& name, const std::vector<ConstTensorView>& vs,
                   const std::vector<float>& scales, Kind kind, bool stacked) {
    const ConstTensorView& v0 = vs[0];
    std::vector<int64_t> ne;  // ggml order: innermost first
    for (int i = v0.ndim() - 1; i >= 0; --i) ne.push_back(v0.dim(i));
    if (stacked) ne.push_back(static_cast<int64_t>(vs.size()));
    const int64_t per = v0.numel();
    const bool quantize =
        nvfp4_ && kind == Kind::kLinear && v0.cols() % formats::kNvfp4BlockSize == 0;
    DType out = kind == Kind::kF32 || v0.ndim() == 1 ? DType::kF32
                : quantize                           ? DType::kNVFP4
                                                     : DType::kBF16;
    auto& buf = bufs_.emplace_back(vs.size() * dtype_bytes_for(out, per));
    std::vector<float> global(vs.size(), 1.0f);
    for (size_t e = 0; e < vs.size(); ++e) {
      uint8_t* dst = buf.data() + e * dtype_bytes_for(out, per);
      if (vs[e].dtype() == out && scales[e] == 1.0f) {
        std::memcpy(dst, vs[e].raw(), dtype_bytes_for(out, per));
        continue;
      }
      std::vector<float> f = to_f32(vs[e], scales[e]);
      if (out == DType::kNVFP4) {
        float amax = 0;
        for (float x : f) amax = std::max(amax, std::fabs(x));
        global[e] = formats::nvfp4_global_scale_for(amax);
        for (float& x : f) x /= global[e];
      }
      formats::quantize_row(out, f.data(), dst, per);
    }
    writer_.add_tensor(name, out, ne, buf.data());
    names_.push_back(name);
    if (out == DType::kNVFP4) {
      auto& sbuf = bufs_.emplace_back(global.size() * sizeof(float));
      std::memcpy(sbuf.data(), global.data(), sbuf.size());
      const std::string scale_name = name.substr(0, name.size() - 7) + ".scale";  // drop ".weight"
      writer_.add_tensor(scale_name, DType::kF32, {static_cast<int64_t>(global.size())},
                         sbuf.data());
      names_.push_back(scale_name);
    }
  }

  bool nvfp4_;
  formats::GgufWriter writer_;
  std::deque<std::vector<uint8_t>> bufs_;  // deque: buffers never move while the writer holds them
  std::vector<std::string> names_;
};

GgufValue bool_array(const std::vector<bool>& v) {
  GgufArray a;
  for (bool b : v) a.push_back(GgufValue::boolean(b));
  return GgufValue::array(GgufValueType::kBool, std::move(a));
}

void set_config_keys(formats::GgufWriter& g, const model::FlintConfig& c, const std::string& name,
                     bool nvfp4) {
  auto u32 = [&](const std::string& k, int64_t v) {
    g.set("flint." + k, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& k, double v) {
    g.set("flint." + k, GgufValue::f32(static_cast<float>(v)));
  };
  g.set("general.architecture", GgufValue::string("flint"));
  g.set("general.name", GgufValue::string(name));
  g.set("general.file_type", GgufValue::u32(nvfp4 ? 39 : 32));
  u32("block_count", c.num_hidden_layers);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("feed_forward_length", c.intermediate_size);
  u32("attention.head_count", c.num_heads);
  u32("attention.head_count_kv", c.num_kv_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  f32("rope.freq_base", c.rope_theta);
  u32("expert_count", c.num_experts);
  u32("expert_used_count", c.num_experts_per_tok);
  u32("expert_feed_forward_length", c.moe_intermediate_size);
  u32("expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
  int64_t dense = 0;
  while (dense < c.num_hidden_layers && c.layer_is_dense[dense]) ++dense;
  u32("leading_dense_block_count", dense);
  u32("expert_shared_count",
      c.moe_intermediate_size ? c.shared_expert_intermediate_size / c.moe_intermediate_size : 0);
  g.set("flint.expert_weights_norm", GgufValue::boolean(c.norm_topk_prob));
  f32("expert_weights_scale", c.routed_scaling_factor);
  u32("expert_gating_func", 2);  // sigmoid
  u32("attention.sliding_window", c.sliding_window);
  std::vector<bool> swa, rope;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    swa.push_back(c.is_sliding(i));
    rope.push_back(c.layer_uses_rope[i]);
  }
  g.set("flint.attention.sliding_window_pattern", bool_array(swa));
  g.set("flint.rope.pattern", bool_array(rope));
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, "{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer.ggml.* keys and the chat template from tokenizer.json / tokenizer_config.json.
Status set_tokenizer_keys(formats::GgufWriter& g, const std::string& dir,
                          const model::FlintConfig& c) {
  namespace fs = std::filesystem;
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  std::error_code ec;
  if (!fs::exists(tok_path, ec)) {
    spdlog::warn("convert: {} not found; the GGUF will have no tokenizer", tok_path);
    return ok();
  }
  FLINT_ASSIGN_OR_RETURN(std::string text, read_file(tok_path));
  try {
    json j = json::parse(text);
    const json& model = j.at("model");
    if (model.value("type", std::string("BPE")) != "BPE") {
      return make_error(ErrorCode::kUnsupported, "{}: tokenizer model '{}' is not BPE", tok_path,
                        model.value("type", std::string()));
    }
    std::map<int64_t, std::pair<std::string, int>> by_id;  // id -> (token, ggml token type)
    for (const auto& [tok, id] : model.at("vocab").items()) by_id[id.get<int64_t>()] = {tok, 1};
    for (const auto& a : j.value("added_tokens", json::array())) {
      by_id[a.at("id").get<int64_t>()] = {a.at("content").get<std::string>(),
                                          a.value("special", false) ? 3 : 4};
    }
    const int64_t n =
        std::max<int64_t>(c.vocab_size, by_id.empty() ? 0 : by_id.rbegin()->first + 1);
    GgufArray tokens, types, merges;
    for (int64_t i = 0; i < n; ++i) {
      auto it = by_id.find(i);
      tokens.push_back(
          GgufValue::string(it != by_id.end() ? it->second.first : fmt::format("[PAD{}]", i)));
      types.push_back(GgufValue::i32(it != by_id.end() ? it->second.second : 5));
    }
    for (const auto& m : model.value("merges", json::array())) {
      if (m.is_string()) {
        merges.push_back(GgufValue::string(m.get<std::string>()));
      } else {
        merges.push_back(
            GgufValue::string(m.at(0).get<std::string>() + " " + m.at(1).get<std::string>()));
      }
    }
    g.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
    g.set("tokenizer.ggml.pre", GgufValue::string("glm4"));
    g.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::kString, std::move(tokens)));
    g.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::kI32, std::move(types)));
    g.set("tokenizer.ggml.merges", GgufValue::array(GgufValueType::kString, std::move(merges)));
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kInvalidFile, "{}: {}", tok_path, e.what());
  }
  if (!c.eos_token_ids.empty()) {
    g.set("tokenizer.ggml.eos_token_id", GgufValue::u32(c.eos_token_ids[0]));
  }
  if (c.pad_token_id) g.set("tokenizer.ggml.padding_token_id", GgufValue::u32(*c.pad_token_id));
  if (c.bos_token_id) g.set("tokenizer.ggml.bos_token_id", GgufValue::u32(*c.bos_token_id));
  // Generation stop tokens beyond eos become the end-of-turn token (GLM: <|user|>).
  for (int32_t id : c.generation.eos_token_ids) {
    if (c.eos_token_ids.empty() || id != c.eos_token_ids[0]) {
      g.set("tokenizer.ggml.eot_token_id", GgufValue::u32(id));
      break;
    }
  }
  std::string tmpl;
  const std::string jinja = (fs::path(dir) / "chat_template.jinja").string();
  const std::string tcfg = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(jinja, ec)) {
    FLINT_ASSIGN_OR_RETURN(tmpl, read_file(jinja));
  } else if (fs::exists(tcfg, ec)) {
    FLINT_ASSIGN_OR_RETURN(std::string t, read_file(tcfg));
    try {
      json j = json::parse(t);
      if (j.contains("chat_template") && j["chat_template"].is_string()) tmpl = j["chat_template"];
    } catch (const json::exception& e) {
      return make_error(ErrorCode::kInvalidFile, "{}: {}", tcfg, e.what());
    }
  }
  if (!tmpl.empty()) g.set("tokenizer.chat_template", GgufValue::string(tmpl));
  return ok();
}

Status convert(const std::string& in, const std::string& out, const std::string& type) {
  if (type != "bf16" && type != "nvfp4") {
    return make_error(ErrorCode::kInvalidArgument,
                      "convert: --type must be bf16 or nvfp4, got '{}'", type);
  }
  FLINT_ASSIGN_OR_RETURN(auto w, model::FlintWeights::load_hf(in));
  const model::FlintConfig& c = w.config;
  Converter cv(type == "nvfp4");
  std::string name;
  try {
    name = std::filesystem::path(in).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(in).parent_path().filename().string();
  } catch (const std::exception&) {
    name = "flint";
  }
  set_config_keys(cv.writer(), c, name, type == "nvfp4");
  FLINT_TRY(set_tokenizer_keys(cv.writer(), in, c));

  const size_t total = 3 + c.num_hidden_layers;
  size_t done = 0;
  cv.add("token_embd.weight", w.embed, Kind::kFloat);
  cv.add("output_norm.weight", w.final_norm, Kind::kF32);
  if (!c.tie_word_embeddings) cv.add("output.weight", w.lm_head.w, Kind::kFloat, w.lm_head.scale);
  cv.progress(done += 3, total);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const auto& L = w.layers[i];
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}", i, s); };
    cv.add(n("attn_norm.weight"), L.attn_norm, Kind::kF32);
    cv.add(n("attn_q.weight"), L.q.w, Kind::kLinear, L.q.scale);
    cv.add(n("attn_k.weight"), L.k.w, Kind::kLinear, L.k.scale);
    cv.add(n("attn_v.weight"), L.v.w, Kind::kLinear, L.v.scale);
    cv.add(n("attn_output.weight"), L.o.w, Kind::kLinear, L.o.scale);
    cv.add(n("attn_q_norm.weight"), L.q_norm, Kind::kF32);
    cv.add(n("attn_k_norm.weight"), L.k_norm, Kind::kF32);
    cv.add(n("attn_sinks.weight"), L.sinks, Kind::kF32);
    cv.add(n("ffn_norm.weight"), L.ffn_norm, Kind::kF32);
    if (c.layer_is_dense[i]) {
      cv.add(n("ffn_gate.weight"), L.gate.w, Kind::kLinear, L.gate.scale);
      cv.add(n("ffn_up.weight"), L.up.w, Kind::kLinear, L.up.scale);
      cv.add(n("ffn_down.weight"), L.down.w, Kind::kLinear, L.down.scale);
    } else {
      // The router stays high precision: it picks the experts.
      cv.add(n("ffn_gate_inp.weight"), L.router.w, Kind::kFloat, L.router.scale);
      if (!L.expert_bias.empty()) cv.add(n("exp_probs_b.bias"), L.expert_bias, Kind::kF32);
      cv.add_experts(n("ffn_gate_exps.weight"), L.exp_gate);
      cv.add_experts(n("ffn_up_exps.weight"), L.exp_up);
      cv.add_experts(n("ffn_down_exps.weight"), L.exp_down);
      if (c.shared_expert_intermediate_size > 0) {
        cv.add(n("ffn_gate_shexp.weight"), L.sh_gate.w, Kind::kLinear, L.sh_gate.scale);
        cv.add(n("ffn_up_shexp.weight"), L.sh_up.w, Kind::kLinear, L.sh_up.scale);
        cv.add(n("ffn_down_shexp.weight"), L.sh_down.w, Kind::kLinear, L.sh_down.scale);
      }
    }
    cv.progress(++done, total);
  }
  FLINT_TRY(cv.writer().write(out));
  spdlog::info("convert: wrote {} ({} tensors, {})", out, cv.names().size(), type);
  return ok();
}

}  // namespace

void add_convert_command(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("convert", "Convert an HF Flint checkpoint to a BF16 or NVFP4 GGUF");
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("bf16");
  cmd->add_option("hf_dir", *in, "HF checkpoint directory")->required();
  cmd->add_option("out", *out, "output .gguf file")->required();
  cmd->add_option("--type", *type,
                  "bf16 or nvfp4 (every linear except embedding, head and router)");
  cmd->callback([in, out, type, &exit_code] {
    auto st = convert(*in, *out, *type);
    if (!st) {
      spdlog::error("convert: {}", st.error().message);
      exit_code = 1;
      return;
    }
    exit_code = 0;
  });
}

}  // namespace flint::cli
