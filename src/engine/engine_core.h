// EngineCore: the single-threaded heart of the engine. It owns the requests, the scheduler state
// (waiting and running sequences), the KvManager and the backend, and runs one step at a time:
// schedule, fill StepInput, forward, sample, detokenize, emit outputs. Not thread-safe; Engine runs
// it on its thread, and tests drive it directly. Test: tests/unit/engine/engine_core_test.cpp.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/kv_manager.h"
#include "engine/logits_processor.h"
#include "engine/output_text.h"
#include "model/backend.h"

namespace flint::engine {

struct RequestState;

// One choice of a request: its tokens, KV pages and ring, and sampling state.
struct Sequence {
  RequestState* req = nullptr;
  int index = 0;
  uint64_t order = 0;           // FCFS order (arrival, then choice index)
  std::vector<int32_t> tokens;  // [num_prompt + num_output]
  int num_prompt = 0;
  int num_computed = 0;        // tokens whose KV is in the cache
  std::vector<int32_t> pages;  // full-layer pages covering [0, num_computed + scheduled)
  int32_t ring = -1;
  int num_registered_blocks = 0;         // full blocks offered to the prefix cache
  BlockHashChain block_hashes;           // of tokens' full blocks, as far as registered
  std::vector<int> snapshot_boundaries;  // ascending token counts at which to snapshot the ring
  bool running = false;
  bool finished = false;
  Rng rng;
  uint64_t sample_seed = 0;  // device sampling: the token is a function of (seed, num_output)
  PenaltyState penalties;
  std::optional<OutputText> text;
  CompletionDelta delta;  // accumulated since the last output
  bool has_delta = false;
  Clock::time_point last_token_time;

  int num_output() const { return static_cast<int>(tokens.size()) - num_prompt; }
};

struct RequestState {
  Request request;
  ResolvedSampling sampling;
  std::function<void(RequestOutput)> sink;
  std::vector<std::unique_ptr<Sequence>> seqs;
  int max_tokens = 0;
  int num_unfinished = 0;
  int num_cached_tokens = 0;
  bool sent_first = false;
  bool admitted = false;  // choice 0 has been admitted once
  std::optional<Clock::time_point> first_token_time;
  // Prompt logprobs (choice 0 computes them): entry i is for prompt token i; entry 0 stays empty.
  std::vector<PositionLogprobs> prompt_logprobs;
  int prompt_logprobs_done = 1;  // entries [1, done) are filled
  bool dirty = false;            // has news for the caller this step
};

class EngineCore {
 public:
  using Sink = std::function<void(RequestOutput)>;

  // Resolves max_model_len and the KV sizes from config and the model, and allocates the KV cache.
  static Result<std::unique_ptr<EngineCore>> create(EngineConfig config,
                                                    std::unique_ptr<model::Backend> backend,
                                                    std::shared_ptr<const TokenDecoder> decoder);

  // Checks a request against the model and limits. Reads only what create() fixed, so it may run
  // on any thread.
  Status validate(const Request& request) const;
  // Queues a validated request. Its outputs go to `sink`.
  Status add_request(Request request, Sink sink);
  // Finishes a request with "abort" now, freeing its pages and ring. Returns false if unknown.
  bool abort(const std::string& request_id);
  // Aborts everything (engine shutdown).
  void abort_all();

  bool has_work() const { return !requests_.empty() || inflight_.has_value(); }
  // One scheduling step and forward pass; outputs are delivered to the sinks before it returns.
  void step();

  EngineStats stats() const;
  LatencySamples take_latency_samples();
  const EngineConfig& config() const { return config_; }
  const model::FlintConfig& model_config() const { return backend_->config(); }
  const KvManager& kv() const { return *kv_; }
  // The StepInput of the most recent step (for tests).
  const model::StepInput& last_step() const { return step_; }

