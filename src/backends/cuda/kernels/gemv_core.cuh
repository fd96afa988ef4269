// The block body of the small-batch GEMV kernels (gemv.cu, moe_router.cu): R output rows per warp,
// a few 16-byte weight loads in flight per lane, weights for rows known up front loaded before
// the PDL wait, activations staged (and optionally RMS-normalised) in shared memory.
// Test: tests/kernels/gemv_test.cpp, tests/kernels/moe_test.cpp
#pragma once

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe_topk.cuh"

namespace flint::cuda::dev {

inline constexpr int kGemvWarps = 8;
inline constexpr int kGemvThreads = kGemvWarps * 32;

struct GemvArgs {
  LinearRef a, b;  // b is used by the gated kernel only
  const float* x;
  int64_t x_stride;
  const int32_t* x_rows;  // dense mode: activation row i is x_rows[i] (gathered) when non-null
  const float* norm;      // [in] RMSNorm weight applied to each staged row, or null
  float eps;
  float* y;
  int64_t y_stride;
  int num_rows;               // activation rows in total (dense mode)
  int pairs_per_token;        // expert mode: x row of group g is g / pairs_per_token
  const int32_t* expert_ids;  // expert mode when non-null; then group == pair, one row per block
  bool accumulate;
  // Expert mode only. Slots (pair % pairs_per_token) >= fixed_from always hold expert
  // fixed_id0 + slot - fixed_from (the shared expert's slices): their weights are requested
  // before the PDL wait, like a dense GEMV's.
  int fixed_from = 1 << 30;
  int fixed_id0 = 0;
  // Expert mode: the blocks of fixed slots do nothing (moe_route computed those slices' act rows).
  bool skip_fixed = false;
  // Expert mode with the routing in the kernel (gemv_block<..., kTopK > 0>): expert_ids is
  // null; each block picks its token's experts from these [num_tokens, E] router logits, and
  // block x == 0 of each pair records the pick in ids_out / w_out ([num_pairs]).
  const float* route_logits = nullptr;
  const float* route_bias = nullptr;
  MoeRouting route{};
  int32_t* ids_out = nullptr;
  float* w_out = nullptr;
  // Not null: each pair's block x == 0 adds 1 here once its pick is in ids_out / w_out, so that
  // moe_down can read the picks before its PDL wait (moe_down's `ready`).
  int32_t* pick_ready = nullptr;
  // Expert mode without `norm` only: x's rows are already times their norm weight (x_out of
  // moe_route_logits) and x_inv[token] is their 1 / rms, applied to the dot products at the end,
  // as with `norm`; null: the rows are used as they are.
  const float* x_inv = nullptr;
  // Expert mode with the whole-block top-k (kTopK 2), instead of route_logits and x_inv: the
  // [num_tokens, E + 1] sums of gemv_route_partials (gemv.h; entries kRouteAccStride doubles
  // apart): acc[e] is expert e's logit times the token's rms, acc[E] its row's sum of squares.
  // x_inv is then 1 / sqrt(acc[E] / in + eps) (`eps`, with no `norm`) and logit e is acc[e] times
  // it.
  const double* route_acc = nullptr;
  // F32/BF16 weights known before the PDL wait (dense, or fixed slots): the chunks past the first
  // pass are also requested into L2 before the wait (prefetch_rest; gemv.cu says when).
  bool l2_rest = false;
  // gemv_block lets the next kernel launch once this block has passed its PDL wait, for a kernel
  // that itself launched early, so that its dependents do not launch earlier still. Set only for
  // a kernel that does not call pdl_launch_dependents at its start (gemv_route_partials' launch
  // of gemv_route_kernel).
  bool trigger_after_wait = false;
};

// kTopK: the expert of pair g (a routed slot: the token's top-k as moe_route picks it; a fixed
// slot: fixed_e, weight 1), recorded by block x == 0. Every thread of the block must call it.
// kAhead (E <= 256, top_k <= kBlockTopKMax): the whole block picks, each thread's selection bias
// and logit of expert threadIdx.x loaded ahead in bias_one and logit_one: block x == 0 the whole
// pick in turn (top_k_token_block), the others their slot's expert by rank
// (top_k_token_block_rank; moe_topk.cuh says what each costs); otherwise warp 0 picks
// (top_k_token, `scratch` its [2E] floats) from a.route_logits. kW: the block's warps (8 or 16;
// kAhead's picks run in the first 8).
template <bool kAhead, int kW = kGemvWarps>
__device__ __forceinline__ int64_t pick_expert(const GemvArgs& a, int g, bool fixed,
                                               int64_t fixed_e, float* scratch, float bias_one,
                                               float logit_one) {
  __shared__ int32_t pick_ids[32];
  __shared__ float pick_w[32];
  const int E = a.route.num_experts, slot = g % a.pairs_per_token, t = g / a.pairs_per_token;
  int64_t e = fixed_e;
  float w = 1.0f;
  static_assert(kW == 8 || kW == 16, "pick_expert: blocks of 8 or 16 warps");
  if (!fixed) {
    // Block x == 0 records the pick with its weight; the others need only their slot's expert.
    // In a block of 16 warps the first 8 pick (a thread an expert, E <= 256) and the rest wait
    // at the barrier below.
    constexpr int kSync = kW == 8 ? 0 : 256;
    if constexpr (kAhead) {
      if (kW == 8 || threadIdx.x < 256) {
        if (blockIdx.x == 0) {
          top_k_token_block<8, kSync>(logit_one, bias_one, a.route, scratch, pick_ids, pick_w);
        } else {
          top_k_token_block_rank<8, kSync>(logit_one, bias_one, a.route, scratch, pick_ids, pick_w,
                                           slot);
        }
      }
    } else if (threadIdx.x < 32) {
      top_k_token(a.route_logits + int64_t(t) * E, a.route_bias, a.route, scratch, pick_ids,
                  pick_w);
    }
    __syncthreads();
    e = pick_ids[slot];
    if (blockIdx.x == 0) w = pick_w[slot];
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    a.ids_out[g] = static_cast<int32_t>(e);
    a.w_out[g] = w;
    if (a.pick_ready != nullptr) {
      __threadfence();  // release: the pick before the count
      atomicAdd(a.pick_ready, 1);
    }
  }
  return e;
}

// Weight chunks a lane loads per pass, per row and matrix: two NVFP4 chunks (a 2048-wide row in
// one pass, all fetched before the PDL wait) or four 16-byte BF16/F32 chunks; half that for the
// gated kernels, which load two matrices. Kept small on purpose: at batch 1 the kernel needs many
// resident warps (few registers) more than deep per-lane queues. A version with 2-4 rows per warp
// and ~8 loads per lane (120-255 registers) made the whole step slower on the H200.
template <DType W, bool kGated, int R>
constexpr int gemv_unroll() {
  return (W == DType::kNVFP4 ? 2 : 4) / (kGated ? 2 : 1);
}

// The per-warp pieces of a GEMV pass, shared with the persistent decode kernel: lane `lane`
// handles chunks base + lane + 32 u (u < U) of R weight rows (rows with valid[r] false are
// skipped). kSplit warps share the rows: warp `half` of them is lanes 32 half .. 32 half + 31 of
// a pass of kSplit * 32 lanes (chunks base + lane + 32 half + 32 kSplit u).
template <DType W, bool kGated, int R, int U, int kSplit = 1>
__device__ __forceinline__ void load_chunks(Chunk<W> (&wa)[R][U], Chunk<W> (&wb)[R][U],
                                            const LinearRef& A, const LinearRef& B,
                                            const int64_t (&row)[R], const bool (&valid)[R],
                                            int64_t base, int64_t nc, int half = 0) {
  const int lane = (threadIdx.x & 31) + 32 * half;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = base + lane + 32 * kSplit * u;
      if (valid[r] && c < nc) {
        wa[r][u].load(A, row[r], c);
        if constexpr (kGated) wb[r][u].load(B, row[r], c);
      }
    }
  }
}

