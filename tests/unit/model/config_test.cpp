// FlintConfig parsing and validation: field spellings, defaults, generation_config merging and
// every rejection, each checked for an error that names the field. Partner: src/model/config.cpp.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace flint::model {
namespace {

using nlohmann::json;

// A small valid config.json: 4 layers (full, full, sliding, full), one dense layer.
json base() {
  return json::parse(R"({
    "architectures": ["FlintForCausalLM"], "model_type": "flint",
    "vocab_size": 384, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "hidden_act": "silu", "intermediate_size": 192, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
    "norm_topk_prob": true, "routed_scaling_factor": 1.0, "mlp_only_layers": [0],
    "layer_types": ["full_attention", "full_attention", "sliding_attention", "full_attention"],
    "no_rope_layer_indices": [0, 1, 3], "sliding_window": 5, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": false,
    "eos_token_id": 367, "pad_token_id": 367
  })");
}

// Expects `j` to be rejected with a message containing every string in `needles`.
void expect_rejected(const json& j, std::initializer_list<std::string> needles) {
  auto c = FlintConfig::from_hf_json(j);
  ASSERT_FALSE(c.has_value()) << "accepted: " << j.dump();
  for (const auto& n : needles) {
    EXPECT_NE(c.error().message.find(n), std::string::npos) << c.error().message << " lacks " << n;
  }
}

TEST(FlintConfig, ParsesEveryField) {
  auto c = FlintConfig::from_hf_json(base());
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->vocab_size, 384);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->intermediate_size, 192);
  EXPECT_EQ(c->moe_intermediate_size, 64);
  EXPECT_EQ(c->shared_expert_intermediate_size, 128);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->sliding_window, 5);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_EQ(c->layer_types,
            (std::vector<LayerType>{LayerType::kFullAttention, LayerType::kFullAttention,
                                    LayerType::kSlidingAttention, LayerType::kFullAttention}));
  EXPECT_EQ(c->layer_uses_rope, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(c->layer_is_dense, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(c->num_full_layers(), 3);
  EXPECT_EQ(c->num_sliding_layers(), 1);
  EXPECT_FLOAT_EQ(c->attention_scale, 0.25f);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{367});
  EXPECT_EQ(c->pad_token_id, 367);
  EXPECT_FALSE(c->bos_token_id.has_value());
}

TEST(FlintConfig, AcceptsAlternativeSpellings) {
  json j = base();
  j.erase("num_experts");
  j["n_routed_experts"] = 8;
  j.erase("shared_expert_intermediate_size");
  j["n_shared_experts"] = 2;
  j["eos_token_id"] = json::array({367, 5, 6});
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  j.erase("no_rope_layer_indices");  // defaults to the full-attention layers
  auto c = FlintConfig::from_hf_json(j);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->shared_expert_intermediate_size, 128);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{367, 5, 6}));
  EXPECT_EQ(c->rope_theta, 250000.0);
  EXPECT_EQ(c->layer_uses_rope, (std::vector<bool>{false, false, true, false}));
}

TEST(FlintConfig, DefaultsOptionalFields) {
  json j = base();
  for (const char* k :
       {"num_key_value_heads", "head_dim", "norm_topk_prob", "routed_scaling_factor",
        "rms_norm_eps", "rope_theta", "max_position_embeddings", "eos_token_id", "pad_token_id",
        "shared_expert_intermediate_size", "tie_word_embeddings"}) {
    j.erase(k);
  }
  auto c = FlintConfig::from_hf_json(j);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);  // hidden_size / num_attention_heads
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->routed_scaling_factor, 1.0f);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FLOAT_EQ(c->attention_scale, 1.0f / std::sqrt(16.0f));
}

TEST(FlintConfig, ExplicitAttentionScaleWins) {
  json j = base();
  j["attention_scale"] = 0.1;
  auto c = FlintConfig::from_hf_json(j);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_FLOAT_EQ(c->attention_scale, 0.1f);
}

