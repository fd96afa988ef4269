// The GEMV of one or two activation rows on tensor cores (gemv.cu's narrow path; gemv.h's
// kNarrowDefault says where it runs). A block computes 16 output rows with mma.sync m16n8k16, its
// warps splitting K; the weights are the mma's A, read from the layout every GEMV reads
// (gemv_mma.cuh's mma_chunk: one dot product's chunks spread over the four lanes of a quad and the
// k slots of the mma). The activations are B: token i's row, split into kParts 16-bit parts (NVFP4:
// f16 hi and lo, ~22 bits, scaled by a power of two into f16's range; BF16: three bf16 parts, all
// 24 bits of f32), fills columns kParts i .. kParts i + kParts - 1, so ONE mma per 16x16 weight
// tile serves every part of both tokens, where the CUDA-core GEMV repeats its FMAs per token. At
// one token it does not pay (docs/PERFORMANCE.md, thirty-seventh session): an NVFP4 weight still
// costs its decode (the qkv projection's mma loop is 585 instructions a lane for 16 mma,
// scripts/sass-mix.sh), and with BF16's qkv projection on it the moe_down before it ended 2.6 us
// later (--ktrace), for 0.2 us saved in the projection. gemv_mma.cuh's kernel (8 token rows a
// block, a warp staging each row, one mma per part) serves 3+ rows.
// Reference: cpu::linear.   Test: tests/kernels/gemv_test.cpp
#pragma once

#include "backends/cuda/kernels/gemv_mma.cuh"

