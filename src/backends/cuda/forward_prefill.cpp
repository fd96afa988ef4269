// The prefill path of the CUDA forward pass: the same spec section 2 sequence as enqueue(), with
// bf16 activations into tensor-core GEMMs (cuBLAS for BF16 weights, our W4A16 kernel for NVFP4),
// the flash-attention kernel (on decode steps of many sequences, the split-KV decode attention),
// and MoE experts grouped by expert. The residual stream stays f32;
// F32 weights (tiny test models) fall back to the decode GEMVs.
#include <algorithm>
#include <cmath>

#include "backends/cuda/forward.h"
#include "backends/cuda/kernels/decode_attention.h"
#include "backends/cuda/kernels/embedding.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe_experts.h"
#include "backends/cuda/kernels/moe_router.h"
#include "backends/cuda/kernels/prefill_attention.h"
#include "backends/cuda/kernels/qk_norm_rope_kv.h"
#include "backends/cuda/kernels/rms_norm.h"

namespace flint::cuda {
namespace {

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

int moe_groups(const DeviceWeights& w) {
  for (const DeviceLayer& L : w.layers()) {
    if (L.exp_gate.w != nullptr) return static_cast<int>(L.exp_gate.num_experts);
  }
  return 0;
}

}  // namespace

PrefillWorkspace::~PrefillWorkspace() {
  if (cublas != nullptr) cublasDestroy(cublas);
}

// Once per CudaForward: the cuBLAS handle, f32 copies of BF16 routers, and the bf16 scratch that
// dense NVFP4 matrices are decoded into before their cuBLAS GEMM.
Status CudaForward::prepare_prefill_weights() {
  if (prefill_.cublas != nullptr) return ok();
  if (cublasCreate(&prefill_.cublas) != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::kUnavailable, "cuda: cublasCreate failed");
  }
  const model::FlintConfig& c = w_.config();
  int64_t router_elems = 0, scratch = 0;
  for (const DeviceLayer& L : w_.layers()) {
    if (L.router.w != nullptr && L.router.dtype == DType::kBF16 && L.router.row_scale == nullptr) {
      router_elems += L.router.out * L.router.in;
    }
    for (const LinearRef* m : {&L.qkv, &L.o, &L.down, &L.sh_down}) {
      if (m->w != nullptr && m->dtype == DType::kNVFP4) scratch = std::max(scratch, m->out * m->in);
    }
  }
  auto b =
      DeviceBuffer::allocate(static_cast<size_t>(align256(4 * router_elems) + 2 * scratch + 16));
  if (!b) return b.error().with_context("allocating prefill weight copies");
  prefill_.weights_buf = std::move(b).value();
  auto* p = prefill_.weights_buf.as<unsigned char>();
  float* next = reinterpret_cast<float*>(p);
  prefill_.w_bf16 =
      scratch > 0 ? reinterpret_cast<__nv_bfloat16*>(p + align256(4 * router_elems)) : nullptr;
  prefill_.router_f32.assign(c.num_hidden_layers, nullptr);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LinearRef& R = w_.layers()[l].router;
    if (R.w == nullptr || R.row_scale != nullptr) continue;
    if (R.dtype == DType::kF32) {
      prefill_.router_f32[l] = static_cast<const float*>(R.w);
    } else if (R.dtype == DType::kBF16) {
      widen_bf16(next, static_cast<const __nv_bfloat16*>(R.w), R.out * R.in, nullptr);
      prefill_.router_f32[l] = next;
      next += R.out * R.in;
    }
  }
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());
  return ok();
}

