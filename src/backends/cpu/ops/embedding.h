// Token embedding lookup. Test partner: tests/unit/cpu/forward_test.cpp (whole model vs NumPy).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace flint::cpu {

// out[t, :] = table[token_ids[t], :] as FP32. out: [num_tokens, hidden_size]. Ids must be valid.
void embedding(float* out, ConstTensorView table, std::span<const int32_t> token_ids);

}  // namespace flint::cpu