 private:
  struct Scheduled {
    Sequence* seq;  // null once its request is freed while the step is in flight
    int num_new;
  };
  // A step launched on the backend (Backend::launch_sample) whose tokens are not read yet. Its
  // rows are its sampled entries in order (row i samples for sched[i] when chained).
  struct InFlight {
    std::vector<Scheduled> sched;
    std::vector<int> sample_row, first_prompt_row;
    size_t num_rows = 0;
  };
  EngineCore() = default;
  std::vector<Scheduled> schedule();
  // Admits seq with its longest reusable cached prefix; `live`: rings of running sequences usable
  // as snapshots (KvManager::lookup).
  bool try_admit(Sequence* seq, std::span<const KvManager::LiveRing> live, int* budget,
                 std::vector<Scheduled>* out);
  // num_new tokens from position `from`, cut at seq's next snapshot boundary past `from`.
  int clamp_chunk(const Sequence& seq, int from, int num_new) const;
  bool grow_pages(Sequence* seq, int num_tokens);
  void preempt(Sequence* seq);
  void release_kv(Sequence* seq);
  // Fills step_. `ahead` (launch_ahead_of): each entry's tokens start past its known tokens, at
  // the one the in-flight step samples, whose id (unknown here: 0) the backend chains.
  void build_step(const std::vector<Scheduled>& sched, std::vector<int>* sample_row,
                  std::vector<int>* first_prompt_row, bool ahead = false);
  // True (and device_params_ filled) when every logits row of the step samples a token with
  // parameters the backend applies itself: no logprobs, penalties, logit_bias or min_tokens.
  // `ahead_outputs`: output tokens not yet recorded (1 for a step queued by launch_ahead_of).
  bool fill_device_sampling(const std::vector<Scheduled>& sched, const std::vector<int>& sample_row,
                            int ahead_outputs = 0);
  bool pipelining() const { return config_.async_scheduling && backend_->can_chain(); }
  // Queues the next decode step of cur's sequences behind cur (in flight), its tokens chained on
  // the device from cur's samples, when that cannot change what the engine outputs: every entry
  // of cur samples on the device and will still run after its token (no length limit reached; an
  // EOS or stop string found then wastes the queued row, which is dropped), no waiting request
  // could be admitted now (a free slot under max_num_seqs), no ring snapshot is due and the pages
  // are there. Returns the queued step, or nothing.
  std::optional<InFlight> launch_ahead_of(const InFlight& cur);
  // Waits for inflight_ and records its tokens, queuing the next step first when it can.
  void finish_inflight();
  void process_results(const std::vector<Scheduled>& sched, const std::vector<int>& sample_row,
                       const std::vector<int>& first_prompt_row);
  // Draws the token of each host-sampled row (sample_row >= 0, logits on the host) into
  // host_tokens_ / host_logprobs_, the rows in parallel: each sequence has its own generator, so
  // the tokens do not depend on the number of threads.
  void sample_on_host(const std::vector<Scheduled>& sched, const std::vector<int>& sample_row);
  // Records a sampled token; `logprobs` (of the processed logits) when the request asked for them.
  void on_token(Sequence* seq, int32_t token, PositionLogprobs* logprobs);
  void finish_seq(Sequence* seq, FinishReason reason);
  void fail_scheduled(const std::vector<Scheduled>& sched, const Error& error);
  void emit_outputs();
  void record(std::vector<double>& v, double x);

  EngineConfig config_;
  std::unique_ptr<model::Backend> backend_;
  std::shared_ptr<const TokenDecoder> decoder_;
  std::unique_ptr<KvManager> kv_;
  std::vector<int32_t> eos_ids_;
  bool has_sliding_ = false;
  int64_t vocab_size_ = 0;
  uint64_t next_order_ = 0;

  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  std::deque<Sequence*> waiting_;        // FCFS; preempted sequences go back to the front
  std::vector<Sequence*> running_;       // admission order
  std::vector<RequestState*> finished_;  // finished this step, freed after emitting
  std::optional<Error> failed_error_;    // why this step's requests failed, if it did

  std::optional<InFlight> inflight_;
  model::StepInput step_;
  std::vector<float> logits_;
  std::vector<model::DeviceSampling> device_params_;  // [num_logits] when sampling on the device
  std::vector<int32_t> sampled_;  // [num_logits] tokens sampled by the backend; empty: host path
  // Host sampling: tokens and logprobs per scheduled entry, a processed-logits buffer per entry
  // that needs one (min_tokens, logit_bias, penalties), and the threads that fill them.
  std::vector<size_t> host_rows_;  // scheduled entries sampled on the host this step
  std::vector<int32_t> host_tokens_;
  std::vector<PositionLogprobs> host_logprobs_;
  std::vector<std::vector<float>> host_scratch_;
  std::unique_ptr<ThreadPool> sample_pool_;

  EngineStats counters_;
  LatencySamples samples_;
};

}  // namespace flint::engine
