// The GEMV of a few activation rows on tensor cores (gemv.cu from kGemvMmaMinRows rows, the
// router in moe_router.cu): a block computes 16 (or 64) output rows for 8 token rows with
// mma.sync m16n8k16, its 8 warps splitting K. The activations are staged once per block as two
// or three 16-bit parts (hi + lo: ~22 mantissa bits in f16, ~16 in bf16, close to the f32 the
// CUDA-core GEMV keeps; three bf16 parts keep all 24); NVFP4 weights are decoded to exact f16
// (code x sub-scale x 2^-7), BF16 weights feed the mma as they are loaded. One dot product's chunks
// are spread over the four lanes of a quad and the k slots of the mma; any order is fine for a sum,
// as long as a and b agree. Reference: cpu::linear.   Test: tests/kernels/gemv_test.cpp
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/kernels/gemv_core.cuh"
#include "backends/cuda/kernels/mma.cuh"

namespace flint::cuda::dev {

inline constexpr int kMmaTokens = 8;  // the mma's n: activation rows per block
inline constexpr int kMmaRows = 16;   // the mma's m: output rows per block
inline constexpr int kMmaUnits = 4;   // chunk quads in flight per lane (per row), per pass

// Staged activations: element e of token row n at half n * row_halves + (e / kChunk) *
// (kChunk + 2) + e % kChunk. The pad word after each chunk and the row length (row_words % 32 ==
// kRowWords) put the 32 lanes' b-fragment loads (8 rows x 4 chunks) on 32 distinct banks.
template <DType W>
struct MmaLayout;
template <>
struct MmaLayout<DType::kNVFP4> {
  using Half = __half;
  static constexpr int kChunk = 32;    // elements per weight chunk (Chunk<kNVFP4>)
  static constexpr int kRowWords = 4;  // 17-word chunks: q x 17 = 0, 17, 2, 19 (mod 32)
};
template <>
struct MmaLayout<DType::kBF16> {
  using Half = __nv_bfloat16;
  static constexpr int kChunk = 8;
  static constexpr int kRowWords = 20;  // 5-word chunks: q x 5 = 0, 5, 10, 15 (mod 32)
};

template <DType W>
__host__ __device__ constexpr int64_t mma_row_halves(int64_t K) {
  using L = MmaLayout<W>;
  const int64_t words = K / L::kChunk * (L::kChunk / 2 + 1);
  return 2 * (words + ((L::kRowWords - words % 32) % 32 + 32) % 32);
}

// Dynamic shared memory of gemv_mma_block for rows of K elements split into kParts parts.
template <DType W, int kParts = 2>
__host__ __device__ constexpr int64_t mma_smem_bytes(int64_t K) {
  return kParts * kMmaTokens * mma_row_halves<W>(K) * 2;
}

__device__ __forceinline__ uint32_t pack_half2(__half a, __half b) {
  return uint32_t(__half_as_ushort(a)) | (uint32_t(__half_as_ushort(b)) << 16);
}
__device__ __forceinline__ uint32_t pack_bf162(__nv_bfloat16 a, __nv_bfloat16 b) {
  return uint32_t(__bfloat16_as_ushort(a)) | (uint32_t(__bfloat16_as_ushort(b)) << 16);
}

// max |norm weight| over the row, for stage_mma_rows' bound: every thread of the block gets it.
// The norm is a weight, so this runs before the PDL wait (it also brings the norm into L1 for the
// staging). Every thread of the block must call it (it synchronises).
__device__ __forceinline__ float norm_abs_max(const float* norm, int64_t K) {
  __shared__ float red[kGemvWarps];
  if (norm == nullptr) return 1.0f;
  const float4* nw = reinterpret_cast<const float4*>(norm);
  float mw = 0.0f;
  for (int64_t j = threadIdx.x; j < K / 4; j += blockDim.x) {
    const float4 w = __ldg(nw + j);
    mw = fmaxf(mw, fmaxf(fmaxf(fabsf(w.x), fabsf(w.y)), fmaxf(fabsf(w.z), fabsf(w.w))));
  }
  mw = warp_max(mw);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mw;
  __syncthreads();
  mw = 0.0f;
#pragma unroll
  for (int w = 0; w < kGemvWarps; ++w) mw = fmaxf(mw, red[w]);
  return mw;
}

// Stores 4 consecutive elements f as kParts 16-bit parts (f16 in NVFP4's layout, bf16 otherwise),
// part p at dst + p * part_stride halves, each the rounding of what the earlier parts left of f.
template <DType W, int kParts>
__device__ __forceinline__ void store_parts(typename MmaLayout<W>::Half* dst, int64_t part_stride,
                                            float (&f)[4]) {
#pragma unroll
  for (int part = 0; part < kParts; ++part) {
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + part * part_stride);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (W == DType::kNVFP4) {
        const __half h0 = __float2half_rn(f[2 * h]), h1 = __float2half_rn(f[2 * h + 1]);
        d[h] = pack_half2(h0, h1);
        f[2 * h] -= __half2float(h0);
        f[2 * h + 1] -= __half2float(h1);
      } else {
        const __nv_bfloat16 h0 = __float2bfloat16_rn(f[2 * h]);
        const __nv_bfloat16 h1 = __float2bfloat16_rn(f[2 * h + 1]);
        d[h] = pack_bf162(h0, h1);
        f[2 * h] -= __bfloat162float(h0);
        f[2 * h + 1] -= __bfloat162float(h1);
      }
    }
  }
}

