// Device code of the persistent decode kernel (decode_persistent.h), instantiated per head_dim in
// decode_persistent_d*.cu so that nvcc compiles them in parallel. One block of 8 warps per SM; the
// phases of a layer split their rows over all warps of the grid (a warp owns whole output rows, so
// sums are deterministic and no atomics add into outputs), and a grid barrier separates the phases.
// Every block stages (and RMS-normalises) the activation rows it needs itself, reading them through
// L2
// (__ldcg), since other blocks wrote them earlier in the same launch and L1 is not coherent. The
// routing top-k is computed redundantly by every block from the router logits, which saves a
// barrier. Weights are prefetched into L2 one or two phases ahead.
// Reference: the layered decode path (forward.cpp) and cpu::forward.
// Test: tests/gpu/persistent_test.cpp
#pragma once

#include "backends/cuda/kernels/decode_attention.cuh"
#include "backends/cuda/kernels/decode_persistent.h"
#include "backends/cuda/kernels/gemv_core.cuh"
#include "backends/cuda/kernels/moe_down.cuh"
#include "backends/cuda/kernels/moe_topk.cuh"

namespace flint::cuda::persistent {

using dev::Chunk;
using dev::pad_idx;
using dev::padded_len;

constexpr int kWarps = attn::kWarps;
constexpr int kThreads = attn::kThreads;
constexpr int kMaxSlots = kPersistentMaxSlots;
constexpr int kR = 2;  // output rows per warp and pass: their weight loads fly together

// ---------------------------------------------------------------------------------------------
// Grid barrier. Thread 0 of each block counts in; the last one resets the count and publishes the
// next generation, which the others spin on. All blocks are resident (cooperative launch).
struct Grid {
  uint32_t* count;
  uint32_t* gen;
  uint32_t expect;  // thread 0 only: the generation this block waits for next
  int gwarp;        // this warp's index in the grid
  int nwarps;
  uint64_t* trace;  // block 0, thread 0: a timestamp per barrier (PersistentDecodeArgs::trace)
  int traced;
};

__device__ __forceinline__ void trace_mark(Grid& g) {
  if (g.trace == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g.trace[g.traced++] = t;
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void grid_sync(Grid& g) {
  __syncthreads();
  if (threadIdx.x == 0) {
    trace_mark(g);
    ++g.expect;
    __threadfence();
    if (atomicAdd(g.count, 1u) == gridDim.x - 1) {
      atomicExch(g.count, 0u);
      __threadfence();
      atomicExch(g.gen, g.expect);
    } else {
      while (ld_acquire(g.gen) != g.expect) {
      }
    }
    __threadfence();
    trace_mark(g);
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// L2 prefetch of a byte range, spread over every thread of the grid (one 128-byte line each).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
  if (p == nullptr || bytes <= 0) return;
  const char* base = static_cast<const char*>(p);
  const int64_t lines = (bytes + 127) / 128;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < lines;
       i += int64_t(gridDim.x) * kThreads) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + i * 128));
  }
}

// Rows [row0, row0 + rows) of a matrix (or expert stack): NVFP4 codes and sub-scales, or values.
__device__ __forceinline__ void prefetch_rows(const LinearRef& L, int64_t row0, int64_t rows) {
  if (L.w == nullptr) return;
  const bool fp4 = L.dtype == DType::kNVFP4;
  const int64_t code_bytes = L.in * (fp4 ? 1 : L.dtype == DType::kF32 ? 8 : 4) / 2;
  prefetch_l2(static_cast<const char*>(L.w) + row0 * code_bytes, rows * code_bytes);
  if (fp4) prefetch_l2(L.sc + row0 * (L.in / 16), rows * (L.in / 16));
}
__device__ __forceinline__ void prefetch_matrix(const LinearRef& L) {
  prefetch_rows(L, 0, L.out * L.num_experts);
}

