// Sampling: one cluster of 8 blocks per logits row; block r owns the r-th eighth of the row, staged
// in shared memory when it fits. The top-k and top-p thresholds are found by a radix search over
// the logits' order-preserving bits (11 + 11 + 10 bits: three passes) with per-block histograms
// merged through distributed shared memory. Counts and 2^-40 fixed-point masses are integers, so
// every sum is order-independent and a seed reproduces exactly. The draw inverts the CDF of the
// kept masses in token order with one uniform from Philox-4x32-10 keyed by the seed, counter the
// step. Reference: engine::sample_token (logits_processor.cpp)   Test:
// tests/kernels/sampling_test.cpp
#include <cooperative_groups.h>

#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/sampling.h"

namespace flint::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;  // two blocks per SM: one waits at a cluster barrier, one works
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = 8;
constexpr int kBins = 2048;
constexpr int64_t kMaxStaged = 24576;         // floats of a block's slice held in shared memory
constexpr float kMassOne = 1099511627776.0f;  // 2^40: fixed-point unit of probability mass
constexpr float kMinLogRatio = -745.0f;       // exp() of less is 0 in double: not a candidate
constexpr unsigned kFull = 0xffffffffu;

using u64 = unsigned long long;

struct Smem {
  // This block's histogram of 64-bit sums as two 32-bit words: shared-memory atomics add 32 bits
  // natively (64-bit adds are compare-and-swap loops, which serialise under contention).
  uint32_t hist_lo[kBins];
  uint32_t hist_hi[kBins];
  u64 xchg[2][kCluster][3];  // values each cluster rank pushed, in alternating slots
  u64 warp_u[kWarps];
  float warp_v[kWarps];
  int warp_i[kWarps];
  int found_digit;
  u64 found_above, found_eq;
  int64_t tie_idx;
};

// The cluster of blocks that share one row.
struct Cluster {
  cg::cluster_group group;
  int rank;
  int slot = 0;

