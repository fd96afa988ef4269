// Prefill attention, flash-attention style. A block owns a set of (query, head) rows of one KV head
// (rows / G queries x the G query heads sharing that KV head) and streams 64-key K/V tiles through
// shared memory (cp.async), computing S = Q K^T and O += P V on the tensor cores (bf16 in, f32
// accumulate) and keeping the softmax online in f32, the sink folded in as the initial running
// max. Two kernels: at head_dim 128 (Flint's) the Hopper one, wgmma in three consumer warpgroups
// of 64 rows fed by a producer warpgroup, one block per SM; for other head dims (and A/B timing)
// the mma.sync one, 4 warps of 64 or 128 rows.
// Reference: backends/cpu/ops/attention.cpp
// Test: tests/kernels/prefill_attention_test.cpp
#include <cmath>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/prefill_attention.h"
#include "backends/cuda/kernels/wgmma.cuh"

namespace flint::cuda {
namespace {

// (query, head) rows per block: kWarps x 16 x kMt. Every block streams all of its keys from L2, so
// the K/V traffic is (rows of the step / rows per block) x keys: with 64-row blocks the last chunks
// of a 100K-token prefill read an estimated 3 TB of K/V each from L2 (130 TFLOP/s measured), so the
// mma.sync kernel's default is 128 (PrefillAttentionArgs::rows_per_block), 4 warps of two m-tiles:
// 8 warps of one m-tile took 601 ms for the 14 full layers of a 100K prompt's last 4K chunk, 4
// warps of two 494 ms (2 blocks per SM at 255 registers), 8 warps of two 499 ms, 32-key tiles 540
// ms; then the scale in the exponent's FMA and O rescaled only when a row's max moves 440 ms (a few
// registers spill, and it wins anyway; H200, eighth session). 64-row blocks are 4 warps of one
// m-tile.
constexpr float kLog2e = 1.4426950408889634f;

// 2^x (MUFU ex2, flushing denormals); -inf gives 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int D, int kRows, int kKeys>
constexpr int smem_bytes() {
  return (kRows + 4 * kKeys) * (D + 8) * 2;
}

struct Params {
  float* out;
  const float* q;
  const __nv_bfloat16 *k_cache, *v_cache, *k_step, *v_step;
  const float* sinks;
  TokenKv kv;
  int num_seqs;
  int num_heads, num_kv_heads;
  float scale_log2;
  bool sliding;
  int page_shift;  // log2(kv.page_size) when it is a power of two, else -1 (divisions)
};

// This block's sequence and first query: tiles of `per_block` queries are numbered sequence by
// sequence, and the last tiles (the most keys) are handed to the first blocks. seq < 0: no tile.
struct BlockRows {
  int seq = -1, t0 = 0, nq = 0;
};
__device__ __forceinline__ BlockRows find_block_rows(const Params& p, int per_block) {
  const int idx = gridDim.x - 1 - blockIdx.x;
  int acc = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int b = p.kv.query_start_loc[s], e = p.kv.query_start_loc[s + 1];
    const int nt = (e - b + per_block - 1) / per_block;
    if (idx < acc + nt) {
      const int t0 = b + (idx - acc) * per_block;
      return {s, t0, min(per_block, e - t0)};
    }
    acc += nt;
  }
  return {};
}

// The keys a block's queries see, and where each key's K/V rows live: before the chunk in the
// paged cache (full layers) or the ring (sliding layers), the chunk's own in this step's rows.
struct SeqKeys {
  int seq, q_begin, old_len, p0, p_last, k_lo, ring, kvh;
  __device__ SeqKeys(const Params& p, int s, int t0, int nq, int kv_head) : seq(s), kvh(kv_head) {
    q_begin = p.kv.query_start_loc[seq];
    const int num_new = p.kv.query_start_loc[seq + 1] - q_begin;
    old_len = p.kv.seq_lens[seq] - num_new;
    p0 = old_len + (t0 - q_begin);
    p_last = p0 + nq - 1;
    k_lo = p.sliding ? max(0, p0 - p.kv.window + 1) : 0;
    ring = p.sliding ? p.kv.ring_ids[seq] : 0;
  }
  // Tiles of `keys` keys from k_lo to p_last.
  __device__ __forceinline__ int num_tiles(int keys) const { return (p_last - k_lo + keys) / keys; }
  // The paged-cache page holding key kp (a full layer's key before the chunk, kp <= p_last), or -1
  // for keys read from elsewhere: a global load that callers may issue ahead of its use.
  __device__ __forceinline__ int page_of(const Params& p, int kp) const {
    if (p.sliding || kp >= old_len || kp > p_last) return -1;
    const int idx = p.page_shift >= 0 ? kp >> p.page_shift : kp / p.kv.page_size;
    return p.kv.block_table[int64_t(seq) * p.kv.max_blocks_per_seq + idx];
  }
  // K and V of key position kp (<= p_last), elements ch.. of the head; `page` is page_of(p, kp).
  template <int D>
  __device__ __forceinline__ void sources(const Params& p, int kp, int ch, int page,
                                          const __nv_bfloat16*& k, const __nv_bfloat16*& v) const {
    const int Hkv = p.num_kv_heads;
    if (kp >= old_len) {
      const int64_t off = (int64_t(q_begin + kp - old_len) * Hkv + kvh) * D + ch;
      k = p.k_step + off;
      v = p.v_step + off;
      return;
    }
    const int in_page = p.page_shift >= 0 ? kp & (p.kv.page_size - 1) : kp % p.kv.page_size;
    const int64_t slot = p.sliding ? int64_t(ring) * p.kv.window + kp % p.kv.window
                                   : int64_t(page) * p.kv.page_size + in_page;
    const int64_t off = (slot * Hkv + kvh) * D + ch;
    k = p.k_cache + off;
    v = p.v_cache + off;
  }
};

// Scores and outputs are held in the mma.sync m16n8 accumulator layout (wgmma's, per warp, is the
// same): thread (g = lane / 4, c = lane % 4) holds rows r0 = 16-row tile base + g (elements 0, 1)
// and r0 + 8 (elements 2, 3), columns 8 * n8-tile + 2c and + 1.

// -inf for the scores of a tile (keys kb..) a row may not see: past its query, outside the window,
// or a row beyond the block's nq queries. Row r is query r / G.
template <int G, int kNt>
__device__ __forceinline__ void mask_tile(float (&sc)[kNt][4], const Params& p, int r0, int c,
                                          int kb, int p0, int nq) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int rq = (r0 + (e >> 1) * 8) / G;
      const int qpos = p0 + rq;
      const int kp = kb + nt * 8 + 2 * c + (e & 1);
      const bool ok = rq < nq && kp <= qpos && (!p.sliding || kp > qpos - p.kv.window);
      if (!ok) sc[nt][e] = -INFINITY;
    }
  }
}

