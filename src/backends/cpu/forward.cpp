// The forward pass (spec 2.1-2.6): embedding; per layer pre-norm attention and pre-norm MLP/MoE
// with residuals; final norm; FP32 LM head on the requested rows.
#include "backends/cpu/forward.h"

#include <algorithm>

#include "backends/cpu/ops/attention.h"
#include "backends/cpu/ops/embedding.h"
#include "backends/cpu/ops/linear.h"
#include "backends/cpu/ops/lm_head.h"
#include "backends/cpu/ops/mlp.h"
#include "backends/cpu/ops/moe.h"
#include "backends/cpu/ops/qk_norm_rope.h"
#include "backends/cpu/ops/rms_norm.h"
#include "backends/cpu/ops/weight_rows.h"

namespace flint::cpu {
namespace {

template <typename... Args>
Error bad(fmt::format_string<Args...> f, Args&&... args) {
  return make_error(ErrorCode::kInvalidArgument, f, std::forward<Args>(args)...);
}

}  // namespace

CpuBackend::CpuBackend(const model::FlintWeights& weights, int num_threads)
    : weights_(weights), pool_(num_threads) {
  for (const auto& lw : weights_.layers) {
    vectors_.push_back({weight_vector(lw.attn_norm), weight_vector(lw.ffn_norm),
                        weight_vector(lw.q_norm), weight_vector(lw.k_norm),
                        weight_vector(lw.sinks)});
  }
  final_norm_ = weight_vector(weights_.final_norm);
}

Status CpuBackend::init_kv_cache(const model::KvCacheSpec& spec) {
  return cache_.init(config(), spec);
}

Status CpuBackend::forward(const model::StepInput& step, std::span<float> logits) {
  FLINT_TRY(validate(step, logits));
  const model::FlintConfig& cfg = config();
  const int64_t T = step.num_tokens(), d = cfg.hidden_size;
  std::vector<float> h(static_cast<size_t>(T * d));
  embedding(h.data(), weights_.embed, step.token_ids);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) layer_forward(l, step, h);

