// The greedy LM head's load-time copy and its per-step pick (greedy_head.h).
#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/gemv_core.cuh"
#include "backends/cuda/kernels/greedy_head.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = dev::kGemvThreads;
constexpr int kWarps = kThreads / 32;
// Blocks per logits row of greedy_pick: each scans V / kPickBlocks rows' bounds (1184 at Flint's
// vocabulary) and computes its candidates.
constexpr int kPickBlocks = 128;
static_assert(kTopKMaximaPerRow == kPickBlocks * kWarps && kTopKMaximaPerRow % kThreads == 0,
              "topk_logits keeps a maximum per warp of greedy_pick's grid");
// The one-row FP32 GEMV's chunks per lane per pass (gemv_unroll<kF32, false, 1>): the exact
// logits must be summed in its order.
constexpr int kF32Unroll = 4;
constexpr int kMaxSmemBytes = 200 * 1024;  // the staged row, as gemv allows it
static_assert(kF32Unroll == dev::gemv_unroll<DType::kF32, false, 1>(),
              "greedy_pick sums the FP32 head's rows as gemv does");

// One warp a row: the largest |w| (and whether every w is finite), then the int8 codes and the
// double sums of the error's and the row's squares.
__global__ void __launch_bounds__(kThreads)
    greedy_prepare_kernel(int8_t* __restrict__ q, float* __restrict__ scales,
                          float* __restrict__ bounds, int32_t* bad, const float* __restrict__ w,
                          int64_t V, int64_t d) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= V) return;
  const float4* src = reinterpret_cast<const float4*>(w + r * d);
  float mx = 0.0f;
  bool finite = true;
  for (int64_t j = lane; j < d / 4; j += 32) {
    const float4 v = src[j];
    finite = finite && isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w);
    mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
  }
  mx = dev::warp_max(mx);
  finite = __all_sync(0xffffffffu, finite);
  // A scale that is not a normal float (a zero or tiny row) codes the row as zeros: its error is
  // then the row itself, which the bound takes in.
  float sc = __fdiv_rn(mx, 127.0f);
  if (!(sc >= FLT_MIN) || !finite) sc = 0.0f;
  char4* dst = reinterpret_cast<char4*>(q + r * d);
  double se = 0.0, sw = 0.0;
  for (int64_t j = lane; j < d / 4; j += 32) {
    const float4 v = src[j];
    const float x[4] = {v.x, v.y, v.z, v.w};
    signed char c[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float t = sc > 0.0f ? fminf(fmaxf(rintf(__fdiv_rn(x[k], sc)), -127.0f), 127.0f) : 0.0f;
      c[k] = static_cast<signed char>(t);
      const double e = double(x[k]) - double(t) * double(sc);  // exact: 8 bits times 24
      se += e * e;
      sw += double(x[k]) * x[k];
    }
    dst[j] = make_char4(c[0], c[1], c[2], c[3]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    se += __shfl_xor_sync(0xffffffffu, se, o);
    sw += __shfl_xor_sync(0xffffffffu, sw, o);
  }
  // beta = ||e|| (1 + g) + g ||W||, g = (2 d + 256) 2^-24 (greedy_head.h). The double sums of d
  // squares are within d 2^-53 of exact (relative), the square roots round up, and the factor
  // 1 + 2^-40 covers the few double roundings after them; the float rounds up.
  const double g = double(2 * d + 256) * 0x1p-24, widen = 1.0 + double(d) * 0x1p-52;
  const double beta =
      (__dsqrt_ru(se * widen) * (1.0 + g) + g * __dsqrt_ru(sw * widen)) * (1.0 + 0x1p-40);
  const float bf = __double2float_ru(beta);
  if (lane == 0) {
    scales[r] = sc;
    bounds[r] = bf;
  }
  if (!finite || !isfinite(bf)) {
    if (lane == 0) *bad = 1;
  }
}

