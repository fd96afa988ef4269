// Backend: what the engine needs from a device. The CPU backend (backends/cpu) is the reference;
// the CUDA backend (backends/cuda) implements the same contract. Not thread-safe: one engine
// thread owns a backend.
#pragma once

#include <cstdint>
#include <span>

#include "core/result.h"
#include "model/step.h"
#include "model/weights.h"

namespace flint::model {

// Below this temperature sampling is greedy: the arg max, lowest id among equals (the engine's
// sampler, the CUDA sampler and the CUDA greedy LM head all use this rule).
inline constexpr float kGreedyTemperature = 1e-5f;

// Sampling parameters a backend can apply on its own device (Backend::forward_sample), with the
// rules of engine::sample_token: greedy when temperature < kGreedyTemperature, else min_p, top_k,
// top_p, a draw.
struct DeviceSampling {
  float temperature = 1.0f;
  int32_t top_k = 0;  // <= 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;  // the token is a pure function of (seed, step, logits row)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const FlintConfig& config() const = 0;
  // Allocates (or reallocates) the KV cache. Errors when it does not fit.
  virtual Status init_kv_cache(const KvCacheSpec& spec) = 0;
  // Runs one step and writes logits [step.logits_indices.size(), vocab_size] f32, row-major, into
  // `logits` (host memory, at least that large).
  virtual Status forward(const StepInput& step, std::span<float> logits) = 0;
  // Copies a sliding-window ring (for prefix caching and preemption); both are ring ids.
  virtual void copy_ring(int32_t src_ring, int32_t dst_ring) = 0;

  // True when forward_sample works (the logits then never leave the device).
  virtual bool can_sample() const { return false; }
  // Runs one step and samples one token per logits row: tokens[i] from row i with params[i]
  // (params.size() == step.logits_indices.size() <= tokens.size()).
  virtual Status forward_sample(const StepInput& step, std::span<const DeviceSampling> params,
                                std::span<int32_t> tokens) {
    (void)step;
    (void)params;
    (void)tokens;
    return Error{ErrorCode::kUnsupported, "backend: no device sampling"};
  }

  // forward_sample in two halves, so that the engine can queue the next decode step before it has
  // read this one's tokens and the host's work between steps overlaps the device's (vLLM's async
  // scheduling). launch_sample queues a step, wait_sample returns the tokens of the oldest step
  // launched and not yet waited for (a span too small for them is refused and the step stays
  // queued); at most two are outstanding. With `chain`, the step's
  // token_ids are not read: token i of the step (step.num_tokens() must equal the previous
  // launch's number of rows) is the token the previously launched step sampled for its row i.
  // Nothing else (forward, forward_sample, copy_ring, init_kv_cache) may run while a launch is
  // outstanding.
  virtual bool can_chain() const { return false; }
  virtual Status launch_sample(const StepInput& step, std::span<const DeviceSampling> params,
                               bool chain) {
    (void)step;
    (void)params;
    (void)chain;
    return Error{ErrorCode::kUnsupported, "backend: no queued device sampling"};
  }
  virtual Status wait_sample(std::span<int32_t> tokens) {
    (void)tokens;
    return Error{ErrorCode::kUnsupported, "backend: no queued device sampling"};
  }
};

}  // namespace flint::model