// Stages token rows i < nb of x (normalised with args.norm when set) as kParts 16-bit parts (each
// the rounding of what the earlier ones left; part p at parts + p * 8 * RS): two keep ~16 (bf16)
// or ~22 (f16) mantissa bits, three (bf16) all of f32's 24. NVFP4 (f16 parts): each row is first
// multiplied by a power of two, 2^kx[i], that keeps it under 2^14 (a bound from max |x|, the
// norm's 1/rms and wmax, max |norm weight| from norm_abs_max), so no part overflows f16;
// unscale[i] = 2^-kx[i]. BF16 parts need no scaling (unscale 1).
// Warp i stages row i (xrow: its index in x) alone: its sums are warp reductions, and a 2048-float
// piece has all its loads in flight at once. A row of up to 2048 is read once and kept in
// registers from the sums to the conversion; a longer one is read twice, piece by piece. The
// block-wide version, a loop over the rows, took 6-7 us before its conversion at batch 8
// (decode_step_bench --ktrace, H200). Ends with __syncthreads().
template <DType W, int kParts>
__device__ __forceinline__ void stage_mma_rows(typename MmaLayout<W>::Half* parts, int64_t RS,
                                               const GemvArgs& a, int64_t xrow, int nb, int64_t K,
                                               float wmax, float* unscale) {
  using L = MmaLayout<W>;
  static_assert(kMmaTokens == kGemvWarps, "one warp per token row");
  constexpr int kPiece = 16;  // float4 per lane in flight: 2048 floats per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n4 = K / 4;
  const float4* nw = reinterpret_cast<const float4*>(a.norm);
  if (warp < nb) {
    const int i = warp;
    const float4* src = reinterpret_cast<const float4*>(a.x + xrow * a.x_stride);
    const bool one_piece = n4 <= 32 * kPiece;
    float4 v[kPiece];
    float ss = 0.0f, mx = 0.0f;
    for (int64_t p0 = 0; p0 < n4; p0 += 32 * kPiece) {
#pragma unroll
      for (int k = 0; k < kPiece; ++k) {
        const int64_t j = p0 + lane + 32 * k;
        v[k] = j < n4 ? src[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < kPiece; ++k) {
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        mx = fmaxf(mx,
                   fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w))));
      }
    }
    ss = warp_sum(ss);
    mx = warp_max(mx);
    const float inv = a.norm != nullptr ? rsqrtf(ss / static_cast<float>(K) + a.eps) : 1.0f;
    float mul = inv, un = 1.0f;
    if constexpr (W == DType::kNVFP4) {
      const float bound = mx * inv * wmax;
      int e = 0;
      if (bound > 0.0f && isfinite(bound)) {
        frexpf(bound, &e);  // bound < 2^e
        e = max(-100, min(100, 14 - e));
        mul = inv * exp2f(static_cast<float>(e));
        un = exp2f(static_cast<float>(-e));
      }
    }
    if (lane == 0) unscale[i] = un;
    ktrace_mark(kKtMarkA);  // warp 0's sums
    for (int64_t p0 = 0; p0 < n4; p0 += 32 * kPiece) {
      if (!one_piece) {
#pragma unroll
        for (int k = 0; k < kPiece; ++k) {
          const int64_t j = p0 + lane + 32 * k;
          if (j < n4) v[k] = src[j];
        }
      }
#pragma unroll
      for (int k = 0; k < kPiece; ++k) {
        const int64_t j = p0 + lane + 32 * k;
        if (j >= n4) continue;
        float4 x = v[k];
        if (nw != nullptr) {
          const float4 w = __ldg(nw + j);
          x.x *= w.x;
          x.y *= w.y;
          x.z *= w.z;
          x.w *= w.w;
        }
        float f[4] = {x.x * mul, x.y * mul, x.z * mul, x.w * mul};
        const int64_t e = 4 * j;
        const int64_t off = i * RS + e / L::kChunk * (L::kChunk + 2) + e % L::kChunk;
        store_parts<W, kParts>(parts + off, kMmaTokens * RS, f);
      }
    }
  }
  __syncthreads();
}

