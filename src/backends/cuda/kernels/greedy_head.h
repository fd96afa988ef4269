// The greedy LM head: the arg max of each logits row of an FP32 head without reading the whole
// head in FP32. At one token the head's 1.23 GB are ~15% of an NVFP4 decode step; the arg max
// needs the exact logits of only the few rows that could be the largest.
//
// At load time the head W [V, d] f32 gets an int8 copy Q with a scale per row (s_r = max |W_r| /
// 127, q = W / s_r rounded to nearest: a quarter of the bytes) and each row's bound coefficient
// beta_r >= ||W_r - s_r Q_r|| + g ||W_r||, g = (2 d + 256) 2^-24 covering both sums' f32 rounding
// (computed in double, rounded up). A step then:
//   1. a_r = s_r Q_r . x', the approximate logits, by greedy_approx (x' the normed row, staged as
//      the full head's GEMV stages it, each block reading its share of the copy's rows);
//   2. greedy_pick, in blocks of V / 128 rows: X >= ||x'||, B_r = X * beta_r. Every |l_r - a_r| <=
//      B_r, where l_r is the FP32 GEMV's logit: the exact products differ by (W_r - s_r Q_r) . x',
//      at most ||x'|| times the error's norm (Cauchy-Schwarz), and each f32 sum of d products is
//      within d 2^-24 sum |w x| <= d 2^-24 ||w|| ||x'|| of its exact value. A block's M = max (a_r
//      - B_r) over its rows is at most the largest logit l_r*, so in the block holding r*, a_r* +
//      B_r* >= l_r* >= M: every row with a_r + B_r >= its block's M is a candidate, r* among them.
//      Each candidate's l_r is computed exactly as gemv computes the one-row FP32 head (the same
//      staging, chunk order and sums: bit for bit), and the largest wins, the lowest row among
//      equals, as argmax picks. When X or M is not finite every row of the block is a candidate
//      (then it reads the whole head, and is still exact).
//   3. greedy_finish: tokens[t], and the pick's key reset for the next step.
// So the token is the arg max of the logits the one-row FP32 GEMV would give, at 0.31 GB and a
// few rows read instead of 1.23 GB. (The first form, a bf16 copy with the bound 2^-7 ||x'||
// ||W_r||, read 0.62 GB.)
//
// The same copy serves sampling steps whose rows keep at most K tokens (top_k, Flint's default
// 20; a greedy row keeps 1), by topk_logits: after step 1, each warp of greedy_pick's grid takes
// the largest a_r - B_r of its rows; L, the K-th largest of those maxima, is at most the K-th
// largest a_r - B_r, so at most the K-th largest logit (each a_r - B_r <= l_r). A row with a_r +
// B_r < L has l_r < L, so it is outside the row's top K and never ties with its K-th logit; every
// other row gets its exact logit (as above), these rows -inf. The sampler (sampling.h) measures
// every mass against the largest logit, and its cuts (min-p against it, the top K, top-p over what
// is left) keep only rows among the top K, so from these logits it keeps the same tokens with the
// same masses and draws the same token as from the one-row GEMV's whole row.
// Test: tests/kernels/greedy_head_test.cpp
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear_ref.h"
#include "backends/cuda/kernels/sampling.h"

namespace flint::cuda {

// Elements of a 16-byte chunk of the int8 copy: the head's `in` must be a multiple.
inline constexpr int kGreedyChunkElems = 16;
// The most tokens a row may keep for topk_logits to serve it (more cost more candidate rows).
inline constexpr int kTopKHeadMax = 128;
// topk_logits' scratch per logits row: a maximum per warp of its 128 blocks of 8 warps.
inline constexpr int kTopKMaximaPerRow = 1024;

// q[r, k] = rint(W[r, k] / s_r) in [-127, 127] with s_r = max_k |W[r, k]| / 127 (IEEE float
// division; 0 with q = 0 for a row whose s_r would not be a normal float); bounds[r] = beta_r (see
// above). *bad is set to 1 when some weight or bound is not finite (then the greedy head must not
// be used). W: an F32 LinearRef (one matrix, no row scale, in % kGreedyChunkElems == 0).
void greedy_head_prepare(int8_t* q, float* scales, float* bounds, int32_t* bad, const LinearRef& w,
                         cudaStream_t s);

struct GreedyPickArgs {
  float* approx = nullptr;   // [n, V] a_r (written by step 1)
  const float* x = nullptr;  // activation rows, as gemv reads them (before the norm)
  int64_t x_stride = 0;
  const int32_t* x_rows = nullptr;  // logits row t reads x row x_rows[t] (null: row t)
  const float* norm = nullptr;      // RMSNorm weight [d] fused into the head, or null
  float eps = 0.0f;
  LinearRef head{};               // the FP32 head [V, d]
  LinearRef copy{};               // the int8 copy: I8 [V, d], row_scale s_r (greedy_approx only)
  const float* bounds = nullptr;  // [V] beta_r from greedy_head_prepare
  uint64_t* keys = nullptr;       // [n] zero before the call; greedy_finish zeroes them again
  int32_t* tokens = nullptr;      // [n] the picks
  int num_rows = 0;               // n (>= 1)
  // topk_logits only:
  const int32_t* top_k = nullptr;  // [n] K of each row (values below 1 count as 1)
  float* maxima = nullptr;         // [n, kTopKMaximaPerRow] scratch
  float* logits = nullptr;         // [n, V] the output
  // Optional (all null: not written): each row's tokens that are not -inf in `logits`, as
  // sample()'s candidate list (sampling.h: SampleCandidates, kSampleCandidates entries a row).
  uint32_t* cand_count = nullptr;  // [n]
  int32_t* cand_ids = nullptr;     // [n, kSampleCandidates]
  float* cand_logits = nullptr;    // [n, kSampleCandidates]
};

// Step 1: approx [n, V] from `copy` (one launch, programmatic dependent launch).
void greedy_approx(const GreedyPickArgs& a, cudaStream_t s);

// Steps 2 and 3 (two launches, programmatic dependent launch).
void greedy_pick(const GreedyPickArgs& a, cudaStream_t s);

// After step 1: logits [n, V], each row's exact logits of the rows that can be among its top K
// (a.top_k) and -inf elsewhere (two launches, programmatic dependent launch). A row with more K
// than there are maxima gets every logit exact. With a.cand_count, those rows (token id, logit)
// are also listed, the list's first kSampleCandidates kept, and counted.
void topk_logits(const GreedyPickArgs& a, cudaStream_t s);

}  // namespace flint::cuda
