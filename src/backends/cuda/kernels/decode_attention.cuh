// Device code of the split-KV decode attention (decode_attention.cu): the (kv head, split, row)
// block body, shared with the persistent decode kernel (decode_persistent.cu), which runs it as
// one of its phases. See decode_attention.cu for the algorithm.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/decode_attention.h"
#include "backends/cuda/kernels/mma.cuh"

namespace flint::cuda::attn {

// 8 warps with 3 stages: one block per SM (192 KB of tiles at head_dim 128), two warps per
// scheduler so one's mma/softmax chain hides behind the other's.
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16;  // keys per warp tile: the K dimension of one P.V mma
constexpr int kStages = 3;     // tiles per warp in flight (2 loading while one computes)
constexpr int kMaxGroup = 8;   // query heads per kv head: the mma's 8 "high" rows
constexpr int kMinKeysPerSplit = kWarps * kTileKeys;
constexpr float kLog2e = 1.4426950408889634f;

struct AttnKernelArgs {
  const float* q;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  const __nv_bfloat16* k_step;
  const __nv_bfloat16* v_step;
  const float* sinks;
  float* out;
  float* part;  // [num_rows, H, S, D] accumulators, then [num_rows, H, S, 2] m (log2 units), l
  int32_t* counters;  // [num_rows, Hkv]
  TokenKv kv;
  DecodeAttentionArgs a;
  DecodeQkv pro;               // fused variant only
  __nv_bfloat16* k_cache_out;  // fused variant: k_cache, written at the new position
  __nv_bfloat16* v_cache_out;
};

template <int D>
constexpr int stage_bytes() {
  return 2 * kTileKeys * D * 2;  // K then V tile, bf16
}
// After the main loop each warp's stage area holds its partial, [kMaxGroup][D + 4] floats (D
// accumulators, m, l and two floats of padding, so that rows start on 16 bytes); behind warp 0's
// partial, in warp 0's stage area, lies the block's partial for a cluster merge: [kMaxGroup][D]
// accumulators, then [kMaxGroup][2] m (log2 units), l.
template <int D>
constexpr int warp_partial_row() {
  return D + 4;
}
template <int D>
constexpr int warp_stage_floats() {  // floats from one warp's stage area to the next's
  return kStages * stage_bytes<D>() / 4;
}
template <int D>
constexpr int smem_bytes() {
  return kWarps * kStages * stage_bytes<D>();
}

// How the splits of a (row, kv head) are merged: by the last block to finish, through the global
// workspace and a counter, or by the thread-block cluster of its splits (cluster dims
// (1, num_splits, 1), block rank = split) through distributed shared memory, without a global
// round trip. The persistent kernel is not launched as clusters and always merges globally.
enum class SplitMerge { kGlobal, kCluster };

// Byte offset of 16-byte chunk `c` of tile row `r` (rows of D bf16): chunks are XOR-swizzled by
// the row so the 8 rows an ldmatrix reads fall in different banks.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  constexpr int kChunks = D / 8;
  constexpr int kSw = kChunks < 8 ? kChunks : 8;
  return uint32_t(r * kChunks + (c ^ (r & (kSw - 1)))) * 16u;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

using dev::mma_bf16;  // c += a * b for one m16n8k16 bf16 tile (mma.cuh)

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}

// x = hi + lo with both bf16: the pair carries ~16 mantissa bits.
__device__ __forceinline__ void split_bf16(float x, __nv_bfloat16& hi, __nv_bfloat16& lo) {
  hi = __float2bfloat16_rn(x);
  lo = __float2bfloat16_rn(x - __bfloat162float(hi));
}

// 2^(m - M), 0 for an empty partial (m = -inf).
__device__ __forceinline__ float rescale(float m, float M) {
  return m == -INFINITY ? 0.0f : exp2f(m - M);
}

// Cache row of position p (< 2^31: 32-bit division); ring: the sequence's first ring row
// (ring_ids[seq] * window), loaded once up front on sliding layers.
__device__ __forceinline__ int64_t key_row(const TokenKv& kv, bool sliding, int64_t ring, int seq,
                                           int p) {
  if (sliding) return ring + p % kv.window;
  const int32_t page = kv.block_table[int64_t(seq) * kv.max_blocks_per_seq + p / kv.page_size];
  return int64_t(page) * kv.page_size + p % kv.page_size;
}