// One tile's online-softmax step for the thread's two rows: the max on the raw scores (the scale is
// positive), sc replaced by exp2(scale * s - max) (the scale in the exponent's FMA), l and m
// updated. Returns whether some row of the warp has a new max; then O must be multiplied by
// alpha[row] before this tile's P V is added (rescale_o).
template <int kNt>
__device__ __forceinline__ bool softmax_scores(float (&sc)[kNt][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2) {
  bool moved = false;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][2 * hr], sc[nt][2 * hr + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[hr], mx * scale_log2);
    const float base = m_new == -INFINITY ? 0.f : m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      sc[nt][2 * hr] = fast_exp2(fmaf(sc[nt][2 * hr], scale_log2, -base));
      sc[nt][2 * hr + 1] = fast_exp2(fmaf(sc[nt][2 * hr + 1], scale_log2, -base));
      sum += sc[nt][2 * hr] + sc[nt][2 * hr + 1];
    }
    alpha[hr] = fast_exp2(m[hr] - base);
    moved |= m_new != m[hr];
    if (m_new != m[hr]) l[hr] *= alpha[hr];
    l[hr] += sum;
    m[hr] = m_new;
  }
  return __any_sync(0xffffffffu, moved);
}

template <int kDt>
__device__ __forceinline__ void rescale_o(float (&o)[kDt][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dt = 0; dt < kDt; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

template <int kNt, int kDt>
__device__ __forceinline__ void softmax_tile(float (&sc)[kNt][4], float (&o)[kDt][4], float (&m)[2],
                                             float (&l)[2], float scale_log2) {
  float alpha[2];
  if (softmax_scores(sc, m, l, alpha, scale_log2)) rescale_o(o, alpha);
}

// P of keys 16kk..16kk+15 as an m16n8k16 A fragment (bf16).
template <int kNt>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&sc)[kNt][4], int kk) {
  a[0] = dev::pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
  a[1] = dev::pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
  a[2] = dev::pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
  a[3] = dev::pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
}

