// The GPU memory plan: arithmetic, the profiling step, and the device measurements around it.
// Test: tests/unit/cuda/memory_plan_test.cpp (arithmetic); tests/python/server on the GPU.
#include "backends/cuda/memory_plan.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "backends/cuda/device.h"

namespace flint::cuda {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / 1073741824.0; }

int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The profiling step's tokens and sequences: as the engine packs its largest step, no sequence
// longer than max_model_len (so with few sequences, fewer tokens than the budget).
std::pair<int, int> profile_split(const ProfileShape& shape) {
  int tokens = std::max(shape.num_tokens, 1);
  const int seqs = std::clamp(shape.num_seqs, 1, tokens);
  if (shape.max_model_len > 0) {
    tokens = static_cast<int>(std::min<int64_t>(tokens, int64_t(seqs) * shape.max_model_len));
  }
  return {tokens, seqs};
}

// Free device memory now; 0 when the runtime does not answer.
int64_t free_now() { return static_cast<int64_t>(device_memory_info().first); }

}  // namespace

KvLayout kv_layout(const model::FlintConfig& c, int64_t page_size, int64_t num_rings,
                   DType kv_dtype) {
  int64_t num_full = 0, num_sliding = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) (c.is_sliding(l) ? num_sliding : num_full)++;
  const int64_t row = 2 * c.num_kv_heads * c.head_dim * dtype_bytes_for(kv_dtype, 1);
  KvLayout k;
  k.page_size = page_size;
  // The engine never uses a zero-byte page, even for a model without full layers.
  k.page_bytes = std::max<int64_t>(1, num_full * row * page_size);
  k.ring_bytes = num_sliding * row * c.sliding_window;
  k.num_rings = num_rings;
  return k;
}

Result<GpuMemoryPlan> plan_gpu_memory(const GpuMemoryFacts& f, const KvLayout& k,
                                      const GpuMemoryRequest& r) {
  GpuMemoryPlan p;
  p.budget = static_cast<int64_t>(static_cast<double>(f.total) * r.gpu_memory_utilization);
  p.margin = kGpuMemoryMarginBytes + f.activations;
  const int64_t before_kv = f.used_at_start + f.weights;
  // What the device can still give once the weights and activations are in, whatever the flags.
  const int64_t physical = f.total - before_kv - f.activations - p.margin;
  if (r.kv_cache_memory) {
    p.kv_from_flag = true;
    p.kv_cache_bytes = *r.kv_cache_memory;
    if (p.kv_cache_bytes > physical) {
      return make_error(ErrorCode::kOutOfMemory,
                        "gpu memory: --kv-cache-memory {:.2f} GiB does not fit: {:.2f} GiB of the "
                        "{:.2f} GiB GPU is left after {:.2f} GiB in use, {:.2f} GiB of weights, "
                        "{:.2f} GiB of activations and a {:.2f} GiB margin; lower "
                        "--kv-cache-memory",
                        gib(p.kv_cache_bytes), gib(std::max<int64_t>(physical, 0)), gib(f.total),
                        gib(f.used_at_start), gib(f.weights), gib(f.activations), gib(p.margin));
    }
  } else if (before_kv > p.budget) {
    return make_error(ErrorCode::kOutOfMemory,
                      "gpu memory: the weights take {:.2f} GiB and {:.2f} GiB was in use before "
                      "them, more than --gpu-memory-utilization {} of the {:.2f} GiB GPU "
                      "({:.2f} GiB); raise --gpu-memory-utilization or serve a smaller (NVFP4) "
                      "checkpoint",
                      gib(f.weights), gib(f.used_at_start), r.gpu_memory_utilization, gib(f.total),
                      gib(p.budget));
  } else {
    p.kv_cache_bytes = std::min(p.budget - before_kv - f.activations - p.margin, physical);
    if (p.kv_cache_bytes <= 0) {
      return make_error(ErrorCode::kOutOfMemory,
                        "gpu memory: nothing is left for the KV cache: --gpu-memory-utilization "
                        "{} of the {:.2f} GiB GPU is {:.2f} GiB, and {:.2f} GiB in use, {:.2f} GiB "
                        "of weights, {:.2f} GiB of activations and a {:.2f} GiB margin take it "
                        "all; raise --gpu-memory-utilization or lower --max-num-batched-tokens",
                        r.gpu_memory_utilization, gib(f.total), gib(p.budget), gib(f.used_at_start),
                        gib(f.weights), gib(f.activations), gib(p.margin));
    }
  }
  const int64_t rings = k.num_rings * k.ring_bytes;
  const char* flag = p.kv_from_flag ? "--kv-cache-memory" : "--gpu-memory-utilization";
  if (rings > p.kv_cache_bytes) {
    return make_error(ErrorCode::kOutOfMemory,
                      "gpu memory: the KV cache gets {:.2f} GiB, but {} sliding-window rings take "
                      "{:.2f} GiB; raise {} or lower --max-num-seqs",
                      gib(p.kv_cache_bytes), k.num_rings, gib(rings), flag);
  }
  p.num_pages = (p.kv_cache_bytes - rings) / k.page_bytes;
  // Slots (page * page_size + offset) are int32 in StepInput: a tiny model on a large GPU stops
  // there, and the bytes past it stay free.
  const int64_t max_pages = std::numeric_limits<int32_t>::max() / k.page_size;
  if (p.num_pages > max_pages) {
    p.num_pages = max_pages;
    p.kv_cache_bytes = rings + max_pages * k.page_bytes;
  }
  p.num_tokens = p.num_pages * k.page_size;
  p.max_model_len_fit = p.num_tokens;
  const int64_t pages_per_seq = ceil_div64(r.max_model_len, k.page_size);
  p.max_concurrency = pages_per_seq > 0
                          ? static_cast<double>(p.num_pages) / static_cast<double>(pages_per_seq)
                          : 0.0;
  if (p.num_pages < pages_per_seq) {
    return make_error(ErrorCode::kOutOfMemory,
                      "gpu memory: one max_model_len ({}) sequence needs {:.2f} GiB of KV cache "
                      "but {:.2f} GiB is left for it ({} tokens); raise {} or lower "
                      "--max-model-len to at most {}",
                      r.max_model_len, gib(pages_per_seq * k.page_bytes),
                      gib(p.kv_cache_bytes - rings), p.num_tokens, flag, p.max_model_len_fit);
  }
  return p;
}

