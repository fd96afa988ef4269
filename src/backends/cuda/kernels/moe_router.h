// MoE routing on the GPU in one launch: the router GEMV over the RMS-normalised hidden state,
// sigmoid scores, top-k, normalised weights, plus the shared expert's always-on slots.
// Reference: cpu::route (spec section 2.5).   Test: tests/kernels/moe_test.cpp
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

struct MoeRouting {
  int num_experts = 0;  // routed experts E
  int top_k = 0;
  int num_shared_slots = 0;  // shared expert split into slices of the routed size (ids E, E+1, ..)
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  int slots() const { return top_k + num_shared_slots; }
};

// Top-k only, for logits computed elsewhere: for each token row t, s = sigmoid(logits[t]), then
// ids and weights as moe_route below. logits: [num_tokens, E] f32.
void moe_router(int32_t* ids, float* weights, const float* logits, const float* bias,
                int num_tokens, const MoeRouting& r, cudaStream_t s);

// Scratch of moe_route: logits [num_tokens, E] f32 and one int32 counter that must be zero before
// the first launch (the kernel leaves it zero again).
struct MoeRouteScratch {
  float* logits = nullptr;
  int32_t* counter = nullptr;
};

// For each token row t: l = router · norm(x[t]) (norm as GemvNorm; none when norm.weight is null),
// s = sigmoid(l); picks the top_k experts by s (+ bias when given; ties go to the lower id);
// weight = s (unbiased), divided by the sum of the picked s when norm_topk_prob, times
// routed_scaling_factor. Then num_shared_slots slots with ids E.. and weight 1.
// x: [num_tokens, router.in] f32 (row stride x_stride); bias: [E] f32 or null;
// ids: [num_tokens, slots] int32; weights: [num_tokens, slots] f32. The blocks compute the logits;
// the last block to finish (an atomic counter) does the top-k, so it is one kernel.
void moe_route(int32_t* ids, float* weights, const float* x, int64_t x_stride, int num_tokens,
               const LinearRef& router, const GemvNorm& norm, const float* bias,
               const MoeRouting& r, const MoeRouteScratch& scratch, cudaStream_t s);

// The shared expert's slices for moe_route_shared: the expert stacks of gemv_gated_experts
// (slices are experts E, E + 1, ..) and its act rows [num_tokens * slots, gate.out].
struct MoeSharedGateUp {
  LinearRef gate, up;
  float* act = nullptr;
};

// moe_route, and when it can, in the same launch, the shared slots' act rows as
// gemv_gated_experts would write them (the same inputs, sums in another order, on tensor cores):
// the router's blocks are few (16 at 8 tokens), so the shared expert fills idle SMs and is read
// once for all tokens, not once per token. Returns whether it did (then gemv_gated_experts is
// told ExpertHints::skip_fixed): from 4 tokens (the router on tensor cores), with BF16 router and
// BF16 expert weights (NVFP4 experts lost, see moe_router.cu).
bool moe_route_shared(int32_t* ids, float* weights, const float* x, int64_t x_stride,
                      int num_tokens, const LinearRef& router, const GemvNorm& norm,
                      const float* bias, const MoeRouting& r, const MoeRouteScratch& scratch,
                      const MoeSharedGateUp& shared, cudaStream_t s);

// The router GEMV alone, for gemv_gated_routed_experts (moe_experts.h), which does the top-k:
// logits[t] = router . norm(x[t]), bit for bit the logits moe_route computes. x_out and x_inv_out
// (both or neither; fewer than kRouteNormedMaxRows tokens): also x[t] times the norm weight,
// [num_tokens, router.in], and its 1 / sqrt(mean(x[t]^2) + eps), [num_tokens] (1 without a norm
// weight): norm(x[t]) = x_out[t] * x_inv_out[t], kept apart so that the gate/up kernel applies
// the scale where it would had it normed x itself (bit for bit the same act rows).
inline constexpr int kRouteNormedMaxRows = 4;
void moe_route_logits(float* logits, const float* x, int64_t x_stride, int num_tokens,
                      const LinearRef& router, const GemvNorm& norm, const MoeRouting& r,
                      cudaStream_t s, float* x_out = nullptr, float* x_inv_out = nullptr);

}  // namespace flint::cuda
