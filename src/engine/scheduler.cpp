// EngineCore's scheduler: FCFS continuous batching with chunked prefill under
// max_num_batched_tokens and max_num_seqs, page allocation with preemption by recompute,
// prefix-cache admission, the StepInput fill, and the handling of a step's logits. Test:
// tests/unit/engine/scheduler_test.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/check.h"
#include "engine/engine_core.h"

namespace flint::engine {

int EngineCore::clamp_chunk(const Sequence& seq, int from, int num_new) const {
  // Stop a prefill chunk at the next snapshot boundary so the ring can be copied exactly there.
  if (!config_.enable_prefix_caching || !has_sliding_) return num_new;
  for (int b : seq.snapshot_boundaries)
    if (b > from) return std::min(num_new, b - from);
  return num_new;
}

bool EngineCore::grow_pages(Sequence* seq, int num_tokens) {
  const size_t want = static_cast<size_t>((num_tokens + config_.page_size - 1) / config_.page_size);
  while (seq->pages.size() < want) {
    std::optional<int32_t> p = kv_->allocate_page();
    if (!p) return false;
    seq->pages.push_back(*p);
  }
  return true;
}

void EngineCore::preempt(Sequence* seq) {
  spdlog::debug("engine: preempting {}#{} at {} tokens", seq->req->request.request_id, seq->index,
                seq->tokens.size());
  release_kv(seq);
  seq->num_computed = 0;
  seq->num_registered_blocks = 0;
  seq->running = false;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
  ++counters_.num_preemptions;
}

bool EngineCore::try_admit(Sequence* seq, std::span<const KvManager::LiveRing> live, int* budget,
                           std::vector<Scheduled>* out) {
  std::optional<int32_t> ring = kv_->allocate_ring();
  if (!ring) return false;
  RequestState* req = seq->req;
  const int num_tokens = static_cast<int>(seq->tokens.size());
  KvManager::PrefixHit hit;
  const bool wants_prompt_logprobs = seq->index == 0 && req->request.params.prompt_logprobs &&
                                     req->prompt_logprobs_done < seq->num_prompt;
  if (config_.enable_prefix_caching && !wants_prompt_logprobs) {
    // At least one token must be computed to produce logits, hence (num_tokens - 1).
    hit = kv_->lookup(seq->tokens, (num_tokens - 1) / config_.page_size, live);
  }
  if (hit.num_chain_tokens > hit.num_tokens) {
    // The full-layer pages match further than any sliding snapshot: snapshot this sequence's ring
    // where the match ends, so the next request with this prefix reuses all of it.
    auto& bs = seq->snapshot_boundaries;
    if (std::find(bs.begin(), bs.end(), hit.num_chain_tokens) == bs.end()) {
      bs.push_back(hit.num_chain_tokens);
      std::sort(bs.begin(), bs.end());
    }
  }
  // The chunk starts where the hit ends (seq->num_computed is set to it below).
  const int num_new =
      clamp_chunk(*seq, hit.num_tokens, std::min(num_tokens - hit.num_tokens, *budget));
  const int64_t need = (hit.num_tokens + num_new + config_.page_size - 1) / config_.page_size -
                       static_cast<int64_t>(hit.pages.size());
  if (kv_->num_allocatable_pages() < need) {
    kv_->release_pages(hit.pages);
    kv_->release_ring(*ring);
    return false;
  }
  if (config_.enable_prefix_caching && !wants_prompt_logprobs) {
    counters_.prefix_cache_queries += num_tokens;
    counters_.prefix_cache_hits += hit.num_tokens;
  }
  if (seq->index == 0 && !req->admitted) {  // what the first admission found, not a recompute's
    req->num_cached_tokens = hit.num_tokens;
    req->admitted = true;
  }
  seq->ring = *ring;
  seq->pages = std::move(hit.pages);
  seq->num_computed = hit.num_tokens;
  seq->num_registered_blocks = static_cast<int>(seq->pages.size());
  if (hit.snapshot_ring >= 0) backend_->copy_ring(hit.snapshot_ring, seq->ring);
  FLINT_CHECK(grow_pages(seq, seq->num_computed + num_new), "engine: page accounting is off");
  seq->running = true;
  running_.push_back(seq);
  out->push_back({seq, num_new});
  *budget -= num_new;
  return true;
}

std::vector<EngineCore::Scheduled> EngineCore::schedule() {
  FLINT_CHECK(!inflight_, "engine: scheduling with a step in flight");
  std::vector<Scheduled> out;
  int budget = config_.max_num_batched_tokens;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int remaining = static_cast<int>(seq->tokens.size()) - seq->num_computed;
    const int num_new = clamp_chunk(*seq, seq->num_computed, std::min(remaining, budget));
    const int64_t need = (seq->num_computed + num_new + config_.page_size - 1) / config_.page_size -
                         static_cast<int64_t>(seq->pages.size());
    bool self_preempted = false;
    while (kv_->num_allocatable_pages() < need) {
      Sequence* victim = running_.back();  // the most recently admitted gives way
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    FLINT_CHECK(grow_pages(seq, seq->num_computed + num_new), "engine: page accounting is off");
    out.push_back({seq, num_new});
    budget -= num_new;
    ++i;
  }
  if (!preempted) {
    // With sliding layers a cached prefix is reusable only up to a ring snapshot, and a sequence
    // snapshots only at its prompt's end: a request arriving while another with its prefix is in
    // prefill would recompute all of it. A running sequence computed exactly to a block end holds
    // that block's sliding state in its ring, and lookup copies it as it would a snapshot. Sound
    // because (a) nothing is in flight here: step() schedules only with inflight_ empty (checked
    // above), i.e. every launch, a queued decode step included, has been waited for and processed;
    // (b) copy_ring has completed when it returns (CPU: memmove; CUDA: on the step stream, then
    // synchronized), before this step's forward writes the source ring, and nothing below
    // preempts or frees a running sequence (preemption happens above, and then nothing is
    // admitted); (c) so a running sequence's ring holds exactly the K/V of its positions
    // < num_computed, in prefill as in decode: process_results counts a step's tokens once it has
    // run, and a queued row of a sequence that finished meanwhile is dropped with the sequence and
    // its ring. Sequences admitted below are not listed: their ring is a copy of a listed one or a
    // snapshot.
    std::vector<KvManager::LiveRing> live;
    if (has_sliding_ && config_.enable_prefix_caching && !waiting_.empty()) {
      const int page = config_.page_size;
      for (const Sequence* r : running_) {
        if (r->num_computed > 0 && r->num_computed % page == 0) {
          const int b = r->num_computed / page - 1;
          live.push_back({b, r->pages[b], r->ring});
        }
      }
    }
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      Sequence* seq = waiting_.front();
      if (!try_admit(seq, live, &budget, &out)) break;
      waiting_.pop_front();
    }
  }
  FLINT_CHECK(!out.empty() || running_.empty() || budget == 0,
              "engine: nothing scheduled with {} running", running_.size());
  spdlog::debug("engine: step with {} seqs, {} tokens, {} running, {} waiting", out.size(),
                config_.max_num_batched_tokens - budget, running_.size(), waiting_.size());
  return out;
}

