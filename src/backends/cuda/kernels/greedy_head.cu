// The greedy LM head's load-time copy and its per-step pick (greedy_head.h).
#include <cuda_bf16.h>

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
// The one-row FP32 GEMV's chunks per lane per pass (gemv_unroll<kF32, false, 1>): the exact
// logits must be summed in its order.
constexpr int kF32Unroll = 4;
constexpr int kMaxSmemBytes = 200 * 1024;  // the staged row, as gemv allows it
static_assert(kF32Unroll == dev::gemv_unroll<DType::kF32, false, 1>(),
              "greedy_pick sums the FP32 head's rows as gemv does");

// One warp a row: the bf16 copy, and the norm as a double sum rounded up to a float.
__global__ void __launch_bounds__(kThreads)
    greedy_prepare_kernel(uint16_t* __restrict__ hi, float* __restrict__ norms, int32_t* bad,
                          const float* __restrict__ w, int64_t V, int64_t d) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= V) return;
  const float4* src = reinterpret_cast<const float4*>(w + r * d);
  uint2* dst = reinterpret_cast<uint2*>(hi + r * d);
  double ss = 0.0;
  bool finite = true;
  for (int64_t j = lane; j < d / 4; j += 32) {
    const float4 v = src[j];
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    finite = finite && isfinite(__low2float(a)) && isfinite(__high2float(a)) &&
             isfinite(__low2float(b)) && isfinite(__high2float(b));
    dst[j] =
        make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
    ss += double(v.x) * v.x + double(v.y) * v.y + double(v.z) * v.z + double(v.w) * v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  // A double sum of d float squares (each exact in a double) is within d * 2^-53 of exact
  // (relative): the factor 1 + d * 2^-52 covers that, and the square root and the float
  // conversion both round up, so the norm is at least ||W_r||.
  const float n = __double2float_ru(__dsqrt_ru(ss * (1.0 + double(d) * 0x1p-52)));
  if (lane == 0) norms[r] = n;
  if (!__all_sync(0xffffffffu, finite) || !isfinite(n)) {
    if (lane == 0) *bad = 1;
  }
}

// The key of a logit for the pick: larger values first, then lower rows; 0 for a value argmax
// would never take (NaN, or below -FLT_MAX).
__device__ __forceinline__ uint64_t pick_key(float v, int64_t r) {
  if (!(v >= -FLT_MAX)) return 0;
  const uint32_t u = __float_as_uint(v);
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(ord) << 32) | uint64_t(0xffffffffu - uint32_t(r));
}