// The sink of row r's head, in log2 units (-inf without sinks).
template <int G>
__device__ __forceinline__ float sink_log2(const Params& p, int kvh, int r) {
  return p.sinks != nullptr ? p.sinks[kvh * G + r % G] * kLog2e : -INFINITY;
}

// Writes the thread's two rows of O / (l + exp(sink - m)).
template <int D, int G>
__device__ __forceinline__ void store_rows(const Params& p, const float (&o)[D / 8][4],
                                           const float (&m)[2], const float (&l)[2], int r0, int c,
                                           int kvh, int t0, int nq) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float lt = l[hr];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int r = r0 + hr * 8;
    if (p.sinks != nullptr) lt += exp2f(sink_log2<G>(p, kvh, r) - m[hr]);
    if (r / G >= nq) continue;
    const float inv = 1.0f / lt;
    float* dst = p.out + int64_t(t0 + r / G) * p.num_heads * D + int64_t(kvh * G + r % G) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<float2*>(dst + dt * 8 + 2 * c) =
          make_float2(o[dt][2 * hr] * inv, o[dt][2 * hr + 1] * inv);
    }
  }
}

// Masks are needed only where a tile of keys kb.. crosses a row's causal or window edge, or where
// the block has fewer than a full set of queries.
__device__ __forceinline__ bool tile_needs_mask(const Params& p, const SeqKeys& sk, int kb,
                                                int keys, int nq, int full_nq) {
  return !(kb + keys - 1 <= sk.p0 && (!p.sliding || kb > sk.p_last - p.kv.window) && nq == full_nq);
}

