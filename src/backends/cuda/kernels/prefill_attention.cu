// Prefill attention, flash-attention style: a block of 4 warps owns 128 (query, head) rows of one
// KV head (128/G queries x the G query heads sharing that KV head), 32 rows per warp, and two
// blocks share an SM. It streams 64-key K/V tiles through double-buffered shared memory
// (cp.async), computes S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, f32 accumulate)
// and keeps the softmax online in f32, the sink folded in as the initial running max.
// Reference: backends/cpu/ops/attention.cpp
// Test: tests/kernels/prefill_attention_test.cpp
#include <cmath>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/prefill_attention.h"

namespace flint::cuda {
namespace {

// (query, head) rows per block: kWarps x 16 x kMt. Every block streams all of its keys from L2, so
// the K/V traffic is (rows of the step / rows per block) x keys: with 64-row blocks the last chunks
// of a 100K-token prefill read an estimated 3 TB of K/V each from L2 (130 TFLOP/s measured), so the
// forward pass uses 128 (PrefillAttentionArgs::rows_per_block), as 4 warps of two m-tiles: 8 warps
// of one m-tile took 601 ms for the 14 full layers of a 100K prompt's last 4K chunk, 4 warps of two
// 494 ms (2 blocks per SM at 255 registers), 8 warps of two 499 ms, 32-key tiles 540 ms; then the
// scale in the exponent's FMA and O rescaled only when a row's max moves 440 ms (a few registers
// spill, and it wins anyway; H200, eighth session). 64-row blocks are 4 warps of one m-tile.
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
};

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

  // Find this block's (sequence, first query): tiles are numbered sequence by sequence, and the
  // last tiles (the most keys) are handed to the first blocks.
  const int idx = gridDim.x - 1 - blockIdx.x;
  int seq = -1, t0 = 0, nq = 0;
  {
    int acc = 0;
    for (int s = 0; s < p.num_seqs; ++s) {
      const int b = p.kv.query_start_loc[s], e = p.kv.query_start_loc[s + 1];
      const int nt = (e - b + kQt - 1) / kQt;
      if (idx < acc + nt) {
        seq = s;
        t0 = b + (idx - acc) * kQt;
        nq = min(kQt, e - t0);
        break;
      }
      acc += nt;
    }
  }
  if (seq < 0) return;
  const int q_begin = p.kv.query_start_loc[seq];
  const int num_new = p.kv.query_start_loc[seq + 1] - q_begin;
  const int old_len = p.kv.seq_lens[seq] - num_new;  // keys before this chunk live in the cache
  const int p0 = old_len + (t0 - q_begin);
  const int p_last = p0 + nq - 1;
  const int W = p.kv.window;
  const int k_lo = p.sliding ? max(0, p0 - W + 1) : 0;
  const int num_tiles = (p_last - k_lo + kKeys) / kKeys;
  const int H = p.num_heads, Hkv = p.num_kv_heads;
  const int ring = p.sliding ? p.kv.ring_ids[seq] : 0;

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
      const bool ok = kp <= p_last;
      const __nv_bfloat16 *ksrc = p.k_step, *vsrc = p.v_step;
      if (ok) {
        int64_t off;
        if (kp >= old_len) {
          off = (int64_t(q_begin + kp - old_len) * Hkv + kvh) * D + ch;
          ksrc = p.k_step + off;
          vsrc = p.v_step + off;
        } else {
          int64_t slot;
          if (p.sliding) {
            slot = int64_t(ring) * W + kp % W;
          } else {
            const int page =
                p.kv.block_table[int64_t(seq) * p.kv.max_blocks_per_seq + kp / p.kv.page_size];
            slot = int64_t(page) * p.kv.page_size + kp % p.kv.page_size;
          }
          off = (slot * Hkv + kvh) * D + ch;
          ksrc = p.k_cache + off;
          vsrc = p.v_cache + off;
        }
      }
      dev::cp_async16(kd + r * kLd + ch, ksrc, ok);
      dev::cp_async16(vd + r * kLd + ch, vsrc, ok);
    }
  };

  load_kv(0, k_lo);
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
  // Per thread: rows g and g + 8 of each m-tile, index mt * 2 + hr.
  auto row_of = [&](int i) { return warp_row + (i >> 1) * 16 + g + (i & 1) * 8; };
  auto sink2_of = [&](int i) {
    return p.sinks != nullptr ? p.sinks[kvh * G + row_of(i) % G] * kLog2e : -INFINITY;
  };
  float m[2 * kMt], l[2 * kMt];
