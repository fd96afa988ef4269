// FlintWeights: a checkpoint's tensors bound by role (from HF or GGUF names), with shape and dtype
// checks. Views point into the mapped files that FlintWeights keeps alive; nothing is copied.
// Spec: ../shared/spec/flint-model.md section 3. Test partner: tests/unit/model/weights_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/tensor.h"
#include "model/config.h"

namespace flint::model {

// A weight matrix W[out, in] (shape {out, in}) in F32, BF16, F16, Q8_0, Q4_1 or NVFP4. For NVFP4,
// `scale` is the per-tensor global scale (GGUF `<name>.scale`, ModelOpt weight_scale_2): the real
// value is E2M1 x UE4M3 x scale. It is 1 for other types.
struct Linear {
  ConstTensorView w;
  float scale = 1.0f;
  int64_t out() const { return w.dim(0); }
  int64_t in() const { return w.dim(1); }
};

struct LayerWeights {
  ConstTensorView attn_norm;  // [hidden_size]
  ConstTensorView ffn_norm;   // [hidden_size]
  Linear q;                   // [num_heads*head_dim, hidden_size]
  Linear k;                   // [num_kv_heads*head_dim, hidden_size]
  Linear v;                   // [num_kv_heads*head_dim, hidden_size]
  Linear o;                   // [hidden_size, num_heads*head_dim]
  ConstTensorView q_norm;     // [head_dim]
  ConstTensorView k_norm;     // [head_dim]
  ConstTensorView sinks;      // [num_heads] (F32 or BF16; used in F32)

  // Dense layers (layer_is_dense): SiLU-gated MLP.
  Linear gate, up, down;  // [intermediate_size, hidden], [..], [hidden, intermediate_size]

  // MoE layers.
  Linear router;                 // [num_experts, hidden_size]
  ConstTensorView expert_bias;   // [num_experts] or empty
  std::vector<Linear> exp_gate;  // num_experts x [moe_intermediate_size, hidden_size]
  std::vector<Linear> exp_up;    // num_experts x [moe_intermediate_size, hidden_size]
  std::vector<Linear> exp_down;  // num_experts x [hidden_size, moe_intermediate_size]
  Linear sh_gate, sh_up,
      sh_down;  // shared expert, empty views if shared_expert_intermediate_size == 0
};

struct FlintWeights {
  FlintConfig config;
  ConstTensorView embed;  // [vocab_size, hidden_size]
  std::vector<LayerWeights> layers;
  ConstTensorView final_norm;  // [hidden_size]
  Linear lm_head;              // [vocab_size, hidden_size]

  // Keeps the mapped files (or generated buffers) alive for the views above.
  std::vector<std::shared_ptr<const void>> storage;

  // Binds an HF directory (config.json + safetensors, single or sharded). Every missing,
  // unexpected or misshapen tensor is listed in one error.
  static Result<FlintWeights> load_hf(const std::string& dir);
  // As above, with `config` replacing the directory's config.json when not null.
  static Result<FlintWeights> load_hf(const std::string& dir, const FlintConfig* config_override);
  // Binds a GGUF file; `config` overrides the GGUF's own metadata (--hf-config-path) if given.
  static Result<FlintWeights> load_gguf(const std::string& path,
                                        const FlintConfig* config_override = nullptr);
  // Loads whichever form `path` is (a .gguf file, or a directory / config.json).
  static Result<FlintWeights> load(const std::string& path,
                                   const FlintConfig* config_override = nullptr);
  // Random weights of `config`'s shape (--load-format dummy): linears in `dtype` (F32 or BF16),
  // norms 1, sinks and biases in F32. Deterministic for a seed. Errors when the weights would not
  // fit in this machine's memory.
  static Result<FlintWeights> dummy(const FlintConfig& config, DType dtype, uint64_t seed);
};

}  // namespace flint::model