// greedy_approx: a warp dots R rows of the copy at a time, each lane U 16-byte chunks of each
// (32 x 16 U weights of a row per item, an item being one pass over the R rows); a warp walks row
// groups warp, warp + step, ... (step: the warps of the grid, one wave), loading its next item
// before it dots the current one. The staged x rows are read from shared memory once per chunk
// for all R rows: at 4-8 x rows the kernel is bound by those reads, and R 2 halves them.
template <int NB, int R, int U>
__global__ void __launch_bounds__(kThreads, NB <= 2 ? 3 : 2)
    greedy_approx_kernel(GreedyPickArgs a, int64_t step) {
  using C = dev::Chunk<DType::kI8>;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  dev::pdl_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = blockIdx.y;
  const LinearRef& q = a.copy;
  const int64_t K = q.in, V = q.out, PK = dev::padded_len(K), nc = K / C::kElems;
  const int P = static_cast<int>((nc + 32 * U - 1) / (32 * U));
  auto load = [&](C(&w)[R][U], int64_t row, int p) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = int64_t(p) * 32 * U + lane + 32 * u;
        if (row + j < V && c < nc) w[j][u].load(q, row + j, c);
      }
    }
  };
  int64_t r = (int64_t(blockIdx.x) * kWarps + warp) * R;
  int p = 0;
  C cur[R][U], nxt[R][U];
  if (r < V) load(cur, r, 0);  // the copy does not depend on earlier kernels
  dev::NormPrefetch pf;
  dev::prefetch_norm(pf, a.norm, K);
  dev::pdl_wait();
  const int nb = min(NB, a.num_rows - g * NB);
  int64_t xrow[NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const int t = g * NB + i;
    xrow[i] = i < nb ? (a.x_rows != nullptr ? a.x_rows[t] : t) : 0;
  }
  dev::stage_rows<NB>(xs, PK, a.x, a.x_stride, xrow, nb, K, a.norm, pf);
  float inv[NB], acc[R][NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    inv[i] = a.norm != nullptr && i < nb ? dev::staged_inv<NB, kWarps>(i, K, a.eps) : 1.0f;
#pragma unroll
    for (int j = 0; j < R; ++j) acc[j][i] = 0.0f;
  }
  while (r < V) {
    int64_t rn = r;
    int pn = p + 1;
    if (pn == P) {
      pn = 0;
      rn = r + step;
    }
    if (rn < V) load(nxt, rn, pn);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = int64_t(p) * 32 * U + lane + 32 * u;
      if (c >= nc) continue;
      const float* xc = xs + dev::pad_idx(c * C::kElems);
      if constexpr (NB == 1 && R == 1) {
        acc[0][0] += cur[0][u].dot(xc, nullptr);
      } else {
        float wf[R][C::kElems];
#pragma unroll
        for (int j = 0; j < R; ++j) cur[j][u].decode(wf[j]);
#pragma unroll
        for (int i = 0; i < NB; ++i) {
          if (i >= nb) continue;
#pragma unroll
          for (int k = 0; k < C::kElems; k += 4) {
            const float4 x4 = *reinterpret_cast<const float4*>(xc + i * PK + k);
#pragma unroll
            for (int j = 0; j < R; ++j) {
              acc[j][i] +=
                  wf[j][k] * x4.x + wf[j][k + 1] * x4.y + wf[j][k + 2] * x4.z + wf[j][k + 3] * x4.w;
            }
          }
        }
      }
    }
    if (p == P - 1) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const bool live = r + j < V;
        const float sc = live ? dev::row_scale(q, r + j) : 0.0f;
#pragma unroll
        for (int i = 0; i < NB; ++i) {
          // As gemv scales a row: (sum * s) * inv.
          const float v = dev::warp_sum(acc[j][i]) * sc * inv[i];
          if (live && lane == i && i < nb) a.approx[int64_t(g * NB + i) * V + r + j] = v;
          acc[j][i] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < R; ++j) {
#pragma unroll
      for (int u = 0; u < U; ++u) cur[j][u] = nxt[j][u];
    }
    r = rn;
    p = pn;
  }
}

// The key of a logit for the pick: larger values first, then lower rows; 0 for a value argmax
// would never take (NaN, or below -FLT_MAX).
__device__ __forceinline__ uint64_t pick_key(float v, int64_t r) {
  if (!(v >= -FLT_MAX)) return 0;
  return (uint64_t(dev::ordered_key(v)) << 32) | uint64_t(0xffffffffu - uint32_t(r));
}

