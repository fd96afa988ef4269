// Decode attention over the KV cache (paged for full layers, ring for sliding layers) on tensor
// cores, split across blocks along the keys (flash-decoding); the splits of a (row, kv head) are
// merged, with the per-head sink, in the same launch: by their thread-block cluster through
// distributed shared memory when decode_attention_uses_cluster() says so, otherwise by the last
// block to finish through a global workspace.
// Reference: backends/cpu/ops/attention.cpp   Test: tests/kernels/attention_decode_test.cpp
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/kv_layout.h"

namespace flint::cuda {

struct DecodeAttentionArgs {
  int num_heads = 0, num_kv_heads = 0;
  int head_dim = 0;  // 16, 32, 64 or 128; num_heads / num_kv_heads in {1, 2, 4, 8}
  float scale = 0.0f;
  bool sliding = false;  // sliding: keys max(0, p - window + 1) .. p; full: 0 .. p
  int num_splits = 1;    // from decode_attention_splits(); 1 .. kAttentionMaxSplits
  // decode_attention_fused on a stream: let the next kernel (the o projection) launch once the
  // prologue is done, so that it requests its weights while attention runs (it still waits for
  // the output). Otherwise it launches when attention exits. Changes no result.
  bool early_dependents = false;
};

inline constexpr int kAttentionMaxSplits = 64;
// Split counts 2 .. this one may launch as clusters (8: the portable cluster size).
inline constexpr int kAttentionClusterMaxSplits = 8;

// Whether a launch merges its splits in clusters (then it needs neither workspace nor counters):
// 2 .. kAttentionClusterMaxSplits splits, and a grid of at most half the SMs, so that every
// cluster (one block per SM, all in one GPC) finds its SMs free in the first wave. Measured on the
// H200 (decode_step_bench, NVFP4, 1K context): at batch 1 (32 blocks) clusters made the step
// 1% faster; at batch 8 (128 blocks of clusters of 4) 3% slower, because clusters that do not
// fit the GPCs' free SMs wait for a second wave.
bool decode_attention_uses_cluster(int num_rows, int num_kv_heads, int num_splits, int num_sms);

// Splits for `num_rows` query rows that each see at most `max_keys` keys (pass a bucketed value:
// the result is baked into captured graphs). One block of (row, kv head, split) per SM at most,
// and at least 128 keys (one 16-key tile per warp) per split.
int decode_attention_splits(int num_rows, int num_kv_heads, int64_t max_keys, int num_sms);

// Workspace floats for the split partials, enough for any split count decode_attention_splits
// picks: [num_rows, H, num_splits, head_dim] accumulators, then [num_rows, H, num_splits, 2].
inline int64_t decode_attention_workspace(int num_rows, int num_heads, int num_kv_heads,
                                          int head_dim, int num_sms) {
  const int64_t rows_times_splits = num_rows + num_sms / num_kv_heads + 1;
  return rows_times_splits * num_heads * (head_dim + 2);
}

// Split-completion counters: [num_rows, num_kv_heads] int32. They must be zero before the first
// launch; each launch leaves them zero again.
inline int64_t decode_attention_counters(int num_rows, int num_kv_heads) {
  return int64_t(num_rows) * num_kv_heads;
}

// out[t, h, :] = sum_j P[h, t, j] v[j] with the sink softmax of spec 2.3 step 6 over the keys of
// row t. q: [num_rows, H, D] f32; sinks: [H] f32 or null; out: [num_rows, H * D] f32.
// k_step, v_step: [num_rows, Hkv, D] bf16, this step's rows (see TokenKv); keys before the
// sequence's new tokens come from k_cache/v_cache. workspace: decode_attention_workspace()
// floats; counters: decode_attention_counters() int32, zero (both may be null when
// a.num_splits == 1 or decode_attention_uses_cluster()).
void decode_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                      const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                      int num_rows, const DecodeAttentionArgs& a, float* workspace,
                      int32_t* counters, cudaStream_t s);

// The decode-step inputs of decode_attention_fused: this step's q|k|v projections and the norm
// and RoPE parameters of spec 2.3 steps 2-3.
struct DecodeQkv {
  const float* qkv = nullptr;     // [num_rows, (H + 2 Hkv) * D] f32: q heads, then k, then v
  const float* q_norm = nullptr;  // [D] f32
  const float* k_norm = nullptr;  // [D] f32
  float eps = 1e-6f;
  bool rope = false;  // NeoX rotate-half on all D channels
  double rope_theta = 10000.0;
};

// Decode steps only (every sequence has exactly one new token, at position seq_len - 1, so token
// row t is sequence t; the kernel relies on it and reads no seq_idx, query_start_loc or seq_lens):
// as qk_norm_rope_kv + kv_cache_write + decode_attention in one launch. The block of split 0 of
// each (row, kv head) stores the new K/V in the cache; every block takes the new key from its own
// prologue, so none reads the slot being written (a ring slot it overwrites holds position
// p - window, outside the window).
void decode_attention_fused(float* out, const DecodeQkv& qkv, __nv_bfloat16* k_cache,
                            __nv_bfloat16* v_cache, const float* sinks, const TokenKv& kv,
                            int num_rows, const DecodeAttentionArgs& a, float* workspace,
                            int32_t* counters, cudaStream_t s);

}  // namespace flint::cuda
