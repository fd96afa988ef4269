// FlintWeights binding against tests/support/tiny_flint.py: every tensor of many tiny checkpoints
// (HF, BF16 GGUF, NVFP4 GGUF) must decode to exactly the float32 values the Python writer stored.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "formats/quant.h"

namespace flint::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string python() {
  const char* p = std::getenv("FLINT_PYTHON");
  return p ? p : std::string(FLINT_SOURCE_DIR) + "/.venv/bin/python";
}

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("flint_weights_test_{}_{}", getpid(), name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Writes a checkpoint with tiny_flint.py; returns its path and fills `index` with the dump.
std::string make_checkpoint(const std::string& tag, const std::string& form, const json& knobs,
                            json& index) {
  fs::path dir = scratch(tag + "_" + form);
  std::string out = form == "hf" ? (dir / "hf").string() : (dir / "model.gguf").string();
  std::string cmd = fmt::format("{} {}/tests/support/tiny_flint.py {} --form {} --dump {}",
                                python(), FLINT_SOURCE_DIR, out, form, (dir / "dump").string());
  for (const auto& [k, v] : knobs.items()) cmd += fmt::format(" --set '{}={}'", k, v.dump());
  cmd += " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "dump" / "index.json");
  index = json::parse(in);
  index["dir"] = (dir / "dump").string();
  return out;
}

std::vector<float> read_f32(const fs::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(p, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  EXPECT_TRUE(in.good()) << p;
  return v;
}

// The bound view (and global scale) for an HF tensor name.
std::pair<ConstTensorView, float> role(const FlintWeights& w, const std::string& name) {
  if (name == "model.embed_tokens.weight") return {w.embed, 1.0f};
  if (name == "model.norm.weight") return {w.final_norm, 1.0f};
  if (name == "lm_head.weight") return {w.lm_head.w, w.lm_head.scale};
  std::smatch m;
  static const std::regex re(R"(model\.layers\.(\d+)\.(.*))");
  if (!std::regex_match(name, m, re)) return {};
  const LayerWeights& L = w.layers.at(std::stoi(m[1]));
  const std::string r = m[2];
  auto lin = [](const Linear& l) { return std::pair{l.w, l.scale}; };
  static const std::regex ex(R"(mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight)");
  if (std::regex_match(r, m, ex)) {
    const int e = std::stoi(m[1]);
    if (m[2] == "gate") return lin(L.exp_gate.at(e));
    if (m[2] == "up") return lin(L.exp_up.at(e));
    return lin(L.exp_down.at(e));
  }
  static const std::regex sh(R"(mlp\.shared_experts?\.(gate|up|down)_proj\.weight)");
  if (std::regex_match(r, m, sh)) {
    return lin(m[1] == "gate" ? L.sh_gate : m[1] == "up" ? L.sh_up : L.sh_down);
  }
  if (r == "input_layernorm.weight") return {L.attn_norm, 1.0f};
  if (r == "post_attention_layernorm.weight") return {L.ffn_norm, 1.0f};
  if (r == "self_attn.q_proj.weight") return lin(L.q);
  if (r == "self_attn.k_proj.weight") return lin(L.k);
  if (r == "self_attn.v_proj.weight") return lin(L.v);
  if (r == "self_attn.o_proj.weight") return lin(L.o);
  if (r == "self_attn.q_norm.weight") return {L.q_norm, 1.0f};
  if (r == "self_attn.k_norm.weight") return {L.k_norm, 1.0f};
  if (r.find("sinks") != std::string::npos || r.find("softmax_offset") != std::string::npos) {
    return {L.sinks, 1.0f};
  }
  if (r.find("e_score_correction_bias") != std::string::npos) return {L.expert_bias, 1.0f};
  if (r == "mlp.gate.weight") return lin(L.router);
  if (r == "mlp.gate_proj.weight") return lin(L.gate);
  if (r == "mlp.up_proj.weight") return lin(L.up);
  if (r == "mlp.down_proj.weight") return lin(L.down);
  return {};
}

void expect_config_matches(const FlintConfig& c, const json& k) {
  EXPECT_EQ(c.num_hidden_layers, k["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, k["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.vocab_size, k["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.num_heads, k["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_kv_heads, k["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, k["head_dim"].get<int64_t>());
  EXPECT_EQ(c.num_experts, k["num_experts"].get<int64_t>());
  EXPECT_EQ(c.num_experts_per_tok, k["num_experts_per_tok"].get<int64_t>());
  EXPECT_EQ(c.moe_intermediate_size, k["moe_intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.shared_expert_intermediate_size, k["shared_expert_intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.sliding_window, k["sliding_window"].get<int64_t>());
  EXPECT_EQ(c.norm_topk_prob, k["norm_topk_prob"].get<bool>());
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, k["routed_scaling_factor"].get<float>());
  EXPECT_EQ(c.has_expert_bias, k["expert_bias"].get<bool>());
  EXPECT_DOUBLE_EQ(c.rope_theta, k["rope_theta"].get<double>());
  EXPECT_FLOAT_EQ(c.rms_norm_eps, k["rms_norm_eps"].get<float>());
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(k["head_dim"].get<float>()));
  const auto types = k["layer_types"].get<std::vector<std::string>>();
  const auto no_rope = k["no_rope_layers"].get<std::vector<int64_t>>();
  const auto dense = k["mlp_only_layers"].get<std::vector<int64_t>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    SCOPED_TRACE(fmt::format("layer {}", i));
    EXPECT_EQ(c.is_sliding(i), types[i] == "sliding_attention");
    EXPECT_EQ(c.layer_uses_rope[i], std::find(no_rope.begin(), no_rope.end(), i) == no_rope.end());
    EXPECT_EQ(c.layer_is_dense[i], std::find(dense.begin(), dense.end(), i) != dense.end());
  }
}

// Loads `path` and checks every tensor of the dump bit for bit (after decoding to f32).
void expect_weights_match(const std::string& path, const json& index) {
  auto w = FlintWeights::load(path);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  expect_config_matches(w->config, index["config"]);
  for (const auto& [name, info] : index["tensors"].items()) {
    SCOPED_TRACE(name);
    auto [view, scale] = role(*w, name);
    ASSERT_FALSE(view.empty());
    const auto shape = info["shape"].get<std::vector<int64_t>>();
    ASSERT_EQ(view.ndim(), static_cast<int>(shape.size()));
    for (size_t d = 0; d < shape.size(); ++d) ASSERT_EQ(view.dim(static_cast<int>(d)), shape[d]);
    const size_t n = static_cast<size_t>(view.numel());
    std::vector<float> want =
        read_f32(fs::path(index["dir"].get<std::string>()) / info["file"].get<std::string>(), n);
    std::vector<float> got(n);
    formats::dequantize_row(view.dtype(), view.raw(), got.data(), static_cast<int64_t>(n));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += (got[i] * scale != want[i]);
    EXPECT_EQ(bad, 0u) << "first: got " << got[0] * scale << " want " << want[0];
  }
}

struct Case {
  const char* tag;
  json knobs;
};

std::vector<Case> cases() {
  return {
      {"default", json::object()},
      {"window1_dense2",
       {{"sliding_window", 1}, {"mlp_only_layers", {0, 1}}, {"num_hidden_layers", 5}}},
      {"nodense_top1",
       {{"mlp_only_layers", json::array()}, {"num_experts_per_tok", 1}, {"num_experts", 3}}},
      {"topall_noshared",
       {{"num_experts", 4},
        {"num_experts_per_tok", 4},
        {"shared_expert_intermediate_size", 0},
        {"norm_topk_prob", false},
        {"routed_scaling_factor", 2.5}}},
      {"bias_variants",
       {{"expert_bias", true},
        {"experts_key", "n_routed_experts"},
        {"shared_expert_name", "shared_experts"},
        {"sink_name", "self_attn.softmax_offset"},
        {"bias_name", "mlp.e_score_correction_bias"},
        {"shards", 3}}},
      {"f32_window513",
       {{"dtype", "F32"},
        {"sliding_window", 513},
        {"rope_theta", 500000.0},
        {"rms_norm_eps", 1e-5},
        {"shared_expert_intermediate_size", 64},
        {"num_experts", 16},
        {"num_experts_per_tok", 6}}},
      {"all_sliding",
       {{"layer_types", {"sliding_attention", "sliding_attention", "sliding_attention"}},
        {"num_hidden_layers", 3},
        {"no_rope_layers", {1}},
        {"sink_scale", 4.0}}},
  };
}

class WeightsBinding : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightsBinding, EveryTensorMatchesTheWriter) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.tag);
    json index;
    std::string path = make_checkpoint(c.tag, GetParam(), c.knobs, index);
    expect_weights_match(path, index);
    fs::remove_all(fs::path(path).parent_path());
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, WeightsBinding, ::testing::Values("hf", "gguf-bf16", "gguf-nvfp4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(WeightsBinding, Nvfp4GlobalScalesArePerExpert) {
  json index;
  std::string path = make_checkpoint("scales", "gguf-nvfp4", json::object(), index);
  auto w = FlintWeights::load_gguf(path);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  const LayerWeights& L = w->layers.back();
  ASSERT_GE(L.exp_up.size(), 2u);
  EXPECT_EQ(L.exp_up[0].w.dtype(), DType::kNVFP4);
  EXPECT_NE(L.exp_up[0].scale, 1.0f);
  EXPECT_NE(L.exp_up[0].scale, L.exp_up[1].scale);
  EXPECT_NE(L.q.scale, 1.0f);
  EXPECT_EQ(L.router.w.dtype(), DType::kBF16);
  EXPECT_EQ(L.router.scale, 1.0f);
}

TEST(WeightsBinding, ViewsPointIntoTheMappedFile) {
  json index;
  std::string path = make_checkpoint("mmap", "gguf-bf16", json::object(), index);
  auto w = FlintWeights::load_gguf(path);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  // Consecutive experts of one stacked tensor are adjacent slices of the same mapping.
  const LayerWeights& L = w->layers.back();
  const auto* a = static_cast<const uint8_t*>(L.exp_gate[0].w.raw());
  const auto* b = static_cast<const uint8_t*>(L.exp_gate[1].w.raw());
  EXPECT_EQ(b - a, L.exp_gate[0].w.nbytes());
  EXPECT_FALSE(w->storage.empty());
}

TEST(WeightsBinding, GgufConfigOverrideReplacesMetadata) {
  json index;
  std::string path = make_checkpoint("override", "gguf-bf16", json::object(), index);
  auto base = FlintWeights::load_gguf(path);
  ASSERT_TRUE(base.has_value()) << base.error().message;
  FlintConfig cfg = base->config;
  cfg.rope_theta = 123456.0;
  cfg.sliding_window = 3;
  auto w = FlintWeights::load(path, &cfg);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  EXPECT_EQ(w->config.rope_theta, 123456.0);
  EXPECT_EQ(w->config.sliding_window, 3);
  cfg.num_experts = 5;  // now the tensors disagree with the config
  auto bad = FlintWeights::load(path, &cfg);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("ffn_gate_inp.weight' has shape"), std::string::npos)
      << bad.error().message;
}

TEST(WeightsBinding, MissingFileIsAnError) {
  auto w = FlintWeights::load("/nonexistent/flint/model.gguf");
  ASSERT_FALSE(w.has_value());
  auto d = FlintWeights::load("/nonexistent/flint_dir/");
  ASSERT_FALSE(d.has_value());
}

}  // namespace
}  // namespace flint::model