std::string describe(const GpuMemoryFacts& f, const GpuMemoryPlan& p, const GpuMemoryRequest& r) {
  std::string s = fmt::format(
      "gpu memory: {:.2f} GiB total, budget {:.2f} GiB (--gpu-memory-utilization {}); in use "
      "before loading {:.2f} GiB, weights {:.2f} GiB, activation peak {:.2f} GiB, margin {:.2f} "
      "GiB, KV cache {:.2f} GiB{}",
      gib(f.total), gib(p.budget), r.gpu_memory_utilization, gib(f.used_at_start), gib(f.weights),
      gib(f.activations), gib(p.margin), gib(p.kv_cache_bytes),
      p.kv_from_flag ? " (--kv-cache-memory)" : "");
  s += fmt::format(
      "\ngpu memory: KV cache size {} tokens; maximum concurrency for {} tokens per request: "
      "{:.2f}x (at most {} sequences at once: --max-num-seqs)",
      p.num_tokens, r.max_model_len, p.max_concurrency, r.max_num_seqs);
  return s;
}

Result<GpuInfo> gpu_info() {
  GpuInfo g;
  if (cudaGetDeviceCount(&g.device_count) != cudaSuccess || g.device_count <= 0) {
    const char* why = cudaGetErrorString(cudaGetLastError());
    return make_error(ErrorCode::kUnavailable, "cuda: no usable CUDA device ({})", why);
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    const char* why = cudaGetErrorString(cudaGetLastError());
    return make_error(ErrorCode::kUnavailable, "cuda: cannot read device 0 ({})", why);
  }
  g.name = prop.name;
  const auto [free_b, total_b] = device_memory_info();
  g.free = static_cast<int64_t>(free_b);
  g.total = static_cast<int64_t>(total_b);
  return g;
}

