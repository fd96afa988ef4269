// MoE: route every token, then run each selected expert once over the tokens that chose it.
#include "backends/cpu/ops/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/ops/linear.h"
#include "backends/cpu/ops/mlp.h"
#include "backends/cpu/ops/weight_rows.h"

namespace flint::cpu {

Routing route(const float* x, int64_t num_tokens, const model::LayerWeights& lw,
              const model::FlintConfig& cfg, ThreadPool& pool) {
  const int64_t num_experts = cfg.num_experts, k = cfg.num_experts_per_tok;
  std::vector<float> scores(static_cast<size_t>(num_tokens * num_experts));
  linear(scores.data(), x, num_tokens, lw.router, pool);
  const std::vector<float> bias = lw.expert_bias.empty() ? std::vector<float>(num_experts, 0.0f)
                                                         : weight_vector(lw.expert_bias);
  Routing r;
  r.expert_ids.resize(static_cast<size_t>(num_tokens * k));
  r.weights.resize(r.expert_ids.size());
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* s = scores.data() + t * num_experts;
    for (int64_t e = 0; e < num_experts; ++e) s[e] = 1.0f / (1.0f + std::exp(-s[e]));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float ca = s[a] + bias[a], cb = s[b] + bias[b];
      return ca != cb ? ca > cb : a < b;
    });
    float sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += s[order[i]];
    for (int64_t i = 0; i < k; ++i) {
      float w = s[order[i]];
      if (cfg.norm_topk_prob) w /= sum;
      r.expert_ids[t * k + i] = order[i];
      r.weights[t * k + i] = w * cfg.routed_scaling_factor;
    }
  }
  return r;
}

void moe(float* out, const float* x, int64_t num_tokens, const model::LayerWeights& lw,
         const model::FlintConfig& cfg, ThreadPool& pool) {
  const int64_t d = cfg.hidden_size, k = cfg.num_experts_per_tok;
  const Routing r = route(x, num_tokens, lw, cfg, pool);

  if (cfg.shared_expert_intermediate_size > 0) {
    gated_mlp(out, x, num_tokens, lw.sh_gate, lw.sh_up, lw.sh_down, pool);
  } else {
    std::fill(out, out + num_tokens * d, 0.0f);
  }

  // Tokens per expert, then one batched MLP per used expert.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(cfg.num_experts));
  for (int64_t i = 0; i < num_tokens * k; ++i) slots[r.expert_ids[i]].push_back(i);
  std::vector<float> xin, y;
  for (int64_t e = 0; e < cfg.num_experts; ++e) {
    const auto& sl = slots[e];
    if (sl.empty()) continue;
    const int64_t n = static_cast<int64_t>(sl.size());
    xin.resize(static_cast<size_t>(n * d));
    y.resize(xin.size());
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + (sl[i] / k) * d, d, xin.data() + i * d);
    gated_mlp(y.data(), xin.data(), n, lw.exp_gate[e], lw.exp_up[e], lw.exp_down[e], pool);
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + (sl[i] / k) * d;
      const float w = r.weights[sl[i]];
      for (int64_t c = 0; c < d; ++c) o[c] += w * y[i * d + c];
    }
  }
}

}  // namespace flint::cpu