// ---------------------------------------------------------------------------------------------
// Stages n rows of K f32 (row i at x + i * ldx) into xs, padded layout of PK floats per row,
// RMS-normalised by `norm` when given (then n <= kPersistentMaxRows). Ends with __syncthreads().
__device__ inline void stage(float* xs, int64_t PK, const float* x, int64_t ldx, int n, int64_t K,
                             const float* norm, float eps) {
  __shared__ float red[kWarps][kPersistentMaxRows];
  __shared__ float inv[kPersistentMaxRows];
  const int64_t n4 = K / 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = 0; i < n; ++i) {
    const float4* src = reinterpret_cast<const float4*>(x + int64_t(i) * ldx);
    float* dst = xs + int64_t(i) * PK;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
      const float4 v = __ldcg(src + j);
      *reinterpret_cast<float4*>(dst + pad_idx(4 * j)) = v;
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    if (norm != nullptr) {
      ss = dev::warp_sum(ss);
      if (lane == 0) red[warp][i] = ss;
    }
  }
  if (norm == nullptr) {
    __syncthreads();
    return;
  }
  __syncthreads();
  if (threadIdx.x < n) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += red[w][threadIdx.x];
    inv[threadIdx.x] = rsqrtf(total / static_cast<float>(K) + eps);
  }
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    float* dst = xs + int64_t(i) * PK;
    const float s = inv[i];
    for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
      const float4 w = __ldg(reinterpret_cast<const float4*>(norm) + j);
      float4* p = reinterpret_cast<float4*>(dst + pad_idx(4 * j));
      float4 v = *p;
      v.x = v.x * s * w.x;
      v.y = v.y * s * w.y;
      v.z = v.z * s * w.z;
      v.w = v.w * s * w.w;
      *p = v;
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// One warp: oa[r][i] = A[row[r]] . xs_i (and ob with B when gated) for R rows and nb (<= NB)
// staged activation rows, row scales applied, in every lane. Same per-lane order as gemv_block
// (gemv_core.cuh), so the results match the layered path's GEMV.
template <DType W, int NB, bool kGated, int R>
__device__ __forceinline__ void warp_gemv(const LinearRef& A, const LinearRef& B,
                                          const int64_t (&row)[R], const bool (&valid)[R],
                                          const float* xs, int64_t PK, int nb, float (&oa)[R][NB],
                                          float (&ob)[R][NB]) {
  constexpr int U = dev::gemv_unroll<W, kGated, 1>();
  const int64_t nc = A.in / Chunk<W>::kElems;
  float acc_a[R][NB], acc_b[R][NB];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < NB; ++i) acc_a[r][i] = acc_b[r][i] = 0.0f;
  }
  for (int64_t base = 0; base < nc; base += 32 * U) {
    Chunk<W> wa[R][U], wb[R][U];
    dev::load_chunks<W, kGated, R, U>(wa, wb, A, B, row, valid, base, nc);
    dev::accumulate_chunks<W, NB, kGated, R, U>(wa, wb, valid, base, nc, xs, PK, nb, acc_a, acc_b);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float sa = valid[r] ? dev::row_scale(A, row[r]) : 0.0f;
    const float sb = kGated && valid[r] ? dev::row_scale(B, row[r]) : 0.0f;
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      oa[r][i] = dev::warp_sum(acc_a[r][i]) * sa;
      if constexpr (kGated) ob[r][i] = dev::warp_sum(acc_b[r][i]) * sb;
    }
  }
}

// Scratch of a block: its dynamic shared memory and where the warps are.
struct Block {
  float* xs;
  int64_t floats;  // dynamic shared memory in floats
  Grid grid;
};

// y[t, r] (+)= A[r] . norm(x[t]) for every row r of A and token row t < nb (gated: y[t, r] =
// silu(A[r] . x) * (B[r] . x)). Rows go to the warps of the grid in groups of kR.
template <int NB, bool kGated, DType W>
__device__ __forceinline__ void linear_phase(const Block& b, const LinearRef A, const LinearRef B,
                                             const float* x, int64_t ldx, const float* norm,
                                             float eps, float* y, int64_t ldy, bool accumulate,
                                             int nb) {
  const int lane = threadIdx.x & 31;
  const int64_t K = A.in, PK = padded_len(K);
  const int group = static_cast<int>(b.floats / PK < nb ? b.floats / PK : nb);
  const int64_t row_groups = (A.out + kR - 1) / kR;
  for (int t0 = 0; t0 < nb; t0 += group) {
    const int tn = min(group, nb - t0);
    stage(b.xs, PK, x + int64_t(t0) * ldx, ldx, tn, K, norm, eps);
    for (int64_t it = b.grid.gwarp; it < row_groups; it += b.grid.nwarps) {
      int64_t row[kR];
      bool valid[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        row[r] = it * kR + r;
        valid[r] = row[r] < A.out;
      }
      float oa[kR][NB], ob[kR][NB];
      warp_gemv<W, NB, kGated, kR>(A, B, row, valid, b.xs, PK, tn, oa, ob);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int i = 0; i < NB; ++i) {
          if (lane != i || i >= tn || !valid[r]) continue;
          float v = oa[r][i];
          if constexpr (kGated) v = dev::silu(v) * ob[r][i];
          float* yp = y + int64_t(t0 + i) * ldy + row[r];
          *yp = accumulate ? __ldcg(yp) + v : v;
        }
      }
    }
    __syncthreads();  // xs is restaged by the next group
  }
}

