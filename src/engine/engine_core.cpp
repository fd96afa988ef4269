// EngineCore: requests, admission, KV sizing and the per-step pipeline. The scheduler itself is in
// scheduler.cpp. Test: tests/unit/engine/engine_core_test.cpp.
#include "engine/engine_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace flint::engine {
namespace {

constexpr size_t kMaxSamples = 100000;

int64_t dtype_size(DType t) { return dtype_bytes_for(t, 1); }

uint64_t seed_for(uint64_t base, int index) {
  Rng r(base ^ (0x5851f42d4c957f2dull * static_cast<uint64_t>(index + 1)));
  return r.next();
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Result<std::unique_ptr<EngineCore>> EngineCore::create(
    EngineConfig config, std::unique_ptr<model::Backend> backend,
    std::shared_ptr<const TokenDecoder> decoder) {
  FLINT_CHECK(backend != nullptr, "engine: no backend");
  const model::FlintConfig& mc = backend->config();
  auto bad = [](std::string m) { return Error{ErrorCode::kInvalidArgument, std::move(m)}; };
  if (config.max_num_seqs < 1)
    return bad(fmt::format("max_num_seqs must be >= 1, got {}", config.max_num_seqs));
  if (config.page_size < 1 || config.page_size > 1024)
    return bad(fmt::format("page_size must be in [1, 1024], got {}", config.page_size));
  if (config.max_model_len <= 0)
    config.max_model_len = static_cast<int>(mc.max_position_embeddings);
  if (config.max_model_len <= 1)
    return bad(fmt::format("max_model_len must be > 1, got {}", config.max_model_len));
  if (mc.max_position_embeddings > 0 && config.max_model_len > mc.max_position_embeddings)
    return bad(fmt::format("max_model_len {} exceeds the model's max_position_embeddings {}",
                           config.max_model_len, mc.max_position_embeddings));
  if (config.max_num_batched_tokens < 1)
    return bad(
        fmt::format("max_num_batched_tokens must be >= 1, got {}", config.max_num_batched_tokens));

  int64_t num_full = 0, num_sliding = 0;
  for (auto t : mc.layer_types)
    (t == model::LayerType::kSlidingAttention ? num_sliding : num_full)++;
  const int64_t elem = dtype_size(config.kv_dtype);
  const int64_t kv_row =
      2 * mc.num_kv_heads * mc.head_dim * elem;  // K and V of one token, one layer
  const int64_t page_bytes = std::max<int64_t>(1, num_full * kv_row * config.page_size);
  const int64_t ring_bytes = num_sliding * kv_row * mc.sliding_window;
  int num_snapshots = 0;
  if (num_sliding > 0 && config.enable_prefix_caching) {
    num_snapshots = config.num_ring_snapshots >= 0 ? config.num_ring_snapshots
                                                   : std::max(4, config.max_num_seqs / 2);
  }
  const int64_t pages_per_seq = (config.max_model_len + config.page_size - 1) / config.page_size;
  if (config.kv_cache_memory <= 0)
    return bad("kv_cache_memory must be set to a positive number of bytes");
  const int64_t rings_bytes = (config.max_num_seqs + num_snapshots) * ring_bytes;
  const int64_t num_pages = (config.kv_cache_memory - rings_bytes) / page_bytes;
  if (config.kv_cache_memory < rings_bytes || num_pages < pages_per_seq) {
    return Error{
        ErrorCode::kOutOfMemory,
        fmt::format("kv_cache_memory {} bytes is too small: {} sliding-window rings take {} "
                    "bytes and one max_model_len ({}) sequence needs {} pages of {} bytes",
                    config.kv_cache_memory, config.max_num_seqs + num_snapshots, rings_bytes,
                    config.max_model_len, pages_per_seq, page_bytes)};
  }
  model::KvCacheSpec spec;
  spec.num_pages = num_pages;
  spec.page_size = config.page_size;
  spec.num_rings = config.max_num_seqs + num_snapshots;
  spec.dtype = config.kv_dtype;
  FLINT_TRY(backend->init_kv_cache(spec));

  auto core = std::unique_ptr<EngineCore>(new EngineCore());
  core->has_sliding_ = num_sliding > 0;
  core->kv_ =
      std::make_unique<KvManager>(num_pages, config.page_size, config.max_num_seqs, num_snapshots,
                                  config.enable_prefix_caching, core->has_sliding_);
  core->vocab_size_ = mc.vocab_size;
  const std::vector<int32_t>* eos_lists[] = {&mc.eos_token_ids, &mc.generation.eos_token_ids,
                                             &config.extra_eos_token_ids};
  for (const std::vector<int32_t>* list : eos_lists)
    for (int32_t id : *list)
      if (std::find(core->eos_ids_.begin(), core->eos_ids_.end(), id) == core->eos_ids_.end())
        core->eos_ids_.push_back(id);
  core->config_ = std::move(config);
  core->backend_ = std::move(backend);
  core->decoder_ = std::move(decoder);
  spdlog::info("engine: {} KV pages of {} tokens, {} rings ({} snapshots), max_model_len {}",
               num_pages, core->config_.page_size, spec.num_rings, num_snapshots,
               core->config_.max_model_len);
  return core;
}

Status EngineCore::validate(const Request& r) const {
  auto bad = [](std::string m) { return Error{ErrorCode::kInvalidArgument, std::move(m)}; };
  if (r.prompt_token_ids.empty()) return bad("prompt must contain at least one token");
  for (int32_t id : r.prompt_token_ids)
    if (id < 0 || id >= vocab_size_)
      return bad(fmt::format("prompt: token id {} is out of range [0, {})", id, vocab_size_));
  FLINT_TRY(r.params.validate(vocab_size_));
  const int64_t num_prompt = static_cast<int64_t>(r.prompt_token_ids.size());
  if (num_prompt >= config_.max_model_len) {
    return bad(fmt::format(
        "This model's maximum context length is {} tokens. However, your prompt has {} tokens, "
        "which leaves no room for a completion",
        config_.max_model_len, num_prompt));
  }
  if (r.params.max_tokens && num_prompt + *r.params.max_tokens > config_.max_model_len) {
    return bad(fmt::format(
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} "
        "in the prompt, {} in the completion). Please reduce the prompt or max_tokens",
        config_.max_model_len, num_prompt + *r.params.max_tokens, num_prompt,
        *r.params.max_tokens));
  }
  if (r.params.n > config_.max_num_seqs)
    return bad(
        fmt::format("n must be <= max_num_seqs ({}), got {}", config_.max_num_seqs, r.params.n));
  if (!r.params.stop.empty() && decoder_ == nullptr) return bad("stop strings need a tokenizer");
  return ok();
}

Status EngineCore::add_request(Request request, Sink sink) {
  FLINT_TRY(validate(request));
  if (requests_.count(request.request_id))
    return Error{ErrorCode::kInvalidArgument,
                 fmt::format("request id '{}' is already in use", request.request_id)};
  auto st = std::make_unique<RequestState>();
  RequestState* req = st.get();
  req->sampling = resolve_sampling(request.params, backend_->config().generation);
  const int num_prompt = static_cast<int>(request.prompt_token_ids.size());
  const int room = config_.max_model_len - num_prompt;
  const auto& gen = backend_->config().generation;
  req->max_tokens =
      std::min(room, request.params.max_tokens.value_or(gen.max_new_tokens.value_or(room)));
  req->max_tokens = std::max(1, req->max_tokens);
  req->sink = std::move(sink);
  if (request.params.prompt_logprobs) req->prompt_logprobs.resize(num_prompt);
  const uint64_t base_seed = request.params.seed
                                 ? *request.params.seed
                                 : seed_for(config_.seed, static_cast<int>(next_order_));
  const int page = config_.page_size;
  for (int i = 0; i < request.params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->req = req;
    seq->index = i;
    seq->order = next_order_++;
    seq->tokens = request.prompt_token_ids;
    seq->num_prompt = num_prompt;
    seq->rng = Rng(seed_for(base_seed, i));
    seq->sample_seed = seed_for(base_seed, i);
    if (req->sampling.repetition_penalty != 1.0f)
      seq->penalties.prompt_tokens.insert(seq->tokens.begin(), seq->tokens.end());
    // The ring is snapshotted at the last block boundary before the prompt's last token, the
    // furthest point a later request with this prompt as prefix can reuse (it must compute a
    // token).
    if (const int b = ((num_prompt - 1) / page) * page; b > 0)
      seq->snapshot_boundaries.push_back(b);
    if (request.params.detokenize && decoder_ != nullptr) {
      seq->text.emplace(decoder_.get(), request.params.skip_special_tokens, request.params.stop,
                        request.params.include_stop_str_in_output);
    }
    seq->delta.index = i;
    waiting_.push_back(seq.get());
    req->seqs.push_back(std::move(seq));
  }
  req->num_unfinished = request.params.n;
  counters_.prompt_tokens_total += num_prompt;
  req->request = std::move(request);
  std::string id = req->request.request_id;
  requests_.emplace(std::move(id), std::move(st));
  return ok();
}

void EngineCore::release_kv(Sequence* seq) {
  if (!seq->pages.empty()) kv_->release_pages(seq->pages);
  seq->pages.clear();
  if (seq->ring >= 0) kv_->release_ring(seq->ring);
  seq->ring = -1;
}

void EngineCore::finish_seq(Sequence* seq, FinishReason reason) {
  if (seq->finished) return;
  seq->finished = true;
  release_kv(seq);
  if (seq->running) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
    seq->running = false;
  } else if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) {
    waiting_.erase(it);
  }
  seq->delta.finish_reason = reason;
  if (seq->text) seq->delta.text += seq->text->take_delta(/*final=*/true);
  seq->has_delta = true;
  RequestState* req = seq->req;
  req->dirty = true;
  if (--req->num_unfinished == 0) finished_.push_back(req);
}