// Two E2M1 codes (nibbles at bits 0 and 16) as 2^-15 x their doubled value, an f16 pair.
__device__ __forceinline__ uint32_t e2m1x2_to_f16x2(uint32_t v) {
  return ((v & 0x00070007u) << 9) | ((v & 0x00080008u) << 12);
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, __half2 s) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), s);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// c += the chunk pair (rows m and m + 8 of the tile, chunk `chunk` of each) times the staged
// activations of token n = lane / 4, all kParts parts (x: part 0 of the token's row, the parts
// part_stride halves apart; b = 0 for n >= nb or chunk >= nc).
template <DType W, int kParts>
__device__ __forceinline__ void mma_chunk(float (&c)[4], const Chunk<W>& wa, const Chunk<W>& wb,
                                          int64_t chunk, bool live,
                                          const typename MmaLayout<W>::Half* x,
                                          int64_t part_stride) {
  using L = MmaLayout<W>;
  const int64_t base = chunk * (L::kChunk + 2);
  auto b_pair = [&](const typename MmaLayout<W>::Half* xp, int64_t e) -> uint32_t {
    return live ? *reinterpret_cast<const uint32_t*>(xp + base + e) : 0u;
  };
  if constexpr (W == DType::kNVFP4) {
    // Sub-block scales x 2^8 (exact in f16): a = code x scale x 2^-7.
    const __half2 sa[2] = {__float2half2_rn(ue4m3_half(wa.s & 0xffu) * 256.0f),
                           __float2half2_rn(ue4m3_half(wa.s >> 8) * 256.0f)};
    const __half2 sb[2] = {__float2half2_rn(ue4m3_half(wb.s & 0xffu) * 256.0f),
                           __float2half2_rn(ue4m3_half(wb.s >> 8) * 256.0f)};
    const uint32_t qa[4] = {wa.q.x, wa.q.y, wa.q.z, wa.q.w};
    const uint32_t qb[4] = {wb.q.x, wb.q.y, wb.q.z, wb.q.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      // Step i: bytes 2p, 2p + 1 of sub-block s (p = i % 4): elements 2p, 2p + 1 (low nibbles)
      // in k slots 2q, 2q + 1, and 2p + 8, 2p + 9 (high nibbles) in k slots 2q + 8, 2q + 9.
      const int s = i >> 2, p = i & 3;
      const uint32_t sel = (p & 1) ? 0x4342u : 0x4140u;
      const uint32_t va = __byte_perm(qa[2 * s + (p >> 1)], 0u, sel);
      const uint32_t vb = __byte_perm(qb[2 * s + (p >> 1)], 0u, sel);
      const uint32_t a[4] = {
          hmul2_bits(e2m1x2_to_f16x2(va), sa[s]), hmul2_bits(e2m1x2_to_f16x2(vb), sb[s]),
          hmul2_bits(e2m1x2_to_f16x2(va >> 4), sa[s]), hmul2_bits(e2m1x2_to_f16x2(vb >> 4), sb[s])};
      const int64_t e = 16 * s + 2 * p;
#pragma unroll
      for (int part = 0; part < kParts; ++part) {
        const auto* xp = x + part * part_stride;
        mma_f16(c, a, b_pair(xp, e), b_pair(xp, e + 8));
      }
    }
  } else {
    const uint32_t ra[4] = {wa.raw.x, wa.raw.y, wa.raw.z, wa.raw.w};
    const uint32_t rb[4] = {wb.raw.x, wb.raw.y, wb.raw.z, wb.raw.w};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // Step j: elements 4j, 4j + 1 in k slots 2q, 2q + 1; 4j + 2, 4j + 3 in 2q + 8, 2q + 9.
      const uint32_t a[4] = {ra[2 * j], rb[2 * j], ra[2 * j + 1], rb[2 * j + 1]};
#pragma unroll
      for (int part = 0; part < kParts; ++part) {
        const auto* xp = x + part * part_stride;
        mma_bf16(c, a, b_pair(xp, 4 * j), b_pair(xp, 4 * j + 2));
      }
    }
  }
}