Status CudaForward::reserve_prefill(int num_tokens) {
  FLINT_TRY(prepare_prefill_weights());
  if (num_tokens <= prefill_.cap_tokens) return ok();
  const model::FlintConfig& c = w_.config();
  const int64_t T = num_tokens;
  // bf16 activations of the widest projection input; also the LM head's hi/lo split (2 d).
  const int64_t x_cols = std::max(2 * c.hidden_size, c.num_heads * c.head_dim);
  const int64_t act_cols =
      std::max({c.intermediate_size, c.shared_expert_intermediate_size, int64_t(1)});
  const int groups = moe_groups(w_);
  const int64_t moe_bytes =
      groups > 0
          ? moe_grouped_workspace_bytes(T * slots_, groups, c.moe_intermediate_size, c.hidden_size)
          : 0;
  const int64_t bytes = align256(2 * T * x_cols) + align256(2 * T * act_cols) + moe_bytes;
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may be in use by queued work
  prefill_.buf = DeviceBuffer();
  auto b = DeviceBuffer::allocate(static_cast<size_t>(bytes));
  if (!b) return b.error().with_context("allocating prefill workspaces for {} tokens", T);
  prefill_.buf = std::move(b).value();
  auto* p = prefill_.buf.as<unsigned char>();
  prefill_.x = reinterpret_cast<__nv_bfloat16*>(p);
  p += align256(2 * T * x_cols);
  prefill_.act = reinterpret_cast<__nv_bfloat16*>(p);
  p += align256(2 * T * act_cols);
  if (groups > 0) {
    prefill_.moe =
        moe_grouped_workspace(p, T * slots_, groups, c.moe_intermediate_size, c.hidden_size);
  }
  prefill_.cap_tokens = num_tokens;
  return ok();
}