bool EngineCore::abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  RequestState* req = it->second.get();
  if (req->num_unfinished == 0) return false;
  for (auto& seq : req->seqs) finish_seq(seq.get(), FinishReason::kAbort);
  emit_outputs();
  return true;
}

void EngineCore::abort_all() {
  std::vector<std::string> ids;
  for (auto& [id, req] : requests_) ids.push_back(id);
  for (auto& id : ids) abort(id);
  if (inflight_) {  // every row of it is dropped; the backend must not be left with a launch
    sampled_.resize(inflight_->num_rows);
    inflight_.reset();
    if (Status st = backend_->wait_sample(sampled_); !st)
      spdlog::warn("engine: a queued step failed at shutdown: {}", st.error().message);
  }
}

void EngineCore::step() {
  if (inflight_) return finish_inflight();
  if (requests_.empty()) return;
  std::vector<Scheduled> sched = schedule();
  if (sched.empty()) {
    emit_outputs();
    return;
  }
  std::vector<int> sample_row, first_prompt_row;
  build_step(sched, &sample_row, &first_prompt_row);
  Status st = ok();
  ++counters_.num_steps;
  if (fill_device_sampling(sched, sample_row)) {
    if (pipelining()) {
      // Launched, not waited for: finish_inflight queues the next step behind it first.
      st = backend_->launch_sample(step_, device_params_, /*chain=*/false);
      if (st) {
        inflight_ = InFlight{std::move(sched), std::move(sample_row), std::move(first_prompt_row),
                             device_params_.size()};
        return finish_inflight();
      }
    } else {
      // Only the sampled tokens come back from the device, not vocab_size floats per row.
      sampled_.resize(device_params_.size());
      st = backend_->forward_sample(step_, device_params_, sampled_);
    }
  } else {
    sampled_.clear();
    logits_.resize(step_.logits_indices.size() * static_cast<size_t>(vocab_size_));
    st = backend_->forward(step_, logits_);
  }
  if (!st) {
    spdlog::error("engine: forward failed: {}", st.error().message);
    fail_scheduled(sched, st.error());
  } else {
    process_results(sched, sample_row, first_prompt_row);
  }
  emit_outputs();
}

