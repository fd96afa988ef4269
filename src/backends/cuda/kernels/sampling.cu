// Sampling: one 1024-thread block per logits row, no sort. The top-k and top-p thresholds are found
// by a radix search over the logits' order-preserving bits (11 + 11 + 10 bits: three passes), with
// integer counts and 2^-40 fixed-point masses so that every sum is order-independent and a seed
// reproduces exactly. The draw inverts the CDF of the kept masses in token order with one uniform
// from Philox-4x32-10 keyed by the seed, counter the step.
// Reference: engine::sample_token (logits_processor.cpp)   Test: tests/kernels/sampling_test.cpp
#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/sampling.h"

namespace flint::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;
constexpr float kMassOne = 1099511627776.0f;  // 2^40: fixed-point unit of probability mass
constexpr float kMinLogRatio = -745.0f;       // exp() of less is 0 in double: not a candidate

using u64 = unsigned long long;

struct Smem {
  u64 hist[kBins];
  u64 warp_u[kWarps];
  float warp_v[kWarps];
  int warp_i[kWarps];
  int found_digit;
  u64 found_above, found_eq;
  int64_t tie_idx;
};

// Order-preserving map of a float's bits to an unsigned key (larger float, larger key).
__device__ __forceinline__ uint32_t ordered_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Philox-4x32-10 (Salmon et al., SC'11).
__device__ __forceinline__ uint4 philox(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}

// A uniform double in [0, 1) with 53 random bits, a pure function of (seed, step).
__device__ __forceinline__ double uniform(uint64_t seed, uint64_t step) {
  const uint4 r =
      philox(make_uint4(static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u),
             make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  return static_cast<double>((uint64_t(r.x) << 32 | r.y) >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ void take_better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// Block-wide (max value, lowest index among equals), returned to every thread.
__device__ void block_argmax(float& v, int& i, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    take_better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  }
  if ((threadIdx.x & 31) == 0) {
    sm.warp_v[threadIdx.x >> 5] = v;
    sm.warp_i[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  v = sm.warp_v[0];
  i = sm.warp_i[0];
  for (int w = 1; w < kWarps; ++w) take_better(v, i, sm.warp_v[w], sm.warp_i[w]);
  __syncthreads();
}

// Sum over the threads above this one (higher threadIdx), and the block total.
__device__ u64 block_sum_above(u64 v, u64* total, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 incl = v;  // inclusive suffix sum within the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 other = __shfl_down_sync(0xffffffffu, incl, o);
    if (lane + o < 32) incl += other;
  }
  if (lane == 0) sm.warp_u[warp] = incl;
  __syncthreads();
  u64 higher = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    all += sm.warp_u[w];
    if (w > warp) higher += sm.warp_u[w];
  }
  __syncthreads();
  *total = all;
  return incl - v + higher;
}

// Among the elements elem() includes, finds the key K with W(key > K) < target <= W(key >= K),
// W the summed weights. Returns false when all of them weigh less than target. *above = W(> K),
// *equal = W(== K).
template <typename Elem>
__device__ bool radix_search(const Elem& elem, int64_t vocab, u64 target, Smem& sm, uint32_t* key,
                             u64* above, u64* equal) {
  uint32_t prefix = 0, mask = 0;
  u64 base = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nb = pass == 2 ? 1024 : 2048;
    for (int b = threadIdx.x; b < nb; b += kThreads) sm.hist[b] = 0;
    if (threadIdx.x == 0) sm.found_digit = -1;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      uint32_t k;
      u64 w;
      if (elem(j, k, w) && w > 0 && (k & mask) == prefix) {
        atomicAdd(&sm.hist[(k >> shift) & uint32_t(nb - 1)], w);
      }
    }
    __syncthreads();
    const int per = nb / kThreads;  // bins [per * t, per * t + per) belong to thread t
    const int b0 = per * threadIdx.x;
    u64 mine = 0;
    for (int b = b0; b < b0 + per; ++b) mine += sm.hist[b];
    u64 total;
    u64 gt = base + block_sum_above(mine, &total, sm);
    for (int b = b0 + per - 1; b >= b0; --b) {
      const u64 ge = gt + sm.hist[b];
      if (gt < target && target <= ge) {
        sm.found_digit = b;
        sm.found_above = gt;
        sm.found_eq = sm.hist[b];
      }
      gt = ge;
    }
    __syncthreads();
    const int d = sm.found_digit;
    base = sm.found_above;
    *equal = sm.found_eq;
    __syncthreads();
    if (d < 0) return false;
    prefix |= uint32_t(d) << shift;
    mask |= uint32_t(nb - 1) << shift;
  }
  *key = prefix;
  *above = base;
  return true;
}

// The index of the need-th (1-based) element, in index order, that elem() includes with key K.
template <typename Elem>
__device__ int64_t nth_with_key(const Elem& elem, int64_t vocab, uint32_t K, u64 need, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 seen = 0;
  if (threadIdx.x == 0) sm.tie_idx = vocab - 1;
  for (int64_t tile = 0; tile < vocab; tile += kThreads) {
    const int64_t j = tile + threadIdx.x;
    uint32_t k = 0;
    u64 w = 0;
    const bool hit = j < vocab && elem(j, k, w) && w > 0 && k == K;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) sm.warp_u[warp] = __popc(ballot);
    __syncthreads();
    u64 before = 0, count = 0;
    for (int w2 = 0; w2 < kWarps; ++w2) {
      count += sm.warp_u[w2];
      if (w2 < warp) before += sm.warp_u[w2];
    }
    const u64 rank = seen + before + __popc(ballot & ((1u << lane) - 1u));
    if (hit && rank + 1 == need) sm.tie_idx = j;
    __syncthreads();
    seen += count;
    if (seen >= need) break;
  }
  const int64_t idx = sm.tie_idx;
  __syncthreads();
  return idx;
}

