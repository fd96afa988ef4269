// Timing of cuda::prefill_attention at Flint's attention shape (32 query heads, 4 KV heads,
// head_dim 128, sinks): one sequence whose last `chunk` tokens are this step's rows and whose
// earlier keys sit in the paged cache (full layer) or the ring (sliding layer, window 513), for the
// Hopper (wgmma) kernel and the mma.sync kernel. Prints a markdown table: the median ms per call
// (events around each of 5 calls after a warm-up call), TFLOP/s (4 * head_dim flops per (query
// head, key) pair a query sees) and the largest difference between the two kernels' outputs
// (nan if either has a non-finite value).
// Usage: prefill_attention_bench [context...]   (default: 8192 102400; chunk 8192 or the context)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/prefill_attention.h"

namespace flint::cuda {
namespace {

constexpr int kHeads = 32, kKvHeads = 4, kHeadDim = 128, kWindow = 513, kPageSize = 16;
constexpr int kChunk = 8192;

// Uniform bf16 values in [-1, 1) from a hash of the index.
__global__ void fill_bf16_kernel(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(float(h & 0xffffu) / 32768.0f - 1.0f);
  }
}

template <typename T>
T* device_alloc(int64_t n) {
  T* d = nullptr;
  FLINT_CUDA_CHECK(cudaMalloc(&d, size_t(n) * sizeof(T)));
  return d;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* d = device_alloc<T>(int64_t(h.size()));
  FLINT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

__nv_bfloat16* random_bf16(int64_t n, uint32_t seed) {
  __nv_bfloat16* d = device_alloc<__nv_bfloat16>(n);
  fill_bf16_kernel<<<1024, 256>>>(d, n, seed);
  FLINT_CUDA_CHECK(cudaGetLastError());
  return d;
}

// (query head, key) pairs the step's queries see.
double pairs(int64_t context, int64_t chunk, bool sliding) {
  double n = 0;
  for (int64_t p = context - chunk; p < context; ++p)
    n += sliding ? std::min(p + 1, int64_t(kWindow)) : p + 1;
  return n * kHeads;
}

void run(int64_t context) {
  const int64_t chunk = std::min<int64_t>(kChunk, context);
  const int64_t row = int64_t(kKvHeads) * kHeadDim;
  const int32_t num_pages = int32_t((context + kPageSize - 1) / kPageSize);
  const int64_t cache_slots = std::max<int64_t>(int64_t(num_pages) * kPageSize, kWindow);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> q(size_t(chunk) * kHeads * kHeadDim), sinks(kHeads);
  for (float& x : q) x = uni(g) * 4.0f;  // scores of a few units after the 1/sqrt(128) scale
  for (float& x : sinks) x = uni(g);
  float* dq = to_device(q);
  float* dsinks = to_device(sinks);
  float* dout[2] = {device_alloc<float>(int64_t(q.size())), device_alloc<float>(int64_t(q.size()))};
  __nv_bfloat16* kc = random_bf16(cache_slots * row, 1);
  __nv_bfloat16* vc = random_bf16(cache_slots * row, 2);
  __nv_bfloat16* ks = random_bf16(chunk * row, 3);
  __nv_bfloat16* vs = random_bf16(chunk * row, 4);
  std::vector<int32_t> table(num_pages);
  for (int32_t i = 0; i < num_pages; ++i) table[i] = (i * 7919) % num_pages;  // shuffled pages
  int32_t* dtable = to_device(table);
  int32_t* dqsl = to_device(std::vector<int32_t>{0, int32_t(chunk)});
  int32_t* dlens = to_device(std::vector<int32_t>{int32_t(context)});
  int32_t* drings = to_device(std::vector<int32_t>{0});
  TokenKv kv;
  kv.ring_ids = drings;
  kv.query_start_loc = dqsl;
  kv.seq_lens = dlens;
  kv.block_table = dtable;
  kv.max_blocks_per_seq = num_pages;
  kv.page_size = kPageSize;
  kv.window = kWindow;
  cudaEvent_t e0, e1;
  FLINT_CUDA_CHECK(cudaEventCreate(&e0));
  FLINT_CUDA_CHECK(cudaEventCreate(&e1));
  for (bool sliding : {false, true}) {
    double ms[2] = {0, 0};
    for (int w = 0; w < 2; ++w) {
      PrefillAttentionArgs a{kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(float(kHeadDim)),
                             sliding};
      a.wgmma = w == 0;
      auto call = [&] {
        prefill_attention(dout[w], dq, kc, vc, ks, vs, dsinks, kv, int(chunk), 1, a, nullptr);
      };
      call();
      FLINT_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> t;
      for (int i = 0; i < 5; ++i) {
        FLINT_CUDA_CHECK(cudaEventRecord(e0));
        call();
        FLINT_CUDA_CHECK(cudaEventRecord(e1));
        FLINT_CUDA_CHECK(cudaEventSynchronize(e1));
        float x = 0;
        FLINT_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
        t.push_back(x);
      }
      std::sort(t.begin(), t.end());
      ms[w] = t[t.size() / 2];
    }
    std::vector<float> o0(q.size()), o1(q.size());
    FLINT_CUDA_CHECK(cudaMemcpy(o0.data(), dout[0], q.size() * 4, cudaMemcpyDeviceToHost));
    FLINT_CUDA_CHECK(cudaMemcpy(o1.data(), dout[1], q.size() * 4, cudaMemcpyDeviceToHost));
    double diff = 0;  // NaN when either output has a non-finite value
    for (size_t i = 0; i < o0.size(); ++i) {
      const double d = std::fabs(double(o0[i]) - double(o1[i]));
      diff = std::isfinite(d) ? std::max(diff, d) : NAN;
      if (!std::isfinite(d)) break;
    }
    const double flop = 4.0 * kHeadDim * pairs(context, chunk, sliding);
    fmt::print("| {} | {} | {} | {:.3f} | {:.0f} | {:.3f} | {:.0f} | {:.2f} | {:.2e} |\n",
               sliding ? "sliding" : "full", context, chunk, ms[0], flop / ms[0] * 1e-9, ms[1],
               flop / ms[1] * 1e-9, ms[1] / ms[0], diff);
    std::fflush(stdout);
  }
  for (void* p :
       {static_cast<void*>(dq), static_cast<void*>(dsinks), static_cast<void*>(dout[0]),
        static_cast<void*>(dout[1]), static_cast<void*>(kc), static_cast<void*>(vc),
        static_cast<void*>(ks), static_cast<void*>(vs), static_cast<void*>(dtable),
        static_cast<void*>(dqsl), static_cast<void*>(dlens), static_cast<void*>(drings)}) {
    FLINT_CUDA_CHECK(cudaFree(p));
  }
  FLINT_CUDA_CHECK(cudaEventDestroy(e0));
  FLINT_CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace
}  // namespace flint::cuda

int main(int argc, char** argv) {
  std::vector<int64_t> contexts;
  for (int i = 1; i < argc; ++i) contexts.push_back(std::strtoll(argv[i], nullptr, 10));
  if (contexts.empty()) contexts = {8192, 102400};
  fmt::print(
      "| layer | context | new rows | wgmma ms | TFLOP/s | mma.sync ms | TFLOP/s | speedup | max "
      "diff |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t c : contexts) {
    if (c <= 0) {
      fmt::print(stderr, "prefill_attention_bench: context {} is not a positive length\n", c);
      return 1;
    }
    flint::cuda::run(c);
  }
  return 0;
}
