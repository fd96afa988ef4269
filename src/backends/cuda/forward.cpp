// The CUDA forward pass: spec section 2 as a sequence of launches over all rows of a step.
// Attention reads this step's own K/V from step rows and, for chunks, the cache is written after
// it, so a prefill chunk longer than the sliding window never reads a ring slot it already
// overwrote. Decode steps (one new token per sequence) run q/k norm, RoPE, the cache write and
// attention as one launch per layer (decode_attention_fused).
#include "backends/cuda/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "backends/cuda/fill.h"
#include "backends/cuda/kernels/copy_words.h"
#include "backends/cuda/kernels/decode_attention.h"
#include "backends/cuda/kernels/embedding.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/greedy_head.h"
#include "backends/cuda/kernels/moe_experts.h"
#include "backends/cuda/kernels/moe_router.h"
#include "backends/cuda/kernels/qk_norm_rope_kv.h"
#include "backends/cuda/kernels/rms_norm.h"

namespace flint::cuda {
namespace {

// Graph buckets: the next power of two (at least 64), capped at `cap`.
int64_t key_bucket(int64_t keys, int64_t cap) {
  int64_t b = 64;
  while (b < keys) b *= 2;
  return std::min(b, std::max<int64_t>(cap, 1));
}

int64_t count_layers(const model::FlintConfig& c, bool sliding) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n += c.is_sliding(l) == sliding;
  return n;
}

}  // namespace

Result<std::unique_ptr<CudaForward>> CudaForward::create(const DeviceWeights& w,
                                                         const model::KvCacheSpec& kv) {
  const model::FlintConfig& c = w.config();
  if (kv.dtype != DType::kBF16) {
    return make_error(ErrorCode::kUnsupported, "cuda: KV cache dtype {} (only bf16)", kv.dtype);
  }
  if (kv.page_size <= 0 || kv.num_pages < 0 || kv.num_rings < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda: bad KV cache spec ({} pages of {}, {} rings)", kv.num_pages,
                      kv.page_size, kv.num_rings);
  }
  std::unique_ptr<CudaForward> f(new CudaForward(w, kv));
  const int64_t row = c.num_kv_heads * c.head_dim;
  int64_t total = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t n =
        c.is_sliding(l) ? kv.num_rings * c.sliding_window * row : kv.num_pages * kv.page_size * row;
    f->kv_offset_.push_back(total);
    f->kv_elems_.push_back(n);
    total += 2 * n;
  }
  auto buf = DeviceBuffer::allocate(static_cast<size_t>(total) * 2);
  if (!buf) return buf.error().with_context("allocating the KV cache");
  f->kv_ = std::move(buf).value();
  if (total > 0) FLINT_CUDA_CHECK(cudaMemset(f->kv_.data(), 0, f->kv_.size()));
  f->slots_ = static_cast<int>(c.num_experts_per_tok) + w.num_shared_slots();
  f->max_act_cols_ = std::max({c.intermediate_size, c.moe_intermediate_size,
                               c.shared_expert_intermediate_size, int64_t(1)});
  int dev = 0;
  FLINT_CUDA_CHECK(cudaGetDevice(&dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&f->num_sms_, cudaDevAttrMultiProcessorCount, dev));
  for (cudaEvent_t& e : f->staged_) {
    FLINT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (w.greedy_head() != nullptr) {
    const int64_t rows = kLmHeadGemvRows, approx = rows * c.vocab_size * int64_t(sizeof(float));
    const int64_t maxima = rows * kTopKMaximaPerRow * int64_t(sizeof(float));
    const int64_t list = rows * kSampleCandidates * 4;  // ids, then logits
    auto g = DeviceBuffer::allocate(size_t(approx + rows * 16 + maxima + rows * 4 + 2 * list));
    if (!g) return g.error().with_context("allocating the greedy LM head's scratch");
    f->greedy_buf_ = std::move(g).value();
    auto* base = static_cast<unsigned char*>(f->greedy_buf_.data());
    f->ws_greedy_approx_ = reinterpret_cast<float*>(base);
    f->d_greedy_keys_ = reinterpret_cast<uint64_t*>(base + approx);
    f->d_greedy_tokens_ = reinterpret_cast<int32_t*>(base + approx + rows * 8);
    f->d_head_top_k_ = reinterpret_cast<int32_t*>(base + approx + rows * 12);
    f->ws_topk_maxima_ = reinterpret_cast<float*>(base + approx + rows * 16);
    unsigned char* cand = base + approx + rows * 16 + maxima;
    f->d_cand_count_ = reinterpret_cast<uint32_t*>(cand);
    f->d_cand_ids_ = reinterpret_cast<int32_t*>(cand + rows * 4);
    f->d_cand_logits_ = reinterpret_cast<float*>(cand + rows * 4 + list);
    FLINT_CUDA_CHECK(cudaMemset(base + approx, 0, size_t(rows) * 16));
  }
  FLINT_TRY(f->prepare_persistent());
  // The KV cache's zero fill and the persistent kernel's tables went through the legacy stream
  // (cudaMemset, a pageable cudaMemcpy: both may return before they land), which the step's
  // non-blocking stream does not wait for.
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());
  return f;
}