TEST(FlintConfig, RejectsUnknownArchitecture) {
  json j = base();
  j["architectures"] = {"LlamaForCausalLM"};
  expect_rejected(j, {"architectures", "LlamaForCausalLM"});
  j = base();
  j["model_type"] = "qwen2_moe";
  expect_rejected(j, {"model_type", "qwen2_moe"});
  j = base();
  j.erase("architectures");
  j.erase("model_type");
  expect_rejected(j, {"architectures"});
}

TEST(FlintConfig, RejectsMissingRequiredFields) {
  for (const char* k : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "layer_types", "sliding_window", "num_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "intermediate_size"}) {
    SCOPED_TRACE(k);
    json j = base();
    j.erase(k);
    expect_rejected(j, {"missing", k});
  }
}

TEST(FlintConfig, RejectsWrongTypes) {
  for (auto [k, v] : std::vector<std::pair<std::string, json>>{{"hidden_size", "64"},
                                                               {"num_hidden_layers", 4.5},
                                                               {"norm_topk_prob", 1},
                                                               {"rope_theta", "big"},
                                                               {"layer_types", "full_attention"},
                                                               {"eos_token_id", "x"},
                                                               {"mlp_only_layers", 0},
                                                               {"eos_token_id", -1}}) {
    SCOPED_TRACE(k);
    json j = base();
    j[k] = v;
    expect_rejected(j, {k});
  }
  expect_rejected(json::array({1, 2}), {"expected a JSON object"});
}

TEST(FlintConfig, RejectsInconsistentValues) {
  struct Bad {
    std::string field;
    json value;
    std::string needle;
  };
  for (const auto& b : std::vector<Bad>{
           {"num_attention_heads", 5, "not a multiple of num_key_value_heads"},
           {"num_key_value_heads", 0, "num_key_value_heads"},
           {"sliding_window", 0, "sliding_window must be > 0"},
           {"sliding_window", -3, "sliding_window"},
           {"layer_types", {"full_attention", "sliding_attention"}, "layer_types"},
           {"layer_types",
            {"full_attention", "full_attention", "global", "full_attention"},
            "global"},
           {"mlp_only_layers", {1}, "prefix"},
           {"mlp_only_layers", {0, 2}, "prefix"},
           {"mlp_only_layers", {7}, "outside"},
           {"no_rope_layer_indices", {4}, "outside"},
           {"num_experts_per_tok", 9, "num_experts_per_tok"},
           {"num_experts_per_tok", 0, "num_experts_per_tok"},
           {"num_experts", -1, "num_experts"},
           {"moe_intermediate_size", 0, "moe_intermediate_size"},
           {"shared_expert_intermediate_size", -5, "shared_expert_intermediate_size"},
           {"intermediate_size", 0, "intermediate_size"},
           {"hidden_size", 0, "hidden_size"},
           {"vocab_size", -2, "vocab_size"},
           {"num_hidden_layers", 0, "num_hidden_layers"},
           {"head_dim", 0, "head_dim"},
           {"rms_norm_eps", 0.0, "rms_norm_eps"},
           {"rope_theta", 0.0, "rope_theta"},
           {"routed_scaling_factor", 0.0, "routed_scaling_factor"},
           {"eos_token_id", 384, "eos_token_id"},
           {"pad_token_id", 1000, "pad_token_id"},
           {"hidden_act", "gelu", "hidden_act"},
           {"attention_bias", true, "attention_bias"},
           {"decoder_sparse_step", 2, "decoder_sparse_step"},
           {"scoring_func", "softmax", "scoring_func"},
           {"n_group", 8, "n_group"},
           {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_scaling"},
           {"hidden_size", int64_t{1} << 40, "hidden_size"},
       }) {
    SCOPED_TRACE(b.field + " = " + b.value.dump());
    json j = base();
    j[b.field] = b.value;
    expect_rejected(j, {b.needle});
  }
}

TEST(FlintConfig, ValidateCatchesHandEdits) {
  auto c = FlintConfig::from_hf_json(base());
  ASSERT_TRUE(c.has_value());
  FlintConfig bad = *c;
  bad.layer_types.pop_back();
  EXPECT_FALSE(bad.validate().has_value());
  bad = *c;
  bad.num_experts_per_tok = 100;
  EXPECT_FALSE(bad.validate().has_value());
  bad = *c;
  bad.layer_is_dense = {false, true, false, false};
  EXPECT_FALSE(bad.validate().has_value());
}

TEST(FlintConfig, GenerationConfigMerges) {
  auto c = FlintConfig::from_hf_json(base());
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE(
      c
          ->apply_generation_config(json::parse(
              R"({"eos_token_id": [367, 371], "temperature": 0.7, "top_p": 0.9, "top_k": 20})"))
          .has_value());
  EXPECT_EQ(c->generation.eos_token_ids, (std::vector<int32_t>{367, 371}));
  EXPECT_FLOAT_EQ(*c->generation.temperature, 0.7f);
  EXPECT_FLOAT_EQ(*c->generation.top_p, 0.9f);
  EXPECT_EQ(*c->generation.top_k, 20);
  EXPECT_FALSE(c->generation.min_p.has_value());
  // An int eos is accepted too; a bad value is rejected and leaves the defaults untouched.
  ASSERT_TRUE(c->apply_generation_config(json::parse(R"({"eos_token_id": 5})")).has_value());
  EXPECT_EQ(c->generation.eos_token_ids, std::vector<int32_t>{5});
  auto st = c->apply_generation_config(json::parse(R"({"top_p": 2.0, "temperature": 0.1})"));
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("top_p"), std::string::npos);
  EXPECT_FLOAT_EQ(*c->generation.temperature, 0.7f);
  EXPECT_FALSE(c->apply_generation_config(json::parse(R"({"eos_token_id": 9999})")).has_value());
}