// acc[r][i] += the loaded chunks of row r . staged activation row i (i < nb <= NB; PK floats per
// row in the padded layout). Below 4 rows each chunk is dotted directly; from 4 rows on it is
// decoded once and reused (the kernel is bound by instructions at 4-8 rows).
template <DType W, int NB, bool kGated, int R, int U, int kSplit = 1>
__device__ __forceinline__ void accumulate_chunks(const Chunk<W> (&wa)[R][U],
                                                  const Chunk<W> (&wb)[R][U],
                                                  const bool (&valid)[R], int64_t base, int64_t nc,
                                                  const float* xs, int64_t PK, int nb,
                                                  float (&acc_a)[R][NB], float (&acc_b)[R][NB],
                                                  int half = 0) {
  using C = Chunk<W>;
  const int lane = (threadIdx.x & 31) + 32 * half;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = base + lane + 32 * kSplit * u;
    if (c >= nc) continue;
    const int64_t xo = pad_idx(c * C::kElems);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!valid[r]) continue;
      if constexpr (NB < 4) {
#pragma unroll
        for (int i = 0; i < NB; ++i) {
          if (i >= nb) continue;
          acc_a[r][i] += wa[r][u].dot(xs + i * PK + xo, nullptr);
          if constexpr (kGated) acc_b[r][i] += wb[r][u].dot(xs + i * PK + xo, nullptr);
        }
      } else {
        float wf[C::kElems];
        wa[r][u].decode(wf);
#pragma unroll
        for (int i = 0; i < NB; ++i) {
          if (i < nb) acc_a[r][i] += dot_decoded(wf, xs + i * PK + xo);
        }
        if constexpr (kGated) {
          wb[r][u].decode(wf);
#pragma unroll
          for (int i = 0; i < NB; ++i) {
            if (i < nb) acc_b[r][i] += dot_decoded(wf, xs + i * PK + xo);
          }
        }
      }
    }
  }
}