Status CudaForward::prepare_persistent() {
  const model::FlintConfig& c = w_.config();
  const int L = static_cast<int>(c.num_hidden_layers);
  std::vector<PersistentLayer> table(static_cast<size_t>(L));
  bool separate_shared = false;
  for (int l = 0; l < L; ++l) {
    const DeviceLayer& d = w_.layers()[l];
    PersistentLayer& p = table[l];
    p.qkv = d.qkv;
    p.o = d.o;
    p.gate = d.gate;
    p.up = d.up;
    p.down = d.down;
    p.router = d.router;
    p.exp_gate = d.exp_gate;
    p.exp_up = d.exp_up;
    p.exp_down = d.exp_down;
    p.attn_norm = d.attn_norm;
    p.ffn_norm = d.ffn_norm;
    p.q_norm = d.q_norm;
    p.k_norm = d.k_norm;
    p.sinks = d.sinks;
    p.expert_bias = d.expert_bias;
    p.k_cache = k_cache(l);
    p.v_cache = v_cache(l);
    p.sliding = c.is_sliding(l);
    p.rope = c.layer_uses_rope[l];
    p.dense = c.layer_is_dense[l];
    separate_shared = separate_shared || d.has_separate_shared;
  }
  if (separate_shared) {
    persistent_shape_.why = "a shared expert that is not sliced into the expert stacks";
    return ok();
  }
  // The model's part of the launch arguments; enqueue_persistent adds the step's.
  PersistentDecodeArgs& a = persistent_args_;
  a.num_layers = L;
  a.hidden = c.hidden_size;
  a.num_heads = static_cast<int>(c.num_heads);
  a.num_kv_heads = static_cast<int>(c.num_kv_heads);
  a.head_dim = static_cast<int>(c.head_dim);
  a.eps = c.rms_norm_eps;
  a.attn_scale = c.softmax_scale();
  a.rope_theta = c.rope_theta;
  a.routing = routing();
  persistent_shape_ = persistent_decode_shape(table.data(), L, a);
  if (!persistent_shape_.ok) return ok();
  auto t = DeviceBuffer::allocate(table.size() * sizeof(PersistentLayer));
  if (!t) return t.error().with_context("allocating the persistent kernel's layer table");
  persistent_layers_ = std::move(t).value();
  FLINT_CUDA_CHECK(cudaMemcpy(persistent_layers_.data(), table.data(), persistent_layers_.size(),
                              cudaMemcpyHostToDevice));
  auto b = DeviceBuffer::allocate(2 * sizeof(uint32_t));
  if (!b) return b.error().with_context("allocating the grid barrier");
  persistent_barrier_ = std::move(b).value();
  FLINT_CUDA_CHECK(cudaMemset(persistent_barrier_.data(), 0, persistent_barrier_.size()));
  a.layers = persistent_layers_.as<PersistentLayer>();
  a.barrier = persistent_barrier_.as<uint32_t>();
  return ok();
}

MoeRouting CudaForward::routing() const {
  const model::FlintConfig& c = w_.config();
  return MoeRouting{static_cast<int>(c.num_experts), static_cast<int>(c.num_experts_per_tok),
                    w_.num_shared_slots(), c.norm_topk_prob, c.routed_scaling_factor};
}

void CudaForward::enqueue_persistent(const StepPlan& plan, cudaStream_t s, uint64_t* trace) {
  const model::FlintConfig& c = w_.config();
  const int T = plan.num_tokens;
  const int64_t d = c.hidden_size;
  embedding(ws_h_, w_.embed(), w_.embed_dtype(), d_tokens_, T, d, s);
  PersistentDecodeArgs a = persistent_args_;
  a.num_rows = T;
  a.full_splits = plan.full_splits;
  a.sliding_splits = plan.sliding_splits;
  a.kv = token_kv(plan);
  a.h = ws_h_;
  a.qkv = ws_qkv_;
  a.attn = ws_attn_;
  a.act = ws_act_;
  a.logits = ws_rlogits_;
  a.weights = ws_rw_;
  a.ids = d_ids_;
  a.ids_layer_stride = int64_t(cap_tokens_) * slots_;
  a.attn_part = ws_attn_part_;
  a.attn_counters = attn_counters_.as<int32_t>();
  a.trace = trace;
  persistent_decode(a, persistent_shape_, s);
  if (plan.num_logits > 0) {
    gemv(ws_logits_, c.vocab_size, ws_h_, d, plan.num_logits, w_.lm_head(), false, s,
         GemvNorm{w_.final_norm(), c.rms_norm_eps}, d_logit_rows_);
  }
}

CudaForward::~CudaForward() {
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (pinned_back_ != nullptr) cudaFreeHost(pinned_back_);
  for (cudaEvent_t e : staged_)
    if (e != nullptr) cudaEventDestroy(e);
}