TEST(FlintConfig, ReadsDirectoryWithGenerationConfig) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / fmt::format("flint_config_test_{}", getpid());
  fs::create_directories(d);
  std::ofstream(d / "config.json") << base().dump();
  std::ofstream(d / "generation_config.json") << R"({"eos_token_id": [367, 370], "top_k": 7})";
  auto c = FlintConfig::from_hf_path(d.string());
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(*c->generation.top_k, 7);
  EXPECT_EQ(c->generation.eos_token_ids, (std::vector<int32_t>{367, 370}));
  auto f = FlintConfig::from_hf_path((d / "config.json").string());
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(*f->generation.top_k, 7);

  std::ofstream(d / "config.json") << "{\"vocab_size\": ";
  auto bad = FlintConfig::from_hf_path(d.string());
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("invalid JSON"), std::string::npos) << bad.error().message;
  fs::remove_all(d);
  auto missing = FlintConfig::from_hf_path(d.string());
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find(d.filename().string()), std::string::npos)
      << missing.error().message;
}

TEST(FlintConfig, RealDimensionsGivePublishedTotals) {
  auto c =
      FlintConfig::from_hf_path(std::string(FLINT_SOURCE_DIR) + "/tests/data/flint-config.json");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  // Published: 39.8B total, about 2.5B active (spec section 0 and 7.2).
  EXPECT_NEAR(static_cast<double>(c->total_params()) / 1e9, 39.8, 0.05);
  EXPECT_NEAR(static_cast<double>(c->active_params()) / 1e9, 2.5, 0.05);
  // 28 KiB of BF16 KV per token (spec 7.1).
  EXPECT_EQ(c->kv_bytes_per_token(2), 28 * 1024);
  EXPECT_EQ(c->num_full_layers(), 14);
  EXPECT_EQ(c->sliding_window, 513);
}

}  // namespace
}  // namespace flint::model