__global__ void __launch_bounds__(kThreads) greedy_pick_kernel(GreedyPickArgs a, int64_t slice) {
  using C = dev::Chunk<DType::kF32>;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float s_ss[kWarps];
  dev::pdl_launch_dependents();
  const int t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t K = a.head.in, V = a.head.out, PK = dev::padded_len(K), nc = K / C::kElems;
  dev::NormPrefetch pf;
  dev::prefetch_norm(pf, a.norm, K);
  dev::pdl_wait();
  // x', staged and scaled as the FP32 head's GEMV stages it.
  const int64_t xrow[1] = {a.x_rows != nullptr ? a.x_rows[t] : t};
  dev::stage_rows<1>(xs, PK, a.x, a.x_stride, xrow, 1, K, a.norm, pf);
  const float inv = a.norm != nullptr ? dev::staged_inv<1, kWarps>(0, K, a.eps) : 1.0f;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < K / 4; j += kThreads) {
    const float4 v = *reinterpret_cast<const float4*>(xs + dev::pad_idx(4 * j));
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = dev::warp_sum(ss);
  if (lane == 0) s_ss[warp] = ss;
  __syncthreads();
  float tot = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) tot += s_ss[w];
  const float bx = kGreedyBound * sqrtf(tot) * inv;  // B_r = bx * norms[r]
  const float* ap = a.approx + int64_t(t) * V;
  // M: the largest a_r - B_r of this block's rows. Each is at most its l_r, so M is at most the
  // largest logit: a lower bound the winner's a_r + B_r reaches, from the block that holds it.
  const int64_t begin = int64_t(blockIdx.x) * slice, end = min(V, begin + slice);
  float lo = __int_as_float(0xff800000);  // -inf
  for (int64_t r = begin + threadIdx.x; r < end; r += kThreads) {
    lo = fmaxf(lo, __ldcg(ap + r) - bx * __ldg(a.norms + r));
  }
  lo = dev::warp_max(lo);
  __syncthreads();  // s_ss is read above
  if (lane == 0) s_ss[warp] = lo;
  __syncthreads();
  float M = s_ss[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_ss[w]);
  const bool all = !(isfinite(bx) && isfinite(M));
  // The exact logit of row r, by the whole warp, as gemv_block sums the one-row FP32 head.
  auto exact = [&](int64_t r) {
    C wa[1][kF32Unroll], wb[1][kF32Unroll];
    const int64_t row[1] = {r};
    const bool valid[1] = {true};
    float acc_a[1][1] = {{0.0f}}, acc_b[1][1] = {{0.0f}};
    dev::load_chunks<DType::kF32, false, 1, kF32Unroll>(wa, wb, a.head, a.head, row, valid, 0, nc);
    for (int64_t base = 0; base < nc; base += 32 * kF32Unroll) {
      if (base > 0) {
        dev::load_chunks<DType::kF32, false, 1, kF32Unroll>(wa, wb, a.head, a.head, row, valid,
                                                            base, nc);
      }
      dev::accumulate_chunks<DType::kF32, 1, false, 1, kF32Unroll>(wa, wb, valid, base, nc, xs, PK,
                                                                   1, acc_a, acc_b);
    }
    return dev::warp_sum(acc_a[0][0]) * dev::row_scale(a.head, r) * inv;
  };
  uint64_t best = 0;
  for (int64_t base = begin + warp * 32; base < end; base += kThreads) {
    const int64_t r = base + lane;
    const bool cand = r < end && (all || !(__ldcg(ap + r) + bx * __ldg(a.norms + r) < M));
    for (uint32_t mask = __ballot_sync(0xffffffffu, cand); mask != 0; mask &= mask - 1) {
      const int64_t rc = base + __ffs(mask) - 1;
      const uint64_t k = pick_key(exact(rc), rc);
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

}  // namespace

void greedy_head_prepare(uint16_t* hi, float* norms, int32_t* bad, const LinearRef& w,
                         cudaStream_t s) {
  FLINT_CHECK(w.dtype == DType::kF32 && w.num_experts == 1 && w.row_scale == nullptr &&
                  w.in % 4 == 0 && w.w != nullptr,
              "greedy_head_prepare: an FP32 matrix [{}, {}] without row scales", w.out, w.in);
  if (w.out == 0) return;
  const auto blocks = static_cast<unsigned>(ceil_div(w.out, kWarps));
  greedy_prepare_kernel<<<blocks, kThreads, 0, s>>>(hi, norms, bad, static_cast<const float*>(w.w),
                                                    w.out, w.in);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void greedy_pick(const GreedyPickArgs& a, cudaStream_t s) {
  FLINT_CHECK(a.head.dtype == DType::kF32 && a.head.num_experts == 1 && a.head.in % 4 == 0 &&
                  a.head.out > 0 && a.head.out <= (int64_t(1) << 31) && a.num_rows >= 1 &&
                  a.num_rows <= 32,
              "greedy_pick: FP32 head [{}, {}], {} rows", a.head.out, a.head.in, a.num_rows);
  FLINT_CHECK(a.approx != nullptr && a.x != nullptr && a.norms != nullptr && a.keys != nullptr &&
                  a.tokens != nullptr,
              "greedy_pick: null buffer");
  const size_t smem = size_t(dev::padded_len(a.head.in)) * sizeof(float);
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(
        greedy_pick_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
    return true;
  }();
  (void)configured;
  FLINT_CHECK(smem <= size_t(kMaxSmemBytes), "greedy_pick: rows of {} are too long to stage",
              a.head.in);
  const int64_t blocks = std::min<int64_t>(kPickBlocks, ceil_div(a.head.out, kThreads));
  const int64_t slice = ceil_div(a.head.out, blocks);
  launch_pdl(greedy_pick_kernel, dim3(static_cast<unsigned>(blocks), a.num_rows), dim3(kThreads),
             smem, s, a, slice);
  launch_pdl(greedy_finish_kernel, dim3(1), dim3(32), 0, s, a.keys, a.tokens, a.num_rows);
}

}  // namespace flint::cuda