template <DType W>
__device__ __forceinline__ void zero_chunk(Chunk<W>& w) {
  if constexpr (W == DType::kNVFP4) {
    w.q = make_uint4(0, 0, 0, 0);
    w.s = 0;
  } else {
    w.raw = make_uint4(0, 0, 0, 0);
  }
}

// y rows [16 TM bx, +16 TM) for token rows [8 by, +8) (dense mode of GemvArgs: x_rows, norm,
// accumulate; not experts). TM > 1 shares one staging of the activations among TM row tiles (the
// LM head's thousands of blocks would otherwise each stage them). kGated (TM 1): y = silu(A x) *
// (B x) of args.a and args.b, half the chunks in flight per matrix. (bx, by): the block's
// coordinates in this GEMV (blockIdx unless the launch runs other work too). Every thread of the
// block must call it; it performs the PDL wait itself (after requesting its first weights).
template <DType W, int TM, int kParts = 2, bool kGated = false>
__device__ __forceinline__ void gemv_mma_block(const GemvArgs& args, void* smem, int bx, int by) {
  using L = MmaLayout<W>;
  using C = Chunk<W>;
  using H = typename L::Half;
  constexpr int kWarps = kGemvWarps, kMats = kGated ? 2 : 1;
  constexpr int U = kMmaUnits / TM / kMats, kRows = kMmaRows * TM;
  static_assert(U >= 1 && U * TM * kMats == kMmaUnits, "TM must divide kMmaUnits");
  static_assert(!kGated || TM == 1, "the gated GEMV has one row tile");
  __shared__ float red[kMats][kWarps][kRows][kMmaTokens];
  __shared__ float unscale[kMmaTokens];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m = lane >> 2, q = lane & 3;
  const int64_t K = args.a.in, out = args.a.out, nc = K / L::kChunk, RS = mma_row_halves<W>(K);
  const int64_t units = (nc + 3) / 4;  // chunk quads; quad u goes to warp u % 8
  const int64_t r0 = int64_t(bx) * kRows;
  H* parts = static_cast<H*>(smem);
  // wa/wb: rows m and m + 8 of each row tile, per matrix (gate, then up when kGated).
  C wa[kMats][TM][U], wb[kMats][TM][U];
  auto load = [&](int64_t pass) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t chunk = 4 * (warp + kWarps * (pass * U + u)) + q;
#pragma unroll
      for (int mat = 0; mat < kMats; ++mat) {
        const LinearRef& w = mat == 0 ? args.a : args.b;
#pragma unroll
        for (int t = 0; t < TM; ++t) {
          zero_chunk(wa[mat][t][u]);
          zero_chunk(wb[mat][t][u]);
          const int64_t row_a = r0 + kMmaRows * t + m, row_b = row_a + 8;
          if (chunk < nc) {
            if (row_a < out) wa[mat][t][u].load(w, row_a, chunk);
            if (row_b < out) wb[mat][t][u].load(w, row_b, chunk);
          }
        }
      }
    }
  };
  load(0);  // weights do not depend on earlier kernels
  const float wmax = W == DType::kNVFP4 ? norm_abs_max(args.norm, K) : 1.0f;
  ktrace_mark(kKtWaitBegin);
  pdl_wait();
  ktrace_mark(kKtWaitEnd);
  const int g = by;
  const int64_t y_row0 = int64_t(g) * kMmaTokens;
  const int nb = min(kMmaTokens, args.num_rows - g * kMmaTokens);
  // This warp's token row (stage_mma_rows: warp i stages row i).
  int64_t xrow = 0;
  if (warp < nb) xrow = args.x_rows != nullptr ? args.x_rows[y_row0 + warp] : y_row0 + warp;
  stage_mma_rows<W, kParts>(parts, RS, args, xrow, nb, K, wmax, unscale);
  ktrace_mark(kKtMarkB);
  const H* x = parts + m * RS;
  float c[kMats][TM][4];