// act[p, r] = silu(gate_e[r] . x_t) * (up_e[r] . x_t) for each (token t, slot) pair p = t * slots +
// slot with expert e = ids[p], x_t = norm(h[t]).
template <DType W>
__device__ __forceinline__ void experts_gate_up(const Block& b, const PersistentLayer& L,
                                                const PersistentDecodeArgs& a, const int32_t* ids,
                                                int nb, int slots) {
  const LinearRef G = L.exp_gate, U = L.exp_up;  // in registers, not re-read per item
  const int lane = threadIdx.x & 31;
  const int64_t K = G.in, PK = padded_len(K), I = G.out;
  const int group = static_cast<int>(b.floats / PK < nb ? b.floats / PK : nb);
  const int64_t row_groups = (I + kR - 1) / kR;
  for (int t0 = 0; t0 < nb; t0 += group) {
    const int tn = min(group, nb - t0);
    stage(b.xs, PK, a.h + int64_t(t0) * a.hidden, a.hidden, tn, K, L.ffn_norm, a.eps);
    const int64_t items = int64_t(tn) * slots * row_groups;
    for (int64_t it = b.grid.gwarp; it < items; it += b.grid.nwarps) {
      const int p = static_cast<int>(it / row_groups);  // pair within the group
      const int64_t r0 = (it - p * row_groups) * kR;
      const int pair = t0 * slots + p;
      const int64_t e = ids[pair];
      int64_t row[kR];
      bool valid[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        row[r] = e * I + r0 + r;
        valid[r] = r0 + r < I;
      }
      float oa[kR][1], ob[kR][1];
      warp_gemv<W, 1, true, kR>(G, U, row, valid, b.xs + (p / slots) * PK, PK, 1, oa, ob);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (lane == r && valid[r])
          a.act[int64_t(pair) * I + r0 + r] = dev::silu(oa[r][0]) * ob[r][0];
      }
    }
    __syncthreads();
  }
}

// h[t, r] += sum over the token's slots of w[p] * down_e[r] . act[p] (the moe_down combine).
template <DType W>
__device__ __forceinline__ void down_rows(const LinearRef& Dn, const float* xs, int64_t PKs,
                                          const int32_t* ids, const float* coef, int slots,
                                          int64_t r0, float (&out)[kR]) {
  constexpr int U = 4;  // as moe_down_kernel
  const int chunks = static_cast<int>(Dn.in / Chunk<W>::kElems);
  const int total = slots * chunks;
  const float inv_chunks = __frcp_rn(static_cast<float>(chunks));
  float acc[kR] = {};
  for (int base = 0; base < total; base += 32 * U) {
    Chunk<W> w[kR][U];
    int64_t ebase[U];
    dev::load_down_chunks<W, kR, U>(w, ebase, Dn, ids, r0, base, total, chunks, inv_chunks);
    dev::accumulate_down<W, kR, U>(w, ebase, Dn, xs, PKs, coef, r0, base, total, chunks, inv_chunks,
                                   acc);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) out[r] = dev::warp_sum(acc[r]);
}

