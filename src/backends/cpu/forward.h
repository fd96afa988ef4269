// CpuBackend: the Flint forward pass in plain loops, op by op as ../shared/spec/flint-model.md
// section 2 reads. It is the reference the CUDA backend is checked against.
// Test partner: tests/unit/cpu/forward_test.cpp (against tests/reference/flint_ref.py).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/kv_cache.h"
#include "core/thread_pool.h"
#include "model/backend.h"

namespace flint::cpu {

class CpuBackend final : public model::Backend {
 public:
  // `weights` must outlive the backend. num_threads <= 0: one per hardware thread.
  explicit CpuBackend(const model::FlintWeights& weights, int num_threads = 0);

  const model::FlintConfig& config() const override { return weights_.config; }
  // KvCacheSpec dtype F32 (exact) or BF16.
  Status init_kv_cache(const model::KvCacheSpec& spec) override;
  // Validates the step (sizes, token ids, positions, pages, rings) and returns kInvalidArgument
  // naming the first problem; otherwise runs it and updates the cache.
  Status forward(const model::StepInput& step, std::span<float> logits) override;
  void copy_ring(int32_t src_ring, int32_t dst_ring) override {
    cache_.copy_ring(src_ring, dst_ring);
  }

  int num_threads() const { return pool_.num_threads(); }

 private:
  struct LayerVectors {  // small per-layer weights, converted to FP32 once
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, sinks;
  };
  Status validate(const model::StepInput& step, std::span<float> logits) const;
  void layer_forward(int64_t layer, const model::StepInput& step, std::vector<float>& h);

  const model::FlintWeights& weights_;
  ThreadPool pool_;
  KvCache cache_;
  std::vector<LayerVectors> vectors_;
  std::vector<float> final_norm_;
};

// Builds steps for a handful of sequences with a trivial KV layout: sequence i owns ring i and the
// pages [i * pages_per_seq, (i + 1) * pages_per_seq). Enough for tests, benchmarks and
// `flint generate`; the engine has the real allocator.
class SimpleSteps {
 public:
  SimpleSteps(int num_seqs, int64_t max_seq_len, int64_t page_size = 16);
  model::KvCacheSpec kv_spec(DType dtype) const;
  // Queues `tokens` as the next chunk of sequence `seq`; logits for all of them or the last only.
  void add(int seq, std::span<const int32_t> tokens, bool all_logits);
  // The step of everything queued since the last call; sequence lengths advance.
  model::StepInput take();
  int64_t seq_len(int seq) const { return lens_[seq]; }

 private:
  struct Chunk {
    int seq;
    std::vector<int32_t> tokens;
    bool all_logits;
  };
  int64_t page_size_, pages_per_seq_;
  std::vector<int64_t> lens_;
  std::vector<Chunk> queued_;
};

}  // namespace flint::cpu