__nv_bfloat16* CudaForward::k_cache(int layer) const {
  return kv_.as<__nv_bfloat16>() + kv_offset_[layer];
}
__nv_bfloat16* CudaForward::v_cache(int layer) const {
  return kv_.as<__nv_bfloat16>() + kv_offset_[layer] + kv_elems_[layer];
}

DecodeAttentionArgs CudaForward::decode_attention_args(const StepPlan& plan, bool sliding) const {
  const model::FlintConfig& c = w_.config();
  return DecodeAttentionArgs{static_cast<int>(c.num_heads),
                             static_cast<int>(c.num_kv_heads),
                             static_cast<int>(c.head_dim),
                             c.softmax_scale(),
                             sliding,
                             sliding ? plan.sliding_splits : plan.full_splits};
}

TokenKv CudaForward::token_kv(const StepPlan& plan) const {
  return TokenKv{d_pos_,
                 d_seq_,
                 d_slots_,
                 d_rings_,
                 d_qsl_,
                 d_seq_lens_,
                 d_table_,
                 plan.max_blocks_per_seq,
                 static_cast<int>(spec_.page_size),
                 static_cast<int>(w_.config().sliding_window)};
}

const int32_t* CudaForward::expert_ids(int layer) const {
  return d_ids_ + int64_t(layer) * cap_tokens_ * slots_;
}

Status CudaForward::reserve(int num_tokens, int num_seqs, int64_t table_len, int num_logits) {
  if (num_tokens <= cap_tokens_ && num_seqs <= cap_seqs_ && table_len <= cap_table_ &&
      num_logits <= cap_logits_) {
    return ok();
  }
  const model::FlintConfig& c = w_.config();
  cap_tokens_ = std::max(cap_tokens_, num_tokens);
  cap_seqs_ = std::max(cap_seqs_, num_seqs);
  cap_table_ = std::max(cap_table_, table_len);
  cap_logits_ = std::max(cap_logits_, num_logits);
  const int64_t T = cap_tokens_, L = c.num_hidden_layers;
  // int32 metadata: first the staged region, which upload_step fills with the step's nine host
  // arrays packed at offsets that depend only on the step's plan (one upload per step); room for
  // each at its capacity plus its alignment padding. Then the routing ids and moe_route's block
  // counter, which live on the device only.
  const int64_t staged = staged_offset(T) + staged_offset(T) + staged_offset(T) + staged_offset(T) +
                         staged_offset(cap_seqs_) + staged_offset(cap_table_) +
                         staged_offset(cap_logits_) + staged_offset(cap_seqs_ + 1) +
                         staged_offset(cap_seqs_);
  const int64_t ids = L * T * slots_;
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());  // buffers may be in use by queued work
  ++buffer_generation_;
  auto m = DeviceBuffer::allocate((staged + ids + 1) * 4);
  if (!m) return m.error().with_context("allocating step metadata");
  meta_ = std::move(m).value();
  d_ids_ = meta_.as<int32_t>() + staged;
  d_route_counter_ = d_ids_ + ids;
  // moe_route's block counter: zero between launches.
  FLINT_CUDA_CHECK(cudaMemset(d_route_counter_, 0, sizeof(int32_t)));
  if (route_state_.data() == nullptr) {
    const int64_t acc = L * route_acc_doubles(std::max<int64_t>(c.num_experts, 0));
    auto rs = DeviceBuffer::allocate(acc * int64_t(sizeof(double)) + L * int64_t(sizeof(int32_t)));
    if (!rs) return rs.error().with_context("allocating the routing sums");
    route_state_ = std::move(rs).value();
    d_route_acc_ = route_state_.as<double>();
    d_pick_ready_ = reinterpret_cast<int32_t*>(d_route_acc_ + acc);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (pinned_back_ != nullptr) cudaFreeHost(pinned_back_);
  pinned_elems_ = static_cast<size_t>(staged);
  FLINT_CUDA_CHECK(cudaMallocHost(&pinned_, pinned_elems_ * 4));
  FLINT_CUDA_CHECK(cudaMallocHost(&pinned_back_, pinned_elems_ * 4));

  const int64_t d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t attn_ws = decode_attention_workspace(
      cap_tokens_, static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), num_sms_);
  auto cb =
      DeviceBuffer::allocate(decode_attention_counters(cap_tokens_, static_cast<int>(Hkv)) * 4);
  if (!cb) return cb.error().with_context("allocating attention counters");
  attn_counters_ = std::move(cb).value();
  FLINT_CUDA_CHECK(cudaMemset(attn_counters_.data(), 0, attn_counters_.size()));
  // Segments start on 64-float boundaries: the kernels load activations 16 bytes at a time.
  const int64_t sizes[] = {T * d,
                           T * d,
                           T * (H + 2 * Hkv) * D,
                           T * H * D,
                           T * H * D,
                           T * slots_ * max_act_cols_,
                           T * std::max<int64_t>(c.num_experts, 1),
                           T * slots_,
                           attn_ws,
                           int64_t(cap_logits_) * c.vocab_size,
                           int64_t(cap_logits_) * d,
                           T * Hkv * D,  // bf16 K rows (over-allocated as floats)
                           T * Hkv * D,
                           T};
  int64_t floats = 0;
  for (int64_t n : sizes) floats += (n + 63) / 64 * 64;
  auto wb = DeviceBuffer::allocate(floats * 4);
  if (!wb) return wb.error().with_context("allocating forward workspaces");
  work_ = std::move(wb).value();
  float* f = work_.as<float>();
  float** segs[] = {&ws_h_,    &ws_a_,       &ws_qkv_,   &ws_q_,         &ws_attn_,
                    &ws_act_,  &ws_rlogits_, &ws_rw_,    &ws_attn_part_, &ws_logits_,
                    &ws_alog_, &ws_kstep_,   &ws_vstep_, &ws_xinv_};
  for (size_t i = 0; i < std::size(segs); ++i) {
    *segs[i] = f;
    f += (sizes[i] + 63) / 64 * 64;
  }
  // The zeroed counters above were set on the legacy stream, which the step's non-blocking stream
  // does not wait for.
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());
  return ok();
}