// x' of logits row t, staged in xs as the FP32 head's GEMV stages it (after the PDL wait), with
// inv (the RMSNorm's scale, 1 without a norm) and bx >= ||x'|| * inv: the float sum of squares is
// within d 2^-24 of exact, and the factor covers that up to d = 2^16 (and the square root's and
// the product's roundings). B_r = bx * bounds[r]. s_tmp: kWarps floats of shared memory, free
// again on return.
__device__ __forceinline__ void stage_head_row(const GreedyPickArgs& a, int t, float* xs,
                                               float* s_tmp, float& inv, float& bx) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t K = a.head.in, PK = dev::padded_len(K);
  dev::NormPrefetch pf;
  dev::prefetch_norm(pf, a.norm, K);
  dev::pdl_wait();
  const int64_t xrow[1] = {a.x_rows != nullptr ? a.x_rows[t] : t};
  dev::stage_rows<1>(xs, PK, a.x, a.x_stride, xrow, 1, K, a.norm, pf);
  inv = a.norm != nullptr ? dev::staged_inv<1, kWarps>(0, K, a.eps) : 1.0f;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < K / 4; j += kThreads) {
    const float4 v = *reinterpret_cast<const float4*>(xs + dev::pad_idx(4 * j));
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = dev::warp_sum(ss);
  if (lane == 0) s_tmp[warp] = ss;
  __syncthreads();
  float tot = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) tot += s_tmp[w];
  bx = sqrtf(tot) * inv * (1.0f + 0x1p-8f);
  __syncthreads();  // s_tmp is read above
}

// The exact logit of head row r against the staged x', by the whole warp, as gemv_block sums the
// one-row FP32 head: the same chunks, order and sums, so the same bits.
__device__ __forceinline__ float exact_logit(const GreedyPickArgs& a, int64_t r, const float* xs,
                                             float inv) {
  using C = dev::Chunk<DType::kF32>;
  const int64_t K = a.head.in, PK = dev::padded_len(K), nc = K / C::kElems;
  C wa[1][kF32Unroll], wb[1][kF32Unroll];
  const int64_t row[1] = {r};
  const bool valid[1] = {true};
  float acc_a[1][1] = {{0.0f}}, acc_b[1][1] = {{0.0f}};
  dev::load_chunks<DType::kF32, false, 1, kF32Unroll>(wa, wb, a.head, a.head, row, valid, 0, nc);
  for (int64_t base = 0; base < nc; base += 32 * kF32Unroll) {
    if (base > 0) {
      dev::load_chunks<DType::kF32, false, 1, kF32Unroll>(wa, wb, a.head, a.head, row, valid, base,
                                                          nc);
    }
    dev::accumulate_chunks<DType::kF32, 1, false, 1, kF32Unroll>(wa, wb, valid, base, nc, xs, PK, 1,
                                                                 acc_a, acc_b);
  }
  return dev::warp_sum(acc_a[0][0]) * dev::row_scale(a.head, r) * inv;
}

// The largest a_r - B_r over the rows begin + threadIdx.x, + kThreads, ... below end of this warp's
// threads (-inf without any): at most the largest of their logits.
__device__ __forceinline__ float warp_lower_max(const GreedyPickArgs& a, const float* ap, float bx,
                                                int64_t begin, int64_t end) {
  float lo = __int_as_float(0xff800000);  // -inf
  for (int64_t r = begin + threadIdx.x; r < end; r += kThreads) {
    lo = fmaxf(lo, __ldcg(ap + r) - bx * __ldg(a.bounds + r));
  }
  return dev::warp_max(lo);
}