template <DType W>
__device__ __forceinline__ void experts_down(const Block& b, const PersistentLayer& L,
                                             const PersistentDecodeArgs& a, const int32_t* ids,
                                             const float* coef, int nb, int slots) {
  const LinearRef Dn = L.exp_down;  // in registers, not re-read per item
  const int lane = threadIdx.x & 31;
  const int64_t I = Dn.in, PKs = padded_len(I), per_token = slots * PKs;
  const int group = static_cast<int>(b.floats / per_token < nb ? b.floats / per_token : nb);
  const int64_t row_groups = (Dn.out + kR - 1) / kR;
  for (int t0 = 0; t0 < nb; t0 += group) {
    const int tn = min(group, nb - t0);
    stage(b.xs, PKs, a.act + int64_t(t0) * slots * I, I, tn * slots, I, nullptr, 0.0f);
    const int64_t items = int64_t(tn) * row_groups;
    for (int64_t it = b.grid.gwarp; it < items; it += b.grid.nwarps) {
      const int tl = static_cast<int>(it / row_groups);
      const int64_t r0 = (it - tl * row_groups) * kR;
      const int t = t0 + tl;
      const float* xs = b.xs + tl * per_token;
      float out[kR];
      down_rows<W>(Dn, xs, PKs, ids + t * slots, coef + t * slots, slots, r0, out);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (lane == r && r0 + r < Dn.out) {
          float* hp = a.h + int64_t(t) * a.hidden + r0 + r;
          *hp = __ldcg(hp) + out[r];
        }
      }
    }
    __syncthreads();
  }
}

// The layer's attention: blocks take the (kv head, split, row) items in turn.
template <int D>
__device__ __noinline__ void attention_phase(const PersistentDecodeArgs& a,
                                             const PersistentLayer& L, unsigned char* smem) {
  const int H = a.num_heads, Hkv = a.num_kv_heads, nb = a.num_rows;
  const int S = L.sliding ? a.sliding_splits : a.full_splits;
  const attn::AttnKernelArgs aa{nullptr,
                                L.k_cache,
                                L.v_cache,
                                nullptr,
                                nullptr,
                                L.sinks,
                                a.attn,
                                a.attn_part,
                                a.attn_counters,
                                a.kv,
                                DecodeAttentionArgs{H, Hkv, D, a.attn_scale, L.sliding, S},
                                DecodeQkv{a.qkv, L.q_norm, L.k_norm, a.eps, L.rope, a.rope_theta},
                                L.k_cache,
                                L.v_cache};
  const int items = Hkv * S * nb;
  for (int it = blockIdx.x; it < items; it += gridDim.x) {
    attn::attention_block<D, true, attn::SplitMerge::kGlobal>(aa, it % Hkv, (it / Hkv) % S,
                                                              it / (Hkv * S), nb, smem);
    __syncthreads();
  }
}