// kMt: 16-row m-tiles per warp. Two let every K/V fragment loaded from shared memory feed two
// mma (shared-memory bandwidth, not the tensor cores, bounds one m-tile per warp); Q then comes
// from shared memory at each tile instead of registers.
template <int D, int G, int kWarps, int kMt, int kKeys>
__global__ void __launch_bounds__(kWarps * 32, kMt == 2 && kWarps == 4 ? 2 : 1)
    prefill_attention_kernel(const Params p) {
  constexpr int kRows = kWarps * 16 * kMt, kThreads = kWarps * 32;
  constexpr int kLd = D + 8;
  constexpr int kQt = kRows / G;  // queries per block
  constexpr bool kQInRegs = kMt == 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + kRows * kLd;  // [2][kKeys][kLd]
  __nv_bfloat16* vs = ks + 2 * kKeys * kLd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvh = blockIdx.y;

  const BlockRows br = find_block_rows(p, kQt);
  if (br.seq < 0) return;
  const int t0 = br.t0, nq = br.nq;
  const SeqKeys sk(p, br.seq, t0, nq, kvh);
  const int num_tiles = sk.num_tiles(kKeys);
  const int H = p.num_heads;

  // Q rows (f32 -> bf16 in shared memory), row r = query r / G, head kvh * G + r % G.
  for (int i = tid; i < kRows * (D / 4); i += kThreads) {
    const int r = i / (D / 4), c4 = i % (D / 4);
    const int qi = r / G;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (qi < nq) {
      v = *reinterpret_cast<const float4*>(p.q + (int64_t(t0 + qi) * H + kvh * G + r % G) * D +
                                           c4 * 4);
    }
    uint2 packed;
    packed.x = dev::pack_bf16(v.x, v.y);
    packed.y = dev::pack_bf16(v.z, v.w);
    *reinterpret_cast<uint2*>(qs + r * kLd + c4 * 4) = packed;
  }

  auto load_kv = [&](int stage, int kb) {
    __nv_bfloat16* kd = ks + stage * kKeys * kLd;
    __nv_bfloat16* vd = vs + stage * kKeys * kLd;
    for (int i = tid; i < kKeys * (D / 8); i += kThreads) {
      const int r = i / (D / 8), ch = (i % (D / 8)) * 8;
      const int kp = kb + r;
      const bool ok = kp <= sk.p_last;
      const __nv_bfloat16 *ksrc = p.k_step, *vsrc = p.v_step;
      if (ok) sk.sources<D>(p, kp, ch, sk.page_of(p, kp), ksrc, vsrc);
      dev::cp_async16(kd + r * kLd + ch, ksrc, ok);
      dev::cp_async16(vd + r * kLd + ch, vsrc, ok);
    }
  };

  load_kv(0, sk.k_lo);
  dev::cp_async_commit();
  __syncthreads();  // Q in shared memory

  const int warp_row = warp * 16 * kMt;
  // This warp's Q fragment of m-tile mt, k-slice kk.
  auto load_q = [&](uint32_t(&a)[4], int mt, int kk) {
    dev::ldmatrix_x4(a, qs + (warp_row + mt * 16 + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
  };
  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_q(qf[kk], 0, kk);
  }

  const int g = lane >> 2, c = lane & 3;
  // Per thread: rows warp_row + mt * 16 + g and + 8 of each m-tile.
  float m[kMt][2], l[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      m[mt][hr] = sink_log2<G>(p, kvh, warp_row + mt * 16 + g + hr * 8);  // joins the max
      l[mt][hr] = 0.f;  // the sink's exp is added at the end
    }
  }
  float o[kMt][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  }

  for (int j = 0; j < num_tiles; ++j) {
    const int stage = j & 1;
    const int kb = sk.k_lo + j * kKeys;
    if (j + 1 < num_tiles) {
      load_kv(stage ^ 1, kb + kKeys);
      dev::cp_async_commit();
      dev::cp_async_wait<1>();
    } else {
      dev::cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* kt = ks + stage * kKeys * kLd;
    const __nv_bfloat16* vt = vs + stage * kKeys * kLd;

    float sc[kMt][kKeys / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int i = 0; i < kKeys / 8; ++i)
        sc[mt][i][0] = sc[mt][i][1] = sc[mt][i][2] = sc[mt][i][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMt][4];
      if constexpr (kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) qa[0][x] = qf[kk][x];
      } else {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) load_q(qa[mt], mt, kk);
      }
#pragma unroll
      for (int jp = 0; jp < kKeys / 16; ++jp) {
        uint32_t b[4];
        dev::ldmatrix_x4(b, kt + (jp * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk * 16 +
                                ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          dev::mma_bf16(sc[mt][2 * jp], qa[mt], b[0], b[1]);
          dev::mma_bf16(sc[mt][2 * jp + 1], qa[mt], b[2], b[3]);
        }
      }
    }
    if (tile_needs_mask(p, sk, kb, kKeys, nq, kQt)) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
        mask_tile<G>(sc[mt], p, warp_row + mt * 16 + g, c, kb, sk.p0, nq);
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) softmax_tile(sc[mt], o[mt], m[mt], l[mt], p.scale_log2);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) p_fragment(a[mt], sc[mt], kk);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        dev::ldmatrix_x4_trans(b, vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd +
                                      dp * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          dev::mma_bf16(o[mt][2 * dp], a[mt], b[0], b[1]);
          dev::mma_bf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's load overwrites this stage
  }