#pragma unroll
  for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
    for (int t = 0; t < TM; ++t) c[mat][t][0] = c[mat][t][1] = c[mat][t][2] = c[mat][t][3] = 0.0f;
  }
  const int64_t passes = (units + int64_t(kWarps) * U - 1) / (int64_t(kWarps) * U);
  for (int64_t pass = 0; pass < passes; ++pass) {
    if (pass > 0) load(pass);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t quad = warp + kWarps * (pass * U + u);
      if (quad >= units) break;
      const int64_t chunk = 4 * quad + q;
#pragma unroll
      for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
        for (int t = 0; t < TM; ++t) {
          mma_chunk<W, kParts>(c[mat][t], wa[mat][t][u], wb[mat][t][u], chunk, chunk < nc && m < nb,
                               x, kMmaTokens * RS);
        }
      }
    }
  }
  ktrace_mark(kKtMarkC);
#pragma unroll
  for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      red[mat][warp][kMmaRows * t + m][2 * q] = c[mat][t][0];
      red[mat][warp][kMmaRows * t + m][2 * q + 1] = c[mat][t][1];
      red[mat][warp][kMmaRows * t + m + 8][2 * q] = c[mat][t][2];
      red[mat][warp][kMmaRows * t + m + 8][2 * q + 1] = c[mat][t][3];
    }
  }
  __syncthreads();
  constexpr float kDecodeScale = W == DType::kNVFP4 ? 128.0f : 1.0f;
  for (int k = threadIdx.x; k < kRows * kMmaTokens; k += blockDim.x) {
    const int r = k / kMmaTokens, i = k % kMmaTokens;
    const int64_t row = r0 + r;
    if (row < out && i < nb) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += red[0][w][r][i];
      v *= unscale[i] * row_scale(args.a, row) * kDecodeScale;
      if constexpr (kGated) {
        float vu = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) vu += red[kMats - 1][w][r][i];
        v = silu(v) * (vu * unscale[i] * row_scale(args.b, row) * kDecodeScale);
      }
      float* yp = args.y + (y_row0 + i) * args.y_stride + row;
      *yp = args.accumulate ? *yp + v : v;
    }
  }
}

template <DType W, int TM, int kParts = 2, bool kGated = false>
__device__ __forceinline__ void gemv_mma_block(const GemvArgs& args, void* smem) {
  gemv_mma_block<W, TM, kParts, kGated>(args, smem, blockIdx.x, blockIdx.y);
}

}  // namespace flint::cuda::dev
