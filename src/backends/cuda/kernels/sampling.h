// Sampling on the GPU: one token per logits row with per-row temperature, min-p, top-k, top-p and
// a counter-based RNG keyed by (seed, step). Test: tests/kernels/sampling_test.cpp
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// One row's sampling parameters (the same rules as engine::sample_token): greedy (lowest id among
// equal maxima) when temperature < 1e-5 or the best logit is not finite; otherwise
// p = softmax(logits / temperature), drop tokens with p < min_p * p_max, keep the top_k most likely
// (ties: lower id first; top_k <= 0: off), keep the smallest most-likely-first prefix whose share
// of the remaining mass reaches top_p (>= 1: off), and draw one token in proportion to p.
struct SampleParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;  // the draw is a pure function of (seed, step, logits row)
  uint64_t step = 0;
};

// tokens[r] = a token sampled from logits row r. logits: [num_rows, vocab] f32, row-major;
// params: [num_rows] device memory; tokens: [num_rows] int32; num_rows <= 65535, vocab <= 2^21.
// Launches only (graph-safe).
void sample(int32_t* tokens, const float* logits, const SampleParams* params, int num_rows,
            int64_t vocab, cudaStream_t s);

}  // namespace flint::cuda