void EngineCore::finish_inflight() {
  InFlight cur = std::move(*inflight_);
  inflight_.reset();
  // Queued before this step's tokens are read, so the device goes on to it while the host records
  // them. emit_outputs drops the entries of requests it frees from the queued step.
  inflight_ = launch_ahead_of(cur);
  sampled_.resize(cur.num_rows);
  Status st = backend_->wait_sample(sampled_);
  if (!st) {
    spdlog::error("engine: forward failed: {}", st.error().message);
    fail_scheduled(cur.sched, st.error());
  } else {
    process_results(cur.sched, cur.sample_row, cur.first_prompt_row);
  }
  emit_outputs();
}

std::optional<EngineCore::InFlight> EngineCore::launch_ahead_of(const InFlight& cur) {
  // A waiting request that could be admitted now goes first (admission needs a step with nothing
  // in flight); one that must wait for a sequence slot anyway does not stop the queue.
  const bool admissible =
      !waiting_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs;
  if (admissible || cur.num_rows != cur.sched.size() || cur.sched.empty()) return {};
  for (size_t i = 0; i < cur.sched.size(); ++i) {
    const Sequence* seq = cur.sched[i].seq;
    // Row i samples for entry i: every entry's chunk reached its last token.
    if (seq == nullptr || seq->finished || cur.sample_row[i] != static_cast<int>(i)) return {};
    const RequestState& req = *seq->req;
    const int len = static_cast<int>(seq->tokens.size());  // before the in-flight token
    // After the in-flight token the sequence must still run: not at max_tokens or max_model_len.
    if (seq->num_output() + 1 >= req.max_tokens || len + 1 >= config_.max_model_len) return {};
    if (has_sliding_ && config_.enable_prefix_caching) {
      for (int b : seq->snapshot_boundaries)
        if (b > seq->num_computed) return {};  // process_results would copy the ring mid-flight
    }
  }
  std::vector<Scheduled> sched;
  sched.reserve(cur.sched.size());
  for (const Scheduled& x : cur.sched) {
    // The queued token sits at position len; its page may be new. Pages grown here and not used
    // (no launch) are the next step's anyway.
    if (!grow_pages(x.seq, static_cast<int>(x.seq->tokens.size()) + 1)) return {};
    sched.push_back({x.seq, 1});
  }
  std::vector<int> sample_row, first_prompt_row;
  build_step(sched, &sample_row, &first_prompt_row, /*ahead=*/true);
  if (!fill_device_sampling(sched, sample_row, /*ahead_outputs=*/1) ||
      device_params_.size() != sched.size()) {
    return {};
  }
  Status st = backend_->launch_sample(step_, device_params_, /*chain=*/true);
  if (!st) {  // the next step runs unqueued and meets the error, if it recurs, there
    spdlog::warn("engine: queuing a decode step failed: {}", st.error().message);
    return {};
  }
  ++counters_.num_steps;
  return InFlight{std::move(sched), std::move(sample_row), std::move(first_prompt_row),
                  device_params_.size()};
}

