// Per-head Q/K RMSNorm, then NeoX rotary on layers that use it (spec 2.3 steps 2-3).
// Test partner: tests/unit/cpu/ops_test.cpp.
#pragma once

#include <cstdint>
#include <span>

namespace flint::cpu {

struct QkNormRopeArgs {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float eps = 1e-6f;
  bool use_rope = false;  // false on NoPE (full-attention) layers
  double rope_theta = 10000.0;
};

// q: [num_tokens, num_heads, head_dim], k: [num_tokens, num_kv_heads, head_dim], in place.
// q_norm, k_norm: [head_dim]; positions: [num_tokens].
void qk_norm_rope(float* q, float* k, std::span<const int32_t> positions, const float* q_norm,
                  const float* k_norm, const QkNormRopeArgs& args);

// NeoX rotate-half on one head vector x[head_dim] at position `pos`: pairs (j, j + head_dim/2).
void rope_neox(float* x, int64_t head_dim, int32_t pos, double theta);

}  // namespace flint::cpu