// kMaxima: topk_logits' first launch, which stores each warp's largest a_r - B_r in a.maxima and
// stops there.
template <bool kMaxima>
__global__ void __launch_bounds__(kThreads) greedy_pick_kernel(GreedyPickArgs a, int64_t slice) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float s_ss[kWarps];
  dev::pdl_launch_dependents();
  const int t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t V = a.head.out;
  float inv, bx;
  stage_head_row(a, t, xs, s_ss, inv, bx);
  const float* ap = a.approx + int64_t(t) * V;
  // M: the largest a_r - B_r of this block's rows. Each is at most its l_r, so M is at most the
  // largest logit: a lower bound the winner's a_r + B_r reaches, from the block that holds it.
  const int64_t begin = int64_t(blockIdx.x) * slice, end = min(V, begin + slice);
  const float lo = warp_lower_max(a, ap, bx, begin, end);
  if constexpr (kMaxima) {
    if (lane == 0) a.maxima[int64_t(t) * kTopKMaximaPerRow + blockIdx.x * kWarps + warp] = lo;
    // The second launch counts the row's candidates from zero (it waits for this one to finish).
    if (a.cand_count != nullptr && blockIdx.x == 0 && threadIdx.x == 0) a.cand_count[t] = 0;
    return;
  }
  if (lane == 0) s_ss[warp] = lo;
  __syncthreads();
  float M = s_ss[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_ss[w]);
  const bool all = !(isfinite(bx) && isfinite(M));
  uint64_t best = 0;
  for (int64_t base = begin + warp * 32; base < end; base += kThreads) {
    const int64_t r = base + lane;
    const bool cand = r < end && (all || !(__ldcg(ap + r) + bx * __ldg(a.bounds + r) < M));
    for (uint32_t mask = __ballot_sync(0xffffffffu, cand); mask != 0; mask &= mask - 1) {
      const int64_t rc = base + __ffs(mask) - 1;
      const uint64_t k = pick_key(exact_logit(a, rc, xs, inv), rc);
      best = k > best ? k : best;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if (lane == 0 && best != 0) {
    atomicMax(reinterpret_cast<unsigned long long*>(a.keys + t),
              static_cast<unsigned long long>(best));
  }
}

// The k-th largest (1-based, k <= the marked count) of the keys the block's threads mark, by a
// most-significant-digit-first radix select: four 8-bit digits, each from a histogram of the keys
// that share the digits found so far. hist: 256 words of shared memory; sel: 2.
template <int kPer>
__device__ uint32_t block_kth_largest(const uint32_t (&key)[kPer], const bool (&has)[kPer],
                                      uint32_t k, uint32_t* hist, uint32_t* sel) {
  uint32_t prefix = 0, need = k;
#pragma unroll 1
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (has[j] && (pass == 0 || (key[j] >> (shift + 8)) == (prefix >> (shift + 8)))) {
        atomicAdd(&hist[(key[j] >> shift) & 255u], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // lane l holds digits 255 - 8 l down to 248 - 8 l
      const int lane = threadIdx.x;
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        c[i] = hist[255 - 8 * lane - i];
        sum += c[i];
      }
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      uint32_t above = incl - sum;  // keys with a larger digit
      if (above < need && need <= incl) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (need <= above + c[i]) {
            sel[0] = prefix | (uint32_t(255 - 8 * lane - i) << shift);
            sel[1] = need - above;
            break;
          }
          above += c[i];
        }
      }
    }
    __syncthreads();
    prefix = sel[0];
    need = sel[1];
  }
  return prefix;
}

// topk_logits, second launch: L, the K-th largest of the row's warp maxima, then every row of the
// block's slice: its exact logit when a_r + B_r >= L, else -inf.
__global__ void __launch_bounds__(kThreads) topk_fill_kernel(GreedyPickArgs a, int64_t slice) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float s_tmp[kWarps];
  __shared__ uint32_t s_hist[256], s_sel[2];
  dev::pdl_launch_dependents();
  const int t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t V = a.head.out;
  float inv, bx;
  stage_head_row(a, t, xs, s_tmp, inv, bx);
  constexpr int kPer = kTopKMaximaPerRow / kThreads;
  const int count = static_cast<int>(gridDim.x) * kWarps;  // the first launch's maxima
  uint32_t key[kPer];
  bool has[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * kThreads;
    has[j] = i < count;
    key[j] = has[j] ? dev::ordered_key(__ldcg(a.maxima + int64_t(t) * kTopKMaximaPerRow + i)) : 0u;
  }
  const int k = max(1, a.top_k[t]);
  // More rows wanted than maxima: every row is a candidate (L = -inf).
  const float L = k <= count
                      ? dev::key_value(block_kth_largest(key, has, uint32_t(k), s_hist, s_sel))
                      : __int_as_float(0xff800000);
  const bool all = !isfinite(bx);
  const float* ap = a.approx + int64_t(t) * V;
  float* out = a.logits + int64_t(t) * V;
  const int64_t begin = int64_t(blockIdx.x) * slice, end = min(V, begin + slice);
  for (int64_t base = begin + warp * 32; base < end; base += kThreads) {
    const int64_t r = base + lane;
    const bool in = r < end;
    const bool cand = in && (all || !(__ldcg(ap + r) + bx * __ldg(a.bounds + r) < L));
    float v = __int_as_float(0xff800000);
    const uint32_t ballot = __ballot_sync(0xffffffffu, cand);
    for (uint32_t mask = ballot; mask != 0; mask &= mask - 1) {
      const int j = __ffs(mask) - 1;
      const float e = exact_logit(a, base + j, xs, inv);
      if (lane == j) v = e;
    }
    if (in) out[r] = v;
    if (a.cand_count != nullptr && ballot != 0) {  // the warp's candidates, one atomic
      uint32_t first = 0;
      if (lane == 0) first = atomicAdd(a.cand_count + t, static_cast<uint32_t>(__popc(ballot)));
      first = __shfl_sync(0xffffffffu, first, 0);
      const uint32_t slot = first + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1)));
      if (cand && slot < uint32_t(kSampleCandidates)) {
        a.cand_ids[int64_t(t) * kSampleCandidates + slot] = static_cast<int32_t>(r);
        a.cand_logits[int64_t(t) * kSampleCandidates + slot] = v;
      }
    }
  }
}

