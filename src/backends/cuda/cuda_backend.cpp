// CudaBackend: weights upload, KV cache, the step -> logits path over CudaForward, CUDA graphs for
// decode steps, and sampling on the GPU.
//
// Graphs: one per decode-step shape (StepPlan, whose split counts and block-table stride
// upload_step buckets), captured the second time a shape is seen and replayed after. Exact shapes
// rather than padded batch buckets because a padded row would need a scratch page and ring of its
// own in the KV contract, and would write its K/V somewhere every step; capturing a new batch size
// costs a few ms once and the cache holds at most kMaxGraphs. Prefill and mixed steps run
// un-captured.
#include "backends/cuda/cuda_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "backends/cuda/kernels/copy_words.h"
#include "backends/cuda/kernels/greedy_head.h"

namespace flint::cuda {
namespace {

// Every sequence has exactly one new token.
bool is_decode(const model::StepInput& st) {
  if (st.num_tokens() != st.num_seqs() || st.query_start_loc.size() != st.seq_lens.size() + 1) {
    return false;
  }
  for (size_t s = 0; s + 1 < st.query_start_loc.size(); ++s) {
    if (st.query_start_loc[s + 1] - st.query_start_loc[s] != 1) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const model::FlintWeights& weights) {
  if (!device_available()) return make_error(ErrorCode::kUnavailable, "cuda: no CUDA device");
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto w = DeviceWeights::upload(weights, s);
  if (!w) {
    cudaStreamDestroy(s);
    return w.error().with_context("uploading weights");
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(w).value(), s));
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create_dummy(const model::FlintConfig& config,
                                                               DType linear_dtype, uint64_t seed) {
  if (!device_available()) return make_error(ErrorCode::kUnavailable, "cuda: no CUDA device");
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto w = DeviceWeights::dummy(config, linear_dtype, seed, s);
  if (!w) {
    cudaStreamDestroy(s);
    return w.error().with_context("generating dummy {} weights", linear_dtype);
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(w).value(), s));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  clear_graphs();
  fwd_.reset();
  for (SampleSlot& slot : slots_) {
    if (slot.params != nullptr) cudaFreeHost(slot.params);
    if (slot.tokens != nullptr) cudaFreeHost(slot.tokens);
    if (slot.done != nullptr) cudaEventDestroy(slot.done);
  }
  cudaStreamDestroy(stream_);
}

CudaBackend::CudaBackend(DeviceWeights w, cudaStream_t s) : weights_(std::move(w)), stream_(s) {
  if (!weights_.greedy_head_missing().empty()) {
    spdlog::warn("cuda: greedy steps read the whole FP32 LM head: {}",
                 weights_.greedy_head_missing());
  }
}

Status CudaBackend::init_kv_cache(const model::KvCacheSpec& spec) {
  FLINT_TRY(no_launch_outstanding("init_kv_cache"));
  last_tokens_ = nullptr;  // the greedy head's buffers go with the old CudaForward
  last_rows_ = 0;
  clear_graphs();
  fwd_.reset();
  FLINT_ASSIGN_OR_RETURN(fwd_, CudaForward::create(weights_, spec));
  fwd_->set_persistent_decode(persistent_on_);
  // Room for the largest graphed decode step up front (tables of up to 64 pages per sequence);
  // a later step that needs more moves the buffers once and the graphs are captured again.
  FLINT_TRY(fwd_->reserve_capacity(kMaxGraphSeqs, kMaxGraphSeqs, int64_t(kMaxGraphSeqs) * 64,
                                   kMaxGraphSeqs));
  FLINT_TRY(reserve_sampling(kMaxGraphSeqs));
  graphs_generation_ = fwd_->buffer_generation();
  return ok();
}

CudaBackend::GraphStats CudaBackend::graph_stats() const {
  GraphStats g = stats_;
  g.cached = graphs_.size();
  return g;
}

void CudaBackend::clear_graphs() {
  for (CachedGraph& g : graphs_) {
    // Shapes seen once have no graph; destroying a null graph would leave cudaErrorInvalidValue
    // pending for the next launch check to find.
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
  graphs_.clear();
}

cudaGraphExec_t CudaBackend::find_or_capture(const StepPlan& plan) {
  const int stride = plan.max_blocks_per_seq;
  ++use_clock_;
  CachedGraph* entry = nullptr;
  for (CachedGraph& g : graphs_) {
    if (g.plan == plan && g.max_blocks_per_seq == stride) entry = &g;
  }
  if (entry != nullptr && entry->exec != nullptr) {
    entry->last_use = use_clock_;
    return entry->exec;
  }
  // A shape is captured the second time it is seen: one-off shapes never pay for a capture, and
  // every kernel has run (and set its attributes) un-captured once before.
  if (entry == nullptr) {
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
        return a.last_use < b.last_use;
      });
      if (lru->exec != nullptr) cudaGraphExecDestroy(lru->exec);
      graphs_.erase(lru);
    }
    graphs_.push_back(CachedGraph{plan, stride, nullptr, use_clock_});
    return nullptr;
  }
  // Thread-local mode: other threads' CUDA calls (none today) would not break the capture.
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  fwd_->enqueue(plan, stream_);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const bool ok_capture = cudaStreamEndCapture(stream_, &graph) == cudaSuccess &&
                          cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!ok_capture) {
    (void)cudaGetLastError();
    spdlog::warn("cuda: graph capture of a decode step failed; running un-captured from now on");
    graphs_enabled_ = false;
    return nullptr;
  }
  ++stats_.captures;
  entry->exec = exec;
  entry->last_use = use_clock_;
  return exec;
}