Result<StepPlan> CudaForward::upload_step(const model::StepInput& st, cudaStream_t s,
                                          const int32_t* chain) {
  const model::FlintConfig& c = w_.config();
  const int T = st.num_tokens(), S = st.num_seqs();
  auto bad = [](fmt::string_view f, auto&&... a) {
    return Error{ErrorCode::kInvalidArgument,
                 "cuda step: " + fmt::vformat(f, fmt::make_format_args(a...))};
  };
  if (T == 0) return bad("no tokens");
  if (st.positions.size() != size_t(T) || st.slot_mapping.size() != size_t(T)) {
    return bad("{} tokens but {} positions and {} slots", T, st.positions.size(),
               st.slot_mapping.size());
  }
  if (st.query_start_loc.size() != size_t(S) + 1 || st.ring_ids.size() != size_t(S) ||
      st.block_table.size() != size_t(S) * std::max(st.max_blocks_per_seq, 0)) {
    return bad("{} sequences but query_start_loc {}, ring_ids {}, block_table {} (x{})", S,
               st.query_start_loc.size(), st.ring_ids.size(), st.block_table.size(),
               st.max_blocks_per_seq);
  }
  if (st.query_start_loc[0] != 0 || st.query_start_loc[S] != T) {
    return bad("query_start_loc must run from 0 to {}", T);
  }
  const int64_t num_slots = spec_.num_pages * spec_.page_size;
  std::vector<int32_t>& seq_idx = seq_idx_;
  seq_idx.assign(T, 0);
  StepPlan plan;
  plan.num_tokens = T;
  plan.num_seqs = S;
  plan.num_logits = static_cast<int>(st.logits_indices.size());
  // The block table goes up with a power-of-two row stride so that the stride, a launch argument,
  // changes rarely.
  int32_t stride = 16;
  while (stride < st.max_blocks_per_seq) stride *= 2;
  plan.max_blocks_per_seq = stride;
  plan.decode = T == S;  // each sequence has at least one token (positions checked below)
  int64_t max_full_keys = 0, max_sliding_keys = 0;
  for (int q = 0; q < S; ++q) {
    const int32_t b = st.query_start_loc[q], e = st.query_start_loc[q + 1];
    if (e < b) return bad("query_start_loc is not sorted at sequence {}", q);
    if (count_layers(c, true) > 0 && (st.ring_ids[q] < 0 || st.ring_ids[q] >= spec_.num_rings)) {
      return bad("sequence {} uses ring {} of {}", q, st.ring_ids[q], spec_.num_rings);
    }
    const int64_t len = st.seq_lens[q];
    if (len < e - b || len > int64_t(st.max_blocks_per_seq) * spec_.page_size) {
      return bad("sequence {} has length {} ({} new, {} blocks of {})", q, len, e - b,
                 st.max_blocks_per_seq, spec_.page_size);
    }
    if (count_layers(c, false) > 0) {
      for (int64_t blk = 0; blk < ceil_div(len, spec_.page_size); ++blk) {
        const int32_t page = st.block_table[int64_t(q) * st.max_blocks_per_seq + blk];
        if (page < 0 || page >= spec_.num_pages) {
          return bad("sequence {} block {} is page {} of {}", q, blk, page, spec_.num_pages);
        }
      }
    }
    for (int32_t t = b; t < e; ++t) {
      seq_idx[t] = q;
      if (st.positions[t] != len - (e - b) + (t - b)) {
        return bad("token {} has position {}, expected {}", t, st.positions[t],
                   len - (e - b) + (t - b));
      }
      if (count_layers(c, false) > 0 &&
          (st.slot_mapping[t] < 0 || st.slot_mapping[t] >= num_slots)) {
        return bad("token {} maps to slot {} of {}", t, st.slot_mapping[t], num_slots);
      }
      max_full_keys = std::max<int64_t>(max_full_keys, st.positions[t] + 1);
      max_sliding_keys = std::max<int64_t>(
          max_sliding_keys, std::min<int64_t>(st.positions[t] + 1, c.sliding_window));
    }
    if (e == b) plan.decode = false;  // a sequence with no new token
  }
  const int Hkv = static_cast<int>(c.num_kv_heads);
  plan.persistent =
      plan.decode && persistent_on_ && persistent_shape_.ok && T <= kPersistentMaxRows;
  persistent_steps_ += plan.persistent;
  plan.full_splits = decode_attention_splits(
      T, Hkv, key_bucket(max_full_keys, std::numeric_limits<int32_t>::max()), num_sms_);
  plan.sliding_splits =
      decode_attention_splits(T, Hkv, key_bucket(max_sliding_keys, c.sliding_window), num_sms_);
  for (int32_t id : st.token_ids) {
    if (id < 0 || id >= c.vocab_size) return bad("token id {} outside [0, {})", id, c.vocab_size);
  }
  for (int32_t r : st.logits_indices) {
    if (r < 0 || r >= T) return bad("logits row {} outside [0, {})", r, T);
  }
  std::vector<int32_t>& table = table_;
  table.assign(size_t(S) * stride, 0);
  for (int q = 0; q < S; ++q) {
    std::copy_n(st.block_table.begin() + int64_t(q) * st.max_blocks_per_seq, st.max_blocks_per_seq,
                table.begin() + int64_t(q) * stride);
  }
  FLINT_TRY(reserve(T, S, int64_t(table.size()), plan.num_logits));
  // The prefill path, and the LM head's cuBLAS handle and activation scratch for more logits
  // rows than one GEMV pass holds (enqueue_lm_head).
  if (T > kPrefillMinTokens || plan.num_logits > lm_head_gemv_rows()) {
    FLINT_TRY(reserve_prefill(T));
  }
  // The other half of the staging may still be in flight; this half's copies (two steps ago)
  // have normally finished long since, so this wait does not stall the host.
  stage_ ^= 1;
  FLINT_CUDA_CHECK(cudaEventSynchronize(staged_[stage_]));
  // The nine arrays packed into the pinned half and uploaded at once; the device views point at
  // the same offsets, which depend only on (T, S, stride, logits rows): a graph replayed for an
  // equal plan reads where this step's upload writes.
  int32_t* const pin = stage_ == 0 ? pinned_ : pinned_back_;
  int32_t* const dev = meta_.as<int32_t>();
  int64_t off = 0;
  auto put = [&](const int32_t* src, size_t n, int32_t** view) {
    if (n > 0) std::memcpy(pin + off, src, n * 4);
    *view = dev + off;
    off += staged_offset(static_cast<int64_t>(n));
  };
  put(st.token_ids.data(), T, &d_tokens_);
  put(st.positions.data(), T, &d_pos_);
  put(seq_idx.data(), T, &d_seq_);
  put(st.slot_mapping.data(), T, &d_slots_);
  put(st.ring_ids.data(), S, &d_rings_);
  put(table.data(), table.size(), &d_table_);
  put(st.logits_indices.data(), st.logits_indices.size(), &d_logit_rows_);
  put(st.query_start_loc.data(), S + 1, &d_qsl_);
  put(st.seq_lens.data(), S, &d_seq_lens_);
  // A kernel reads the pinned half: no hand-off to a copy engine and back between steps.
  copy_words(dev, pin, off, s, chain, chain != nullptr ? T : 0);
  FLINT_CUDA_CHECK(cudaEventRecord(staged_[stage_], s));
  return plan;
}