namespace flint::cuda::dev {

inline constexpr int kNarrowMaxTokens = 2;

// Float4s of each token row a lane stages (and keeps in registers until converted), one a round of
// 32 lanes over the warp's quads: NVFP4 one quad a round, as many as a pass holds (U, one pass);
// BF16 four quads a round, two rounds (at most two passes of four).
template <DType W, int U>
__host__ __device__ constexpr int narrow_rounds() {
  return W == DType::kNVFP4 ? U : 2;
}

template <DType W>
__host__ __device__ constexpr int narrow_parts() {
  return W == DType::kNVFP4 ? 2 : 3;
}

// Dynamic shared memory of narrow_block: the parts of NB token rows.
template <DType W, int NB>
__host__ __device__ constexpr int64_t narrow_smem_bytes(int64_t K) {
  return int64_t(narrow_parts<W>()) * NB * mma_row_halves<W>(K) * 2;
}

// Chunk quads (4 chunks of each of the 16 rows: 128 NVFP4 or 32 BF16 elements of K) in a row of K,
// and the passes narrow_block<W, NB, U, kWarps> takes over them.
template <DType W>
__host__ __device__ constexpr int64_t narrow_units(int64_t K) {
  return (K / MmaLayout<W>::kChunk + 3) / 4;
}
template <DType W>
__host__ __device__ constexpr int64_t narrow_passes(int64_t K, int U, int warps) {
  return (narrow_units<W>(K) + int64_t(warps) * U - 1) / (int64_t(warps) * U);
}

// Whether narrow_block<W, NB, U, kWarps> serves rows of K elements: a lane stages its warp's share
// of a row in narrow_rounds float4s.
template <DType W, int U, int kWarps>
__host__ __device__ constexpr bool narrow_serves(int64_t K) {
  constexpr int kQuadF4 = MmaLayout<W>::kChunk;  // float4s a quad: 4 chunks x kChunk / 4
  constexpr int kQuadsPerRound = 32 / kQuadF4;
  const int64_t quads = narrow_passes<W>(K, U, kWarps) * U;
  return K > 0 && K % MmaLayout<W>::kChunk == 0 && K / 4 < (int64_t(1) << 30) &&
         (quads + kQuadsPerRound - 1) / kQuadsPerRound <= narrow_rounds<W, U>();
}

// y rows [16 blockIdx.x, +16) for the nb = min(NB, num_rows) token rows of args (dense mode of
// GemvArgs: x (row i, or x_rows[i]), norm, accumulate; one matrix, not gated, not experts). kWarps
// warps split K: lane (m, q) of warp w holds chunks 4 (w + kWarps t) + q of rows m and m + 8 (quad
// t of the warp), U quads a pass; NVFP4 launches take every quad in one pass (all the weights
// requested before the PDL wait), BF16's later passes are requested into L2 before the wait.
// Each warp stages the activations of its own quads (no block barrier before the mma): token i's
// part p is row kParts i + p of the staged parts, each part the rounding of what the earlier ones
// left of v = x (times the norm weight), NVFP4's f16 parts times the power of two that keeps the
// warp's largest |v| under 2^14 (its inverse multiplies the warp's sums). The warps' sums meet in
// shared memory (one barrier), with their sums of squares for the norm's 1 / rms. Every thread of
// the block must call it; it performs the PDL wait itself.
template <DType W, int NB, int U, int kWarps>
__device__ __forceinline__ void narrow_block(const GemvArgs& args, void* smem) {
  using L = MmaLayout<W>;
  using C = Chunk<W>;
  using H = typename L::Half;
  constexpr int kParts = narrow_parts<W>(), kCols = kParts * NB;
  constexpr int kQuadF4 = L::kChunk, kQuadsPerRound = 32 / kQuadF4;
  constexpr int kRounds = narrow_rounds<W, U>();
  constexpr bool kFp4 = W == DType::kNVFP4;
  static_assert(kCols <= 8, "narrow_block: the mma has 8 columns");
  static_assert(NB >= 1 && NB <= kNarrowMaxTokens, "narrow_block: 1-2 token rows");
  __shared__ float red[kWarps][kMmaRows][kCols];
  __shared__ float red_ss[kWarps][NB];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, m = lane >> 2, q = lane & 3;
  const int64_t K = args.a.in, out = args.a.out, nc = K / L::kChunk, RS = mma_row_halves<W>(K);
  const int64_t units = narrow_units<W>(K);  // quad u goes to warp u % kWarps
  const int64_t passes = narrow_passes<W>(K, U, kWarps);
  const int64_t r0 = int64_t(blockIdx.x) * kMmaRows, row_a = r0 + m, row_b = row_a + 8;
  C wa[U], wb[U];  // rows m and m + 8 of the tile
  auto load = [&](int64_t pass) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t chunk = 4 * (warp + kWarps * (pass * U + u)) + q;
      zero_chunk(wa[u]);
      zero_chunk(wb[u]);
      if (chunk < nc) {
        if (row_a < out) wa[u].load(args.a, row_a, chunk);
        if (row_b < out) wb[u].load(args.a, row_b, chunk);
      }
    }
  };
  load(0);  // weights do not depend on earlier kernels
  if constexpr (!kFp4) {
    // The chunks of later passes, [first, nc) of each of the 16 rows, into L2: thread t requests
    // every (threads / 16)-th line of row t % 16. (Without these requests BF16's one-row qkv
    // projection measured the same: 2.111 against 2.109 ms, H100, 40 layers.)
    const int64_t first = int64_t(4) * kWarps * U;
    if (passes > 1 && r0 + tid % kMmaRows < out) {
      l2_lines(static_cast<const uint8_t*>(args.a.w) + (r0 + tid % kMmaRows) * nc * 16, first * 16,
               nc * 16, tid / kMmaRows, kWarps * 32 / kMmaRows);
    }
  }
  // The float4s this lane stages: round r covers quad t = r kQuadsPerRound + lane / kQuadF4 of the
  // warp, float4 lane % kQuadF4 of it; their norm weights are loaded before the wait.
  const int n4 = static_cast<int>(K / 4);
  const int rounds = static_cast<int>((passes * U + kQuadsPerRound - 1) / kQuadsPerRound);
  int f4[kRounds];  // -1: nothing to stage
  float4 g[kRounds];
  const float4* nw = reinterpret_cast<const float4*>(args.norm);
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int quad = warp + kWarps * (r * kQuadsPerRound + lane / kQuadF4);
    f4[r] = r < rounds && quad < units ? quad * kQuadF4 + lane % kQuadF4 : n4;
    if (f4[r] >= n4) f4[r] = -1;
    g[r] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (nw != nullptr && f4[r] >= 0) g[r] = __ldg(nw + f4[r]);
  }
  ktrace_mark(kKtWaitBegin);
  pdl_wait();
  ktrace_mark(kKtWaitEnd);
  if (args.trigger_after_wait) pdl_launch_dependents();
  const int nb = min(NB, args.num_rows);
  // The epilogue's thread for (row r, token i) reads y's old value now (the residual stream).
  const int er = tid / NB, ei = tid % NB;
  const bool epi = tid < kMmaRows * NB && r0 + er < out && ei < nb;
  float y_old = 0.0f;
  if (epi && args.accumulate) y_old = __ldcg(args.y + int64_t(ei) * args.y_stride + r0 + er);
  // Stage: every load first, then the warp's sums, then the parts.
  H* parts = static_cast<H*>(smem);
  float4 v[NB][kRounds];
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const int64_t xr = i < nb ? (args.x_rows != nullptr ? args.x_rows[i] : i) : 0;
    const float4* src = reinterpret_cast<const float4*>(args.x + xr * args.x_stride);
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      v[i][r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < nb && f4[r] >= 0) v[i][r] = src[f4[r]];
    }
  }
  float mul[NB], unscale[NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    float ss = 0.0f, mx = 0.0f;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      float4& a = v[i][r];
      ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
      a.x *= g[r].x;
      a.y *= g[r].y;
      a.z *= g[r].z;
      a.w *= g[r].w;
      if constexpr (kFp4) {
        mx = fmaxf(mx, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))));
      }
    }
    ss = warp_sum(ss);
    if (lane == 0) red_ss[warp][i] = ss;
    mul[i] = unscale[i] = 1.0f;
    if constexpr (kFp4) {
      mx = warp_max(mx);
      if (mx > 0.0f && isfinite(mx)) {
        int e = 0;
        frexpf(mx, &e);  // mx < 2^e
        e = max(-100, min(100, 14 - e));
        mul[i] = exp2f(static_cast<float>(e));
        unscale[i] = exp2f(static_cast<float>(-e));
      }
    }
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (f4[r] < 0 || i >= nb) continue;
      float f[4] = {v[i][r].x * mul[i], v[i][r].y * mul[i], v[i][r].z * mul[i], v[i][r].w * mul[i]};
      const int e = 4 * f4[r];
      const int64_t off = e / L::kChunk * (L::kChunk + 2) + e % L::kChunk;
      store_parts<W, kParts>(parts + kParts * i * RS + off, RS, f);
    }
  }
  __syncwarp();  // the warp reads only what it staged
  ktrace_mark(kKtMarkB);
  const H* xm = parts + m * RS;
  const bool lane_live = m < kParts * nb;
  // Two accumulators, alternating by quad: each mma waits for the one before it on the same
  // accumulator.
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  for (int64_t pass = 0; pass < passes; ++pass) {
    if (pass > 0) load(pass);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t quad = warp + kWarps * (pass * U + u);
      if (quad >= units) break;
      const int64_t chunk = 4 * quad + q;
      mma_chunk<W, 1>(acc[u & 1], wa[u], wb[u], chunk, chunk < nc && lane_live, xm, 0);
    }
  }
  ktrace_mark(kKtMarkC);
  // Lane (m, q) holds columns 2q, 2q + 1 (token (2q + j) / kParts) of rows m and m + 8.
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int col = 2 * q + j;
    if (col < kCols) {
      const float un = unscale[col / kParts < NB ? col / kParts : 0];
      red[warp][m][col] = (acc[0][j] + acc[1][j]) * un;
      red[warp][m + 8][col] = (acc[0][2 + j] + acc[1][2 + j]) * un;
    }
  }
  __syncthreads();
  if (!epi) return;
  // The warps' sums of each part as a tree (fixed order), the low parts first; the row's sum of
  // squares likewise.
  auto tree = [](float(&t)[kWarps]) {
#pragma unroll
    for (int step = 1; step < kWarps; step *= 2) {
#pragma unroll
      for (int w = 0; w + step < kWarps; w += 2 * step) t[w] += t[w + step];
    }
    return t[0];
  };
  float s = 0.0f;
#pragma unroll
  for (int p = kParts - 1; p >= 0; --p) {
    float t[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t[w] = red[w][er][kParts * ei + p];
    s += tree(t);
  }
  float inv = 1.0f;
  if (args.norm != nullptr) {
    float t[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t[w] = red_ss[w][ei];
    inv = rsqrtf(tree(t) / static_cast<float>(K) + args.eps);
  }
  constexpr float kDecodeScale = kFp4 ? 128.0f : 1.0f;
  const float v0 = s * (inv * kDecodeScale) * row_scale(args.a, r0 + er);
  const float nv = args.accumulate ? y_old + v0 : v0;
  args.y[int64_t(ei) * args.y_stride + r0 + er] = nv;
}

}  // namespace flint::cuda::dev