model::StepInput profile_step(const model::FlintConfig& c, const ProfileShape& shape) {
  const auto [T, S] = profile_split(shape);
  const int64_t page = std::max(shape.page_size, 1);
  const int longest = (T + S - 1) / S;
  const int64_t pages_used = ceil_div64(longest, page);
  const int64_t blocks = std::max<int64_t>(ceil_div64(shape.max_model_len, page), pages_used);
  model::StepInput st;
  st.max_blocks_per_seq = static_cast<int32_t>(blocks);
  st.query_start_loc.push_back(0);
  for (int q = 0; q < S; ++q) {
    const int n = T / S + (q < T % S ? 1 : 0);
    for (int i = 0; i < n; ++i) {
      const int32_t row = st.num_tokens();
      st.token_ids.push_back(static_cast<int32_t>((int64_t(row) * 7919 + 11) % c.vocab_size));
      st.positions.push_back(i);
      st.slot_mapping.push_back(static_cast<int32_t>(i));  // pages 0.. shared by all sequences
    }
    st.query_start_loc.push_back(st.num_tokens());
    st.seq_lens.push_back(n);
    st.ring_ids.push_back(0);
    for (int64_t b = 0; b < blocks; ++b)
      st.block_table.push_back(static_cast<int32_t>(b % pages_used));
  }
  for (int32_t t = 0; t < T; ++t) st.logits_indices.push_back(t);
  for (int q = 0; q < S; ++q) st.logits_indices.push_back(st.query_start_loc[q + 1] - 1);
  return st;
}

model::KvCacheSpec profile_kv_spec(const model::FlintConfig& c, const ProfileShape& shape) {
  (void)c;
  const auto [T, S] = profile_split(shape);
  model::KvCacheSpec spec;
  spec.page_size = std::max(shape.page_size, 1);
  spec.num_pages = ceil_div64((T + S - 1) / S, spec.page_size);
  spec.num_rings = 1;
  spec.dtype = DType::kBF16;
  return spec;
}

namespace {

// Creates the backend with `make` (its weights are what the device's free memory lost meanwhile),
// then runs the profiling step on a minimal KV cache. `smaller` says how to make the weights fit.
template <typename Make>
Result<std::unique_ptr<CudaBackend>> profiled(Make&& make, const char* smaller,
                                              const ProfileShape& shape, GpuMemoryFacts* facts) {
  FLINT_ASSIGN_OR_RETURN(GpuInfo info, gpu_info());
  FLINT_CUDA_CHECK(cudaFree(nullptr));  // creates the context, so it counts as in use before us
  const int64_t free0 = free_now();
  facts->total = info.total;
  facts->used_at_start = info.total - free0;
  Result<std::unique_ptr<CudaBackend>> backend = make();
  if (!backend) {
    if (backend.error().code == ErrorCode::kOutOfMemory) {
      return make_error(ErrorCode::kOutOfMemory,
                        "gpu memory: the weights do not fit on the {} ({:.2f} GiB free of {:.2f} "
                        "GiB); {}: {}",
                        info.name, gib(free0), gib(info.total), smaller, backend.error().message);
    }
    return backend.error().with_context("cuda backend");
  }
  facts->weights = free0 - free_now();
  const model::FlintConfig& c = (*backend)->config();
  FLINT_TRY((*backend)->init_kv_cache(profile_kv_spec(c, shape)));
  const int64_t free1 = free_now();
  const model::StepInput step = profile_step(c, shape);
  if (auto st = (*backend)->forward_on_device(step); !st) {
    return st.error().with_context("gpu memory: the profiling step of {} tokens in {} sequences",
                                   step.num_tokens(), step.num_seqs());
  }
  facts->activations = std::max<int64_t>(0, free1 - free_now());
  return backend;
}

}  // namespace

Result<std::unique_ptr<CudaBackend>> create_profiled_backend(const model::FlintWeights& weights,
                                                             const ProfileShape& shape,
                                                             GpuMemoryFacts* facts) {
  return profiled([&] { return CudaBackend::create(weights); },
                  "serve a smaller (NVFP4) checkpoint", shape, facts);
}

Result<std::unique_ptr<CudaBackend>> create_profiled_dummy_backend(const model::FlintConfig& config,
                                                                   DType linear_dtype,
                                                                   uint64_t seed,
                                                                   const ProfileShape& shape,
                                                                   GpuMemoryFacts* facts) {
  return profiled([&] { return CudaBackend::create_dummy(config, linear_dtype, seed); },
                  linear_dtype == DType::kNVFP4 ? "the model is too large for this GPU"
                                                : "use --quantization nvfp4 (4.5 bits per weight)",
                  shape, facts);
}

}  // namespace flint::cuda
