// Final RMSNorm and the untied FP32 LM head (spec 2.6). Test partner:
// tests/unit/cpu/forward_test.cpp.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace flint::cpu {

// logits: [num_rows, vocab_size]; h: [num_rows, hidden_size] (last hidden states of the rows that
// want logits); final_norm: [hidden_size].
void lm_head(float* logits, const float* h, int64_t num_rows, const float* final_norm,
             const model::Linear& head, float eps, ThreadPool& pool);

}  // namespace flint::cpu