void EngineCore::build_step(const std::vector<Scheduled>& sched, std::vector<int>* sample_row,
                            std::vector<int>* first_prompt_row, bool ahead) {
  model::StepInput& s = step_;
  // Cleared, not replaced: the vectors keep their capacity from step to step (a sequence at 100K
  // tokens has a 6400-page block table).
  for (auto* v : {&s.token_ids, &s.positions, &s.query_start_loc, &s.seq_lens, &s.ring_ids,
                  &s.block_table, &s.slot_mapping, &s.logits_indices}) {
    v->clear();
  }
  const int page = config_.page_size;
  size_t max_blocks = 1;
  for (const Scheduled& x : sched) max_blocks = std::max(max_blocks, x.seq->pages.size());
  s.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  s.block_table.reserve(sched.size() * max_blocks);
  s.query_start_loc.push_back(0);
  sample_row->assign(sched.size(), -1);
  first_prompt_row->assign(sched.size(), -1);
  for (size_t i = 0; i < sched.size(); ++i) {
    const Sequence& seq = *sched[i].seq;
    const int known = static_cast<int>(seq.tokens.size());
    const int start = ahead ? known : seq.num_computed;
    const int end = start + sched[i].num_new;
    const int32_t row0 = s.num_tokens();
    for (int p = start; p < end; ++p) {
      s.token_ids.push_back(p < known ? seq.tokens[p] : 0);  // past known: chained on the device
      s.positions.push_back(p);
      s.slot_mapping.push_back(seq.pages[p / page] * page + p % page);
    }
    s.query_start_loc.push_back(s.num_tokens());
    s.seq_lens.push_back(end);
    s.ring_ids.push_back(seq.ring);
    s.block_table.insert(s.block_table.end(), seq.pages.begin(), seq.pages.end());
    s.block_table.resize(s.block_table.size() + (max_blocks - seq.pages.size()), 0);
    const RequestState& req = *seq.req;
    if (seq.index == 0 && req.request.params.prompt_logprobs && !ahead) {
      // Row p gives the logprob of prompt token p + 1.
      const int from = std::max(start, req.prompt_logprobs_done - 1);
      const int to = std::min(end, seq.num_prompt - 1);
      if (from < to) {
        (*first_prompt_row)[i] = static_cast<int>(s.logits_indices.size());
        for (int p = from; p < to; ++p) s.logits_indices.push_back(row0 + (p - start));
      }
    }
    if (end >= known) {  // the chunk reaches the last token (ahead: past it)
      (*sample_row)[i] = static_cast<int>(s.logits_indices.size());
      s.logits_indices.push_back(s.num_tokens() - 1);
    }
  }
}

