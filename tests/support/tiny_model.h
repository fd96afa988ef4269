// Tiny random Flint models built in memory for the CPU, CUDA and engine tests (one set of weights
// for every backend), and a writer of the same stored values to safetensors for the NumPy
// reference (tests/reference/flint_ref.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace flint::cpu::testing {

struct TinyOptions {
  int64_t num_layers = 4;
  std::vector<bool> sliding;  // per layer; empty: {full, sliding, sliding, ..., full}
  int64_t num_dense = 1;      // leading dense layers
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 16;
  int64_t intermediate_size = 64;
  int64_t moe_intermediate_size = 64;
  int64_t shared_intermediate_size = 64;
  int64_t num_experts = 8;
  int64_t num_experts_per_tok = 2;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  bool expert_bias = false;
  int64_t sliding_window = 5;
  int64_t vocab_size = 96;
  int64_t max_position_embeddings = 4096;
  float sink_scale = 2.0f;           // sinks ~ U(-1, 1) * sink_scale + 1: large enough to matter
  DType linear_dtype = DType::kF32;  // q/k/v/o, MLPs, experts: F32, BF16 or NVFP4
  uint64_t seed = 1;
};

struct StoredTensor {
  std::string name;            // HF name
  std::string kind;            // "f32", "bf16" or "nvfp4"
  std::vector<int64_t> shape;  // logical [rows, cols] or [n]
  std::vector<uint8_t> bytes;
  float scale = 1.0f;  // NVFP4 global scale
};

struct TinyModel {
  model::FlintWeights weights;
  std::vector<StoredTensor> tensors;  // owned by `weights.storage` as well
};

TinyModel make_tiny_model(const TinyOptions& opt);

// Writes DIR/config.json (HF keys), DIR/model.safetensors and DIR/tokens.json for the reference.
void write_reference_case(const TinyModel& m, const std::string& dir,
                          const std::vector<std::vector<int32_t>>& sequences);

}  // namespace flint::cpu::testing