// Requests into L2 the 128-byte lines that cover bytes [from, to) of p, lane gl of nl taking every
// nl-th line. A call, as measured (the NVFP4 kernels, which do not call it now, spilled more
// with it inlined).
static __device__ __noinline__ void l2_lines(const void* p, int64_t from, int64_t to, int gl,
                                             int nl) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t e = b + uintptr_t(to);
  for (uintptr_t q = ((b + uintptr_t(from)) & ~uintptr_t(127)) + uintptr_t(gl) * 128; q < e;
       q += uintptr_t(nl) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
  }
}

// The F32/BF16 chunks (16 bytes each) of rows `row` past the first pass of kSplit * 32 lanes x U,
// requested into L2 by the pass's lanes: the passes after the PDL wait then read L2, not DRAM.
template <bool kGated, int R, int U, int kSplit>
__device__ __forceinline__ void prefetch_rest(const GemvArgs& a, const int64_t (&row)[R],
                                              const bool (&valid)[R], int64_t nc, int half) {
  const int64_t first = int64_t(32) * kSplit * U;
  if (first >= nc) return;
  const int gl = (threadIdx.x & 31) + 32 * half;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!valid[r]) continue;
#pragma unroll
    for (int m = 0; m < (kGated ? 2 : 1); ++m) {
      const LinearRef& L = m == 0 ? a.a : a.b;
      l2_lines(static_cast<const uint8_t*>(L.w) + row[r] * nc * 16, first * 16, nc * 16, gl,
               32 * kSplit);
    }
  }
}

// Computes, for the block (blockIdx.x, blockIdx.y), y rows as gemv.h describes. Every thread of
// the block must call it (it synchronises); it performs the PDL wait itself. UX multiplies the
// chunks each lane has in flight (gemv_unroll): 2 lets a row twice as long be read in one pass.
// kTopK: 0 dense or given ids; 1 routed experts picked in the block (pick_expert); 2 as 1, by
// the whole block, with the selection bias loaded before the PDL wait (E <= 256, top_k <=
// kBlockTopKMax).
// kW: warps a block per row group (8, or 16: half the blocks). kSplit: warps per row (a block of
// kSplit * kW warps, kW x R rows); the kSplit partial sums of a row are added in shared memory, in
// a fixed order. Dense mode only.
// y_new (NB 1, not null): each row's new y value (after `accumulate`) also goes to
// y_new[warp * R + r], the block's rows in order (gemv_route_partials' tail reads them).
// kPipe: two passes in flight, the next pass's loads issued before this pass's dots (twice the
// weight registers; gemv.cu's gemv_route_kernel says where it pays).
template <DType W, int NB, bool kGated, int R, int UX = 1, int kTopK = 0, int kSplit = 1,
          bool kPipe = false, int kW = kGemvWarps>