// exp(x) in 2^-40 units (x <= 0); the fast exp's ~1e-6 relative error is far below what a
// sampled distribution can show.
__device__ __forceinline__ u64 fixed_mass(float x) { return __float2ull_rn(__expf(x) * kMassOne); }

// Draws token j with probability w(j) / sum w over the tokens kept(j) admits, by inverting the
// CDF in token order: warp w owns a contiguous range, the warp holding the target scans it.
template <typename Kept>
__device__ int draw(const Kept& kept, int64_t vocab, double u, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t chunk = (vocab + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int64_t begin = warp * chunk, end = begin + chunk < vocab ? begin + chunk : vocab;
  u64 mine = 0;
  for (int64_t j = begin + lane; j < end; j += 32) mine += kept(j);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, o);
  if (lane == 0) sm.warp_u[warp] = mine;
  if (threadIdx.x == 0) sm.tie_idx = -1;
  __syncthreads();
  u64 total = 0, before = 0;
  for (int w = 0; w < kWarps; ++w) {
    total += sm.warp_u[w];
    if (w < warp) before += sm.warp_u[w];
  }
  if (total > 0) {
    u64 target = static_cast<u64>(u * static_cast<double>(total));
    if (target >= total) target = total - 1;
    if (before <= target && target < before + mine) {  // this warp holds it
      u64 run = before;
      for (int64_t base = begin; base < end; base += 32) {
        const int64_t j = base + lane;
        const u64 w = j < end ? kept(j) : 0;
        u64 incl = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const u64 other = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += other;
        }
        if (w > 0 && run + incl - w <= target && target < run + incl) sm.tie_idx = j;
        run += __shfl_sync(0xffffffffu, incl, 31);
        if (run > target) break;
      }
    }
  }
  __syncthreads();
  const int64_t pick = sm.tie_idx;
  __syncthreads();
  return static_cast<int>(pick);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(int32_t* __restrict__ tokens, const float* __restrict__ logits,
                  const SampleParams* __restrict__ params, int64_t vocab) {
  __shared__ Smem sm;
  const SampleParams prm = params[blockIdx.x];
  const float* row = logits + int64_t(blockIdx.x) * vocab;

  float m = -FLT_MAX;
  int best = static_cast<int>(vocab);
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) take_better(m, best, row[j], int(j));
  block_argmax(m, best, sm);
  if (best >= vocab) best = 0;
  m = row[best];
  if (prm.temperature < 1e-5f || !isfinite(m)) {
    if (threadIdx.x == 0) tokens[blockIdx.x] = best;
    return;
  }
  const float inv_t = 1.0f / prm.temperature;
  // p >= min_p as a bound on x = log p (the host compares p itself; they differ only within a
  // rounding error of the boundary).
  const float log_min_p = prm.min_p > 0.0f ? logf(prm.min_p) : -FLT_MAX;
  // Candidates after min_p (key: the logit's ordered bits; weight 1).
  auto c0 = [&](int64_t j, uint32_t& key, u64& w) {
    const float l = row[j];
    const float x = (l - m) * inv_t;
    key = ordered_key(l);
    w = 1;
    return x > kMinLogRatio && x >= log_min_p;
  };
  // ... then top_k: key > kk, or == kk at an index <= kcut.
  uint32_t kk = 0;
  int64_t kcut = vocab;
  if (prm.top_k > 0 && prm.top_k < vocab) {
    u64 above = 0, equal = 0;
    if (radix_search(c0, vocab, u64(prm.top_k), sm, &kk, &above, &equal)) {
      const u64 need = u64(prm.top_k) - above;
      if (need < equal) kcut = nth_with_key(c0, vocab, kk, need, sm);
    } else {
      kk = 0;  // fewer candidates than top_k: keep them all
    }
  }
  auto c1 = [&](int64_t j, uint32_t& key, u64& w) {
    if (!c0(j, key, w)) return false;
    if (key < kk || (key == kk && j > kcut)) return false;
    w = fixed_mass((row[j] - m) * inv_t);
    return true;
  };
  // ... then top_p over the remaining mass: key > pk, or == pk at an index <= pcut.
  uint32_t pk = 0;
  int64_t pcut = vocab;
  if (prm.top_p < 1.0f) {
    u64 mine = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      uint32_t key;
      u64 w;
      if (c1(j, key, w)) mine += w;
    }
    u64 mass;
    block_sum_above(mine, &mass, sm);
    u64 target = static_cast<u64>(ceil(static_cast<double>(prm.top_p) * static_cast<double>(mass)));
    target = target < 1 ? 1 : target > mass ? mass : target;
    u64 above = 0, equal = 0;
    if (mass > 0 && radix_search(c1, vocab, target, sm, &pk, &above, &equal)) {
      const u64 wk = fixed_mass((key_value(pk) - m) * inv_t);
      const u64 need = (target - above + wk - 1) / wk;
      if (need < equal / wk) pcut = nth_with_key(c1, vocab, pk, need, sm);
    } else {
      pk = 0;
    }
  }
  // The draw, over the tokens that pass every filter.
  auto kept = [&](int64_t j) -> u64 {
    uint32_t key;
    u64 w;
    if (!c1(j, key, w) || key < pk || (key == pk && j > pcut)) return 0;
    return w;
  };
  const int pick = draw(kept, vocab, uniform(prm.seed, prm.step), sm);
  if (threadIdx.x == 0) tokens[blockIdx.x] = pick >= 0 ? pick : best;
}

}  // namespace

void sample(int32_t* tokens, const float* logits, const SampleParams* params, int num_rows,
            int64_t vocab, cudaStream_t s) {
  FLINT_CHECK(vocab > 0 && vocab < (int64_t(1) << 31), "sample: vocab {}", vocab);
  if (num_rows == 0) return;
  sample_kernel<<<num_rows, kThreads, 0, s>>>(tokens, logits, params, vocab);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
