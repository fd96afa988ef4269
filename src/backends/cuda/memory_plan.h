// GPU memory for `flint serve`, vLLM's rule: the KV cache gets total x --gpu-memory-utilization
// minus what was in use before us, the weights, the peak of a profiling step and a margin;
// --kv-cache-memory overrides. plan_gpu_memory is plain arithmetic (test:
// tests/unit/cuda/memory_plan_test.cpp); create_profiled_backend measures it on the device
// (tests/gpu/dummy_backend_test.cpp for the dummy-weights variant).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/result.h"
#include "model/config.h"
#include "model/step.h"
#include "model/weights.h"

namespace flint::cuda {

// What the device reported, in bytes.
struct GpuMemoryFacts {
  int64_t total = 0;          // the device's memory
  int64_t used_at_start = 0;  // in use before the weights: CUDA context, other processes
  int64_t weights = 0;        // taken by the weight upload (and the backend's handles)
  int64_t activations = 0;    // growth during the profiling step (workspaces, kernels, cuBLAS)
};

// The KV cache the engine builds from a byte budget (engine/engine_core.cpp): rings for sliding
// layers first, then as many pages for full layers as fit.
struct KvLayout {
  int64_t page_size = 16;  // tokens per page
  int64_t page_bytes = 0;  // K and V of one page over all full layers
  int64_t ring_bytes = 0;  // K and V of one sliding-window ring over all sliding layers
  int64_t num_rings = 0;   // sequence rings + prefix-cache snapshot rings
};
KvLayout kv_layout(const model::FlintConfig& config, int64_t page_size, int64_t num_rings,
                   DType kv_dtype);

struct GpuMemoryRequest {
  double gpu_memory_utilization = 0.9;
  std::optional<int64_t> kv_cache_memory;  // --kv-cache-memory in bytes, if given
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 1;
};

struct GpuMemoryPlan {
  int64_t budget = 0;          // total x gpu_memory_utilization
  int64_t margin = 0;          // kept free: workspace regrowth, CUDA graphs, driver
  int64_t kv_cache_bytes = 0;  // handed to the engine
  bool kv_from_flag = false;   // --kv-cache-memory was given
  int64_t num_pages = 0;
  int64_t num_tokens = 0;         // full-layer token slots: num_pages x page_size
  double max_concurrency = 0.0;   // max_model_len sequences that fit in the pages
  int64_t max_model_len_fit = 0;  // longest sequence the pages hold (for the error's hint)
};

// The fixed part of the margin; the other part is one more activation peak, because a workspace
// that grows holds its old and new buffers for a moment.
inline constexpr int64_t kGpuMemoryMarginBytes = int64_t{256} << 20;

// Sizes the KV cache. Errors (kOutOfMemory) say what does not fit and which flag to change.
Result<GpuMemoryPlan> plan_gpu_memory(const GpuMemoryFacts& facts, const KvLayout& layout,
                                      const GpuMemoryRequest& request);
// The plan as vLLM-style log lines (weights / activations / KV GiB, tokens, concurrency).
std::string describe(const GpuMemoryFacts& facts, const GpuMemoryPlan& plan,
                     const GpuMemoryRequest& request);

struct GpuInfo {
  int device_count = 0;
  std::string name;   // of device 0
  int64_t total = 0;  // bytes
  int64_t free = 0;
};
// Device 0 as the runtime reports it; kUnavailable without a usable device.
Result<GpuInfo> gpu_info();

// The largest step the engine will send: the profiling step's shape.
struct ProfileShape {
  int num_tokens = 2048;  // --max-num-batched-tokens
  int num_seqs = 256;     // --max-num-seqs (capped at num_tokens)
  int max_model_len = 0;  // sizes the block table as the engine does
  int page_size = 16;
};
// The step itself: min(num_seqs, num_tokens) fresh prefills, none longer than max_model_len,
// sharing pages and ring 0, with logits for every token plus each sequence's last (prompt
// logprobs' worst case). Also its minimal KV cache.
model::StepInput profile_step(const model::FlintConfig& config, const ProfileShape& shape);
model::KvCacheSpec profile_kv_spec(const model::FlintConfig& config, const ProfileShape& shape);

// Uploads the weights and runs the profiling step on a minimal KV cache, filling `facts`. The
// engine's init_kv_cache then replaces that cache with the real one. Errors: no device, weights
// that do not fit (kOutOfMemory, saying so), a failing profiling step.
Result<std::unique_ptr<CudaBackend>> create_profiled_backend(const model::FlintWeights& weights,
                                                             const ProfileShape& shape,
                                                             GpuMemoryFacts* facts);
// The same with random weights of `config`'s shape generated on the device
// (CudaBackend::create_dummy, linear layers in `linear_dtype`): --load-format dummy. The weights'
// bytes are measured on the device just as an upload's are.
Result<std::unique_ptr<CudaBackend>> create_profiled_dummy_backend(const model::FlintConfig& config,
                                                                   DType linear_dtype,
                                                                   uint64_t seed,
                                                                   const ProfileShape& shape,
                                                                   GpuMemoryFacts* facts);

}  // namespace flint::cuda
