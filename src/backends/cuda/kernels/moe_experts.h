// MoE down projection and combine for small batches: reads only the experts each token picked.
// (The gated half is gemv_gated_experts in gemv.h.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/linear_ref.h"
#include "backends/cuda/kernels/moe_router.h"

namespace flint::cuda {

// h[t, r] += sum_{p < slots} weights[t, p] * (Wd_{ids[t, p]} act[t * slots + p])[r].
// h: [num_tokens, Wd.out] f32 (row stride h_stride); act: [num_tokens * slots, Wd.in] f32;
// ids, weights: [num_tokens, slots]. Wd is the stack of down projections (routed, then shared
// slices).
// ready (may be null): the picks' counter of gemv_gated_routed_experts (pick_ready), zero before
// that launch. Once it reaches num_tokens * slots the blocks read ids/weights and request their
// first weights before the PDL wait, while the gate/up kernel still runs; a block that does not
// see the count within a bounded spin reads them after the wait, as without it.
void moe_down(float* h, int64_t h_stride, const float* act, const int32_t* ids,
              const float* weights, int num_tokens, int slots, const LinearRef& down,
              cudaStream_t s, const int32_t* ready = nullptr);

// gemv_gated_experts (gemv.h) for num_tokens tokens of r.slots() pairs each, with the routing in
// the kernel: each block picks its token's experts from the router logits [num_tokens, E] (+ bias,
// as moe_route picks them; the shared slices are the last slots), so the router before it is a
// plain GEMV (moe_route_logits). ids/weights: [num_tokens, slots], written for moe_down.
// x: the input rows (normed on the way with `norm`, as gemv_gated_experts), or, with x_inv and
// no norm, rows already times their norm weight whose 1 / rms is x_inv[token] (moe_route_logits'
// x_out and x_inv_out).
// route_acc (one token, when routed_top_k_in_block(r); then logits is null): the router's sums of
// gemv_route_partials (gemv.h), [num_tokens, E + 1]; x is then its x_out (rows times their norm
// weight) and the 1 / rms comes from the sums with route_eps.
void gemv_gated_routed_experts(float* act, const float* x, int64_t x_stride, int num_tokens,
                               const float* logits, const float* bias, const MoeRouting& r,
                               int32_t* ids, float* weights, const LinearRef& gate,
                               const LinearRef& up, cudaStream_t s, const GemvNorm& norm = {},
                               int32_t* pick_ready = nullptr, const float* x_inv = nullptr,
                               const double* route_acc = nullptr, float route_eps = 0.0f);

// Whether gemv_gated_routed_experts picks with the whole block (E <= 256, top_k <= 8), the path
// that can read gemv_route_partials' sums.
bool routed_top_k_in_block(const MoeRouting& r);

}  // namespace flint::cuda
