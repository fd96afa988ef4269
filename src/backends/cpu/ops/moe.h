// Flint MoE block (spec 2.5): sigmoid router, top-k (optionally on biased scores), optional
// renormalisation, routed_scaling_factor, weights applied after each expert's down projection,
// plus the ungated shared expert. Test partner: tests/unit/cpu/ops_test.cpp and forward_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

namespace flint::cpu {

struct Routing {
  std::vector<int32_t> expert_ids;  // [num_tokens, num_experts_per_tok]
  std::vector<float> weights;       // [num_tokens, num_experts_per_tok]
};

// Router only: scores = sigmoid(router x); top-k on scores + bias (ties: lower id first);
// weights = scores (renormalised if norm_topk_prob) * routed_scaling_factor.
Routing route(const float* x, int64_t num_tokens, const model::LayerWeights& lw,
              const model::FlintConfig& cfg, ThreadPool& pool);

// out: [num_tokens, hidden] = routed + shared; x: [num_tokens, hidden]. Overwrites out.
void moe(float* out, const float* x, int64_t num_tokens, const model::LayerWeights& lw,
         const model::FlintConfig& cfg, ThreadPool& pool);

}  // namespace flint::cpu