bool EngineCore::fill_device_sampling(const std::vector<Scheduled>& sched,
                                      const std::vector<int>& sample_row, int ahead_outputs) {
  if (!backend_->can_sample()) return false;
  device_params_.assign(step_.logits_indices.size(), model::DeviceSampling{});
  size_t num_rows = 0;
  for (size_t i = 0; i < sched.size(); ++i) {
    if (sample_row[i] < 0) continue;
    const Sequence& seq = *sched[i].seq;
    const SamplingParams& p = seq.req->request.params;
    const ResolvedSampling& r = seq.req->sampling;
    if (p.logprobs || p.prompt_logprobs || !p.logit_bias.empty() || r.repetition_penalty != 1.0f ||
        p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f ||
        seq.num_output() + ahead_outputs < p.min_tokens) {
      return false;
    }
    device_params_[sample_row[i]] = model::DeviceSampling{
        r.temperature, r.top_k,         r.top_p,
        r.min_p,       seq.sample_seed, uint64_t(seq.num_output() + ahead_outputs)};
    ++num_rows;
  }
  return num_rows > 0 && num_rows == step_.logits_indices.size();  // no prompt-logprobs rows
}

void EngineCore::fail_scheduled(const std::vector<Scheduled>& sched, const Error& error) {
  failed_error_ = error;
  for (const Scheduled& s : sched) {
    if (s.seq == nullptr) continue;
    for (auto& seq : s.seq->req->seqs) finish_seq(seq.get(), FinishReason::kError);
  }
}

void EngineCore::record(std::vector<double>& v, double x) {
  if (v.size() >= kMaxSamples) v.erase(v.begin(), v.begin() + static_cast<long>(kMaxSamples / 10));
  v.push_back(x);
}

void EngineCore::on_token(Sequence* seq, int32_t token, PositionLogprobs* logprobs) {
  RequestState* req = seq->req;
  const SamplingParams& params = req->request.params;
  const auto now = Clock::now();
  if (!req->first_token_time) {
    req->first_token_time = now;
    record(samples_.ttft_s, seconds(now - req->request.arrival_time));
  } else if (seq->num_output() > 0) {
    record(samples_.itl_s, seconds(now - seq->last_token_time));
  }
  seq->last_token_time = now;
  seq->tokens.push_back(token);
  ++counters_.generation_tokens_total;
  if (req->sampling.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
      params.presence_penalty != 0.0f)
    seq->penalties.output_counts[token]++;
  seq->delta.new_token_ids.push_back(token);
  seq->delta.num_output_tokens = seq->num_output();
  if (logprobs != nullptr) seq->delta.logprobs.push_back(std::move(*logprobs));
  seq->has_delta = true;
  req->dirty = true;

  const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  const bool is_stop_token = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                       token) != params.stop_token_ids.end();
  if (is_eos && !params.ignore_eos) {
    finish_seq(seq, FinishReason::kStop);
    return;
  }
  if (is_stop_token) {
    seq->delta.stop_token_id = token;
    finish_seq(seq, FinishReason::kStop);
    return;
  }
  if (seq->text) {
    const bool check = seq->num_output() >= params.min_tokens;
    if (seq->text->append(token, check)) {
      seq->delta.stop_string = *seq->text->matched_stop();
      finish_seq(seq, FinishReason::kStop);
      return;
    }
  }
  if (seq->num_output() >= req->max_tokens ||
      static_cast<int>(seq->tokens.size()) >= config_.max_model_len) {
    finish_seq(seq, FinishReason::kLength);
    return;
  }
  if (seq->text) seq->delta.text += seq->text->take_delta(/*final=*/false);
}