void CudaForward::enqueue_prefill(const StepPlan& plan, cudaStream_t s, OpTimer* timer) {
  auto mark = [&](const char* op) {
    if (timer != nullptr) timer->mark(op, s);
  };
  const model::FlintConfig& c = w_.config();
  const int T = plan.num_tokens;
  FLINT_CHECK(T <= prefill_.cap_tokens, "enqueue_prefill: {} tokens, workspace for {}", T,
              prefill_.cap_tokens);
  const int64_t d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t qkv_cols = (H + 2 * Hkv) * D;
  const float eps = c.rms_norm_eps;
  const float attn_scale = c.softmax_scale();
  PrefillWorkspace& px = prefill_;

  // y (+)= W x for all T rows from bf16 rows x [T, W.in]; a dense NVFP4 matrix is decoded into
  // the bf16 scratch first so that cuBLAS runs it (cheaper than our tile kernel at these sizes).
  auto gemm_rows = [&](float* y, int64_t ys, const __nv_bfloat16* x, int64_t xs, const LinearRef& W,
                       bool accumulate) {
    if (W.dtype == DType::kNVFP4 && px.w_bf16 != nullptr) {
      dequantize_bf16(px.w_bf16, W, s);
      const LinearRef B{DType::kBF16, W.out, W.in, 1, px.w_bf16, nullptr, nullptr};
      gemm(px.cublas, y, ys, x, xs, T, B, accumulate, s);
      return;
    }
    gemm(px.cublas, y, ys, x, xs, T, W, accumulate, s);
  };
  // y (+)= W x for all T rows, x f32 [T, W.in] (row stride xs).
  auto linear = [&](float* y, int64_t ys, const float* x, int64_t xs, const LinearRef& W,
                    bool accumulate) {
    if (W.dtype == DType::kF32) {
      gemv(y, ys, x, xs, T, W, accumulate, s);
      return;
    }
    cast_to_bf16(px.x, W.in, x, xs, T, W.in, s);
    gemm_rows(y, ys, px.x, W.in, W, accumulate);
  };
  // h += Down(silu(Gate a) * Up a) for the normalised rows in ws_a_.
  auto mlp = [&](const LinearRef& gate, const LinearRef& up, const LinearRef& down) {
    const int64_t I = gate.out;
    if (gate.dtype == DType::kF32 || up.dtype == DType::kF32 || down.dtype == DType::kF32) {
      gemv_gated(ws_act_, I, ws_a_, d, T, gate, up, s);
      gemv(ws_h_, d, ws_act_, I, T, down, true, s);
      return;
    }
    cast_to_bf16(px.x, d, ws_a_, d, T, d, s);
    gemm_gated(px.act, I, px.x, d, T, gate, up, s);
    gemm_rows(ws_h_, d, px.act, I, down, true);
  };

  embedding(ws_h_, w_.embed(), w_.embed_dtype(), d_tokens_, T, d, s);
  mark("embedding");
  const MoeRouting routing = this->routing();
  const TokenKv kv = token_kv(plan);
  auto* k_step = reinterpret_cast<__nv_bfloat16*>(ws_kstep_);
  auto* v_step = reinterpret_cast<__nv_bfloat16*>(ws_vstep_);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& L = w_.layers()[l];
    const bool sliding = c.is_sliding(l);
    rms_norm(ws_a_, d, ws_h_, d, L.attn_norm, T, d, eps, s);
    mark("rms_norm");
    linear(ws_qkv_, qkv_cols, ws_a_, d, L.qkv, false);
    mark("qkv_proj");
    const bool rope = c.layer_uses_rope[l];
    if (plan.decode) {
      // A decode step of many sequences (one new token each): the split-KV decode attention
      // with q/k norm, RoPE and the cache write fused, as the layered path runs it. The
      // flash-attention kernel would give each (sequence, kv head) a block of 128 rows of which
      // G hold a query, each streaming the whole context.
      const DecodeQkv dq{ws_qkv_, L.q_norm, L.k_norm, eps, rope, c.rope_theta};
      decode_attention_fused(ws_attn_, dq, k_cache(l), v_cache(l), L.sinks, kv, T,
                             decode_attention_args(plan, sliding), ws_attn_part_,
                             attn_counters_.as<int32_t>(), s);
      mark(sliding ? "attention_sliding" : "attention_full");
    } else {
      const QkNormRopeArgs qa{
          static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), eps, rope, c.rope_theta};
      qk_norm_rope_kv(ws_q_, ws_qkv_, L.q_norm, L.k_norm, k_step, v_step, d_pos_, T, qa, s);
      mark("qk_norm_rope");
      const PrefillAttentionArgs pa{static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D),
                                    attn_scale, sliding};
      prefill_attention(ws_attn_, ws_q_, k_cache(l), v_cache(l), k_step, v_step, L.sinks, kv, T,
                        plan.num_seqs, pa, s);
      mark(sliding ? "attention_sliding" : "attention_full");
      kv_cache_write(k_cache(l), v_cache(l), k_step, v_step, kv, T, static_cast<int>(Hkv),
                     static_cast<int>(D), sliding, s);
      mark("kv_cache_write");
    }
    linear(ws_h_, d, ws_attn_, H * D, L.o, true);
    mark("o_proj");
    rms_norm(ws_a_, d, ws_h_, d, L.ffn_norm, T, d, eps, s);
    mark("rms_norm");
    if (c.layer_is_dense[l]) {
      mlp(L.gate, L.up, L.down);
      mark("dense_mlp");
      continue;
    }
    int32_t* ids = d_ids_ + l * int64_t(cap_tokens_) * slots_;
    if (px.router_f32[l] != nullptr) {
      gemm_f32(px.cublas, ws_rlogits_, c.num_experts, ws_a_, d, T, px.router_f32[l], L.router.out,
               L.router.in, s);
    } else {
      gemv(ws_rlogits_, c.num_experts, ws_a_, d, T, L.router, false, s);
    }
    moe_router(ids, ws_rw_, ws_rlogits_, L.expert_bias, T, routing, s);
    mark("moe_router");
    if (L.exp_gate.dtype == DType::kF32 || L.exp_down.dtype == DType::kF32) {
      gemv_gated_experts(ws_act_, ws_a_, d, T * slots_, slots_, ids, L.exp_gate, L.exp_up, s);
      moe_down(ws_h_, d, ws_act_, ids, ws_rw_, T, slots_, L.exp_down, s);
    } else {
      cast_to_bf16(px.x, d, ws_a_, d, T, d, s);
      moe_grouped(ws_h_, d, px.x, d, ids, ws_rw_, T, slots_, L.exp_gate, L.exp_up, L.exp_down,
                  px.moe, s);
    }
    if (L.has_separate_shared) mlp(L.sh_gate, L.sh_up, L.sh_down);
    mark("moe_experts");
  }
  if (plan.num_logits > 0) {
    enqueue_lm_head(plan, s);
    mark("lm_head");
  }
}

}  // namespace flint::cuda
