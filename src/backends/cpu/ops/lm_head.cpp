// Final norm + LM head.
#include "backends/cpu/ops/lm_head.h"

#include <vector>

#include "backends/cpu/ops/linear.h"
#include "backends/cpu/ops/rms_norm.h"

namespace flint::cpu {

void lm_head(float* logits, const float* h, int64_t num_rows, const float* final_norm,
             const model::Linear& head, float eps, ThreadPool& pool) {
  if (num_rows == 0) return;
  const int64_t d = head.in();
  std::vector<float> normed(static_cast<size_t>(num_rows * d));
  rms_norm(normed.data(), h, final_norm, num_rows, d, eps);
  linear(logits, normed.data(), num_rows, head, pool);
}

}  // namespace flint::cpu