__global__ void greedy_finish_kernel(uint64_t* keys, int32_t* tokens, int n) {
  dev::pdl_launch_dependents();
  dev::pdl_wait();
  const int t = threadIdx.x;
  if (t >= n) return;
  const uint64_t k = keys[t];
  // No key: every logit was NaN or -inf, where argmax answers 0.
  tokens[t] = k != 0 ? static_cast<int32_t>(0xffffffffu - uint32_t(k & 0xffffffffu)) : 0;
  keys[t] = 0;
}

// One or two x rows: a row a warp, 4 chunks a lane (2048 weights an item); 3-8: two rows a warp,
// 2 chunks a lane (R 2 with the registers of R 1).
template <int NB>
void launch_approx(const GreedyPickArgs& a, size_t smem, cudaStream_t s) {
  constexpr int R = NB <= 2 ? 1 : 2;
  const auto kernel = greedy_approx_kernel<NB, R, 4 / R>;
  static const bool configured = [kernel] {
    FLINT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
    return true;
  }();
  (void)configured;
  // One wave: as many blocks as reside at once (device attributes only: safe in graph capture),
  // queried once per staging size (a model has one), not on every uncaptured step.
  thread_local size_t cached_smem = 0;
  thread_local int per_sm = 0;
  if (cached_smem != smem) {
    FLINT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    FLINT_CHECK(per_sm > 0, "greedy_approx: no SM holds a block of {} bytes", smem);
    cached_smem = smem;
  }
  const int64_t blocks =
      std::min<int64_t>(ceil_div(a.copy.out, kWarps * R), int64_t(per_sm) * device_sm_count());
  const unsigned groups = static_cast<unsigned>(ceil_div(a.num_rows, NB));
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks), groups), dim3(kThreads), smem, s, a,
             blocks * kWarps * R);
}

}  // namespace

