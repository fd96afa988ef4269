// RMSNorm, plain loops; statistics in double so the row length does not matter.
#include "backends/cpu/ops/rms_norm.h"

#include <cmath>

namespace flint::cpu {

void rms_norm(float* out, const float* x, const float* w, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    double sum_sq = 0;
    for (int64_t c = 0; c < cols; ++c) sum_sq += static_cast<double>(xr[c]) * xr[c];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(cols) + eps));
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * w[c];
  }
}

}  // namespace flint::cpu