#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    store_rows<D, G>(p, o[mt], m[mt], l[mt], warp_row + mt * 16 + g, c, kvh, t0, nq);
  }
}

// The Hopper kernel for head_dim 128, warp-specialized: three consumer warpgroups of 64 (query,
// head) rows each and one producer warpgroup, one block per SM. S = Q K^T is one wgmma m64n64k16
// per 16 dims with Q and K read from shared memory, O += P V one m64n128k16 per 16 keys with P
// from registers and V read from shared memory (MN-major), so there is no ldmatrix traffic. Each
// consumer warpgroup overlaps one tile's softmax with the previous tile's P V: at tile j it issues
// S_j and P_{j-1} V_{j-1}, waits for S_j, computes its softmax while P V runs, then waits for P V
// and rescales O. The producer warpgroup does every K/V copy (cp.async), so the paged cache's
// address work and the copies' waits stay off the consumers, and hands the kWsStages stages over
// with mbarriers instead of a block barrier per tile: full[s] gets one arrival per producer warp
// once the warp's copies of the stage have landed and been fenced for the async proxy, empty[s]
// one per consumer warp once its P V of that tile is done. The producer publishes a tile after
// issuing the next one's copies. Registers (setmaxnreg): 56 for the producer, 152 for the
// consumers, the block's 65536 in all. Q, K and V are kept in core-matrix order: row r, 16-byte
// chunk ch at ((r / 8) * (D / 8) + ch) * 128 + (r % 8) * 16 bytes (8 consecutive threads of Q's
// staging fill one 128-byte core matrix; the producer's copies follow global memory instead, see
// there). That layout is K-major for Q and K (LBO 128 between 16-byte chunks, SBO one 8-row group)
// and MN-major for V (SBO 128 between 8-dim groups, LBO one 8-key group). Last 8K rows of a 100K
// prompt, one full layer (H200, thirty-first session): 38.2 ms against 44.8 for the same loop with
// every warp copying and a block barrier per tile; measured and slower: 5 stages 38.6, two consumer
// warpgroups 52.8, 128-key tiles (two consumer warpgroups at 224 registers) 69.4, consumer
// warpgroups issuing their products in turn (FA3's ping-pong, named barriers) 41.3.
constexpr int kWsWarpgroups = 3, kWsKeys = 64, kWsStages = 4;
constexpr int kWsProducerRegs = 56, kWsConsumerRegs = 152;
static_assert(kWsProducerRegs * 128 + kWsConsumerRegs * 128 * kWsWarpgroups <= 65536);

// Its shared memory: Q, kWsStages K and V tiles (bf16), then the full and empty barriers.
constexpr int ws_smem_bytes() {
  return (64 * kWsWarpgroups + 2 * kWsStages * kWsKeys) * 128 * 2 + 2 * kWsStages * 8;
}