Result<std::vector<double>> CudaForward::trace_persistent(const StepPlan& plan, cudaStream_t s) {
  if (!plan.persistent) {
    return make_error(ErrorCode::kInvalidArgument, "trace_persistent: not a persistent step");
  }
  const size_t n = 2 + 12 * static_cast<size_t>(w_.config().num_hidden_layers);
  FLINT_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(n * sizeof(uint64_t)));
  FLINT_CUDA_CHECK(cudaMemsetAsync(buf.data(), 0, buf.size(), s));
  enqueue_persistent(plan, s, buf.as<uint64_t>());
  std::vector<uint64_t> t(n);
  FLINT_CUDA_CHECK(cudaMemcpyAsync(t.data(), buf.data(), buf.size(), cudaMemcpyDeviceToHost, s));
  FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> d;
  for (size_t i = 1; i < n && t[i] != 0; ++i) d.push_back(static_cast<double>(t[i] - t[i - 1]));
  return d;
}

void CudaForward::enqueue(const StepPlan& plan, cudaStream_t s, OpTimer* timer) {
  if (plan.num_tokens > kPrefillMinTokens) return enqueue_prefill(plan, s, timer);
  if (plan.persistent && timer == nullptr) return enqueue_persistent(plan, s);
  enqueue_layered(plan, s, timer);
}