Status CudaBackend::run_step(const model::StepInput& step, LmHead head, LmHead* ran,
                             const int32_t* chain) {
  if (!fwd_) return make_error(ErrorCode::kInternal, "cuda: forward before init_kv_cache");
  const bool decode = is_decode(step);
  // With `chain`, the token ids are the previous step's samples, never on the host.
  FLINT_ASSIGN_OR_RETURN(StepPlan plan, fwd_->upload_step(step, stream_, chain));
  plan.head = fwd_->greedy_head_serves(plan) ? head : LmHead::kLogits;
  if (ran != nullptr) *ran = plan.head;
  if (fwd_->buffer_generation() != graphs_generation_) {
    clear_graphs();  // their captured pointers are stale
    graphs_generation_ = fwd_->buffer_generation();
  }
  // upload_step buckets everything a launch depends on (split counts, table stride), so equal plans
  // replay the same graph.
  if (decode && graphs_enabled_ && plan.num_tokens <= kMaxGraphSeqs) {
    if (cudaGraphExec_t exec = find_or_capture(plan)) {
      FLINT_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      ++stats_.replays;
      return ok();
    }
  }
  fwd_->enqueue(plan, stream_);
  ++stats_.uncaptured;
  return ok();
}

Status CudaBackend::no_launch_outstanding(const char* what) const {
  if (launched_.empty()) return ok();
  return make_error(ErrorCode::kInvalidArgument, "cuda: {} with {} queued steps not waited for",
                    what, launched_.size());
}

Status CudaBackend::forward(const model::StepInput& step, std::span<float> logits) {
  FLINT_TRY(no_launch_outstanding("forward"));
  const int64_t need = int64_t(step.logits_indices.size()) * config().vocab_size;
  if (int64_t(logits.size()) < need) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: logits buffer holds {} floats, need {}",
                      logits.size(), need);
  }
  FLINT_TRY(run_step(step));
  if (need > 0) {
    FLINT_CUDA_CHECK(cudaMemcpyAsync(logits.data(), fwd_->logits(), need * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
  }
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return ok();
}

Status CudaBackend::forward_on_device(const model::StepInput& step) {
  FLINT_TRY(run_step(step));
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return ok();
}

Status CudaBackend::reserve_sampling(size_t rows) {
  if (rows <= sample_rows_) return ok();
  FLINT_TRY(no_launch_outstanding("growing the sampling buffers"));
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  auto p = DeviceBuffer::allocate(rows * sizeof(SampleParams));
  if (!p) return p.error().with_context("allocating sampling parameters");
  auto t = DeviceBuffer::allocate(rows * sizeof(int32_t));
  if (!t) return t.error().with_context("allocating sampled tokens");
  d_sample_params_ = std::move(p).value();
  d_sample_tokens_ = std::move(t).value();
  for (SampleSlot& slot : slots_) {
    if (slot.params != nullptr) cudaFreeHost(slot.params);
    if (slot.tokens != nullptr) cudaFreeHost(slot.tokens);
    slot.params = nullptr;
    slot.tokens = nullptr;
    FLINT_CUDA_CHECK(cudaMallocHost(&slot.params, rows * sizeof(SampleParams)));
    FLINT_CUDA_CHECK(cudaMallocHost(&slot.tokens, 2 * rows * sizeof(int32_t)));
    slot.head_top_k = slot.tokens + rows;
    if (slot.done == nullptr) {
      FLINT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    }
  }
  sample_rows_ = rows;
  return ok();
}

Status CudaBackend::forward_sample(const model::StepInput& step,
                                   std::span<const model::DeviceSampling> params,
                                   std::span<int32_t> tokens) {
  FLINT_TRY(no_launch_outstanding("forward_sample"));
  if (tokens.size() < step.logits_indices.size()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: room for {} tokens, the step samples {}",
                      tokens.size(), step.logits_indices.size());
  }
  FLINT_TRY(launch_sample(step, params, /*chain=*/false));
  return wait_sample(tokens);
}