  const int64_t n = static_cast<int64_t>(step.logits_indices.size());
  std::vector<float> rows(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(h.data() + step.logits_indices[i] * d, d, rows.data() + i * d);
  lm_head(logits.data(), rows.data(), n, final_norm_.data(), weights_.lm_head, cfg.rms_norm_eps,
          pool_);
  return ok();
}

void CpuBackend::layer_forward(int64_t l, const model::StepInput& step, std::vector<float>& h) {
  const model::FlintConfig& cfg = config();
  const model::LayerWeights& lw = weights_.layers[l];
  const LayerVectors& vec = vectors_[l];
  const int64_t T = step.num_tokens(), d = cfg.hidden_size;
  const int64_t q_dim = cfg.num_heads * cfg.head_dim, kv_dim = cfg.num_kv_heads * cfg.head_dim;

  // Attention block.
  std::vector<float> a(h.size()), q(static_cast<size_t>(T * q_dim)),
      k(static_cast<size_t>(T * kv_dim)), v(k.size()), o(q.size()), y(h.size());
  rms_norm(a.data(), h.data(), vec.attn_norm.data(), T, d, cfg.rms_norm_eps);
  linear(q.data(), a.data(), T, lw.q, pool_);
  linear(k.data(), a.data(), T, lw.k, pool_);
  linear(v.data(), a.data(), T, lw.v, pool_);
  const QkNormRopeArgs rope{cfg.num_heads,
                            cfg.num_kv_heads,
                            cfg.head_dim,
                            cfg.rms_norm_eps,
                            static_cast<bool>(cfg.layer_uses_rope[l]),
                            cfg.rope_theta};
  qk_norm_rope(q.data(), k.data(), step.positions, vec.q_norm.data(), vec.k_norm.data(), rope);
  if (cache_.spec().dtype == DType::kBF16) {
    // This step's keys and values are seen exactly as later steps will read them back.
    for (float* p : {k.data(), v.data()})
      for (int64_t i = 0; i < T * kv_dim; ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  }
  attention(o.data(), q.data(), k.data(), v.data(), step, l, cfg, vec.sinks.data(), cache_, pool_);
  kv_cache_write(cache_, k.data(), v.data(), step, l, cfg);
  linear(y.data(), o.data(), T, lw.o, pool_);
  for (size_t i = 0; i < h.size(); ++i) h[i] += y[i];

  // MLP / MoE block.
  rms_norm(a.data(), h.data(), vec.ffn_norm.data(), T, d, cfg.rms_norm_eps);
  if (cfg.layer_is_dense[l]) {
    gated_mlp(y.data(), a.data(), T, lw.gate, lw.up, lw.down, pool_);
  } else {
    moe(y.data(), a.data(), T, lw, cfg, pool_);
  }
  for (size_t i = 0; i < h.size(); ++i) h[i] += y[i];
}

Status CpuBackend::validate(const model::StepInput& step, std::span<float> logits) const {
  const model::FlintConfig& cfg = config();
  if (!cache_.ready())
    return make_error(ErrorCode::kInvalidArgument, "cpu forward: kv cache not initialised");
  const int32_t T = step.num_tokens(), S = step.num_seqs();
  if (T == 0) return bad("cpu forward: empty step (no tokens)");
  if (std::ssize(step.positions) != T || std::ssize(step.slot_mapping) != T)
    return bad("cpu forward: positions/slot_mapping have {}/{} entries, expected {}",
               step.positions.size(), step.slot_mapping.size(), T);
  if (std::ssize(step.query_start_loc) != S + 1 || std::ssize(step.ring_ids) != S ||
      std::ssize(step.block_table) != int64_t{S} * step.max_blocks_per_seq)
    return bad(
        "cpu forward: query_start_loc/ring_ids/block_table sizes {}/{}/{} do not match {} "
        "sequences",
        step.query_start_loc.size(), step.ring_ids.size(), step.block_table.size(), S);
  if (step.query_start_loc.front() != 0 || step.query_start_loc.back() != T)
    return bad("cpu forward: query_start_loc must run from 0 to {}", T);
  for (int32_t t = 0; t < T; ++t)
    if (step.token_ids[t] < 0 || step.token_ids[t] >= cfg.vocab_size)
      return bad("cpu forward: token id {} at row {} is outside the vocabulary [0, {})",
                 step.token_ids[t], t, cfg.vocab_size);
  const int64_t page_size = cache_.spec().page_size;
  const int64_t full_rows = cache_.spec().num_pages * page_size;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t begin = step.query_start_loc[s], end = step.query_start_loc[s + 1];
    if (end <= begin) return bad("cpu forward: sequence {} has no new tokens", s);
    const int64_t len = step.seq_lens[s], first_new = len - (end - begin);
    if (first_new < 0)
      return bad("cpu forward: sequence {} has {} new tokens but seq_len {}", s, end - begin, len);
    if (cfg.max_position_embeddings > 0 && len > cfg.max_position_embeddings)
      return bad("cpu forward: sequence {} reaches length {}, over max_position_embeddings {}", s,
                 len, cfg.max_position_embeddings);
    if (step.ring_ids[s] < 0 || step.ring_ids[s] >= cache_.spec().num_rings)
      return bad("cpu forward: ring id {} of sequence {} outside [0, {})", step.ring_ids[s], s,
                 cache_.spec().num_rings);
    if ((len + page_size - 1) / page_size > step.max_blocks_per_seq)
      return bad("cpu forward: sequence {} of length {} needs more than {} blocks", s, len,
                 step.max_blocks_per_seq);
    for (int64_t b = 0; b < (len + page_size - 1) / page_size; ++b) {
      const int32_t page = step.block_table[s * step.max_blocks_per_seq + b];
      if (page < 0 || page >= cache_.spec().num_pages)
        return bad("cpu forward: page {} (block {} of sequence {}) outside [0, {})", page, b, s,
                   cache_.spec().num_pages);
    }
    for (int32_t t = begin; t < end; ++t) {
      if (step.positions[t] != first_new + (t - begin))
        return bad("cpu forward: token {} of sequence {} has position {}, expected {}", t, s,
                   step.positions[t], first_new + (t - begin));
      const int64_t pos = step.positions[t];
      const int64_t want =
          int64_t{step.block_table[s * step.max_blocks_per_seq + pos / page_size]} * page_size +
          pos % page_size;
      if (step.slot_mapping[t] != want || want >= full_rows)
        return bad("cpu forward: slot_mapping[{}] = {}, expected {} from the block table", t,
                   step.slot_mapping[t], want);
    }
  }
  for (int32_t idx : step.logits_indices)
    if (idx < 0 || idx >= T) return bad("cpu forward: logits index {} outside [0, {})", idx, T);
  if (std::ssize(logits) < std::ssize(step.logits_indices) * cfg.vocab_size)
    return bad("cpu forward: logits buffer holds {} floats, need {}", logits.size(),
               step.logits_indices.size() * cfg.vocab_size);
  return ok();
}

SimpleSteps::SimpleSteps(int num_seqs, int64_t max_seq_len, int64_t page_size)
    : page_size_(page_size),
      pages_per_seq_((max_seq_len + page_size - 1) / page_size),
      lens_(static_cast<size_t>(num_seqs), 0) {}

model::KvCacheSpec SimpleSteps::kv_spec(DType dtype) const {
  model::KvCacheSpec spec;
  spec.num_pages = pages_per_seq_ * std::ssize(lens_);
  spec.page_size = page_size_;
  spec.num_rings = std::ssize(lens_);
  spec.dtype = dtype;
  return spec;
}

void SimpleSteps::add(int seq, std::span<const int32_t> tokens, bool all_logits) {
  queued_.push_back({seq, std::vector<int32_t>(tokens.begin(), tokens.end()), all_logits});
}

model::StepInput SimpleSteps::take() {
  model::StepInput step;
  step.max_blocks_per_seq = static_cast<int32_t>(pages_per_seq_);
  step.query_start_loc.push_back(0);
  for (const Chunk& c : queued_) {
    const int64_t start = lens_[c.seq];
    const int32_t first_row = step.num_tokens();
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int64_t pos = start + static_cast<int64_t>(i);
      step.token_ids.push_back(c.tokens[i]);
      step.positions.push_back(static_cast<int32_t>(pos));
      const int64_t page = c.seq * pages_per_seq_ + pos / page_size_;
      step.slot_mapping.push_back(static_cast<int32_t>(page * page_size_ + pos % page_size_));
      if (c.all_logits || i + 1 == c.tokens.size())
        step.logits_indices.push_back(first_row + static_cast<int32_t>(i));
    }
    lens_[c.seq] = start + static_cast<int64_t>(c.tokens.size());
    step.query_start_loc.push_back(step.num_tokens());
    step.seq_lens.push_back(static_cast<int32_t>(lens_[c.seq]));
    step.ring_ids.push_back(c.seq);
    for (int64_t b = 0; b < pages_per_seq_; ++b)
      step.block_table.push_back(static_cast<int32_t>(c.seq * pages_per_seq_ + b));
  }
  queued_.clear();
  return step;
}

}  // namespace flint::cpu
