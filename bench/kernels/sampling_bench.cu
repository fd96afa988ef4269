// Timing of cuda::sample at the Flint vocabulary: rows 1, 8 and 64, greedy and filtered parameters,
// on flat logits (most tokens are candidates) and peaked ones (a few tokens hold most mass).
// Prints a markdown table: the median time per call (cudaEvents over 10 back-to-back calls, after
// warm-up), the logits read in GB/s, and a hash of the sampled tokens (equal hashes: equal draws).
// Usage: sampling_bench [vocab]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/sampling.h"

namespace flint::cuda {
namespace {

enum class Shape { kFlat, kPeaked };

// Flat: uniform in [-4, 4), every 13th token +3, one -inf (the GPU test's logits). Peaked: normal
// with sd 2 and four tokens at 14..16, so that a few tokens hold most of the mass.
std::vector<float> make_logits(Shape shape, int rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> l(size_t(rows) * vocab);
  std::uniform_real_distribution<float> uni(-4.0f, 4.0f);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = l.data() + int64_t(r) * vocab;
    if (shape == Shape::kFlat) {
      for (int64_t i = 0; i < vocab; ++i) row[i] = uni(g) + (i % 13 == r % 13 ? 3.0f : 0.0f);
      row[(r * 31 + 3) % vocab] = -std::numeric_limits<float>::infinity();
    } else {
      for (int64_t i = 0; i < vocab; ++i) row[i] = normal(g);
      const float top[] = {16.0f, 15.0f, 14.5f, 14.0f};
      for (int t = 0; t < 4; ++t) row[(int64_t(r) * 7919 + t * 104729) % vocab] = top[t];
    }
  }
  return l;
}

struct Case {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

template <typename T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  FLINT_CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  FLINT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

uint64_t fnv1a(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

int run(int64_t vocab) {
  const Case cases[] = {{0.0f, 0, 1.0f, 0.0f},   {1.0f, 0, 0.95f, 0.0f}, {0.7f, 20, 0.8f, 0.05f},
                        {0.7f, 50, 0.95f, 0.0f}, {0.6f, 0, 1.0f, 0.05f}, {1.0f, 0, 1.0f, 0.0f}};
  cudaEvent_t e0, e1;
  FLINT_CUDA_CHECK(cudaEventCreate(&e0));
  FLINT_CUDA_CHECK(cudaEventCreate(&e1));
  fmt::print(
      "| logits | rows | t | top_k | top_p | min_p | us/call (median) | GB/s | tokens hash |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (Shape shape : {Shape::kFlat, Shape::kPeaked}) {
    for (int rows : {1, 8, 64}) {
      float* logits = to_device(make_logits(shape, rows, vocab, 77 + rows));
      int32_t* tokens = nullptr;
      FLINT_CUDA_CHECK(cudaMalloc(&tokens, rows * sizeof(int32_t)));
      for (const Case& c : cases) {
        std::vector<SampleParams> ps(rows);
        for (int r = 0; r < rows; ++r) {
          ps[r] = SampleParams{c.temperature, c.top_k, c.top_p, c.min_p, 1234u + r, 7u};
        }
        SampleParams* params = to_device(ps);
        for (int w = 0; w < 3; ++w) sample(tokens, logits, params, rows, vocab, nullptr);
        constexpr int kCalls = 10;
        std::vector<float> us;
        for (int rep = 0; rep < 15; ++rep) {
          FLINT_CUDA_CHECK(cudaEventRecord(e0));
          for (int k = 0; k < kCalls; ++k) sample(tokens, logits, params, rows, vocab, nullptr);
          FLINT_CUDA_CHECK(cudaEventRecord(e1));
          FLINT_CUDA_CHECK(cudaEventSynchronize(e1));
          float ms = 0;
          FLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
          us.push_back(ms * 1000.0f / kCalls);
        }
        std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
        const double med = us[us.size() / 2];
        std::vector<int32_t> got(rows);
        FLINT_CUDA_CHECK(
            cudaMemcpy(got.data(), tokens, rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
        fmt::print("| {} | {} | {:.1f} | {} | {:.2f} | {:.2f} | {:.1f} | {:.0f} | {:016x} |\n",
                   shape == Shape::kFlat ? "flat" : "peaked", rows, c.temperature, c.top_k, c.top_p,
                   c.min_p, med, double(rows) * vocab * 4 / (med * 1e3), fnv1a(got));
        FLINT_CUDA_CHECK(cudaFree(params));
      }
      FLINT_CUDA_CHECK(cudaFree(tokens));
      FLINT_CUDA_CHECK(cudaFree(logits));
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

}  // namespace
}  // namespace flint::cuda

int main(int argc, char** argv) {
  const int64_t vocab = argc > 1 ? std::atoll(argv[1]) : 151552;
  if (vocab <= 0) {
    fmt::print(stderr, "sampling_bench: vocab must be positive, got '{}'\n", argv[1]);
    return 2;
  }
  return flint::cuda::run(vocab);
}