// Fused decode prologue (spec 2.3 steps 2-3): the block's G query heads, times `qs` (the softmax
// scale in log2 units) and split into bf16 high and low parts, into sm_qa (rows g and
// kMaxGroup + g: the mma's A operand, loaded with ldmatrix; rows of absent heads zero), its kv
// head's new K (normed, roped) and V into sm_kv (bf16); split 0 also stores them in the cache.
// One warp per head, staged in sm_x so the NeoX pairs (j, j + D/2) rotate in place; the angles
// (dev::rope_cos_sin) are the same for every head of the row, so each lane computes its own once.
// kPdl: the kernel was launched with PDL; the angles (from the step's positions, uploaded before
// the step) are computed before the wait, the projections read after it.
template <int D, bool kPdl>
__device__ void decode_prologue(const AttnKernelArgs& args, int row, int kvh, bool store, float qs,
                                __nv_bfloat16 (*sm_qa)[D + 8], __nv_bfloat16 (*sm_kv)[D],
                                float (*sm_x)[D]) {
  const DecodeQkv& pq = args.pro;
  const int H = args.a.num_heads, Hkv = args.a.num_kv_heads, G = H / Hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t pos = args.kv.positions[row];
  for (int i = threadIdx.x; i < (kMaxGroup - G) * D; i += kThreads) {  // heads G .. 7: none
    const int g = G + i / D, j = i % D;
    sm_qa[g][j] = sm_qa[kMaxGroup + g][j] = __float2bfloat16(0.0f);
  }
  constexpr int kPairs = (D / 2 + 31) / 32;  // rotation pairs per lane
  float2 rot[kPairs];
  if (pq.rope && warp < G + 1) {  // the warps that rotate a query head or K
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int j = lane + 32 * i;
      rot[i] = j < D / 2 ? dev::rope_cos_sin(pos, j, D, pq.rope_theta) : make_float2(1.0f, 0.0f);
    }
  }
  if constexpr (kPdl) {
    dev::ktrace_mark(kKtWaitBegin);
    dev::pdl_wait();  // qkv comes from the previous kernel
    dev::ktrace_mark(kKtWaitEnd);
  }
  // The warp's rows (at most kAhead: G <= kMaxGroup) are all requested before the first is used:
  // the warps with two waited on L2 twice. H200, ms per step: NVFP4 b1 1K 2.324 -> 2.316, BF16
  // 2.819 -> 2.813, every batch-1/2 configuration 0.0-0.4% faster (scripts/gpu.sh sweep).
  constexpr int kAhead = (kMaxGroup + 2 + kWarps - 1) / kWarps;
  constexpr int kPer = (D + 31) / 32;  // values per lane of a row
  auto head_of = [&](int it) {         // G query heads, then K, then V
    return it < G ? kvh * G + it : (it == G ? H + kvh : H + Hkv + kvh);
  };
  float pre[kAhead][kPer];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) {
    const int it = warp + i * kWarps;
    const float* src = pq.qkv + (int64_t(row) * (H + 2 * Hkv) + head_of(it)) * D;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int j = lane + 32 * u;
      // L2: written by another block of a persistent kernel
      pre[i][u] = it < G + 2 && j < D ? __ldcg(src + j) : 0.0f;
    }
  }
