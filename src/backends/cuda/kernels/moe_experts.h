// MoE down projection and combine for small batches: reads only the experts each token picked.
// (The gated half is gemv_gated_experts in gemv.h.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

// h[t, r] += sum_{p < slots} weights[t, p] * (Wd_{ids[t, p]} act[t * slots + p])[r].
// h: [num_tokens, Wd.out] f32 (row stride h_stride); act: [num_tokens * slots, Wd.in] f32;
// ids, weights: [num_tokens, slots]. Wd is the stack of down projections (routed, then shared
// slices).
void moe_down(float* h, int64_t h_stride, const float* act, const int32_t* ids,
              const float* weights, int num_tokens, int slots, const LinearRef& down,
              cudaStream_t s);

}  // namespace flint::cuda
