// Q/K norm and NeoX RoPE. Angles are computed in double: p * theta^(-2j/D) is large for long
// positions, and FP32 would lose the phase.
#include "backends/cpu/ops/qk_norm_rope.h"

#include <cmath>

#include "backends/cpu/ops/rms_norm.h"

namespace flint::cpu {

void rope_neox(float* x, int64_t head_dim, int32_t pos, double theta) {
  const int64_t half = head_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    const double inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(pos) * inv_freq;
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    const float a = x[j], b = x[j + half];
    x[j] = a * c - b * s;
    x[j + half] = b * c + a * s;
  }
}

void qk_norm_rope(float* q, float* k, std::span<const int32_t> positions, const float* q_norm,
                  const float* k_norm, const QkNormRopeArgs& args) {
  const int64_t d = args.head_dim;
  for (size_t t = 0; t < positions.size(); ++t) {
    float* qt = q + static_cast<int64_t>(t) * args.num_heads * d;
    float* kt = k + static_cast<int64_t>(t) * args.num_kv_heads * d;
    rms_norm(qt, qt, q_norm, args.num_heads, d, args.eps);
    rms_norm(kt, kt, k_norm, args.num_kv_heads, d, args.eps);
    if (!args.use_rope) continue;
    for (int64_t h = 0; h < args.num_heads; ++h)
      rope_neox(qt + h * d, d, positions[t], args.rope_theta);
    for (int64_t h = 0; h < args.num_kv_heads; ++h)
      rope_neox(kt + h * d, d, positions[t], args.rope_theta);
  }
}

}  // namespace flint::cpu