#pragma unroll
  for (int i = 0; i < kAhead; ++i) {
    const int it = warp + i * kWarps;
    if (it >= G + 2) break;
    float* x = sm_x[warp];
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int j = lane + 32 * u;
      if (j < D) {
        x[j] = pre[i][u];
        ss += x[j] * x[j];
      }
    }
    if (it <= G) {
      const float inv = rsqrtf(dev::warp_sum(ss) / static_cast<float>(D) + pq.eps);
      const float* w = it < G ? pq.q_norm : pq.k_norm;
      for (int j = lane; j < D; j += 32) x[j] = x[j] * inv * w[j];
      __syncwarp();
      if (pq.rope) {
#pragma unroll
        for (int q = 0; q < kPairs; ++q) {
          const int j = lane + 32 * q;
          if (j >= D / 2) continue;
          const float c = rot[q].x, s = rot[q].y;
          const float x0 = x[j], x1 = x[j + D / 2];
          x[j] = x0 * c - x1 * s;
          x[j + D / 2] = x1 * c + x0 * s;
        }
        __syncwarp();
      }
    }
    if (it < G) {
      for (int j = lane; j < D; j += 32)
        split_bf16(x[j] * qs, sm_qa[it][j], sm_qa[kMaxGroup + it][j]);
    } else {
      __nv_bfloat16* kv_row = sm_kv[it - G];
      for (int j = lane; j < D; j += 32) kv_row[j] = __float2bfloat16(x[j]);
      if (store) {
        const TokenKv& kv = args.kv;
        const int64_t slot = args.a.sliding  // row t is sequence t (decode_attention_fused)
                                 ? int64_t(kv.ring_ids[row]) * kv.window + pos % kv.window
                                 : int64_t(kv.slot_mapping[row]);
        __nv_bfloat16* dst =
            (it == G ? args.k_cache_out : args.v_cache_out) + (slot * Hkv + kvh) * D;
        for (int j = lane; j < D; j += 32) dst[j] = kv_row[j];
      }
    }
    __syncwarp();  // x is reused by this warp's next head
  }
}