void greedy_head_prepare(int8_t* q, float* scales, float* bounds, int32_t* bad, const LinearRef& w,
                         cudaStream_t s) {
  FLINT_CHECK(w.dtype == DType::kF32 && w.num_experts == 1 && w.row_scale == nullptr &&
                  w.in % kGreedyChunkElems == 0 && w.w != nullptr,
              "greedy_head_prepare: an FP32 matrix [{}, {}] without row scales, in % {} == 0",
              w.out, w.in, kGreedyChunkElems);
  FLINT_CHECK(q != nullptr && scales != nullptr && bounds != nullptr && bad != nullptr,
              "greedy_head_prepare: null buffer");
  if (w.out == 0) return;
  const auto blocks = static_cast<unsigned>(ceil_div(w.out, kWarps));
  greedy_prepare_kernel<<<blocks, kThreads, 0, s>>>(q, scales, bounds, bad,
                                                    static_cast<const float*>(w.w), w.out, w.in);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void greedy_approx(const GreedyPickArgs& a, cudaStream_t s) {
  const LinearRef& q = a.copy;
  FLINT_CHECK(q.dtype == DType::kI8 && q.num_experts == 1 && q.w != nullptr &&
                  q.row_scale != nullptr && q.in % kGreedyChunkElems == 0 && q.out > 0 &&
                  q.in == a.head.in && q.out == a.head.out && a.num_rows >= 1 && a.num_rows <= 32,
              "greedy_approx: an I8 copy [{}, {}] with row scales of the head [{}, {}], {} rows",
              q.out, q.in, a.head.out, a.head.in, a.num_rows);
  FLINT_CHECK(a.approx != nullptr && a.x != nullptr, "greedy_approx: null buffer");
  FLINT_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.x_stride % 4 == 0 &&
                  reinterpret_cast<uintptr_t>(q.w) % 16 == 0,
              "greedy_approx: rows must be 16-byte aligned (stride {})", a.x_stride);
  const int nb = a.num_rows >= 8 ? 8 : a.num_rows > 2 ? 4 : a.num_rows;
  const size_t smem = size_t(nb) * size_t(dev::padded_len(q.in)) * sizeof(float);
  FLINT_CHECK(smem <= size_t(kMaxSmemBytes), "greedy_approx: rows of {} are too long to stage",
              q.in);
  switch (nb) {
    case 1:
      launch_approx<1>(a, smem, s);
      break;
    case 2:
      launch_approx<2>(a, smem, s);
      break;
    case 4:
      launch_approx<4>(a, smem, s);
      break;
    default:
      launch_approx<8>(a, smem, s);
      break;
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

// greedy_pick's and topk_logits' checks; the shared memory of their staged row.
static size_t check_pick(const GreedyPickArgs& a, const char* what) {
  FLINT_CHECK(a.head.dtype == DType::kF32 && a.head.num_experts == 1 && a.head.in % 4 == 0 &&
                  a.head.out > 0 && a.head.out <= (int64_t(1) << 31) && a.num_rows >= 1 &&
                  a.num_rows <= 32,
              "{}: FP32 head [{}, {}], {} rows", what, a.head.out, a.head.in, a.num_rows);
  FLINT_CHECK(a.approx != nullptr && a.x != nullptr && a.bounds != nullptr, "{}: null buffer",
              what);
  const size_t smem = size_t(dev::padded_len(a.head.in)) * sizeof(float);
  FLINT_CHECK(smem <= size_t(kMaxSmemBytes), "{}: rows of {} are too long to stage", what,
              a.head.in);
  return smem;
}

void greedy_pick(const GreedyPickArgs& a, cudaStream_t s) {
  const size_t smem = check_pick(a, "greedy_pick");
  FLINT_CHECK(a.keys != nullptr && a.tokens != nullptr, "greedy_pick: null buffer");
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(
        greedy_pick_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
    return true;
  }();
  (void)configured;
  const int64_t blocks = std::min<int64_t>(kPickBlocks, ceil_div(a.head.out, kThreads));
  const int64_t slice = ceil_div(a.head.out, blocks);
  launch_pdl(greedy_pick_kernel<false>, dim3(static_cast<unsigned>(blocks), a.num_rows),
             dim3(kThreads), smem, s, a, slice);
  launch_pdl(greedy_finish_kernel, dim3(1), dim3(32), 0, s, a.keys, a.tokens, a.num_rows);
}

void topk_logits(const GreedyPickArgs& a, cudaStream_t s) {
  const size_t smem = check_pick(a, "topk_logits");
  FLINT_CHECK(a.top_k != nullptr && a.maxima != nullptr && a.logits != nullptr,
              "topk_logits: null buffer");
  FLINT_CHECK((a.cand_count == nullptr) == (a.cand_ids == nullptr) &&
                  (a.cand_count == nullptr) == (a.cand_logits == nullptr),
              "topk_logits: a candidate list needs its count, ids and logits");
  static const bool configured = [] {
    for (const auto kernel : {greedy_pick_kernel<true>, topk_fill_kernel}) {
      FLINT_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
    }
    return true;
  }();
  (void)configured;
  const int64_t blocks = std::min<int64_t>(kPickBlocks, ceil_div(a.head.out, kThreads));
  const int64_t slice = ceil_div(a.head.out, blocks);
  const dim3 grid(static_cast<unsigned>(blocks), a.num_rows);
  launch_pdl(greedy_pick_kernel<true>, grid, dim3(kThreads), smem, s, a, slice);
  launch_pdl(topk_fill_kernel, grid, dim3(kThreads), smem, s, a, slice);
}

}  // namespace flint::cuda
