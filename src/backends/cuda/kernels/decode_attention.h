// Decode attention over the KV cache (paged for full layers, ring for sliding layers), split
// across blocks along the keys (flash-decoding); the per-head sink is added when the splits merge.
// Test: tests/kernels/decode_attention_test.cu
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/kernels/kv_layout.h"

namespace flint::cuda {

struct DecodeAttentionArgs {
  int num_heads = 0, num_kv_heads = 0,
      head_dim = 0;  // head_dim 16, 32, 64 or 128; H / Hkv in {1,2,4,8}
  float scale = 0.0f;
  bool sliding = false;  // sliding: keys max(0, p - window + 1) .. p; full: 0 .. p
  int num_splits = 1;    // from decode_attention_splits()
};

// Blocks the split heuristic aims for (2 per SM on an H200; 8 measured slower), and the most
// splits it picks.
inline constexpr int kAttentionTargetBlocks = 2 * 132;
inline constexpr int kAttentionMaxSplits = 64;

// Splits that keep the GPU busy for `num_tokens` rows of up to `max_keys` keys; at most max_splits.
int decode_attention_splits(int num_tokens, int num_kv_heads, int64_t max_keys, int max_splits);

// Workspace floats for the partial results: [num_tokens, H, num_splits, head_dim + 2]. For any
// num_tokens, num_tokens * splits <= kAttentionTargetBlocks / num_kv_heads + num_tokens.
inline int64_t decode_attention_workspace(int num_tokens, int num_heads, int head_dim,
                                          int num_splits) {
  return int64_t(num_tokens) * num_heads * num_splits * (head_dim + 2);
}

// out[t, h, :] = sum_j P[h, t, j] v[j] with the sink softmax of spec 2.3 step 6 over the keys of
// row t. q: [num_tokens, H, D] f32; sinks: [H] f32 or
// null; out: [num_tokens, H * D] f32; workspace: decode_attention_workspace() floats.
// k_step, v_step: [num_tokens, Hkv, D] bf16, this step's rows (see TokenKv).
void decode_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                      const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                      int num_tokens, const DecodeAttentionArgs& a, float* workspace,
                      cudaStream_t s);

}  // namespace flint::cuda