// Run by one warp per query head: the weights 2^(m_s - M) of the S <= 64 splits into w[0 .. S) and
// 1 / Z into *inv_z, where M and Z include the sink (log2 units; -inf: none). ml(sp) returns split
// sp's (m, l) and is called by the lanes sp < S only. The global merge's; the cluster merge, of
// at most 8 splits, finds the same weights per thread (it may round z differently: the sum's
// order differs).
template <typename LoadMl>
__device__ __forceinline__ void split_weights(int S, float sink, LoadMl ml, float* w,
                                              float* inv_z) {
  static_assert(kAttentionMaxSplits <= 64, "two splits per lane");
  const int lane = threadIdx.x & 31;
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int sp = lane + 32 * h;
    if (sp < S) {
      const float2 x = ml(sp);
      m[h] = x.x;
      lsum[h] = x.y;
    }
  }
  float M = fmaxf(fmaxf(sink, m[0]), m[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  float z = lane == 0 ? rescale(sink, M) : 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int sp = lane + 32 * h;
    if (sp < S) {
      const float wt = rescale(m[h], M);
      w[sp] = wt;
      z += lsum[h] * wt;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
  if (lane == 0) *inv_z = z > 0.0f ? 1.0f / z : 0.0f;
}

// o += x * wt, component-wise.
__device__ __forceinline__ void add_weighted(float4& o, const float4& x, float wt) {
  o.x += x.x * wt;
  o.y += x.y * wt;
  o.z += x.z * wt;
  o.w += x.w * wt;
}

// SplitMerge::kCluster: the S <= kAttentionClusterMaxSplits blocks of the (row, kv head) cluster
// each left their partial in `part` (their own shared memory, same offset in every block; see
// smem_bytes) and now merge them through distributed shared memory, block `split` the
// split-th slice of the G * D / 4 output float4s. Each thread requests its float4 and its head's
// (m, l) of every split together (one DSMEM wait) and finds the split weights itself: no warp
// phase and no block barrier for them. Before, one warp per head computed the weights
// (split_weights, as the global merge still does) and a block barrier published them: NVFP4 b1 1K
// 1.918 -> 1.892 ms, BF16 2.361 -> 2.326, every batch-1/2 configuration 0.3-1.5% faster (H200,
// scripts/gpu.sh sweep, three rounds). Every thread of every block of the cluster calls it (it
// holds two cluster barriers).
template <int D>
__device__ __forceinline__ void cluster_merge(const AttnKernelArgs& args, int kvh, int split,
                                              int64_t head0, const float* part) {
  namespace cg = cooperative_groups;
  constexpr int kVecs = D / 4;  // output float4s per query head
  static_assert(kMaxGroup * kVecs <= kThreads, "one output float4 per thread");
  const cg::cluster_group cluster = cg::this_cluster();
  const int S = args.a.num_splits, G = args.a.num_heads / args.a.num_kv_heads;
  const int per_block = (G * kVecs + S - 1) / S;
  const int idx = split * per_block + int(threadIdx.x);  // float4 of [G][D]: head idx / kVecs
  const bool mine = int(threadIdx.x) < per_block && idx < G * kVecs;
  const int g = mine ? idx / kVecs : 0;
  const float sink = mine && args.sinks != nullptr ? args.sinks[kvh * G + g] * kLog2e : -INFINITY;
  // Release / acquire: every block's partial, written by its own threads, is visible to all.
  cluster.sync();
  float4 x[kAttentionClusterMaxSplits];
  float2 ml[kAttentionClusterMaxSplits];  // split s's (m, l) of head g
#pragma unroll
  for (int s = 0; s < kAttentionClusterMaxSplits; ++s) {
    x[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ml[s] = make_float2(-INFINITY, 0.0f);
    if (mine && s < S) {  // ranks past S do not exist: not even mapped
      const float* p = cluster.map_shared_rank(part, s);
      x[s] = reinterpret_cast<const float4*>(p)[idx];
      ml[s] = *reinterpret_cast<const float2*>(p + kMaxGroup * D + 2 * g);
    }
  }
  float M = sink;
#pragma unroll
  for (int s = 0; s < kAttentionClusterMaxSplits; ++s) M = fmaxf(M, ml[s].x);
  float z = rescale(sink, M);
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int s = 0; s < kAttentionClusterMaxSplits; ++s) {
    const float wt = rescale(ml[s].x, M);  // 0 for the absent splits (m = -inf)
    z += ml[s].y * wt;
    add_weighted(o, x[s], wt);
  }
  const float iz = z > 0.0f ? 1.0f / z : 0.0f;
  // Every remote value this block reads has been used, so a relaxed arrival may go now; the wait
  // keeps this block's shared memory alive until the other blocks have read it too.
  dev::cluster_arrive_relaxed();
  if (mine) {
    reinterpret_cast<float4*>(args.out + head0 * D)[idx] =
        make_float4(o.x * iz, o.y * iz, o.z * iz, o.w * iz);
  }
  dev::cluster_wait();
}

// The work of one (kv head, split, row) block; every thread of the block calls it. smem: at least
// smem_bytes<D>() bytes, 128-byte aligned. num_rows: the rows of the launch (partials layout).
// Activations (the fused variant's qkv) are read through L2, so a persistent kernel may call it
// after other blocks wrote them in the same launch. kPdl (the kernel was launched with PDL): the
// fused variant requests its first K/V tiles of the cache, written by earlier steps, and computes
// the RoPE angles before the PDL wait, so they overlap the qkv projection's tail; the unfused
// variant, which may read this step's k_step/v_step, waits first.
template <int D, bool kFused, SplitMerge kMerge, bool kPdl = false>
__device__ __forceinline__ void attention_block(const AttnKernelArgs& args, int kvh, int split,
                                                int row, int num_rows, unsigned char* smem) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per key row
  __shared__ float sm_w[kMaxGroup][kAttentionMaxSplits];
  __shared__ float sm_inv_z[kMaxGroup];
  __shared__ int sm_last;
  // Fused variant: the prologue's results.
  // The query heads as the mma's A operand: rows 0..7 the bf16 high parts, rows 8..15 the lows
  // (row stride D + 8: ldmatrix's eight rows fall in different banks).
  __shared__ __align__(16) __nv_bfloat16 sm_qa[kFused ? 2 * kMaxGroup : 1][D + 8];
  __shared__ float sm_x[kFused ? kWarps : 1][D];
  __shared__ __align__(16) __nv_bfloat16 sm_kv[2][D];

  // griddepcontrol.launch_dependents only with a.early_dependents (after the fused prologue):
  // otherwise the next kernel (the o projection) launches when this grid exits. Letting it launch
  // at the start made the step slower (NVFP4 batch 1: 2.41 against 2.30 ms; decode_step_bench on
  // the H200, docs/PERFORMANCE.md, fifth session); after the prologue it pays for the one-token
  // o projection (seventeenth session: BF16; twenty-ninth: NVFP4 too, once the o blocks let the
  // kernel after them launch only after their own wait; forward.cpp).
  if constexpr (kPdl && !kFused) {
    dev::ktrace_mark(kKtWaitBegin);
    dev::pdl_wait();
    dev::ktrace_mark(kKtWaitEnd);
  }
  const int Hkv = args.a.num_kv_heads, H = args.a.num_heads, S = args.a.num_splits;
  const int G = H / Hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gr = lane >> 2, qd = lane & 3;  // mma fragment row (query head) and column pair
  const TokenKv& kv = args.kv;
  const bool sliding = args.a.sliding;
  // A decode step (the fused variant) has one token per sequence: row t is sequence t and its
  // only new key is at pos. Skipping those lookups, and loading the ring id next to the position,
  // shortens the chain of dependent loads before the first K/V tile is requested from three round
  // trips to one (sliding layers) or two (full layers: the block table entry needs the position).
  const int seq = kFused ? row : kv.seq_idx[row];
  const int64_t pos = kv.positions[row];
  const int64_t ring = sliding ? int64_t(kv.ring_ids[seq]) * kv.window : 0;
  const int64_t first = sliding ? max(int64_t(0), pos - kv.window + 1) : 0;
  const int64_t count = pos - first + 1;
  const int64_t per_split = ((count + S - 1) / S + kTileKeys - 1) & ~int64_t(kTileKeys - 1);
  const int64_t begin = first + split * per_split;
  const int64_t end = min(first + count, begin + per_split);
  const int32_t q_start = kFused ? row : kv.query_start_loc[seq];
  const int64_t first_new =
      kFused ? pos : kv.seq_lens[seq] - (kv.query_start_loc[seq + 1] - q_start);

  const int64_t num_keys = end > begin ? end - begin : 0;
  const int num_tiles = static_cast<int>((num_keys + kTileKeys - 1) / kTileKeys);
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
  const uint32_t wsm = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) +
                       uint32_t(warp * kStages * stage_bytes<D>());

  // Tile j of this warp: keys begin + (warp + j * kWarps) * 16 ...; missing keys are zero-filled.
  // lookup(j): lane l finds the cache row of the tile's key l % 16 (one block-table read per
  // lane). issue(j, rows): each cp.async instruction copies whole key rows, lanes 0 .. kChunks-1
  // one row's 16-byte chunks in order, the row offsets shuffled from the lanes that looked them
  // up, so every request covers full 128-byte lines. A lane per key with two chunks per
  // instruction (each request 32 bytes of 16 lines) streamed 2.97 GB of cache at 100K in 1.19 ms
  // per step; whole rows, with each lookup made one tile ahead, in 0.92 ms (docs/PERFORMANCE.md).
  struct TileRows {
    int64_t off = 0;  // element offset of this lane's key row in the K (and V) tensor
    int flags = 0;    // bit 0: the key exists (else zero-filled); bit 1: it is in k_step/v_step
  };
  auto lookup = [&](int j) {
    TileRows t;
    if (j < my_tiles) {
      const int64_t p = begin + int64_t(warp + j * kWarps) * kTileKeys + (lane & (kTileKeys - 1));
      // Fused: the new key is not in the cache for every block yet; it is patched in from sm_kv.
      if (p < end && !(kFused && p == pos)) {
        const bool in_step = p >= first_new;
        const int64_t kr = in_step ? q_start + (p - first_new)
                                   : key_row(kv, sliding, ring, seq, static_cast<int>(p));
        t.off = (kr * Hkv + kvh) * D;
        t.flags = in_step ? 3 : 1;
      }
    }
    return t;
  };
  auto issue = [&](int j, const TileRows& t) {
    if (j < my_tiles) {
      const uint32_t st = wsm + uint32_t((j % kStages) * stage_bytes<D>());
      constexpr int kRowsPerOp = 32 / kChunks;
#pragma unroll
      for (int i = 0; i < kTileKeys / kRowsPerOp; ++i) {
        const int r = i * kRowsPerOp + lane / kChunks, ch = lane % kChunks;
        const int64_t off = __shfl_sync(0xffffffffu, t.off, r);
        const int flags = __shfl_sync(0xffffffffu, t.flags, r);
        const bool step = (flags & 2) != 0;
        cp_async16(st + swz<D>(r, ch), (step ? args.k_step : args.k_cache) + off + ch * 8,
                   flags & 1);
        cp_async16(st + uint32_t(kTileKeys * D * 2) + swz<D>(r, ch),
                   (step ? args.v_step : args.v_cache) + off + ch * 8, flags & 1);
      }
    }
    cp_async_commit();  // empty groups keep the wait count uniform
  };

  float m = -INFINITY, l = 0.0f;  // running max (log2 units) and this lane's part of the sum
  float oacc[D / 8][4];
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb) oacc[nb][0] = oacc[nb][1] = oacc[nb][2] = oacc[nb][3] = 0.0f;

