// The greedy LM head: the arg max of each logits row of an FP32 head without reading the whole
// head in FP32. At one token the head's 1.23 GB are ~15% of an NVFP4 decode step; the arg max
// needs the exact logits of only the few rows that could be the largest.
//
// At load time the head W [V, d] f32 gets a bf16 copy H (round to nearest, half the bytes) and
// each row's norm n_r >= ||W_r||. A step then:
//   1. a_r = H_r . x', the approximate logits, by the BF16 GEMV (x' the normed row, as the full
//      head uses it);
//   2. greedy_pick, in blocks of V / 128 rows: X >= ||x'||, B_r = kGreedyBound * X * n_r. Every
//      |l_r - a_r| <= B_r, where l_r is the FP32 GEMV's logit (bf16 rounding moves a weight by at
//      most 2^-8 of itself, so the dot product by at most 2^-8 ||x'|| ||W_r||; kGreedyBound is
//      2^-7, twice that, which also covers both sums' f32 rounding and their 1 / rms). A block's
//      M = max (a_r - B_r) over its rows is at most the largest logit l_r*, so in the block
//      holding r*, a_r* + B_r* >= l_r* >= M: every row with a_r + B_r >= its block's M is a
//      candidate, r* among them. Each candidate's l_r is computed exactly as gemv computes the
//      one-row FP32 head (the same staging, chunk order and sums: bit for bit), and the largest
//      wins, the lowest row among equals, as argmax picks. When X or M is not finite every row of
//      the block is a candidate (then it reads the whole head, and is still exact).
//   3. greedy_finish: tokens[t], and the pick's key reset for the next step.
// So the token is the arg max of the logits the one-row FP32 GEMV would give, at 0.62 GB and a
// few rows read instead of 1.23 GB. Test: tests/kernels/greedy_head_test.cpp
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

inline constexpr float kGreedyBound = 1.0f / 128.0f;

// hi[r, k] = bf16(W[r, k]) (round to nearest even); norms[r] >= ||W_r||_2 (a double sum rounded
// up); *bad is set to 1 when some hi or norm is not finite (then the greedy head must not be
// used: the bound needs finite weights). W: an F32 LinearRef (one matrix, no row scale).
void greedy_head_prepare(uint16_t* hi, float* norms, int32_t* bad, const LinearRef& w,
                         cudaStream_t s);

struct GreedyPickArgs {
  const float* approx;  // [n, V] a_r (step 1)
  const float* x;       // activation rows, as gemv reads them (before the norm)
  int64_t x_stride;
  const int32_t* x_rows;  // logits row t reads x row x_rows[t] (null: row t)
  const float* norm;      // RMSNorm weight [d] fused into the head, or null
  float eps;
  LinearRef head;      // the FP32 head [V, d]
  const float* norms;  // [V] from greedy_head_prepare
  uint64_t* keys;      // [n] zero before the call; greedy_finish zeroes them again
  int32_t* tokens;     // [n] the picks
  int num_rows;        // n (>= 1)
};

// Steps 2 and 3 (two launches, programmatic dependent launch).
void greedy_pick(const GreedyPickArgs& a, cudaStream_t s);

}  // namespace flint::cuda