  // All-gather of three block-uniform values: returns q -> rank q's values at [3 q, 3 q + 3).
  // Exchanges alternate between two slots, so a block one exchange ahead never overwrites values
  // another has yet to read; callers read the result before their next exchange.
  __device__ const u64* exchange(Smem& sm, u64 a, u64 b, u64 c) {
    if (threadIdx.x < kCluster) {
      u64* dst = group.map_shared_rank(&sm.xchg[slot][rank][0], threadIdx.x);
      dst[0] = a;
      dst[1] = b;
      dst[2] = c;
    }
    group.sync();
    const u64* out = &sm.xchg[slot][0][0];
    slot ^= 1;
    return out;
  }
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

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Block-wide (max value, lowest index among equals), returned to every thread.
__device__ void block_argmax(float& v, int& i, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    take_better(v, i, __shfl_xor_sync(kFull, v, o), __shfl_xor_sync(kFull, i, o));
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
    const u64 other = __shfl_down_sync(kFull, incl, o);
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

// hist[b] += w on the (lo, hi) word pair; the low word's carry goes to the high word, so the pair
// holds the exact 64-bit sum once every add is done.
__device__ __forceinline__ void add_wide(Smem& sm, uint32_t b, u64 w) {
  const uint32_t wl = static_cast<uint32_t>(w);
  const uint32_t old = atomicAdd(&sm.hist_lo[b], wl);
  const uint32_t wh = static_cast<uint32_t>(w >> 32) + (old + wl < old ? 1u : 0u);
  if (wh != 0) atomicAdd(&sm.hist_hi[b], wh);
}

// Among the row's elements that key_of admits with weight_of > 0 (this block: local indices
// [0, n)), finds the key K with W(key > K) < target <= W(key >= K), W the summed weights across
// the cluster and target = target_of(W(all)). Returns false when target is 0 or above W(all).
// *above = W(> K), *equal = W(== K). Uniform across the cluster.
template <typename KeyOf, typename WeightOf, typename TargetOf>
__device__ bool radix_search(const KeyOf& key_of, const WeightOf& weight_of,
                             const TargetOf& target_of, int n, Smem& sm, Cluster& cl, uint32_t* key,
                             u64* target, u64* above, u64* equal) {
  const int lane = threadIdx.x & 31;
  uint32_t prefix = 0, mask = 0;
  u64 base = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nb = pass == 2 ? 1024 : 2048;
    for (int b = threadIdx.x; b < nb; b += kThreads) {
      sm.hist_lo[b] = 0;
      sm.hist_hi[b] = 0;
    }
    if (threadIdx.x == 0) sm.found_digit = -1;
    __syncthreads();
    for (int i0 = threadIdx.x & ~31; i0 < n; i0 += kThreads) {
      const int i = i0 + lane;
      uint32_t k = 0;
      u64 w = 0;
      if (i < n && key_of(i, k) && (k & mask) == prefix) w = weight_of(i);
      const uint32_t b = (k >> shift) & uint32_t(nb - 1);
      // A warp whose lanes all add to one bin (ties, a narrow row) sums first: one atomic, not 32.
      const uint32_t b0 = __shfl_sync(kFull, b, 0);
      if (__all_sync(kFull, w > 0 && b == b0)) {
        w = warp_sum(w);
        if (lane == 0) add_wide(sm, b, w);
      } else if (w > 0) {
        add_wide(sm, b, w);
      }
    }
    cl.group.sync();  // every block's histogram is complete
    // Block r merges the r-th segment of the bins across the cluster; thread t holds one bin.
    const int seg = nb / kCluster;
    const int bin = cl.rank * seg + static_cast<int>(threadIdx.x);
    u64 mine = 0;
    if (static_cast<int>(threadIdx.x) < seg) {
      for (int q = 0; q < kCluster; ++q) {
        const Smem* other = cl.group.map_shared_rank(&sm, q);
        mine += (u64(other->hist_hi[bin]) << 32) + other->hist_lo[bin];
      }
    }
    u64 seg_total;
    const u64 in_seg_above = block_sum_above(mine, &seg_total, sm);
    const u64* x = cl.exchange(sm, seg_total, 0, 0);
    u64 all = 0, higher = 0;
    for (int q = 0; q < kCluster; ++q) {
      all += x[3 * q];
      if (q > cl.rank) higher += x[3 * q];
    }
    if (pass == 0) *target = target_of(all);
    if (*target == 0 || base + all < *target) return false;  // (base < target holds)
    const u64 gt = base + higher + in_seg_above;
    if (static_cast<int>(threadIdx.x) < seg && gt < *target && *target <= gt + mine) {
      sm.found_digit = bin;
      sm.found_above = gt;
      sm.found_eq = mine;
    }
    __syncthreads();
    const int d = sm.found_digit;
    x = cl.exchange(sm, d >= 0 ? u64(d) : ~0ull, sm.found_above, sm.found_eq);
    for (int q = 0; q < kCluster; ++q) {
      if (x[3 * q] != ~0ull) {
        prefix |= uint32_t(x[3 * q]) << shift;
        base = x[3 * q + 1];
        *equal = x[3 * q + 2];
      }
    }
    mask |= uint32_t(nb - 1) << shift;
  }
  *key = prefix;
  *above = base;
  return true;
}

// The row index of the need-th (1-based) element, in index order, that key_of admits with key K;
// this block holds local indices [0, n) from row index start.
template <typename KeyOf>
__device__ int64_t nth_with_key(const KeyOf& key_of, int n, int64_t start, int64_t vocab,
                                uint32_t K, u64 need, Smem& sm, Cluster& cl) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 count = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    uint32_t k;
    count += key_of(i, k) && k == K;
  }
  u64 block_count;
  block_sum_above(count, &block_count, sm);
  const u64* x = cl.exchange(sm, block_count, 0, 0);
  u64 before = 0;
  for (int q = 0; q < cl.rank; ++q) before += x[3 * q];
  if (threadIdx.x == 0) sm.tie_idx = INT64_MAX;
  __syncthreads();
  if (before < need && need <= before + block_count) {  // this block holds it
    const u64 local_need = need - before;
    u64 seen = 0;
    for (int tile = 0; tile < n; tile += kThreads) {
      const int i = tile + static_cast<int>(threadIdx.x);
      uint32_t k = 0;
      const bool hit = i < n && key_of(i, k) && k == K;
      const unsigned ballot = __ballot_sync(kFull, hit);
      if (lane == 0) sm.warp_u[warp] = __popc(ballot);
      __syncthreads();
      u64 ahead = 0, tile_count = 0;
      for (int w = 0; w < kWarps; ++w) {
        tile_count += sm.warp_u[w];
        if (w < warp) ahead += sm.warp_u[w];
      }
      const u64 rank = seen + ahead + __popc(ballot & ((1u << lane) - 1u));
      if (hit && rank + 1 == local_need) sm.tie_idx = start + i;
      __syncthreads();
      seen += tile_count;
      if (seen >= local_need) break;
    }
  }
  __syncthreads();
  x = cl.exchange(sm, static_cast<u64>(sm.tie_idx), 0, 0);
  int64_t idx = INT64_MAX;
  for (int q = 0; q < kCluster; ++q) idx = min(idx, static_cast<int64_t>(x[3 * q]));
  return idx == INT64_MAX ? vocab - 1 : idx;
}

