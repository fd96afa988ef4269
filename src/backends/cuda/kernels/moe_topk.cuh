// The MoE top-k of one token by one warp (sigmoid scores, optional selection bias, ties to the
// lower id, normalised/scaled weights, then the shared-expert slots), shared by moe_route
// (moe_router.cu) and the persistent decode kernel (decode_persistent.cu).
// Reference: cpu::route (spec section 2.5).   Test: tests/kernels/moe_test.cpp
#pragma once

#include <cfloat>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/moe_router.h"

namespace flint::cuda::dev {

// logits: the token's [E] router logits (read through L2: other blocks wrote them); bias: [E] or
// null; score, key: [E] scratch of this warp (shared memory); out_ids/out_w: the token's slots
// (shared or global memory), written by lane 0. Every lane of the warp must call it.
__device__ inline void top_k_token(const float* logits, const float* bias, const MoeRouting& r,
                                   float* score, float* key, int32_t* out_ids, float* out_w) {
  const int lane = threadIdx.x & 31;
  const int E = r.num_experts;
  for (int e = lane; e < E; e += 32) {
    const float sc = 1.0f / (1.0f + expf(-__ldcg(logits + e)));
    score[e] = sc;
    const float kv = bias != nullptr ? sc + bias[e] : sc;
    key[e] = isnan(kv) ? -FLT_MAX : kv;  // a NaN score still yields k valid, distinct experts
  }
  __syncwarp();
  float picked_sum = 0.0f;
  for (int k = 0; k < r.top_k; ++k) {
    float best = -INFINITY;
    int best_e = E;
    for (int e = lane; e < E; e += 32) {
      const float v = key[e];
      if (v > best) {  // strictly greater: within a lane, the lower id wins ties
        best = v;
        best_e = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ov > best || (ov == best && oe < best_e)) {
        best = ov;
        best_e = oe;
      }
    }
    if (lane == 0) {
      out_ids[k] = best_e;
      out_w[k] = score[best_e];
      key[best_e] = -INFINITY;
    }
    picked_sum += score[best_e];
    __syncwarp();
  }
  if (lane == 0) {
    const float norm = r.norm_topk_prob ? 1.0f / picked_sum : 1.0f;
    for (int k = 0; k < r.top_k; ++k) out_w[k] *= norm * r.routed_scaling_factor;
    for (int j = 0; j < r.num_shared_slots; ++j) {
      out_ids[r.top_k + j] = E + j;
      out_w[r.top_k + j] = 1.0f;
    }
  }
  __syncwarp();
}

}  // namespace flint::cuda::dev