void EngineCore::emit_outputs() {
  std::vector<RequestState*> dirty;
  for (auto& [id, req] : requests_)
    if (req->dirty) dirty.push_back(req.get());
  std::sort(dirty.begin(), dirty.end(),
            [](RequestState* a, RequestState* b) { return a->seqs[0]->order < b->seqs[0]->order; });
  const auto now = Clock::now();
  for (RequestState* req : dirty) {
    req->dirty = false;
    RequestOutput out;
    out.request_id = req->request.request_id;
    out.num_prompt_tokens = static_cast<int>(req->request.prompt_token_ids.size());
    out.num_cached_tokens = req->num_cached_tokens;
    out.finished = req->num_unfinished == 0;
    if (!req->sent_first) {
      if (req->request.params.prompt_logprobs) {
        if (req->prompt_logprobs_done < out.num_prompt_tokens && !out.finished) continue;
        out.prompt_logprobs = req->prompt_logprobs;
      }
      req->sent_first = true;
    }
    for (auto& seq : req->seqs) {
      if (!seq->has_delta) continue;
      out.outputs.push_back(std::move(seq->delta));
      seq->delta = CompletionDelta{};
      seq->delta.index = seq->index;
      seq->has_delta = false;
    }
    if (out.finished) {
      out.ttft_s =
          req->first_token_time ? seconds(*req->first_token_time - req->request.arrival_time) : 0.0;
      out.e2e_s = seconds(now - req->request.arrival_time);
      bool failed = false;
      int num_generated = 0;
      for (auto& seq : req->seqs) num_generated += seq->num_output();
      for (auto& o : out.outputs)
        if (o.finish_reason == FinishReason::kError) failed = true;
      if (failed)
        out.error = failed_error_.value_or(Error{ErrorCode::kInternal, "engine: step failed"});
      record(samples_.e2e_s, out.e2e_s);
      if (samples_.prompt_tokens.size() < kMaxSamples) {
        samples_.prompt_tokens.push_back(out.num_prompt_tokens);
        samples_.generation_tokens.push_back(num_generated);
      }
      ++counters_.num_requests_finished;
      spdlog::info("request {}: {} prompt + {} completion tokens, ttft {:.3f}s, e2e {:.3f}s",
                   out.request_id, out.num_prompt_tokens, num_generated, out.ttft_s, out.e2e_s);
    }
    if (req->sink) req->sink(std::move(out));
  }
  for (RequestState* req : finished_) {
    if (inflight_) {  // its queued rows, if any, are dropped when they arrive
      for (Scheduled& x : inflight_->sched)
        if (x.seq != nullptr && x.seq->req == req) x.seq = nullptr;
    }
    requests_.erase(req->request.request_id);
  }
  finished_.clear();
  failed_error_.reset();
}

EngineStats EngineCore::stats() const {
  EngineStats s = counters_;
  s.num_running = 0;
  for (Sequence* seq : running_) s.num_running += seq->finished ? 0 : 1;
  s.num_waiting = static_cast<int>(waiting_.size());
  s.num_pages_total = kv_->num_pages();
  s.num_pages_used = kv_->num_used_pages();
  s.num_rings_used = kv_->num_used_rings();
  s.kv_usage = static_cast<double>(s.num_pages_used) / static_cast<double>(s.num_pages_total);
  s.prefix_cache_hit_rate =
      s.prefix_cache_queries > 0
          ? static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries)
          : 0.0;
  return s;
}

LatencySamples EngineCore::take_latency_samples() {
  return std::exchange(samples_, LatencySamples{});
}

}  // namespace flint::engine
