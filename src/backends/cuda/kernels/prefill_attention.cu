// Prefill attention, flash-attention style: a block owns 128 (query, head) rows of one KV head
// (128/G queries x the G query heads sharing that KV head), streams 64-key K/V tiles through
// double-buffered shared memory (cp.async), computes S = Q K^T and O += P V with mma.sync
// m16n8k16 (bf16 in, f32 accumulate) and keeps the softmax online in f32, the sink folded in as
// the initial running max. Reference: backends/cpu/ops/attention.cpp
// Test: tests/kernels/prefill_attention_test.cpp
#include <cmath>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/prefill_attention.h"

namespace flint::cuda {
namespace {

// (query, head) rows per block: kWarps x 16. Every block streams all of its keys from L2, so the
// K/V traffic is (rows of the step / rows per block) x keys: with 64-row blocks the last chunks of
// a 100K-token prefill read an estimated 3 TB of K/V each from L2 (130 TFLOP/s measured), so
// the forward pass uses 128 (PrefillAttentionArgs::rows_per_block).
constexpr int kKeys = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

// 2^x (MUFU ex2, flushing denormals); -inf gives 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int D, int kRows>
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

template <int D, int G, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) prefill_attention_kernel(const Params p) {
  constexpr int kRows = kWarps * 16, kThreads = kWarps * 32;
  constexpr int kLd = D + 8;
  constexpr int kQt = kRows / G;  // queries per block
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

  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    dev::ldmatrix_x4(qf[kk], qs + (warp * 16 + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
  }

  const int g = lane >> 2, c = lane & 3;
  int row_q[2], row_h[2];
  float m[2], l[2] = {0.f, 0.f}, sink2[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp * 16 + g + hr * 8;
    row_q[hr] = r / G;
    row_h[hr] = kvh * G + r % G;
    sink2[hr] = p.sinks != nullptr ? p.sinks[row_h[hr]] * kLog2e : -INFINITY;
    m[hr] = sink2[hr];  // the sink joins the max; its exp is added to l at the end
  }
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

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

    float sc[kKeys / 8][4];
#pragma unroll
    for (int i = 0; i < kKeys / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int jp = 0; jp < kKeys / 16; ++jp) {
        uint32_t b[4];
        dev::ldmatrix_x4(b, kt + (jp * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk * 16 +
                                ((lane >> 3) & 1) * 8);
        dev::mma_bf16(sc[2 * jp], qf[kk], b[0], b[1]);
        dev::mma_bf16(sc[2 * jp + 1], qf[kk], b[2], b[3]);
      }
    }
    // Masks are needed only where the tile crosses a row's causal or window edge (or short rows).
    const bool need_mask = !(kb + kKeys - 1 <= p0 && (!p.sliding || kb > p_last - W) && nq == kQt);
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float s = sc[nt][e] * p.scale_log2;
        if (need_mask) {
          const int hr = e >> 1;
          const int qpos = p0 + row_q[hr];
          const int kp = kb + nt * 8 + 2 * c + (e & 1);
          const bool ok = row_q[hr] < nq && kp <= qpos && (!p.sliding || kp > qpos - W);
          if (!ok) s = -INFINITY;
        }
        sc[nt][e] = s;
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
        mx = fmaxf(mx, fmaxf(sc[nt][2 * hr], sc[nt][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = fast_exp2(m[hr] - base);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
        sc[nt][2 * hr] = fast_exp2(sc[nt][2 * hr] - base);
        sc[nt][2 * hr + 1] = fast_exp2(sc[nt][2 * hr + 1] - base);
        sum += sc[nt][2 * hr] + sc[nt][2 * hr + 1];
      }
      l[hr] = l[hr] * alpha + sum;
      m[hr] = m_new;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * hr] *= alpha;
        o[dt][2 * hr + 1] *= alpha;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
      a[0] = dev::pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
      a[1] = dev::pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
      a[2] = dev::pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      a[3] = dev::pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        dev::ldmatrix_x4_trans(b, vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd +
                                      dp * 16 + (lane >> 4) * 8);
        dev::mma_bf16(o[2 * dp], a, b[0], b[1]);
        dev::mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's load overwrites this stage
  }

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float lt = l[hr];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    if (p.sinks != nullptr) lt += exp2f(sink2[hr] - m[hr]);
    if (row_q[hr] >= nq) continue;
    const float inv = 1.0f / lt;
    float* dst = p.out + int64_t(t0 + row_q[hr]) * H * D + int64_t(row_h[hr]) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<float2*>(dst + dt * 8 + 2 * c) =
          make_float2(o[dt][2 * hr] * inv, o[dt][2 * hr + 1] * inv);
    }
  }
}

template <int D, int G, int kWarps>
void launch(const Params& p, int num_tokens, cudaStream_t s) {
  constexpr int kRows = kWarps * 16;
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D, G, kWarps>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          smem_bytes<D, kRows>()));
    return true;
  }();
  (void)configured;
  constexpr int kQt = kRows / G;
  const dim3 grid(static_cast<unsigned>(ceil_div(num_tokens, kQt) + p.num_seqs),
                  static_cast<unsigned>(p.num_kv_heads));
  prefill_attention_kernel<D, G, kWarps><<<grid, kWarps * 32, smem_bytes<D, kRows>(), s>>>(p);
}

template <int D, int G>
void launch_rows(const Params& p, int num_tokens, int rows, cudaStream_t s) {
  if (rows == 64) {
    launch<D, G, 4>(p, num_tokens, s);
  } else {
    FLINT_CHECK(rows == 128, "prefill_attention: {} rows per block (64 or 128)", rows);
    launch<D, G, 8>(p, num_tokens, s);
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