template <int G>
__global__ void __launch_bounds__(128 * (kWsWarpgroups + 1), 1)
    prefill_attention_ws_kernel(const Params p) {
#if FLINT_WGMMA  // sm_90a only; launched only there (launch_rows)
  constexpr int kWg = kWsWarpgroups, kKeys = kWsKeys, kStages = kWsStages;
  constexpr int D = 128, kRows = 64 * kWg;
  constexpr int kQt = kRows / G;
  constexpr int kChunks = D / 8;              // 16-byte chunks of a row
  constexpr uint32_t kGroup = kChunks * 128;  // bytes of one 8-row group
  constexpr uint32_t kTileBytes = kKeys * D * 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* qs = smem_raw;                   // kRows rows
  unsigned char* ks = qs + kRows * D * 2;         // [kStages] kKeys rows
  unsigned char* vs = ks + kStages * kTileBytes;  // [kStages] kKeys rows
  const uint32_t full0 = dev::smem_addr(vs + kStages * kTileBytes), empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int kvh = blockIdx.y;

  const BlockRows br = find_block_rows(p, kQt);
  if (br.seq < 0) return;
  const int t0 = br.t0, nq = br.nq;
  const SeqKeys sk(p, br.seq, t0, nq, kvh);
  const int num_tiles = sk.num_tiles(kKeys);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      dev::mbar_init(full0 + 8 * s, 4);
      dev::mbar_init(empty0 + 8 * s, 4 * kWg);
    }
  }
  __syncthreads();

  if (wg == kWg) {  // the producer warpgroup
    dev::setmaxnreg_dec<kWsProducerRegs>();
    // Thread pt copies one row of each tile, row = 4 (pt / 8) + pt % 4, its 16-byte chunks 2 k +
    // half (half = (pt / 4) % 2): eight consecutive threads read 32 contiguous bytes of each of 4
    // rows, whole sectors. Rows 8 k + pt % 8 of one chunk each (8 threads filling one core matrix)
    // wrote shared memory without conflicts but read 16 bytes of each sector twice over (Nsight
    // Compute counted half of those copies' L2 sectors as excess). Last 8K rows, one full layer,
    // H200, thirty-first session: 100K context 38.9 -> 35.7 ms (A/B in one build), 35.9 as landed;
    // 8K context 1.38 -> 1.41, 1.48 as landed (ptxas spills a few registers on the masked tiles'
    // path since, none in the A/B build).
    const int pt = tid - 128 * kWg, row = 4 * (pt >> 3) + (pt & 3), half = (pt >> 2) & 1;
    const int row_off = ((row >> 3) * kChunks + half) * 128 + (row & 7) * 16;
    auto publish = [&](int tile) {
      dev::fence_proxy_async_smem();  // this thread's landed copies, for wgmma to read
      __syncwarp();
      if (lane == 0) dev::mbar_arrive(full0 + 8 * (tile % kStages));
    };
    for (int j = 0; j < num_tiles; ++j) {
      const int s = j % kStages;
      if (j >= kStages) dev::mbar_wait(empty0 + 8 * s, ((j / kStages) - 1) & 1);
      const int kb = sk.k_lo + j * kKeys;
      const int kp = kb + row;
      const bool ok = kp <= sk.p_last;
      const __nv_bfloat16 *ksrc = p.k_step, *vsrc = p.v_step;
      if (ok) sk.sources<D>(p, kp, half * 8, sk.page_of(p, kp), ksrc, vsrc);
      unsigned char* kd = ks + s * kTileBytes + row_off;
      unsigned char* vd = vs + s * kTileBytes + row_off;
#pragma unroll
      for (int k = 0; k < kChunks / 2; ++k) {  // chunks 2 k + half, 256 bytes apart
        dev::cp_async16(kd + k * 256, ok ? ksrc + 16 * k : ksrc, ok);
        dev::cp_async16(vd + k * 256, ok ? vsrc + 16 * k : vsrc, ok);
      }
      dev::cp_async_commit();
      if (j > 0) {
        dev::cp_async_wait<1>();  // tile j - 1's copies; tile j's stay in flight
        publish(j - 1);
      }
    }
    dev::cp_async_wait<0>();
    publish(num_tiles - 1);
    return;
  }

  dev::setmaxnreg_inc<kWsConsumerRegs>();
  const int H = p.num_heads;
  // This warpgroup's Q rows (f32 -> bf16): entries wg * 64 * kChunks .. of the core-matrix order,
  // row r = query r / G, head kvh * G + r % G.
  for (int i = (tid & 127); i < 64 * kChunks; i += 128) {
    const int e = wg * 64 * kChunks + i;
    const int r = (e / (8 * kChunks)) * 8 + (e & 7), ch = (e >> 3) % kChunks;
    const int qi = r / G;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    if (qi < nq) {
      const float* src = p.q + (int64_t(t0 + qi) * H + kvh * G + r % G) * D + ch * 8;
      a = *reinterpret_cast<const float4*>(src);
      b = *reinterpret_cast<const float4*>(src + 4);
    }
    *reinterpret_cast<uint4*>(qs + e * 16) =
        make_uint4(dev::pack_bf16(a.x, a.y), dev::pack_bf16(a.z, a.w), dev::pack_bf16(b.x, b.y),
                   dev::pack_bf16(b.z, b.w));
  }
  dev::fence_proxy_async_smem();
  dev::named_barrier(1 + wg, 128);  // the warpgroup's Q rows

  const uint32_t q_addr = dev::smem_addr(qs) + wg * 8 * kGroup;  // this warpgroup's 64 rows
  const uint32_t k_addr = dev::smem_addr(ks), v_addr = dev::smem_addr(vs);
  auto s_product = [&](float(&sc)[kKeys / 2], int tile) {  // sc = Q K_tile^T, issued
    const uint32_t kt = k_addr + (tile % kStages) * kTileBytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      dev::wgmma_m64n64k16_ss(sc, dev::wgmma_desc(q_addr + kk * 256, 128, kGroup),
                              dev::wgmma_desc(kt + kk * 256, 128, kGroup), kk > 0);
    }
    dev::wgmma_commit();
  };
  auto pv_product = [&](float(&o)[D / 2], const uint32_t(&pa)[kKeys / 16][4], int tile) {
    const uint32_t vt = v_addr + (tile % kStages) * kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      dev::wgmma_m64n128k16_rs(o, pa[kk], dev::wgmma_desc(vt + kk * 2 * kGroup, kGroup, 128));
    }
    dev::wgmma_commit();
  };

  const int g = lane >> 2, c = lane & 3;
  const int r0 = wg * 64 + (warp & 3) * 16 + g;  // the thread's rows: r0 and r0 + 8
  float m[2], l[2], alpha[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    m[hr] = sink_log2<G>(p, kvh, r0 + hr * 8);  // joins the max
    l[hr] = 0.f;                                // the sink's exp is added at the end
  }
  float o[D / 8][4], sc[kKeys / 8][4];
  uint32_t pa[kKeys / 16][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
#pragma unroll
  for (int i = 0; i < kKeys / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
  for (int i = 0; i < kKeys / 16; ++i) pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0u;
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  auto& sc_flat = reinterpret_cast<float(&)[kKeys / 2]>(sc);

  for (int j = 0; j < num_tiles; ++j) {
    dev::mbar_wait(full0 + 8 * (j % kStages), (j / kStages) & 1);  // tile j has landed
    dev::wgmma_fence_operand(sc_flat);
    dev::wgmma_fence_operand(o_flat);
    dev::wgmma_fence();
    s_product(sc_flat, j);
    if (j > 0) pv_product(o_flat, pa, j - 1);
    if (j > 0) {
      dev::wgmma_wait<1>();  // S_j; P V of tile j - 1 may still run
    } else {
      dev::wgmma_wait<0>();
    }
    dev::wgmma_fence_operand(sc_flat);
    const int kb = sk.k_lo + j * kKeys;
    if (tile_needs_mask(p, sk, kb, kKeys, nq, kQt)) mask_tile<G>(sc, p, r0, c, kb, sk.p0, nq);
    const bool moved = softmax_scores(sc, m, l, alpha, p.scale_log2);
    dev::wgmma_wait<0>();
    if (j > 0) {  // tile j - 1's stage: K read by S_{j-1}, V by the P V just waited for
      __syncwarp();
      if (lane == 0) dev::mbar_arrive(empty0 + 8 * ((j - 1) % kStages));
    }
    dev::wgmma_fence_operand(o_flat);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) dev::wgmma_fence_operand(pa[kk]);
    if (moved) rescale_o(o, alpha);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) p_fragment(pa[kk], sc, kk);
  }
  dev::wgmma_fence_operand(o_flat);
  dev::wgmma_fence();
  pv_product(o_flat, pa, num_tiles - 1);
  dev::wgmma_wait<0>();
  dev::wgmma_fence_operand(o_flat);

  store_rows<D, G>(p, o, m, l, r0, c, kvh, t0, nq);