#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) issue(j, lookup(j));
  if constexpr (kFused) {
    decode_prologue<D, kPdl>(args, row, kvh, split == 0, args.a.scale * kLog2e, sm_qa, sm_kv, sm_x);
    // After the prologue's PDL wait: the qkv projection has finished, so the early blocks of the
    // next kernel take no SM slot its second wave needed.
    if (kPdl && args.a.early_dependents) dev::pdl_launch_dependents();
    __syncthreads();
    if constexpr (kPdl) dev::ktrace_mark(kKtMarkA);
  }
  // Q fragments, pre-scaled into log2 units: rows 0..7 the bf16 high parts, rows 8..15 the lows.
  // Fused: the prologue left them in sm_qa, one ldmatrix per 16 channels (the lanes' rows: 0..15,
  // then 0..15 again 8 channels on).
  uint32_t qa[D / 16][4];
  if constexpr (kFused) {
    const uint32_t q0 = static_cast<uint32_t>(__cvta_generic_to_shared(&sm_qa[lane & 15][0])) +
                        uint32_t((lane >> 4) * 16);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qa[ks], q0 + uint32_t(ks * 32));
  } else {
    const float qs = args.a.scale * kLog2e;
    const float* qp = args.q + (int64_t(row) * H + kvh * G + gr) * D + 2 * qd;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      __nv_bfloat16 hi[4], lo[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float x = gr < G ? qp[ks * 16 + (i & 1) + (i >> 1) * 8] * qs : 0.0f;
        split_bf16(x, hi[i], lo[i]);
      }
      qa[ks][0] = pack_bf16(hi[0], hi[1]);
      qa[ks][1] = pack_bf16(lo[0], lo[1]);
      qa[ks][2] = pack_bf16(hi[2], hi[3]);
      qa[ks][3] = pack_bf16(lo[2], lo[3]);
    }
  }

  TileRows ahead = lookup(kStages - 1);
  for (int j = 0; j < my_tiles; ++j) {
    issue(j + kStages - 1, ahead);
    ahead = lookup(j + kStages);  // its block-table read overlaps this tile's math
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint32_t kt = wsm + uint32_t((j % kStages) * stage_bytes<D>());
    const uint32_t vt = kt + uint32_t(kTileKeys * D * 2);
    const int64_t key0 = begin + int64_t(warp + j * kWarps) * kTileKeys;
    if constexpr (kFused) {
      if (pos - key0 == (lane & (kTileKeys - 1))) {  // this lane's key is the new one
        const int r = lane & (kTileKeys - 1);
        unsigned char* tile = smem + (kt - static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
#pragma unroll
        for (int i = 0; i < kChunks / 2; ++i) {
          const int ch = (lane >> 4) + 2 * i;
          *reinterpret_cast<uint4*>(tile + swz<D>(r, ch)) =
              reinterpret_cast<const uint4*>(sm_kv[0])[ch];
          *reinterpret_cast<uint4*>(tile + kTileKeys * D * 2 + swz<D>(r, ch)) =
              reinterpret_cast<const uint4*>(sm_kv[1])[ch];
        }
      }
      __syncwarp();
    }

    // S = Q K^T: columns are the tile's keys, 8 per mma (key blocks 0 and 1); even and odd
    // k-steps accumulate apart to halve the dependent mma chain.
    float sacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float sodd[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t b[4];
      ldmatrix_x4(b, kt + swz<D>((lane >> 4) * 8 + (lane & 7), 2 * ks + ((lane >> 3) & 1)));
      float(&acc)[2][4] = ks % 2 == 0 ? sacc : sodd;
      mma_bf16(acc[0], qa[ks], b[0], b[1]);
      mma_bf16(acc[1], qa[ks], b[2], b[3]);
    }
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sacc[kb][i] += sodd[kb][i];
    }
    float sc[2][2];
    float mx = -INFINITY;
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = key0 + kb * 8 + 2 * qd + e < end;
        sc[kb][e] = valid ? sacc[kb][e] + sacc[kb][2 + e] : -INFINITY;
        mx = fmaxf(mx, sc[kb][e]);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);  // finite: a tile holds at least one valid key
    const float corr = rescale(m, m_new);
    m = m_new;
    l *= corr;
    uint32_t pa[4];
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
      __nv_bfloat16 hi[2], lo[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = exp2f(sc[kb][e] - m_new);
        l += p;
        split_bf16(p, hi[e], lo[e]);
      }
      pa[2 * kb] = pack_bf16(hi[0], hi[1]);
      pa[2 * kb + 1] = pack_bf16(lo[0], lo[1]);
    }
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) oacc[nb][i] *= corr;
    }
    // O += P V: P's A fragment is exactly the S accumulator layout.
