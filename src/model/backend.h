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
};

}  // namespace flint::model