__device__ __forceinline__ void gemv_block(const GemvArgs& args, float* xs,
                                           float* y_new = nullptr) {
  using C = Chunk<W>;
  const int bx = static_cast<int>(blockIdx.x), by = static_cast<int>(blockIdx.y);
  constexpr int U = gemv_unroll<W, kGated, R>() * UX;
  static_assert(kSplit == 1 || (kSplit == 2 && kTopK == 0), "gemv_block: kSplit 2 is dense only");
  const int lane = threadIdx.x & 31;
  // One warp a row (kSplit 1): half is 0 and warp < kW, known at compile time (a runtime
  // division here cost the NB >= 2 kernels registers).
  const int warp = threadIdx.x >> 5, half = kSplit > 1 ? warp / kW : 0;
  const int64_t r0 = (int64_t(bx) * kW + (kSplit > 1 ? warp % kW : warp)) * R;
  const int g = by;
  const bool expert = kTopK > 0 || args.expert_ids != nullptr;
  const int64_t K = args.a.in, out = args.a.out, nc = K / C::kElems, PK = padded_len(K);
  C wa[R][U], wb[R][U];
  int64_t row[R];
  bool valid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) valid[r] = r0 + r < out;
  auto load = [&](int64_t base) {
    load_chunks<W, kGated, R, U, kSplit>(wa, wb, args.a, args.b, row, valid, base, nc, half);
  };
  const int slot = expert ? g % args.pairs_per_token : 0;
  const bool fixed = expert && slot >= args.fixed_from;
  if (fixed && args.skip_fixed) return;  // another launch computed the shared slices
  NormPrefetch pf;
  prefetch_norm(pf, args.norm, K);
  int64_t e = fixed ? args.fixed_id0 + (slot - args.fixed_from) : 0;
  if (!expert || fixed) {
#pragma unroll
    for (int r = 0; r < R; ++r) row[r] = e * out + r0 + r;
    load(0);  // weights do not depend on earlier kernels: fetch them before the wait
    if constexpr (W != DType::kNVFP4) {  // NVFP4's kernels keep their registers
      if (args.l2_rest) prefetch_rest<kGated, R, U, kSplit>(args, row, valid, nc, half);
    }
  }
  float bias_one = 0.0f;  // kTopK 2: the selection bias of expert threadIdx.x (pick_expert)
  if constexpr (kTopK == 2) {
    if (args.route_bias != nullptr && int(threadIdx.x) < args.route.num_experts)
      bias_one = __ldg(args.route_bias + threadIdx.x);
  }
  ktrace_mark(kKtWaitBegin);
  pdl_wait();
  ktrace_mark(kKtWaitEnd);
  if (args.trigger_after_wait) pdl_launch_dependents();
  // One activation row, dense, adding to y (the residual stream): lane 0 reads the rows' old
  // values now, which the earlier kernels have finished writing, so that the store at the end
  // does not wait for them.
  float y_old[R];
  if constexpr (NB == 1 && kTopK == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      y_old[r] = 0.0f;
      if (args.accumulate && args.expert_ids == nullptr && lane == 0 && half == 0 && valid[r]) {
        y_old[r] = __ldcg(args.y + int64_t(by) * args.y_stride + r0 + r);
      }
    }
  }
  // The token's 1 / rms for rows normed by an earlier kernel (x_inv), used at the end: copied
  // into shared memory asynchronously (no register held across the kernel), waited for before the
  // barrier that precedes the dot products.
  __shared__ float s_xinv;
  const bool xinv = expert && (args.x_inv != nullptr || args.route_acc != nullptr);
  if (expert && args.x_inv != nullptr && threadIdx.x == 0) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\ncp.async.commit_group;\n" ::"r"(
                     static_cast<uint32_t>(__cvta_generic_to_shared(&s_xinv))),
                 "l"(args.x_inv + g / args.pairs_per_token));
  }
  int64_t xrow[NB];
  int nb;
  int64_t y_row0;
  // Routed picks by the whole block (kTopK 2, one row, already normed, at most kNormVec float4 per
  // thread): the row's loads are issued before the top-k and land in registers while it runs, so
  // the staging after the pick is only their stores to shared memory. Staged after the pick, the
  // row's L2 round trip came on top of the top-k's (eighteenth session: NVFP4 b1 1K 1.963 -> 1.948
  // ms).
  // The row and the router sums below come from the kernel before (the o projection), final once
  // the PDL wait has returned, and every block reads the same lines: loaded through L1 (ld.ca, as
  // stage_rows' plain loads are), the blocks of an SM share an L2 request where through L2 only
  // (ld.cg) each block queued its own at the lines' L2 slices. routed_pick_bench (H100, 512
  // blocks): the loads 1076 -> 890 ns, the last slot's rank picks 1510 -> 1418; the step, H100, 40
  // layers, five rounds: NVFP4 b1 32K 1.593 -> 1.588 ms, the rest within noise (forty-fourth
  // session).
  float4 x_early[kNormVec];
  bool early = false;
  if constexpr (kTopK == 2 && NB == 1) {
    early = args.norm == nullptr && K / 4 <= int64_t(kNormVec) * blockDim.x;
    if (early) {
      const float4* src = reinterpret_cast<const float4*>(
          args.x + int64_t(g / args.pairs_per_token) * args.x_stride);
#pragma unroll
      for (int k = 0; k < kNormVec; ++k) {
        const int64_t j = threadIdx.x + k * blockDim.x;
        if (j < K / 4) x_early[k] = __ldca(src + j);
      }
    }
  }
  // kTopK 2: thread e's logit, requested after the row (from the router's logits, or from
  // gemv_route_partials' sums, which also give this token's 1 / rms).
  float logit_one = 0.0f;
  if constexpr (kTopK == 2) {
    const int t = g / args.pairs_per_token, E = args.route.num_experts;
    const bool mine = !fixed && int(threadIdx.x) < E;
    if (args.route_acc != nullptr) {
      const double* acc = args.route_acc + int64_t(t) * route_acc_doubles(E);
      // Warp w reads copy w of the sum of squares: 512 blocks' 8 warps on one line were a
      // queue at its L2 slice (a scratch probe of the pick, H100, 512 blocks: ~300 of the ~4300
      // cycles a block took; fortieth session, docs/PERFORMANCE.md).
      const double ss =
          __ldca(acc + int64_t(E + (threadIdx.x >> 5) % kRouteSsCopies) * kRouteAccStride);
      const double ae = mine ? __ldca(acc + int64_t(threadIdx.x) * kRouteAccStride) : 0.0;
      const float inv = rsqrtf(static_cast<float>(ss) / static_cast<float>(K) + args.eps);
      logit_one = static_cast<float>(ae) * inv;
      if (threadIdx.x == 0) s_xinv = inv;  // read after the barriers below
    } else if (mine) {
      logit_one = __ldcg(args.route_logits + int64_t(t) * E + threadIdx.x);
    }
  }
  if (expert) {
    if constexpr (kTopK > 0) {
      // xs: staged below
      e = pick_expert<kTopK == 2, kW>(args, g, fixed, e, xs, bias_one, logit_one);
    }
    ktrace_mark(kKtMarkA);
    if (!fixed) {
      if constexpr (kTopK == 0) e = args.expert_ids[g];
#pragma unroll
      for (int r = 0; r < R; ++r) row[r] = e * out + r0 + r;
      load(0);
    }
    xrow[0] = g / args.pairs_per_token;
    nb = 1;
    y_row0 = g;
  } else {
    y_row0 = int64_t(g) * NB;
    nb = min(NB, args.num_rows - g * NB);
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      xrow[i] = 0;
      if (i < nb) xrow[i] = args.x_rows != nullptr ? args.x_rows[y_row0 + i] : y_row0 + i;
    }
  }
  if (xinv && threadIdx.x == 0) asm volatile("cp.async.wait_all;\n" ::: "memory");
  if (early) {  // the top-k is done with xs (pick_expert's barrier)
#pragma unroll
    for (int k = 0; k < kNormVec; ++k) {
      const int64_t j = threadIdx.x + k * blockDim.x;
      if (j < K / 4) *reinterpret_cast<float4*>(xs + pad_idx(4 * j)) = x_early[k];
    }
    __syncthreads();
  } else {
    stage_rows<NB>(xs, PK, args.x, args.x_stride, xrow, nb, K, args.norm, pf);
  }
  ktrace_mark(kKtMarkB);
  float acc_a[R][NB], acc_b[R][NB];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < NB; ++i) acc_a[r][i] = acc_b[r][i] = 0.0f;
  }
  constexpr int64_t kStep = int64_t(32) * kSplit * U;
  if constexpr (kPipe) {
    C na[R][U], nb2[R][U];  // the pass after the one in wa / wb
    for (int64_t base = 0;; base += 2 * kStep) {
      const bool more = base + kStep < nc;
      if (more) {
        load_chunks<W, kGated, R, U, kSplit>(na, nb2, args.a, args.b, row, valid, base + kStep, nc,
                                             half);
      }
      accumulate_chunks<W, NB, kGated, R, U, kSplit>(wa, wb, valid, base, nc, xs, PK, nb, acc_a,
                                                     acc_b, half);
      if (!more) break;
      const bool more2 = base + 2 * kStep < nc;
      if (more2) load(base + 2 * kStep);
      accumulate_chunks<W, NB, kGated, R, U, kSplit>(na, nb2, valid, base + kStep, nc, xs, PK, nb,
                                                     acc_a, acc_b, half);
      if (!more2) break;
    }
  } else {
    for (int64_t base = 0; base < nc; base += kStep) {
      if (base > 0) load(base);
      accumulate_chunks<W, NB, kGated, R, U, kSplit>(wa, wb, valid, base, nc, xs, PK, nb, acc_a,
                                                     acc_b, half);
    }
  }
  ktrace_mark(kKtMarkC);
  if constexpr (kSplit == 2) {
    // Half 1's warp sums to shared memory; half 0 adds them to its own (a then b, fixed order).
    __shared__ float other[kW][R][NB][kGated ? 2 : 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        acc_a[r][i] = warp_sum(acc_a[r][i]);
        if constexpr (kGated) acc_b[r][i] = warp_sum(acc_b[r][i]);
        if (half == 1 && lane == 0) {
          other[warp % kW][r][i][0] = acc_a[r][i];
          if constexpr (kGated) other[warp % kW][r][i][1] = acc_b[r][i];
        }
      }
    }
    __syncthreads();
    if (half == 1) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < NB; ++i) {
        acc_a[r][i] += other[warp][r][i][0];
        if constexpr (kGated) acc_b[r][i] += other[warp][r][i][1];
      }
    }
  }
  // The staged rows' 1 / rms (stage_rows applied only the norm weight), or x_inv's.
  float inv[NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    inv[i] = args.norm != nullptr && i < nb ? staged_inv<NB, kW * kSplit>(i, K, args.eps)
                                            : (xinv ? s_xinv : 1.0f);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= out) continue;
    const float sa = row_scale(args.a, row[r]);
    const float sb = kGated ? row_scale(args.b, row[r]) : 1.0f;
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      const float va = (kSplit == 1 ? warp_sum(acc_a[r][i]) : acc_a[r][i]) * sa * inv[i];
      float v = va;
      if constexpr (kGated) {
        v = silu(va) * ((kSplit == 1 ? warp_sum(acc_b[r][i]) : acc_b[r][i]) * sb * inv[i]);
      }
      if (lane == i && i < nb) {
        float* yp = args.y + (y_row0 + i) * args.y_stride + r0 + r;
        float nv = v;
        if (args.accumulate) {
          if constexpr (NB == 1 && kTopK == 0) {
            nv = (args.expert_ids == nullptr ? y_old[r] : *yp) + v;
          } else {
            nv = *yp + v;
          }
        }
        *yp = nv;
        if constexpr (NB == 1) {
          if (y_new != nullptr) y_new[warp * R + r] = nv;  // half 0: warp < kW
        }
      }
    }
  }
}

}  // namespace flint::cuda::dev