#pragma unroll
    for (int nb = 0; nb < D / 8; nb += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vt + swz<D>(((lane >> 3) & 1) * 8 + (lane & 7), nb + (lane >> 4)));
      mma_bf16(oacc[nb], pa, b[0], b[1]);
      mma_bf16(oacc[nb + 1], pa, b[2], b[3]);
    }
    __syncwarp();  // the next issue() overwrites this stage
  }
  cp_async_wait<0>();
  if constexpr (kPdl) dev::ktrace_mark(kKtMarkB);
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  // Merge the warps. Each warp's partial goes to its own stage area (warp_stage_floats apart:
  // [kMaxGroup][kRow] floats, D accumulators, m, l, padding), so no block barrier is needed
  // before it is written, and every thread finds its head's max and the warps' weights itself.
  // Before, the partials shared the start of the stages (a barrier before they were written) and
  // the weights had a phase of their own (another barrier): NVFP4 b1 1K 1.935 -> 1.924 ms, every
  // batch 1/2/8 configuration 0.1-0.7% faster (H200, scripts/gpu.sh sweep, three rounds).
  constexpr int kRow = warp_partial_row<D>();
  constexpr int kWs = warp_stage_floats<D>();
  static_assert(kWs >= kMaxGroup * (kRow + D + 2),
                "warp 0's stages hold its and the block's partial");
  __syncwarp();  // every lane's copies into this warp's stages have landed
  float* mg = reinterpret_cast<float*>(smem);
  {
    float* mw = mg + warp * kWs + gr * kRow;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      mw[nb * 8 + 2 * qd] = oacc[nb][0] + oacc[nb][2];
      mw[nb * 8 + 2 * qd + 1] = oacc[nb][1] + oacc[nb][3];
    }
    if (qd == 0) {
      mw[D] = m;
      mw[D + 1] = l;
    }
  }
  __syncthreads();
  const int64_t head0 = int64_t(row) * H + kvh * G;
  float* part_ml = args.part + int64_t(num_rows) * H * S * D;
  // SplitMerge::kCluster: this block's partial, read by the cluster (see smem_bytes).
  float* block_part = mg + kMaxGroup * kRow;
  // Four channels per thread: the same products, added in the same order, as one per thread.
  constexpr int kVecs = D / 4;
  for (int idx = threadIdx.x; idx < G * kVecs; idx += kThreads) {
    const int g = idx / kVecs, d = idx % kVecs * 4;
    // The head's max over the warps, their weights and the head's sum (the same products, added
    // in the same order, in every thread of the head).
    float mv[kWarps], wt[kWarps];
    float M = -INFINITY;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      mv[v] = mg[v * kWs + g * kRow + D];
      M = fmaxf(M, mv[v]);
    }
    float L = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      wt[v] = rescale(mv[v], M);
      L += mg[v * kWs + g * kRow + D + 1] * wt[v];
    }
    float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      add_weighted(A, *reinterpret_cast<const float4*>(mg + w * kWs + g * kRow + d), wt[w]);
    }
    if (S == 1) {
      const float sink = args.sinks != nullptr ? args.sinks[kvh * G + g] * kLog2e : -INFINITY;
      const float Mf = fmaxf(M, sink);
      const float r = rescale(M, Mf);
      const float z = L * r + rescale(sink, Mf);
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (z > 0.0f) o = make_float4(A.x * r / z, A.y * r / z, A.z * r / z, A.w * r / z);
      *reinterpret_cast<float4*>(args.out + (head0 + g) * D + d) = o;
    } else if constexpr (kMerge == SplitMerge::kCluster) {
      *reinterpret_cast<float4*>(block_part + g * D + d) = A;
      if (d == 0) {
        block_part[kMaxGroup * D + 2 * g] = M;
        block_part[kMaxGroup * D + 2 * g + 1] = L;
      }
    } else {
      *reinterpret_cast<float4*>(args.part + ((head0 + g) * S + split) * D + d) = A;
      if (d == 0) {
        part_ml[((head0 + g) * S + split) * 2] = M;
        part_ml[((head0 + g) * S + split) * 2 + 1] = L;
      }
    }
  }
  if constexpr (kPdl) dev::ktrace_mark(kKtMarkC);
  if (S == 1) return;
  if constexpr (kMerge == SplitMerge::kCluster) {
    cluster_merge<D>(args, kvh, split, head0, block_part);
    return;
  }

  // Last block of this (row, kv head) merges the S partials (threadFenceReduction pattern).
  __threadfence();
  __syncthreads();
  int32_t* counter = args.counters + int64_t(row) * Hkv + kvh;
  if (threadIdx.x == 0) sm_last = atomicAdd(counter, 1) == S - 1;
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  // The first kPre partials of this thread's first output chunk are requested now, together with
  // the m/l pairs (each read once), so the merge waits on L2 once instead of three times.
  constexpr int kPre = 8;
  const bool pre_ok = int(threadIdx.x) < G * (D / 4);
  float4 pre[kPre];
  {
    const int g = pre_ok ? int(threadIdx.x) / (D / 4) : 0, d4 = int(threadIdx.x) % (D / 4);
    const float4* pp = reinterpret_cast<const float4*>(args.part + (head0 + g) * S * D) + d4;
#pragma unroll
    for (int s = 0; s < kPre; ++s) {
      pre[s] = pre_ok && s < S ? __ldcg(pp + s * (D / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  if (warp < G) {  // one warp per query head: the split weights and 1 / Z
    const int g = warp;
    const float* ml = part_ml + (head0 + g) * S * 2;
    const float sink = args.sinks != nullptr ? args.sinks[kvh * G + g] * kLog2e : -INFINITY;
    split_weights(
        S, sink, [&](int sp) { return make_float2(__ldcg(ml + 2 * sp), __ldcg(ml + 2 * sp + 1)); },
        sm_w[g], &sm_inv_z[g]);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * (D / 4); idx += kThreads) {
    const int g = idx / (D / 4), d4 = idx % (D / 4);
    const float4* pp = reinterpret_cast<const float4*>(args.part + (head0 + g) * S * D) + d4;
    const bool first = idx == int(threadIdx.x);  // pre holds its splits 0 .. kPre - 1
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto add = [&](const float4& x, int s) { add_weighted(o, x, sm_w[g][s]); };
#pragma unroll
    for (int s = 0; s < kPre; ++s) {
      if (s < S) add(first ? pre[s] : __ldcg(pp + s * (D / 4)), s);
    }
#pragma unroll 8
    for (int s = kPre; s < S; ++s) add(__ldcg(pp + s * (D / 4)), s);
    const float iz = sm_inv_z[g];
    reinterpret_cast<float4*>(args.out + (head0 + g) * D)[d4] =
        make_float4(o.x * iz, o.y * iz, o.z * iz, o.w * iz);
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch (graph replays included)
}

}  // namespace flint::cuda::attn
