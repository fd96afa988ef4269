// Prefill attention: flash-attention style (bf16 tensor-core products, f32 online softmax)
// over a step's rows, with causal and sliding-window masks, GQA (the query heads of one KV head
// share each K/V tile) and the per-head sink in the denominator. Keys before a chunk come from the
// paged cache (full layers) or the ring (sliding layers), the chunk's own from this step's rows.
// Reference: backends/cpu/ops/attention.cpp   Test: tests/kernels/prefill_attention_test.cpp
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backends/cuda/kernels/kv_layout.h"

namespace flint::cuda {

struct PrefillAttentionArgs {
  int num_heads = 0, num_kv_heads = 0;  // H / Hkv in {1, 2, 4, 8}
  int head_dim = 0;                     // 16, 32, 64 or 128
  float scale = 0.0f;
  bool sliding = false;  // sliding: keys max(0, p - window + 1) .. p; full: 0 .. p
  // head_dim 128 on compute capability 9.x: the Hopper kernel (wgmma, 192 rows per block). false,
  // another head_dim or another GPU: the mma.sync kernel with rows_per_block (query, head) rows
  // sharing each K/V tile, 64 or 128 (tests and prefill_attention_bench run both kernels).
  bool wgmma = true;
  int rows_per_block = 128;
};

// out[t, h*D:(h+1)*D] = sum_j P[h, t, j] v[j] with the sink softmax of spec 2.3 step 6.
// q: [num_tokens, H, D] f32; k_step, v_step: [num_tokens, Hkv, D] bf16 (this step's rows);
// sinks: [H] f32 or null; out: [num_tokens, H * D] f32. kv.query_start_loc/seq_lens describe
// num_seqs sequences. Any mix of chunk lengths, including single decode tokens.
void prefill_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                       const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                       const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                       int num_tokens, int num_seqs, const PrefillAttentionArgs& a, cudaStream_t s);

}  // namespace flint::cuda
