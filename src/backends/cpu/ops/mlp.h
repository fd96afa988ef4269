// SiLU-gated MLP: down(silu(gate x) * up x) (spec 2.4); also each routed and the shared expert.
// Test partner: tests/unit/cpu/ops_test.cpp.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace flint::cpu {

// out: [num_tokens, hidden], x: [num_tokens, hidden]. Overwrites out.
void gated_mlp(float* out, const float* x, int64_t num_tokens, const model::Linear& gate,
               const model::Linear& up, const model::Linear& down, ThreadPool& pool);

}  // namespace flint::cpu
