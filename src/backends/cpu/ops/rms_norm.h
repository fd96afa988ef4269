// RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * w (spec 2.2). FP32 throughout.
// Test partner: tests/unit/cpu/ops_test.cpp.
#pragma once

#include <cstdint>

namespace flint::cpu {

// out, x: [rows, cols]; w: [cols]. out may alias x.
void rms_norm(float* out, const float* x, const float* w, int64_t rows, int64_t cols, float eps);

}  // namespace flint::cpu