// exp(x) in 2^-40 units (x <= 0); the fast exp's ~1e-6 relative error is far below what a
// sampled distribution can show.
__device__ __forceinline__ u64 fixed_mass(float x) { return __float2ull_rn(__expf(x) * kMassOne); }

// Draws token j with probability w(j) / sum w over the tokens kept(j) admits, by inverting the
// CDF in token order: blocks hold contiguous slices in rank order and warps contiguous ranges of
// a slice; the warp holding the target scans its range and writes *token. `fallback` is written
// when nothing is kept.
template <typename Kept>
__device__ void draw(const Kept& kept, int n, int64_t start, double u, int fallback, int32_t* token,
                     Smem& sm, Cluster& cl) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunk = (n + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int begin = warp * chunk, end = begin + chunk < n ? begin + chunk : n;
  u64 mine = 0;
  for (int i = begin + lane; i < end; i += 32) mine += kept(i);
  mine = warp_sum(mine);
  if (lane == 0) sm.warp_u[warp] = mine;
  __syncthreads();
  u64 block_total = 0, before = 0;
  for (int w = 0; w < kWarps; ++w) {
    block_total += sm.warp_u[w];
    if (w < warp) before += sm.warp_u[w];
  }
  const u64* x = cl.exchange(sm, block_total, 0, 0);
  u64 total = 0;
  for (int q = 0; q < kCluster; ++q) {
    total += x[3 * q];
    if (q < cl.rank) before += x[3 * q];
  }
  if (total == 0) {
    if (cl.rank == 0 && threadIdx.x == 0) *token = fallback;
    return;
  }
  u64 target = static_cast<u64>(u * static_cast<double>(total));
  if (target >= total) target = total - 1;
  if (before <= target && target < before + mine) {  // this warp holds it
    u64 run = before;
    for (int i0 = begin; i0 < end; i0 += 32) {
      const int i = i0 + lane;
      const u64 w = i < end ? kept(i) : 0;
      u64 incl = w;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 other = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += other;
      }
      if (w > 0 && run + incl - w <= target && target < run + incl) {
        *token = static_cast<int32_t>(start + i);
      }
      run += __shfl_sync(kFull, incl, 31);
      if (run > target) break;
    }
  }
}

