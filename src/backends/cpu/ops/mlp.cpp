// Gated MLP on top of linear().
#include "backends/cpu/ops/mlp.h"

#include <cmath>
#include <vector>

#include "backends/cpu/ops/linear.h"

namespace flint::cpu {

void gated_mlp(float* out, const float* x, int64_t num_tokens, const model::Linear& gate,
               const model::Linear& up, const model::Linear& down, ThreadPool& pool) {
  const int64_t inter = gate.out();
  std::vector<float> g(static_cast<size_t>(num_tokens * inter));
  std::vector<float> u(g.size());
  linear(g.data(), x, num_tokens, gate, pool);
  linear(u.data(), x, num_tokens, up, pool);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  linear(out, g.data(), num_tokens, down, pool);
}

}  // namespace flint::cpu