// Every linear layer but the router holds W weights: one dtype's code per kernel keeps each
// phase's instructions few (the whole kernel's do not fit in the instruction caches).
template <int D, int NB, DType W>
__global__ void __launch_bounds__(kThreads, 1)
    persistent_decode_kernel(PersistentDecodeArgs a_param, int64_t smem_floats) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int32_t s_ids[kPersistentMaxRows * kMaxSlots];
  __shared__ float s_w[kPersistentMaxRows * kMaxSlots];
  // The step's arguments and the current layer live in shared memory: read all over each phase,
  // they would otherwise come from local memory or the layer table through the small L1 that the
  // attention tiles leave.
  __shared__ PersistentDecodeArgs sa;
  __shared__ PersistentLayer sl;
  if (threadIdx.x == 0) sa = a_param;
  const int warp = threadIdx.x >> 5;
  Block b{reinterpret_cast<float*>(smem), smem_floats,
          Grid{a_param.barrier, a_param.barrier + 1, 0, int(blockIdx.x) * kWarps + warp,
               int(gridDim.x) * kWarps, a_param.trace, 0}};
  if (threadIdx.x == 0) {
    b.grid.expect = ld_acquire(b.grid.gen);
    trace_mark(b.grid);
  }
  __syncthreads();
  const PersistentDecodeArgs& a = sa;
  const int nb = a.num_rows;
  const int H = a.num_heads, Hkv = a.num_kv_heads;
  const int64_t d = a.hidden, qkv_cols = int64_t(H + 2 * Hkv) * D;
  const int slots = a.routing.top_k + a.routing.num_shared_slots;
  const LinearRef none{};
  prefetch_matrix(a.layers[0].qkv);
  for (int l = 0; l < a.num_layers; ++l) {
    __syncthreads();  // every thread is done with the previous layer's copy
    if (threadIdx.x == 0) sl = a.layers[l];
    __syncthreads();
    const PersistentLayer& L = sl;
    const bool last = l + 1 == a.num_layers;
    // 1. q|k|v = W_qkv . norm(h)
    prefetch_matrix(L.o);
    if (L.dense) {
      prefetch_matrix(L.gate);
      prefetch_matrix(L.up);
    } else {
      prefetch_matrix(L.router);
    }
    linear_phase<NB, false, W>(b, L.qkv, none, a.h, d, L.attn_norm, a.eps, a.qkv, qkv_cols, false,
                               nb);
    grid_sync(b.grid);
    // 2. q/k norm, RoPE, the K/V cache write and attention; partials merged by the last split.
    attention_phase<D>(a, L, smem);
    if (L.dense) prefetch_matrix(L.down);
    grid_sync(b.grid);
    // 3. h += W_o . attn
    linear_phase<NB, false, W>(b, L.o, none, a.attn, int64_t(H) * D, nullptr, a.eps, a.h, d, true,
                               nb);
    grid_sync(b.grid);
    if (L.dense) {
      // 4-5. h += W_down . (silu(W_gate . norm(h)) * (W_up . norm(h)))
      const int64_t I = L.gate.out;
      linear_phase<NB, true, W>(b, L.gate, L.up, a.h, d, L.ffn_norm, a.eps, a.act, I, false, nb);
      grid_sync(b.grid);
      if (!last) prefetch_matrix(a.layers[l + 1].qkv);
      linear_phase<NB, false, W>(b, L.down, none, a.act, I, nullptr, a.eps, a.h, d, true, nb);
    } else {
      // 4. router logits of norm(h)
      const int E = a.routing.num_experts;
      if (L.router.dtype == DType::kF32) {
        linear_phase<NB, false, DType::kF32>(b, L.router, none, a.h, d, L.ffn_norm, a.eps, a.logits,
                                             E, false, nb);
      } else {
        linear_phase<NB, false, DType::kBF16>(b, L.router, none, a.h, d, L.ffn_norm, a.eps,
                                              a.logits, E, false, nb);
      }
      grid_sync(b.grid);
      // 5. every block takes the top-k itself, then the selected experts' gate/up.
      {
        float* score = b.xs + int64_t(warp) * 2 * E;
        for (int t = warp; t < nb; t += kWarps) {
          dev::top_k_token(a.logits + int64_t(t) * E, L.expert_bias, a.routing, score,
                           s_ids + t * slots, s_w + t * slots);
        }
        __syncthreads();
        if (blockIdx.x == 0 && threadIdx.x < nb * slots) {
          a.ids[l * a.ids_layer_stride + threadIdx.x] = s_ids[threadIdx.x];
          a.weights[threadIdx.x] = s_w[threadIdx.x];
        }
        // The chosen experts' down rows, then the next layer's qkv, stream into L2 meanwhile.
        for (int p = 0; p < nb * slots; ++p) {
          prefetch_rows(L.exp_down, int64_t(s_ids[p]) * L.exp_down.out, L.exp_down.out);
        }
        if (!last) prefetch_matrix(a.layers[l + 1].qkv);
      }
      experts_gate_up<W>(b, L, a, s_ids, nb, slots);
      grid_sync(b.grid);
      // 6. h += sum_slots w * W_down,e . act
      experts_down<W>(b, L, a, s_ids, s_w, nb, slots);
    }
    if (!last) grid_sync(b.grid);
  }
  __syncthreads();
  if (threadIdx.x == 0) trace_mark(b.grid);
}

// The kernel for head_dim D, 1 (nb 1) or 8 (nb 2-8) row slots and linear weights of dtype w;
// null for another dtype. Instantiated by decode_persistent_d<D>.cu.
template <int D>
void* kernel_for_head_dim(int nb, DType w) {
  switch (w) {
    case DType::kNVFP4:
      return nb == 1 ? reinterpret_cast<void*>(persistent_decode_kernel<D, 1, DType::kNVFP4>)
                     : reinterpret_cast<void*>(persistent_decode_kernel<D, 8, DType::kNVFP4>);
    case DType::kBF16:
      return nb == 1 ? reinterpret_cast<void*>(persistent_decode_kernel<D, 1, DType::kBF16>)
                     : reinterpret_cast<void*>(persistent_decode_kernel<D, 8, DType::kBF16>);
    case DType::kF32:
      return nb == 1 ? reinterpret_cast<void*>(persistent_decode_kernel<D, 1, DType::kF32>)
                     : reinterpret_cast<void*>(persistent_decode_kernel<D, 8, DType::kF32>);
    default:
      return nullptr;
  }
}

}  // namespace flint::cuda::persistent
