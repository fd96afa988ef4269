// CudaBackend: model::Backend on one CUDA GPU (Hopper first). Same contract as the CPU reference
// (backends/cpu), checked against it by tests/gpu/forward_test.cpp; decode steps replay CUDA graphs
// (tests/gpu/backend_graph_test.cpp) and can sample on the device (backend_sample_test.cpp). Not
// thread-safe; one engine thread owns it.
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/forward.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/weights.h"
#include "model/backend.h"

namespace flint::cuda {

class CudaBackend final : public model::Backend {
 public:
  // Uploads the weights (NVFP4 repacked and checked). Errors: no device, unsupported dtypes, OOM.
  static Result<std::unique_ptr<CudaBackend>> create(const model::FlintWeights& weights);
  // Random weights of `config`'s shape generated on the GPU (DeviceWeights::dummy: linear layers in
  // `linear_dtype`, BF16 or NVFP4) for --load-format dummy, so nothing is built on the host.
  // Errors: no device, a config dummy() refuses, OOM.
  static Result<std::unique_ptr<CudaBackend>> create_dummy(const model::FlintConfig& config,
                                                           DType linear_dtype, uint64_t seed);
  ~CudaBackend() override;

  const model::FlintConfig& config() const override { return weights_.config(); }
  // BF16 KV cache only. Running out of memory is reported here, not mid-request.
  Status init_kv_cache(const model::KvCacheSpec& spec) override;
  // Validates the step (kInvalidArgument naming the problem), runs it, copies logits to host.
  Status forward(const model::StepInput& step, std::span<float> logits) override;
  // As forward, but the logits stay on the device (the start-up memory profile: copying out the
  // logits of every row of an 8192-token step would fill 4.9 GB of host memory for nothing).
  Status forward_on_device(const model::StepInput& step);
  void copy_ring(int32_t src_ring, int32_t dst_ring) override;
  bool can_sample() const override { return true; }
  // As forward, then samples on the GPU (kernels/sampling.h); only the tokens come back.
  Status forward_sample(const model::StepInput& step, std::span<const model::DeviceSampling> params,
                        std::span<int32_t> tokens) override;
  // forward_sample's halves (model::Backend): the step and its sampling queued on the stream, the
  // tokens copied into a pinned slot of their own; a chained step's token ids are copied on the
  // device from the previous launch's tokens after its upload. At most kMaxQueued outstanding.
  bool can_chain() const override { return true; }
  Status launch_sample(const model::StepInput& step, std::span<const model::DeviceSampling> params,
                       bool chain) override;
  Status wait_sample(std::span<int32_t> tokens) override;
  static constexpr size_t kMaxQueued = 2;

  // Decode steps (one new token per sequence, at most kMaxGraphSeqs sequences) replay a CUDA
  // graph captured the second time their shape is seen; on by default. Off runs every step
  // un-captured.
  void set_graphs_enabled(bool on) { graphs_enabled_ = on; }
  struct GraphStats {
    int64_t captures = 0, replays = 0, uncaptured = 0;
    size_t cached = 0;
    int64_t greedy_head_steps = 0;  // forward_sample steps the greedy LM head picked
    int64_t topk_head_steps = 0;    // forward_sample steps sampled from topk_logits' rows
  };
  GraphStats graph_stats() const;

  // Decode steps of up to kPersistentMaxRows sequences run every layer in one persistent kernel
  // when the model allows it; off (the default), the layered path (a launch per op). See
  // CudaForward::set_persistent_decode.
  void set_persistent_decode(bool on) {
    persistent_on_ = on;
    if (fwd_) fwd_->set_persistent_decode(on);
  }
  // After init_kv_cache: whether the persistent kernel can run this model (else why not), and how
  // many steps took it so far.
  bool persistent_decode_available() const { return fwd_ && fwd_->persistent_decode_available(); }
  std::string persistent_decode_unavailable_reason() const {
    return fwd_ ? fwd_->persistent_decode_unavailable_reason() : "no KV cache yet";
  }
  int64_t persistent_steps() const { return fwd_ ? fwd_->persistent_steps() : 0; }

  static constexpr int kMaxGraphSeqs = 64;
  static constexpr size_t kMaxGraphs = 512;  // least recently used graphs go beyond this

 private:
  struct CachedGraph {
    StepPlan plan;  // with max_blocks_per_seq, the whole shape of the captured launches
    int max_blocks_per_seq = 0;
    cudaGraphExec_t exec = nullptr;  // null: seen once, not captured yet
    uint64_t last_use = 0;
  };

  CudaBackend(DeviceWeights w, cudaStream_t s);
  // Uploads and enqueues one step (a graph replay for decode steps) with the LM head `head` when
  // the greedy head serves the step, else LmHead::kLogits (*ran says which; forward.h says where
  // each leaves its results). kTopK reads the rows' K from fwd_->head_top_k(), which the caller
  // writes on stream_ before this call.
  // `chain`: device tokens that replace the step's token ids (one per token).
  Status run_step(const model::StepInput& step, LmHead head = LmHead::kLogits,
                  LmHead* ran = nullptr, const int32_t* chain = nullptr);
  cudaGraphExec_t find_or_capture(const StepPlan& plan);
  void clear_graphs();
  Status reserve_sampling(size_t rows);
  // kInvalidArgument naming `what` while a launch_sample is not waited for (model::Backend's
  // contract: nothing else runs then).
  Status no_launch_outstanding(const char* what) const;

  DeviceWeights weights_;
  cudaStream_t stream_;
  std::unique_ptr<CudaForward> fwd_;

  bool graphs_enabled_ = true;
  bool persistent_on_ = false;
  std::vector<CachedGraph> graphs_;
  uint64_t graphs_generation_ = 0;  // fwd_->buffer_generation() the cached graphs were made at
  uint64_t use_clock_ = 0;
  GraphStats stats_;

  // Sampling: per-row parameters and tokens, staged through pinned memory, one slot per
  // outstanding launch (launches alternate between the two).
  struct SampleSlot {
    SampleParams* params = nullptr;  // [sample_rows_]
    int32_t* tokens = nullptr;       // [2 sample_rows_]: the tokens, then head_top_k
    int32_t* head_top_k = nullptr;   // each row's K for an LmHead::kTopK step
    cudaEvent_t done = nullptr;      // after the tokens' copy to the host
  };
  struct Launched {
    int slot;
    size_t rows;
  };
  size_t sample_rows_ = 0;
  DeviceBuffer d_sample_params_, d_sample_tokens_;
  SampleSlot slots_[kMaxQueued];
  int next_slot_ = 0;
  std::deque<Launched> launched_;         // not waited for yet, oldest first
  const int32_t* last_tokens_ = nullptr;  // the last launch's tokens on the device
  size_t last_rows_ = 0;
};

}  // namespace flint::cuda