Status CudaBackend::launch_sample(const model::StepInput& step,
                                  std::span<const model::DeviceSampling> params, bool chain) {
  const size_t n = step.logits_indices.size();
  if (params.size() != n) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda: {} logits rows but {} sampling parameters", n, params.size());
  }
  if (launched_.size() >= kMaxQueued) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: {} steps queued already",
                      launched_.size());
  }
  if (chain && (last_tokens_ == nullptr || size_t(step.num_tokens()) != last_rows_)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda: a chained step of {} tokens after a step that sampled {}",
                      step.num_tokens(), last_rows_);
  }
  FLINT_TRY(reserve_sampling(n));
  const int which = next_slot_;
  SampleSlot& slot = slots_[which];
  // All rows greedy (model::kGreedyTemperature, sampling.h's rule): the greedy head picks the
  // tokens without the FP32 head's full read (kernels/greedy_head.h); they are the tokens sample()
  // would pick. Every row greedy or keeping at most kTopKHeadMax tokens (top_k; Flint's
  // generation_config.json asks for 20): topk_logits gives the logits the sampler needs from the
  // same copy, and sample() draws the tokens it would draw from the full rows.
  auto greedy_row = [](const model::DeviceSampling& p) {
    return p.temperature < model::kGreedyTemperature;
  };
  const bool greedy = n > 0 && std::all_of(params.begin(), params.end(), greedy_row);
  const bool top_k = n > 0 && std::all_of(params.begin(), params.end(), [&](const auto& p) {
                       return greedy_row(p) || (p.top_k >= 1 && p.top_k <= kTopKHeadMax);
                     });
  // This slot's copies belong to the launch two back, waited for before this one could queue
  // (kMaxQueued), so its pinned buffers are free.
  for (size_t i = 0; i < n; ++i) {
    const model::DeviceSampling& p = params[i];
    slot.params[i] = SampleParams{p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.step};
    slot.head_top_k[i] = greedy_row(p) ? 1 : p.top_k;
  }
  const LmHead want = greedy ? LmHead::kGreedy : top_k ? LmHead::kTopK : LmHead::kLogits;
  if (want == LmHead::kTopK && fwd_ && n <= size_t(CudaForward::kLmHeadGemvRows) &&
      fwd_->head_top_k() != nullptr) {
    copy_words(fwd_->head_top_k(), slot.head_top_k, static_cast<int64_t>(n), stream_);
  }
  LmHead ran = LmHead::kLogits;
  FLINT_TRY(run_step(step, want, &ran, chain ? last_tokens_ : nullptr));
  const int32_t* d_tokens = d_sample_tokens_.as<int32_t>();
  if (ran == LmHead::kGreedy) {
    ++stats_.greedy_head_steps;
    d_tokens = fwd_->greedy_tokens();
  } else if (n > 0) {
    if (ran == LmHead::kTopK) ++stats_.topk_head_steps;
    SampleParams* d_params = d_sample_params_.as<SampleParams>();
    static_assert(sizeof(SampleParams) % 4 == 0);
    copy_words(reinterpret_cast<int32_t*>(d_params), reinterpret_cast<const int32_t*>(slot.params),
               static_cast<int64_t>(n * sizeof(SampleParams) / 4), stream_);
    // A top-k step's rows are -inf but at their candidates: sample() draws from those lists.
    sample(d_sample_tokens_.as<int32_t>(), fwd_->logits(), d_params, static_cast<int>(n),
           config().vocab_size, stream_,
           ran == LmHead::kTopK ? fwd_->topk_candidates() : SampleCandidates{});
  }
  if (n > 0) {
    copy_words(slot.tokens, d_tokens, static_cast<int64_t>(n), stream_);
  }
  FLINT_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
  launched_.push_back(Launched{which, n});
  next_slot_ ^= 1;
  // A chained step reads them before its own head writes either buffer (stream order).
  last_tokens_ = d_tokens;
  last_rows_ = n;
  return ok();
}

Status CudaBackend::wait_sample(std::span<int32_t> tokens) {
  if (launched_.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: wait_sample with no step queued");
  }
  const Launched l = launched_.front();
  if (tokens.size() < l.rows) {  // refused before it is taken: the step's tokens are not lost
    return make_error(ErrorCode::kInvalidArgument, "cuda: room for {} tokens, the step sampled {}",
                      tokens.size(), l.rows);
  }
  launched_.pop_front();
  FLINT_CUDA_CHECK(cudaEventSynchronize(slots_[l.slot].done));
  std::copy_n(slots_[l.slot].tokens, l.rows, tokens.begin());
  return ok();
}

void CudaBackend::copy_ring(int32_t src_ring, int32_t dst_ring) {
  FLINT_CHECK(fwd_ != nullptr, "copy_ring before init_kv_cache");
  fwd_->copy_ring(src_ring, dst_ring, stream_);
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace flint::cuda
