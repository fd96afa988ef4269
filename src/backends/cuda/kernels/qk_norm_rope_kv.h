// Fused per-head Q/K RMSNorm + NeoX RoPE (sliding layers) + KV-cache write, after the q|k|v
// projection. Test: tests/kernels/qk_norm_rope_kv_test.cu
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/kernels/kv_layout.h"

namespace flint::cuda {

struct QkNormRopeArgs {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;  // head_dim even, <= 256
  float eps = 1e-6f;
  bool rope = false;  // NeoX rotate-half on all head_dim channels
  double rope_theta = 10000.0;
};

// For each row t of qkv ([num_tokens, (H + 2*Hkv) * D] f32: q heads, then k, then v):
// q_out[t, h] = rope(rmsnorm(q[t, h]) * q_norm); k_step[t] = rope(rmsnorm(k) * k_norm) and
// v_step[t] = v as bf16 (the cache dtype). q_norm, k_norm: [D] f32; q_out: [num_tokens, H, D] f32;
// k_step, v_step: [num_tokens, Hkv, D] bf16; positions: [num_tokens].
void qk_norm_rope_kv(float* q_out, const float* qkv, const float* q_norm, const float* k_norm,
                     __nv_bfloat16* k_step, __nv_bfloat16* v_step, const int32_t* positions,
                     int num_tokens, const QkNormRopeArgs& a, cudaStream_t s);

// Stores this step's K/V rows in the cache (after the layer's attention): full layers at
// slot_mapping, sliding layers at ring slot position % window, skipping positions that fall out
// of the window by the end of the step (so no two rows race for one slot).
void kv_cache_write(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                    const __nv_bfloat16* v_step, const TokenKv& kv, int num_tokens,
                    int num_kv_heads, int head_dim, bool sliding, cudaStream_t s);

}  // namespace flint::cuda
