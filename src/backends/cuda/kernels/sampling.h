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

// The most candidates a row's list may hold for sample() to draw from the list alone.
inline constexpr int kSampleCandidates = 512;

// Rows whose logits are -inf but at a few tokens (topk_logits' rows): count[r] is the number of
// such tokens of row r, and when it is at most kSampleCandidates, ids/logits [num_rows,
// kSampleCandidates] hold them (token id and its logit, in any order) in their first count[r]
// entries. Device memory; all null: no list.
struct SampleCandidates {
  const uint32_t* count = nullptr;
  const int32_t* ids = nullptr;
  const float* logits = nullptr;
};

// tokens[r] = a token sampled from logits row r. logits: [num_rows, vocab] f32, row-major;
// params: [num_rows] device memory; tokens: [num_rows] int32; num_rows <= 65535, vocab <= 2^21.
// With candidates (cand.count not null), a row whose list holds all its tokens that are not -inf
// is drawn from the list (one block, no pass over the row) and the others from the row: the same
// token either way. Launches only (graph-safe).
void sample(int32_t* tokens, const float* logits, const SampleParams* params, int num_rows,
            int64_t vocab, cudaStream_t s, const SampleCandidates& cand = {});

}  // namespace flint::cuda