template <bool kStaged>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, 2)
    sample_kernel(int32_t* __restrict__ tokens, const float* __restrict__ logits,
                  const SampleParams* __restrict__ params, int64_t vocab, int64_t per_block) {
  extern __shared__ float4 staged_f4[];  // [per_block] when kStaged
  __shared__ Smem sm;
  Cluster cl{cg::this_cluster(), static_cast<int>(cg::this_cluster().block_rank())};
  const int row_id = blockIdx.y;
  const SampleParams prm = params[row_id];
  const float* row = logits + int64_t(row_id) * vocab;
  const int64_t start = min(vocab, cl.rank * per_block);
  const int n = static_cast<int>(min(vocab, start + per_block) - start);

  float m = -FLT_MAX;
  int best = static_cast<int>(vocab);
  const float* src = row + start;
  if constexpr (kStaged) {
    float* buf = reinterpret_cast<float*>(staged_f4);
    int i = threadIdx.x;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
      const int n4 = n / 4;
      for (int q = threadIdx.x; q < n4; q += kThreads) {
        const float4 v = __ldcs(reinterpret_cast<const float4*>(src) + q);
        staged_f4[q] = v;
        const int j = static_cast<int>(start) + 4 * q;
        take_better(m, best, v.x, j);
        take_better(m, best, v.y, j + 1);
        take_better(m, best, v.z, j + 2);
        take_better(m, best, v.w, j + 3);
      }
      i = 4 * n4 + threadIdx.x;
    }
    for (; i < n; i += kThreads) {
      const float v = src[i];
      buf[i] = v;
      take_better(m, best, v, static_cast<int>(start) + i);
    }
    src = buf;
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      take_better(m, best, src[i], static_cast<int>(start) + i);
    }
  }
  block_argmax(m, best, sm);  // its barriers also publish the staged slice
  {
    const u64* x = cl.exchange(sm, __float_as_uint(m), static_cast<u64>(best), 0);
    for (int q = 0; q < kCluster; ++q) {
      take_better(m, best, __uint_as_float(static_cast<uint32_t>(x[3 * q])),
                  static_cast<int>(x[3 * q + 1]));
    }
  }
  if (best >= vocab) best = 0;
  m = row[best];
  if (prm.temperature < 1e-5f || !isfinite(m)) {
    if (cl.rank == 0 && threadIdx.x == 0) tokens[row_id] = best;
    return;
  }
  const float inv_t = 1.0f / prm.temperature;
  // p >= min_p as a bound on x = log p (the host compares p itself; they differ only within a
  // rounding error of the boundary).
  const float log_min_p = prm.min_p > 0.0f ? logf(prm.min_p) : -FLT_MAX;
  // Candidates after min_p (key: the logit's ordered bits); i is a local index.
  auto c0 = [&](int i, uint32_t& key) {
    const float l = src[i];
    const float x = (l - m) * inv_t;
    key = ordered_key(l);
    return x > kMinLogRatio && x >= log_min_p;
  };
  auto mass = [&](int i) { return fixed_mass((src[i] - m) * inv_t); };
  // ... then top_k: key > kk, or == kk at a row index <= kcut.
  uint32_t kk = 0;
  int64_t kcut = vocab;
  if (prm.top_k > 0 && prm.top_k < vocab) {
    u64 target = 0, above = 0, equal = 0;
    auto one = [](int) -> u64 { return 1; };
    auto top_k = [&](u64) -> u64 { return static_cast<u64>(prm.top_k); };
    if (radix_search(c0, one, top_k, n, sm, cl, &kk, &target, &above, &equal)) {
      const u64 need = target - above;
      if (need < equal) kcut = nth_with_key(c0, n, start, vocab, kk, need, sm, cl);
    } else {
      kk = 0;  // fewer candidates than top_k: keep them all
    }
  }
  auto c1 = [&](int i, uint32_t& key) {
    if (!c0(i, key)) return false;
    return !(key < kk || (key == kk && start + i > kcut));
  };
  // ... then top_p over the remaining mass: key > pk, or == pk at a row index <= pcut.
  uint32_t pk = 0;
  int64_t pcut = vocab;
  if (prm.top_p < 1.0f) {
    u64 target = 0, above = 0, equal = 0;
    auto top_p = [&](u64 total) -> u64 {
      if (total == 0) return 0;
      const u64 t = static_cast<u64>(ceil(static_cast<double>(prm.top_p) * double(total)));
      return t < 1 ? 1 : t > total ? total : t;
    };
    if (radix_search(c1, mass, top_p, n, sm, cl, &pk, &target, &above, &equal)) {
      const u64 wk = fixed_mass((key_value(pk) - m) * inv_t);
      const u64 need = (target - above + wk - 1) / wk;
      if (need < equal / wk) pcut = nth_with_key(c1, n, start, vocab, pk, need, sm, cl);
    } else {
      pk = 0;
    }
  }
  // The draw, over the tokens that pass every filter.
  auto kept = [&](int i) -> u64 {
    uint32_t key;
    if (!c1(i, key) || key < pk || (key == pk && start + i > pcut)) return 0;
    return mass(i);
  };
  draw(kept, n, start, uniform(prm.seed, prm.step), best, tokens + row_id, sm, cl);
}

}  // namespace

void sample(int32_t* tokens, const float* logits, const SampleParams* params, int num_rows,
            int64_t vocab, cudaStream_t s) {
  FLINT_CHECK(vocab > 0 && vocab < (int64_t(1) << 31), "sample: vocab {}", vocab);
  FLINT_CHECK(num_rows >= 0 && num_rows <= 65535, "sample: {} rows (at most 65535)", num_rows);
  if (num_rows == 0) return;
  const int64_t per_block = ceil_div(ceil_div(vocab, kCluster), 4) * 4;  // 16-byte aligned slices
  const dim3 grid(kCluster, num_rows);
  if (per_block <= kMaxStaged) {
    // Once per process; not a stream operation, so graph capture is unaffected.
    static const cudaError_t configured =
        cudaFuncSetAttribute(sample_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kMaxStaged * sizeof(float)));
    FLINT_CUDA_CHECK(configured);
    sample_kernel<true><<<grid, kThreads, per_block * sizeof(float), s>>>(tokens, logits, params,
                                                                          vocab, per_block);
  } else {
    sample_kernel<false><<<grid, kThreads, 0, s>>>(tokens, logits, params, vocab, per_block);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
