// Engine: the public, thread-safe face of continuous batching. One engine thread owns the
// scheduler, the KV pages and rings, and the backend; callers hand in Requests and receive
// RequestOutputs through an OutputStream (a queue) or a callback. Test partner:
// tests/unit/engine/engine_test.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/result.h"
#include "engine/request.h"
#include "model/backend.h"

namespace flint::engine {

struct EngineConfig {
  int max_num_seqs = 256;             // sequences (choices) in one step
  int max_num_batched_tokens = 2048;  // tokens in one step (decode + prefill chunks)
  int max_model_len = 0;              // prompt + output; 0: the model's max_position_embeddings
  // KV memory budget in bytes (pages for full layers + rings for sliding layers). The caller turns
  // --gpu-memory-utilization into bytes on the GPU; on the CPU it is --kv-cache-memory.
  int64_t kv_cache_memory = 0;
  int page_size = 16;
  bool enable_prefix_caching = true;
  // Extra rings kept as sliding-window snapshots at cached block boundaries (prefix caching);
  // -1: max_num_seqs / 2 (at least 4). 0 disables reuse for models with sliding layers.
  int num_ring_snapshots = -1;
  uint64_t seed = 0;        // seeds requests that set no seed
  int max_num_waiting = 0;  // add_request fails with kUnavailable beyond; 0: unlimited
  DType kv_dtype = DType::kBF16;
  std::vector<int32_t> extra_eos_token_ids;  // e.g. the tokenizer's end-of-turn tokens
  // Queue the next decode step on the device before reading this one's tokens, when the backend
  // can (Backend::can_chain) and the step allows it (EngineCore::launch_ahead_of); the tokens are
  // the same either way.
  bool async_scheduling = true;
};

// vLLM's default --max-num-batched-tokens for `vllm serve`: 8192 on a GPU of at least 70 GiB that
// is not an A100 (H100, H200, B200, MI300X), 2048 elsewhere (smaller GPUs, A100s, the CPU).
// gpu_name is matched without regard to case.
int default_max_num_batched_tokens(bool gpu, uint64_t gpu_total_bytes, std::string_view gpu_name);

// Turns token ids into text (the tokenizer's decode). Called on the engine thread only.
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::string decode(std::span<const int32_t> token_ids,
                             bool skip_special_tokens) const = 0;
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_usage = 0.0;  // fraction of KV pages in use by live sequences (cached free pages: 0)
  int64_t num_pages_total = 0;
  int64_t num_pages_used = 0;
  int64_t num_rings_used = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up
  int64_t prefix_cache_hits = 0;     // prompt tokens served from the cache
  double prefix_cache_hit_rate = 0.0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t num_preemptions = 0;
  int64_t num_requests_finished = 0;
  int64_t num_steps = 0;
};

// Latency samples in seconds since the last take_latency_samples() call (bounded: the oldest are
// dropped past 100000 each).
struct LatencySamples {
  std::vector<double> ttft_s;
  std::vector<double> itl_s;
  std::vector<double> e2e_s;
  std::vector<int> prompt_tokens;      // per finished request
  std::vector<int> generation_tokens;  // per finished request
};

// A queue of RequestOutputs for one request. Thread-safe: the engine thread pushes, one consumer
// pops.
class OutputStream {
 public:
  // Waits up to `timeout` for the next output; nullopt on timeout or once the final one was taken.
  std::optional<RequestOutput> next(std::chrono::milliseconds timeout);
  // Takes everything queued now without waiting.
  std::vector<RequestOutput> drain();
  bool done() const;  // the final output has been taken
  void push(RequestOutput out);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool final_pushed_ = false;
  bool final_taken_ = false;
};

class EngineCore;

class Engine {
 public:
  using Callback = std::function<void(RequestOutput)>;

  // Sizes the KV cache from config.kv_cache_memory and allocates it in the backend. Errors name the
  // budget when not even one max_model_len sequence fits.
  static Result<std::unique_ptr<Engine>> create(EngineConfig config,
                                                std::unique_ptr<model::Backend> backend,
                                                std::shared_ptr<const TokenDecoder> decoder);
  ~Engine();  // stops the thread; requests still in flight finish with "abort"

  // Starts / stops the engine thread. stop() aborts what is in flight and joins.
  void start();
  void stop();

  // Validates and queues a request; outputs go to the returned stream. Thread-safe. Errors:
  // kInvalidArgument (bad params, empty or too-long prompt, duplicate id; the message names the
  // parameter and the token counts), kUnavailable (waiting queue full or engine stopped).
  Result<std::shared_ptr<OutputStream>> add_request(Request request);
  // Same, but `callback` runs on the engine thread for every output (keep it short).
  Status add_request(Request request, Callback callback);
  // Aborts a request (no-op for unknown ids). Takes effect before the next step; its KV pages and
  // ring are freed and its final output has finish_reason "abort". Thread-safe.
  void abort(const std::string& request_id);

  EngineStats stats() const;              // thread-safe snapshot
  LatencySamples take_latency_samples();  // thread-safe
  const EngineConfig& config() const;     // resolved values (max_model_len filled in)
  const model::FlintConfig& model_config() const;

 private:
  Engine() = default;
  void loop();
  // Moves the core's latency samples into samples_ (the engine thread only). Called after each
  // step and before a finished output is delivered, so that a caller that has seen a request
  // finish also sees its samples.
  void absorb_samples();

  struct Pending {
    Request request;
    Callback callback;
  };
  std::unique_ptr<EngineCore> core_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  std::vector<std::string> pending_aborts_;
  std::unordered_set<std::string> live_ids_;  // ids added and not yet finished
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
  EngineStats stats_;
  LatencySamples samples_;
};

}  // namespace flint::engine