#else
  __trap();
#endif
}

template <int D, int G, int kWarps, int kMt, int kKeys>
void launch(const Params& p, int num_tokens, cudaStream_t s) {
  constexpr int kRows = kWarps * 16 * kMt;
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D, G, kWarps, kMt, kKeys>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          smem_bytes<D, kRows, kKeys>()));
    return true;
  }();
  (void)configured;
  constexpr int kQt = kRows / G;
  const dim3 grid(static_cast<unsigned>(ceil_div(num_tokens, kQt) + p.num_seqs),
                  static_cast<unsigned>(p.num_kv_heads));
  prefill_attention_kernel<D, G, kWarps, kMt, kKeys>
      <<<grid, kWarps * 32, smem_bytes<D, kRows, kKeys>(), s>>>(p);
}

template <int G>
void launch_ws(const Params& p, int num_tokens, cudaStream_t s) {
  constexpr int kSmem = ws_smem_bytes();
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_ws_kernel<G>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(ceil_div(num_tokens, 64 * kWsWarpgroups / G) + p.num_seqs),
                  static_cast<unsigned>(p.num_kv_heads));
  prefill_attention_ws_kernel<G><<<grid, 128 * (kWsWarpgroups + 1), kSmem, s>>>(p);
}

template <int D, int G>
void launch_rows(const Params& p, int num_tokens, const PrefillAttentionArgs& a, cudaStream_t s) {
  if constexpr (D == 128) {
    if (a.wgmma && device_is_sm90()) {
      launch_ws<G>(p, num_tokens, s);
      return;
    }
  }
  if (a.rows_per_block == 64) {
    launch<D, G, 4, 1, 64>(p, num_tokens, s);
  } else {
    launch<D, G, 4, 2, 64>(p, num_tokens, s);
  }
}

