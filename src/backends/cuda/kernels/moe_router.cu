// Sigmoid top-k router: one warp per token, scores in shared memory.
// Reference: spec section 2.5 (tests/kernels/reference.h)   Test: tests/kernels/moe_router_test.cu
#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/moe_router.h"

namespace flint::cuda {
namespace {

__global__ void moe_router_kernel(int32_t* __restrict__ ids,         // [num_tokens, slots]
                                  float* __restrict__ weights,       // [num_tokens, slots]
                                  const float* __restrict__ logits,  // [num_tokens, E]
                                  const float* __restrict__ bias,    // [E] or null
                                  MoeRouting r) {
  extern __shared__ float smem[];
  float* score = smem;                // [E] sigmoid scores
  float* key = smem + r.num_experts;  // [E] selection keys (score + bias), -inf once taken
  const int t = blockIdx.x;
  const int lane = threadIdx.x;
  const int E = r.num_experts;
  const float* lg = logits + int64_t(t) * E;
  for (int e = lane; e < E; e += 32) {
    const float sc = 1.0f / (1.0f + expf(-lg[e]));
    score[e] = sc;
    const float kv = bias != nullptr ? sc + bias[e] : sc;
    key[e] = isnan(kv) ? -FLT_MAX : kv;  // a NaN score still yields k valid, distinct experts
  }
  __syncwarp();
  float picked_sum = 0.0f;
  int32_t* out_ids = ids + int64_t(t) * (r.top_k + r.num_shared_slots);
  float* out_w = weights + int64_t(t) * (r.top_k + r.num_shared_slots);
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
}

}  // namespace

void moe_router(int32_t* ids, float* weights, const float* logits, const float* bias,
                int num_tokens, const MoeRouting& r, cudaStream_t s) {
  FLINT_CHECK(r.num_experts > 0 && r.top_k > 0 && r.top_k <= r.num_experts,
              "moe_router: top_k {} of {} experts", r.top_k, r.num_experts);
  if (num_tokens == 0) return;
  const size_t smem = 2 * sizeof(float) * r.num_experts;
  moe_router_kernel<<<num_tokens, 32, smem, s>>>(ids, weights, logits, bias, r);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
