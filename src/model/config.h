// FlintConfig: every architectural knob of a Flint checkpoint, parsed from HF config.json (+
// generation_config.json) or from GGUF metadata, and validated. Nothing else in the code base may
// hard-code a model dimension. Spec: ../shared/spec/flint-model.md sections 1 and 3.2.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace flint::formats {
class GgufFile;
}

namespace flint::model {

enum class LayerType : uint8_t { kFullAttention, kSlidingAttention };

// Sampling defaults from generation_config.json (absent fields stay unset).
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;
  std::vector<int32_t> eos_token_ids;
};

struct FlintConfig {
  std::string architecture = "FlintForCausalLM";
  std::string model_type = "flint";

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_heads = 0;     // HF num_attention_heads
  int64_t num_kv_heads = 0;  // HF num_key_value_heads
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;                // dense MLP layers
  int64_t moe_intermediate_size = 0;            // each routed expert
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  int64_t num_experts = 0;                      // HF num_experts / n_routed_experts
  int64_t num_experts_per_tok = 0;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  bool has_expert_bias = false;  // an e_score_correction_bias tensor is present (set at binding)

  // Per layer, size num_hidden_layers.
  std::vector<LayerType> layer_types;
  std::vector<bool> layer_uses_rope;  // false for no_rope_layer_indices
  std::vector<bool> layer_is_dense;   // true for mlp_only_layers (a prefix)

  // Keys a sliding layer attends to, counting the current token: key j is visible from query i
  // iff 0 <= i - j < sliding_window (llama.cpp's n_swa rule). Flint stores 513.
  int64_t sliding_window = 0;
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  float attention_scale = 0.0f;  // 0 until validated; then 1/sqrt(head_dim) unless the config says
  // The softmax scale to use: attention_scale, or 1/sqrt(head_dim) in a config built in code and
  // never validated (test and benchmark shapes).
  float softmax_scale() const {
    return attention_scale > 0 ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json eos_token_id (int or list)
  std::optional<int32_t> pad_token_id;
  GenerationDefaults generation;

  // Parses config.json contents. Unknown architectures, missing required fields and inconsistent
  // values are errors that name the field.
  static Result<FlintConfig> from_hf_json(const nlohmann::json& config);
  // Reads config.json (and generation_config.json beside it, if present) from a directory or file.
  static Result<FlintConfig> from_hf_path(const std::string& path);
  // Reads the flint.* keys of a GGUF file.
  static Result<FlintConfig> from_gguf(const formats::GgufFile& gguf);
  // Merges generation_config.json contents into `generation`.
  Status apply_generation_config(const nlohmann::json& gen);

  // Cross-field checks (heads divide, window > 0, layer lists sized right, ...). Called by the
  // parsers; call again after editing a config by hand.
  Status validate();

  bool is_sliding(int64_t layer) const {
    return layer_types[layer] == LayerType::kSlidingAttention;
  }
  int64_t num_full_layers() const;
  int64_t num_sliding_layers() const;
  // Parameter totals computed from the dimensions (spec section 7.2): all, and active per token
  // (excluding the input embedding table and unselected experts).
  int64_t total_params() const;
  int64_t active_params() const;
  // Bytes of full-attention KV per token for a KV element of `kv_bytes` bytes.
  int64_t kv_bytes_per_token(int kv_bytes = 2) const;
};

}  // namespace flint::model