void EngineCore::process_results(const std::vector<Scheduled>& sched,
                                 const std::vector<int>& sample_row,
                                 const std::vector<int>& first_prompt_row) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  const int page = config_.page_size;
  if (sampled_.empty()) sample_on_host(sched, sample_row);
  for (size_t i = 0; i < sched.size(); ++i) {
    Sequence* seq = sched[i].seq;
    if (seq == nullptr || seq->finished) continue;  // freed or finished while in flight: dropped
    RequestState* req = seq->req;
    const int start = seq->num_computed;
    seq->num_computed += sched[i].num_new;
    while ((seq->num_registered_blocks + 1) * page <= seq->num_computed) {
      const int b = seq->num_registered_blocks;
      kv_->register_block(seq->tokens, b, seq->pages[b],
                          seq->block_hashes.upto(seq->tokens, page, b + 1));
      ++seq->num_registered_blocks;
    }
    if (has_sliding_ && std::find(seq->snapshot_boundaries.begin(), seq->snapshot_boundaries.end(),
                                  seq->num_computed) != seq->snapshot_boundaries.end()) {
      const int blocks = seq->num_computed / page;  // boundaries are whole blocks, at least one
      auto chain = seq->block_hashes.upto(seq->tokens, page, blocks);
      if (auto ring = chain.empty() ? std::nullopt : kv_->reserve_snapshot(chain.back()))
        backend_->copy_ring(seq->ring, *ring);
    }
    if (first_prompt_row[i] >= 0) {
      const int from = std::max(start, req->prompt_logprobs_done - 1);
      const int to = std::min(seq->num_computed, seq->num_prompt - 1);
      for (int p = from; p < to; ++p) {
        const float* row = logits_.data() + (first_prompt_row[i] + (p - from)) * vocab;
        req->prompt_logprobs[p + 1] =
            compute_logprobs(std::span<const float>(row, vocab), seq->tokens[p + 1],
                             *req->request.params.prompt_logprobs);
      }
      req->prompt_logprobs_done = std::max(req->prompt_logprobs_done, to + 1);
    }
    if (sample_row[i] < 0) continue;
    if (!sampled_.empty()) {  // sampled on the device (fill_device_sampling)
      on_token(seq, sampled_[sample_row[i]], nullptr);
      continue;
    }
    on_token(seq, host_tokens_[i], req->request.params.logprobs ? &host_logprobs_[i] : nullptr);
  }
}

void EngineCore::sample_on_host(const std::vector<Scheduled>& sched,
                                const std::vector<int>& sample_row) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  host_tokens_.assign(sched.size(), -1);
  host_logprobs_.resize(sched.size());
  if (host_scratch_.size() < sched.size()) host_scratch_.resize(sched.size());
  std::vector<size_t>& rows = host_rows_;  // scheduled entries that sample a token
  rows.clear();
  for (size_t i = 0; i < sched.size(); ++i)
    if (!sched[i].seq->finished && sample_row[i] >= 0) rows.push_back(i);
  auto sample_one = [&](size_t i) {
    Sequence* seq = sched[i].seq;
    const SamplingParams& params = seq->req->request.params;
    const ResolvedSampling& sampling = seq->req->sampling;
    std::span<const float> logits(logits_.data() + static_cast<size_t>(sample_row[i]) * vocab,
                                  vocab);
    // The processors change the logits only for min_tokens masking, logit_bias and penalties;
    // otherwise the row is sampled where it lies.
    const bool process = seq->num_output() < params.min_tokens || !params.logit_bias.empty() ||
                         sampling.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                         params.presence_penalty != 0.0f;
    if (process) {
      std::vector<float>& processed = host_scratch_[i];
      processed.assign(logits.begin(), logits.end());
      std::vector<int32_t> stop_ids = params.stop_token_ids;
      if (!params.ignore_eos) stop_ids.insert(stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
      apply_logits_processors(processed, params, sampling, seq->penalties, seq->num_output(),
                              stop_ids);
      logits = processed;
    }
    host_tokens_[i] = sample_token(logits, sampling, seq->rng);
    if (params.logprobs)
      host_logprobs_[i] = compute_logprobs(logits, host_tokens_[i], *params.logprobs);
  };
  if (rows.size() <= 1) {
    for (size_t i : rows) sample_one(i);
    return;
  }
  if (!sample_pool_) {
    sample_pool_ = std::make_unique<ThreadPool>(
        static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  }
  sample_pool_->parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) sample_one(rows[static_cast<size_t>(r)]);
  });
}

}  // namespace flint::engine
