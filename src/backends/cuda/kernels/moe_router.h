// MoE routing on the GPU: sigmoid scores, top-k, normalised weights, plus the shared expert's
// always-on slots. Reference: spec section 2.5. Test: tests/kernels/moe_router_test.cu
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

struct MoeRouting {
  int num_experts = 0;  // routed experts E
  int top_k = 0;
  int num_shared_slots = 0;  // shared expert split into slices of the routed size (ids E, E+1, ..)
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  int slots() const { return top_k + num_shared_slots; }
};

// For each token row t: s = sigmoid(logits[t]); picks the top_k experts by s (+ bias when given;
// ties go to the lower id); weight = s (unbiased), divided by the sum of the picked s when
// norm_topk_prob, times routed_scaling_factor. Then num_shared_slots slots with ids E.. and
// weight 1. logits: [num_tokens, E] f32; bias: [E] f32 or null; ids: [num_tokens, slots] int32;
// weights: [num_tokens, slots] f32.
void moe_router(int32_t* ids, float* weights, const float* logits, const float* bias,
                int num_tokens, const MoeRouting& r, cudaStream_t s);

}  // namespace flint::cuda