template <int D>
void launch_g(const Params& p, int num_tokens, const PrefillAttentionArgs& a, cudaStream_t s) {
  switch (p.num_heads / p.num_kv_heads) {
    case 1:
      launch_rows<D, 1>(p, num_tokens, a, s);
      break;
    case 2:
      launch_rows<D, 2>(p, num_tokens, a, s);
      break;
    case 4:
      launch_rows<D, 4>(p, num_tokens, a, s);
      break;
    case 8:
      launch_rows<D, 8>(p, num_tokens, a, s);
      break;
    default:
      FLINT_FAIL("prefill_attention: {} query heads per kv head is not supported",
                 p.num_heads / p.num_kv_heads);
  }
}

}  // namespace

void prefill_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                       const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                       const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                       int num_tokens, int num_seqs, const PrefillAttentionArgs& a,
                       cudaStream_t s) {
  FLINT_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0,
              "prefill_attention: {} heads over {} kv heads", a.num_heads, a.num_kv_heads);
  FLINT_CHECK(!a.sliding || kv.window > 0, "prefill_attention: sliding layer without a window");
  FLINT_CHECK(a.sliding || kv.page_size > 0, "prefill_attention: full layer with {}-key pages",
              kv.page_size);
  FLINT_CHECK(a.rows_per_block == 64 || a.rows_per_block == 128,
              "prefill_attention: {} rows per block (64 or 128)", a.rows_per_block);
  if (num_tokens <= 0) return;
  const int ps = kv.page_size;
  const int page_shift = ps > 0 && (ps & (ps - 1)) == 0 ? __builtin_ctz(unsigned(ps)) : -1;
  const Params p{out,       q,         k_cache,  v_cache,     k_step,         v_step,
                 sinks,     kv,        num_seqs, a.num_heads, a.num_kv_heads, a.scale * kLog2e,
                 a.sliding, page_shift};
  switch (a.head_dim) {
    case 16:
      launch_g<16>(p, num_tokens, a, s);
      break;
    case 32:
      launch_g<32>(p, num_tokens, a, s);
      break;
    case 64:
      launch_g<64>(p, num_tokens, a, s);
      break;
    case 128:
      launch_g<128>(p, num_tokens, a, s);
      break;
    default:
      FLINT_FAIL("prefill_attention: head_dim {} is not supported (16, 32, 64, 128)", a.head_dim);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