void CudaForward::enqueue_layered(const StepPlan& plan, cudaStream_t s, OpTimer* timer) {
  auto mark = [&](const char* op) {
    if (timer != nullptr) timer->mark(op, s);
  };
  const model::FlintConfig& c = w_.config();
  const int T = plan.num_tokens;
  const int64_t d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  const int64_t qkv_cols = (H + 2 * Hkv) * D;
  const float eps = c.rms_norm_eps;
  // Steps whose gate/up kernels pick the experts count the picks per layer (d_pick_ready_), so
  // that moe_down reads them before its PDL wait; the counters start each step at zero (set
  // before the first kernel, so that the memset does not sit between two PDL launches).
  // H200, three-round ab against f36cd36 (ms per step): NVFP4 b1 1K 2.045 -> 2.002, 100K 2.783
  // -> 2.760, b2 1K 2.913 -> 2.857; BF16 b1 1K 2.523 -> 2.482; batch 8 unchanged.
  auto routed_max = [](const DeviceLayer& L) {
    return L.exp_gate.dtype == DType::kNVFP4 ? kRoutedGateUpMaxTokensNvfp4 : kRoutedGateUpMaxTokens;
  };
  bool count_picks = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    count_picks |= !c.layer_is_dense[l] && T <= routed_max(w_.layers()[l]);
  }
  if (count_picks) {
    FLINT_CUDA_CHECK(cudaMemsetAsync(route_state_.data(), 0, route_state_.size(), s));
  }
  embedding(ws_h_, w_.embed(), w_.embed_dtype(), d_tokens_, T, d, s);
  mark("embedding");
  const MoeRouting routing = this->routing();
  auto run = [&](uint32_t op) { return (skipped_ops_ & op) == 0; };  // set_skipped_ops
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& L = w_.layers()[l];
    const bool sliding = c.is_sliding(l);
    // The input RMSNorm is fused into the projection that reads the residual stream.
    if (run(kOpQkv))
      gemv(ws_qkv_, qkv_cols, ws_h_, d, T, L.qkv, false, s, GemvNorm{L.attn_norm, eps});
    mark("qkv_proj");
    const TokenKv kv = token_kv(plan);
    auto* k_step = reinterpret_cast<__nv_bfloat16*>(ws_kstep_);
    auto* v_step = reinterpret_cast<__nv_bfloat16*>(ws_vstep_);
    const bool rope = c.layer_uses_rope[l];
    DecodeAttentionArgs aa = decode_attention_args(plan, sliding);
    // One token: the o projection launches once attention's prologue is done, so that it requests
    // its weights while attention runs, and (gemv_route_partials) lets the gate/up launch only once
    // its own blocks have passed their wait. First for BF16 o weights (16 MB): H200, ms per step
    // (scripts/gpu.sh sweep, three rounds, seventeenth session), attention exits first / lets it
    // launch after its prologue: BF16 b1 1K 2.452 / 2.384, 100K 3.166 / 3.105; but NVFP4 b1 1K
    // 1.934 / 1.945, b2 2.793 / 2.934 and BF16 b2 3.675 / 3.774, b8 7.617 / 7.901 lost. NVFP4
    // (twenty-ninth session, sweeps of two rounds, b1 greedy head): with the o blocks letting the
    // gate/up launch at their start, as every GEMV does, 1K 1.632 -> 1.655, 100K 2.341 -> 2.380
    // (another sweep: 1.636 -> 1.657, 2.335 -> 2.369): the o's cycle grew by 0.9 us, the gate/up's
    // by 0.8 and moe_down's by 0.4 (--ktrace) for the 2 us attention's hand-off saved; with the
    // gate/up launched after the o's wait, 1K 1.629 -> 1.609, 100K 2.335 -> 2.329, BF16 unchanged
    // (2.087 -> 2.085, 2.758 -> 2.752). The attention blocks requesting the o weights into L2
    // themselves after their prologue (cp.async.bulk.prefetch.L2, split over the blocks) lost
    // (twenty-fourth session, sweep, five rounds, b1 1K greedy head): NVFP4 1.694 -> 1.727, BF16
    // 2.141 -> 2.302; with the shared expert's slices as well, 1.803 and 2.416.
    aa.early_dependents = T == 1;
    if (plan.decode) {
      // One launch: q/k norm, RoPE, the cache write of the new K/V and attention.
      const DecodeQkv dq{ws_qkv_, L.q_norm, L.k_norm, eps, rope, c.rope_theta};
      if (run(sliding ? kOpAttentionSliding : kOpAttentionFull)) {
        decode_attention_fused(ws_attn_, dq, k_cache(l), v_cache(l), L.sinks, kv, T, aa,
                               ws_attn_part_, attn_counters_.as<int32_t>(), s);
      }
      mark(sliding ? "attention_sliding" : "attention_full");
    } else {
      // Chunks: the cache is written after attention (see the top of this file).
      QkNormRopeArgs qa{static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), eps, rope,
                        c.rope_theta};
      qk_norm_rope_kv(ws_q_, ws_qkv_, L.q_norm, L.k_norm, k_step, v_step, d_pos_, T, qa, s);
      mark("qk_norm_rope");
      decode_attention(ws_attn_, ws_q_, k_cache(l), v_cache(l), k_step, v_step, L.sinks, kv, T, aa,
                       ws_attn_part_, attn_counters_.as<int32_t>(), s);
      mark(sliding ? "attention_sliding" : "attention_full");
      kv_cache_write(k_cache(l), v_cache(l), k_step, v_step, kv, T, static_cast<int>(Hkv),
                     static_cast<int>(D), sliding, s);
      mark("kv_cache_write");
    }
    // One token on a routed layer: the router's sums in the o projection's tail, no router
    // launch (gemv_route_partials; the sums are zeroed with the pick counters above). H200, ms per
    // step (scripts/gpu.sh sweep, three rounds, twenty-second session), router kernel / this:
    // NVFP4 b1 1K 1.855 / 1.844, 100K 2.580 / 2.550; BF16 b1 1K 2.306 / 2.296, 100K 3.007 / 2.991.
    double* route_acc = d_route_acc_ + l * route_acc_doubles(c.num_experts);
    bool routed_in_o = false;
    if (run(kOpO)) {
      if (T == 1 && !c.layer_is_dense[l] && !L.has_separate_shared && run(kOpRouter) &&
          run(kOpGateUp) && routed_top_k_in_block(routing)) {
        routed_in_o =
            gemv_route_partials(ws_h_, ws_attn_, L.o, L.router, L.ffn_norm, ws_a_, route_acc, s);
      }
      if (!routed_in_o) gemv(ws_h_, d, ws_attn_, H * D, T, L.o, true, s);
    }
    mark("o_proj");
    const GemvNorm ffn_norm{L.ffn_norm, eps};
    if (c.layer_is_dense[l]) {
      gemv_gated(ws_act_, c.intermediate_size, ws_h_, d, T, L.gate, L.up, s, ffn_norm);
      gemv(ws_h_, d, ws_act_, c.intermediate_size, T, L.down, true, s);
      mark("dense_mlp");
    } else {
      int32_t* ids = d_ids_ + l * int64_t(cap_tokens_) * slots_;
      // The separate shared expert (rare: it could not be sliced into the expert stacks) reads the
      // normed input after moe_down has updated h, so that layer normalises once up front.
      const float* x = ws_h_;
      GemvNorm norm = ffn_norm;
      if (L.has_separate_shared) {
        rms_norm(ws_a_, d, ws_h_, d, L.ffn_norm, T, d, eps, s);
        x = ws_a_;
        norm = GemvNorm{};
      }
      int32_t* pick_ready = nullptr;
      if (T <= routed_max(L)) {
        // The top-k in the gate/up kernel: the router is a plain GEMV with no serial tail. Its
        // block 0 also writes the normed rows (ws_a_), which the gate/up blocks read instead of
        // normalising h again. H200, ms per step (scripts/gpu.sh sweep, three rounds, sixteenth
        // session): NVFP4 b1 1K 1.976 -> 1.945, 100K 2.714 -> 2.678, b2 1K 2.942 -> 2.885; BF16
        // b1 1K 2.478 -> 2.454.
        static_assert(
            std::max(kRoutedGateUpMaxTokens, kRoutedGateUpMaxTokensNvfp4) < kRouteNormedMaxRows,
            "the routed path's router writes its normed rows");
        // The rows come times the norm weight, their 1 / rms apart (ws_xinv_).
        float* xn = norm.weight != nullptr ? ws_a_ : nullptr;
        float* xinv = xn != nullptr ? ws_xinv_ : nullptr;
        const float* gx = xn != nullptr ? xn : x;
        const GemvNorm gnorm = xn != nullptr ? GemvNorm{} : norm;
        if (run(kOpRouter) && !routed_in_o) {
          moe_route_logits(ws_rlogits_, x, d, T, L.router, norm, routing, s, xn, xinv);
        }
        mark("moe_router");
        if (run(kOpGateUp)) {
          // Counted picks only when moe_down runs after this launch (it waits for the count).
          if (run(kOpDown)) pick_ready = d_pick_ready_ + l;
          if (routed_in_o) {
            gemv_gated_routed_experts(ws_act_, ws_a_, d, T, nullptr, L.expert_bias, routing, ids,
                                      ws_rw_, L.exp_gate, L.exp_up, s, {}, pick_ready, nullptr,
                                      route_acc, eps);
          } else {
            gemv_gated_routed_experts(ws_act_, gx, d, T, ws_rlogits_, L.expert_bias, routing, ids,
                                      ws_rw_, L.exp_gate, L.exp_up, s, gnorm, pick_ready, xinv);
          }
        }
      } else {
        bool shared_done = false;
        if (run(kOpRouter)) {
          const MoeRouteScratch scratch{ws_rlogits_, d_route_counter_};
          // The shared slices' gate/up in the router's launch when moe_route_shared can.
          shared_done =
              moe_route_shared(ids, ws_rw_, x, d, T, L.router, norm, L.expert_bias, routing,
                               scratch, MoeSharedGateUp{L.exp_gate, L.exp_up, ws_act_}, s);
        }
        mark("moe_router");
        if (run(kOpGateUp)) {
          // The shared slices' weights need no ids: they are requested before the PDL wait.
          ExpertHints hints{routing.top_k, routing.num_experts};
          hints.skip_fixed = shared_done;
          gemv_gated_experts(ws_act_, x, d, T * slots_, slots_, ids, L.exp_gate, L.exp_up, s, norm,
                             hints);
        }
      }
      mark("moe_gate_up");
      if (run(kOpDown)) {
        moe_down(ws_h_, d, ws_act_, ids, ws_rw_, T, slots_, L.exp_down, s, pick_ready);
      }
      mark("moe_down");
      if (L.has_separate_shared) {
        const int64_t Ish = c.shared_expert_intermediate_size;
        gemv_gated(ws_act_, Ish, ws_a_, d, T, L.sh_gate, L.sh_up, s);
        gemv(ws_h_, d, ws_act_, Ish, T, L.sh_down, true, s);
      }
    }
  }
  if (plan.num_logits > 0) {
    enqueue_lm_head(plan, s);
    mark("lm_head");
  }
}

