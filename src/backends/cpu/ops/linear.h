// y = W x for a batch of rows, W[out, in] in any weight dtype, dequantized a row at a time, FP32
// accumulation (spec 2.7). Test partner: tests/unit/cpu/ops_test.cpp.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "model/weights.h"

namespace flint::cpu {

// out: [num_tokens, w.out()], x: [num_tokens, w.in()]; rows split across the pool.
void linear(float* out, const float* x, int64_t num_tokens, const model::Linear& w,
            ThreadPool& pool);

// FP32 dot product of n elements (8 partial sums, so the compiler can vectorise).
float dot(const float* a, const float* b, int64_t n);

}  // namespace flint::cpu
