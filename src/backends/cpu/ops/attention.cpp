// Attention, plainly: per (token, kv head), gather the visible keys and values, then for each query
// head of the group a softmax whose denominator also holds exp(sink).
#include "backends/cpu/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/ops/linear.h"

namespace flint::cpu {
namespace {

// Where key position j of sequence s lives: this step's rows, or a cache row.
struct KeySource {
  const float* step_row;  // non-null when j is new this step
  int64_t cache_row;
};

}  // namespace

void attention(float* out, const float* q, const float* k, const float* v,
               const model::StepInput& step, int64_t layer, const model::FlintConfig& cfg,
               const float* sinks, const KvCache& cache, ThreadPool& pool) {
  const int64_t H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_dim;
  const int64_t group = H / Hkv, kv_row = Hkv * D;
  const bool sliding = cfg.is_sliding(layer);
  const int64_t window = cfg.sliding_window;
  const int64_t page_size = cache.spec().page_size;
  const float scale = cfg.softmax_scale();
  std::vector<int32_t> seq_of_token(static_cast<size_t>(step.num_tokens()));
  for (int32_t s = 0; s < step.num_seqs(); ++s)
    for (int32_t t = step.query_start_loc[s]; t < step.query_start_loc[s + 1]; ++t)
      seq_of_token[t] = s;

  pool.parallel_for(int64_t{step.num_tokens()} * Hkv, [&](int64_t begin, int64_t end) {
    std::vector<float> keys, vals, scores, row(static_cast<size_t>(kv_row));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / Hkv, g = item % Hkv;
      const int32_t s = seq_of_token[t];
      const int32_t q_start = step.query_start_loc[s];
      const int64_t first_new = step.seq_lens[s] - (step.query_start_loc[s + 1] - q_start);
      const int64_t pos = step.positions[t];
      const int64_t lo = sliding ? std::max<int64_t>(0, pos - window + 1) : 0;
      const int64_t n_keys = pos - lo + 1;
      keys.resize(static_cast<size_t>(n_keys * D));
      vals.resize(keys.size());
      for (int64_t j = lo; j <= pos; ++j) {
        float* kd = keys.data() + (j - lo) * D;
        float* vd = vals.data() + (j - lo) * D;
        if (j >= first_new) {
          const int64_t r = q_start + (j - first_new);
          std::copy_n(k + r * kv_row + g * D, D, kd);
          std::copy_n(v + r * kv_row + g * D, D, vd);
          continue;
        }
        const int64_t cache_row =
            sliding ? int64_t{step.ring_ids[s]} * window + j % window
                    : int64_t{step.block_table[s * step.max_blocks_per_seq + j / page_size]} *
                              page_size +
                          j % page_size;
        cache.read(layer, 0, cache_row, row.data());
        std::copy_n(row.data() + g * D, D, kd);
        cache.read(layer, 1, cache_row, row.data());
        std::copy_n(row.data() + g * D, D, vd);
      }
      scores.resize(static_cast<size_t>(n_keys));
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* qh = q + t * H * D + h * D;
        float m = sinks[h];
        for (int64_t j = 0; j < n_keys; ++j) {
          scores[j] = dot(qh, keys.data() + j * D, D) * scale;
          m = std::max(m, scores[j]);
        }
        float z = std::exp(sinks[h] - m);  // the sink: in the denominator, with a zero value
        for (int64_t j = 0; j < n_keys; ++j) {
          scores[j] = std::exp(scores[j] - m);
          z += scores[j];
        }
        float* oh = out + t * H * D + h * D;
        std::fill(oh, oh + D, 0.0f);
        for (int64_t j = 0; j < n_keys; ++j) {
          const float p = scores[j] / z;
          const float* vj = vals.data() + j * D;
          for (int64_t c = 0; c < D; ++c) oh[c] += p * vj[c];
        }
      }
    }
  });
}

void kv_cache_write(KvCache& cache, const float* k, const float* v, const model::StepInput& step,
                    int64_t layer, const model::FlintConfig& cfg) {
  const int64_t kv_row = cfg.num_kv_heads * cfg.head_dim;
  const bool sliding = cfg.is_sliding(layer);
  const int64_t window = cfg.sliding_window;
  for (int32_t s = 0; s < step.num_seqs(); ++s) {
    for (int32_t t = step.query_start_loc[s]; t < step.query_start_loc[s + 1]; ++t) {
      const int64_t pos = step.positions[t];
      int64_t row;
      if (sliding) {
        if (pos < step.seq_lens[s] - window) continue;  // overwritten later in this chunk anyway
        row = int64_t{step.ring_ids[s]} * window + pos % window;
      } else {
        row = step.slot_mapping[t];
      }
      cache.write(layer, 0, row, k + t * kv_row);
      cache.write(layer, 1, row, v + t * kv_row);
    }
  }
}

}  // namespace flint::cpu