#pragma unroll
  for (int i = 0; i < 2 * kMt; ++i) {
    m[i] = sink2_of(i);  // the sink joins the max; its exp is added to l at the end
    l[i] = 0.f;
  }
  float o[kMt][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  }

  for (int j = 0; j < num_tiles; ++j) {
    const int stage = j & 1;
    const int kb = k_lo + j * kKeys;
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
    // Masks are needed only where the tile crosses a row's causal or window edge (or short rows).
    const bool need_mask = !(kb + kKeys - 1 <= p0 && (!p.sliding || kb > p_last - W) && nq == kQt);
    // Masks and the max on the raw scores (the scale is positive); the scale is applied in the
    // exponent's FMA, and O is rescaled only when some row of the warp has a new max.
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int rq = row_of(mt * 2 + (e >> 1)) / G;
            const int qpos = p0 + rq;
            const int kp = kb + nt * 8 + 2 * c + (e & 1);
            const bool ok = rq < nq && kp <= qpos && (!p.sliding || kp > qpos - W);
            if (!ok) sc[mt][nt][e] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int i = mt * 2 + hr;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
          mx = fmaxf(mx, fmaxf(sc[mt][nt][2 * hr], sc[mt][nt][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[i], mx * p.scale_log2);
        const float base = m_new == -INFINITY ? 0.f : m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
          sc[mt][nt][2 * hr] = fast_exp2(fmaf(sc[mt][nt][2 * hr], p.scale_log2, -base));
          sc[mt][nt][2 * hr + 1] = fast_exp2(fmaf(sc[mt][nt][2 * hr + 1], p.scale_log2, -base));
          sum += sc[mt][nt][2 * hr] + sc[mt][nt][2 * hr + 1];
        }
        if (__any_sync(0xffffffffu, m_new != m[i])) {
          const float alpha = fast_exp2(m[i] - base);
          l[i] *= alpha;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt) {
            o[mt][dt][2 * hr] *= alpha;
            o[mt][dt][2 * hr + 1] *= alpha;
          }
        }
        l[i] += sum;
        m[i] = m_new;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        a[mt][0] = dev::pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        a[mt][1] = dev::pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        a[mt][2] = dev::pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        a[mt][3] = dev::pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
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
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int i = mt * 2 + hr;
      float lt = l[i];
      lt += __shfl_xor_sync(0xffffffffu, lt, 1);
      lt += __shfl_xor_sync(0xffffffffu, lt, 2);
      if (p.sinks != nullptr) lt += exp2f(sink2_of(i) - m[i]);
      const int r = row_of(i);
      if (r / G >= nq) continue;
      const float inv = 1.0f / lt;
      float* dst = p.out + int64_t(t0 + r / G) * H * D + int64_t(kvh * G + r % G) * D;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<float2*>(dst + dt * 8 + 2 * c) =
            make_float2(o[mt][dt][2 * hr] * inv, o[mt][dt][2 * hr + 1] * inv);
      }
    }
  }
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

template <int D, int G>
void launch_rows(const Params& p, int num_tokens, int rows, cudaStream_t s) {
  if (rows == 64) {
    launch<D, G, 4, 1, 64>(p, num_tokens, s);
  } else {
    FLINT_CHECK(rows == 128, "prefill_attention: {} rows per block (64 or 128)", rows);
    launch<D, G, 4, 2, 64>(p, num_tokens, s);
  }
}

template <int D>
void launch_g(const Params& p, int num_tokens, int rows, cudaStream_t s) {
  switch (p.num_heads / p.num_kv_heads) {
    case 1:
      launch_rows<D, 1>(p, num_tokens, rows, s);
      break;
    case 2:
      launch_rows<D, 2>(p, num_tokens, rows, s);
      break;
    case 4:
      launch_rows<D, 4>(p, num_tokens, rows, s);
      break;
    case 8:
      launch_rows<D, 8>(p, num_tokens, rows, s);
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
  if (num_tokens <= 0) return;
  Params p{out, q,        k_cache,     v_cache,        k_step,           v_step,   sinks,
           kv,  num_seqs, a.num_heads, a.num_kv_heads, a.scale * kLog2e, a.sliding};
  switch (a.head_dim) {
    case 16:
      launch_g<16>(p, num_tokens, a.rows_per_block, s);
      break;
    case 32:
      launch_g<32>(p, num_tokens, a.rows_per_block, s);
      break;
    case 64:
      launch_g<64>(p, num_tokens, a.rows_per_block, s);
      break;
    case 128:
      launch_g<128>(p, num_tokens, a.rows_per_block, s);
      break;
    default:
      FLINT_FAIL("prefill_attention: head_dim {} is not supported (16, 32, 64, 128)", a.head_dim);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