int CudaForward::lm_head_gemv_rows() const {
  return w_.lm_head().dtype == DType::kF32 ? 1 : kLmHeadGemvRows;
}

bool CudaForward::greedy_head_serves(const StepPlan& plan) const {
  return w_.greedy_head() != nullptr && ws_greedy_approx_ != nullptr && !plan.persistent &&
         plan.num_logits >= 1 && plan.num_logits <= kLmHeadGemvRows;
}

void CudaForward::enqueue_lm_head(const StepPlan& plan, cudaStream_t s) {
  const model::FlintConfig& c = w_.config();
  const int64_t d = c.hidden_size;
  const int n = plan.num_logits;
  if (plan.head != LmHead::kLogits) {
    // kernels/greedy_head.h: the int8 copy's logits, then the exact FP32 logits of the rows whose
    // error bound leaves them in the running (a pick, or logits for the sampler).
    FLINT_CHECK(greedy_head_serves(plan),
                "enqueue_lm_head: a greedy or top-k plan of {} rows without a greedy head", n);
    GreedyPickArgs g;
    g.approx = ws_greedy_approx_;
    g.x = ws_h_;
    g.x_stride = d;
    g.x_rows = d_logit_rows_;
    g.norm = w_.final_norm();
    g.eps = c.rms_norm_eps;
    g.head = w_.lm_head();
    g.copy = *w_.greedy_head();
    g.bounds = w_.greedy_bounds();
    g.keys = d_greedy_keys_;
    g.tokens = d_greedy_tokens_;
    g.num_rows = n;
    g.top_k = d_head_top_k_;
    g.maxima = ws_topk_maxima_;
    g.logits = ws_logits_;
    greedy_approx(g, s);
    if (plan.head == LmHead::kGreedy) {
      greedy_pick(g, s);
    } else {
      g.cand_count = d_cand_count_;
      g.cand_ids = d_cand_ids_;
      g.cand_logits = d_cand_logits_;
      topk_logits(g, s);
    }
    return;
  }
  if (n > lm_head_gemv_rows() && prefill_.cublas != nullptr && prefill_.cap_tokens >= n) {
    // cuBLAS reads the head once; the GEMV would read it once per 8 rows (a 64-row step spent
    // 5.4 ms in 8 passes over the 615 MB BF16 head).
    rms_norm_rows(ws_alog_, d, ws_h_, d, d_logit_rows_, w_.final_norm(), n, d, c.rms_norm_eps, s);
    if (!gemm_f32_activations(prefill_.cublas, ws_logits_, c.vocab_size, ws_alog_, d, n,
                              w_.lm_head(), prefill_.x, s)) {
      gemv(ws_logits_, c.vocab_size, ws_alog_, d, n, w_.lm_head(), false, s);
    }
    return;
  }
  // Final norm fused into the LM head, over the gathered logits rows.
  gemv(ws_logits_, c.vocab_size, ws_h_, d, n, w_.lm_head(), false, s,
       GemvNorm{w_.final_norm(), c.rms_norm_eps}, d_logit_rows_);
}

void CudaForward::copy_ring(int32_t src, int32_t dst, cudaStream_t s) {
  const model::FlintConfig& c = w_.config();
  FLINT_CHECK(src >= 0 && dst >= 0 && src < spec_.num_rings && dst < spec_.num_rings,
              "copy_ring: rings {} -> {} of {}", src, dst, spec_.num_rings);
  if (src == dst) return;
  const int64_t ring = c.sliding_window * c.num_kv_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_sliding(l)) continue;
    for (__nv_bfloat16* base : {k_cache(l), v_cache(l)}) {
      FLINT_CUDA_CHECK(cudaMemcpyAsync(base + dst * ring, base + src * ring, ring * 2,
                                       cudaMemcpyDeviceToDevice, s));
    }
  }
}

void CudaForward::fill_kv_random(uint64_t seed, cudaStream_t s) {
  fill_uniform_bf16(kv_.data(), static_cast<int64_t>(kv_.size() / 2), 1.0f, seed, s);
}

}  // namespace flint::cuda
