// Sampling: one cluster of 8 blocks per logits row; block r owns the r-th eighth of the row, staged
// in shared memory when it fits. A top-k or top-p cut is found in one pass: a histogram over 1024
// buckets of x = (logit - max) / temperature, merged across the cluster through distributed shared
// memory, names the bucket that holds the cut; its elements (usually a few hundred) are gathered,
// sorted and walked. A bucket too crowded for that (ties) falls back to a radix search over the
// logits' order-preserving bits. Counts and 2^-40 fixed-point masses are integers, so every sum is
// order-independent and a seed reproduces exactly. The draw inverts the CDF of the kept masses in
// token order with one uniform from Philox-4x32-10 keyed by the seed, counter the step.
// A row that comes with a candidate list (topk_logits' rows: -inf but at a few tokens) is drawn
// by one block from the list alone, by the same rules and integer sums: the same token, without
// the pass over the row (NVFP4 b1 1K, H200: a top-k step 42 us slower than a greedy one before,
// 8 us after; docs/PERFORMANCE.md, thirty-second session).
// Reference: engine::sample_token (logits_processor.cpp)   Test: tests/kernels/sampling_test.cpp
#include <cooperative_groups.h>

#include <cfloat>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/sampling.h"

namespace flint::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;  // two blocks per SM: one waits at a cluster barrier, one works
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = 8;
constexpr int kBins = 2048;   // radix digits of the fallback search
constexpr int kXBins = 1024;  // buckets of x in the one-pass search
constexpr int kList = 2048;   // the most elements of the cut's bucket that are gathered and sorted
constexpr int64_t kMaxStaged = 24576;         // floats of a block's slice held in shared memory
constexpr float kMassOne = 1099511627776.0f;  // 2^40: fixed-point unit of probability mass
constexpr float kMinLogRatio = -745.0f;       // exp() of less is 0 in double: not a candidate
constexpr float kMinMassLogRatio = -28.5f;    // exp() of less is 0 in 2^-40 units: no mass
constexpr unsigned kFull = 0xffffffffu;

using u64 = unsigned long long;

struct Smem {
  // This block's histogram of 64-bit sums in 32-bit words: shared-memory atomics add 32 bits
  // natively (64-bit adds are compare-and-swap loops, which serialise under contention). The radix
  // search uses [0, 2 kBins) as low and high words; the bucket search [0, 4 kXBins) as a count and
  // three 14-bit slices of the weight.
  uint32_t hist[4 * kXBins];
  u64 list[kList];           // the cut's bucket: (key << 32 | ~row index), sorted descending
  u64 xchg[2][kCluster][4];  // values each cluster rank pushed, in alternating slots
  u64 warp_u[kWarps];
  float warp_v[kWarps];
  int warp_i[kWarps];
  int found_digit;
  uint32_t found_count, list_n;
  int cut_pos;
  u64 found_above, found_eq, found_packed;
  int64_t tie_idx;
};
static_assert(2 * kBins <= 4 * kXBins && 4 * kThreads >= kList);

// The cluster of blocks that share one row.
struct Cluster {
  cg::cluster_group group;
  int rank;
  int slot = 0;

  // All-gather of four block-uniform values: returns q -> rank q's values at [4 q, 4 q + 4).
  // Exchanges alternate between two slots, so a block one exchange ahead never overwrites values
  // another has yet to read; callers read the result before their next exchange.
  __device__ const u64* exchange(Smem& sm, u64 a, u64 b = 0, u64 c = 0, u64 d = 0) {
    if (threadIdx.x < kCluster) {
      u64* dst = group.map_shared_rank(&sm.xchg[slot][rank][0], threadIdx.x);
      dst[0] = a;
      dst[1] = b;
      dst[2] = c;
      dst[3] = d;
    }
    group.sync();
    const u64* out = &sm.xchg[slot][0][0];
    slot ^= 1;
    return out;
  }
};

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

__device__ __forceinline__ float finite_or_max(float v) { return isfinite(v) ? v : FLT_MAX; }

// Block-wide minimum, returned to every thread.
__device__ float block_min(float v, Smem& sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFull, v, o));
  if ((threadIdx.x & 31) == 0) sm.warp_v[threadIdx.x >> 5] = v;
  __syncthreads();
  v = sm.warp_v[0];
  for (int w = 1; w < kWarps; ++w) v = fminf(v, sm.warp_v[w]);
  __syncthreads();
  return v;
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
  const uint32_t old = atomicAdd(&sm.hist[b], wl);
  const uint32_t wh = static_cast<uint32_t>(w >> 32) + (old + wl < old ? 1u : 0u);
  if (wh != 0) atomicAdd(&sm.hist[kBins + b], wh);
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
      sm.hist[b] = 0;
      sm.hist[kBins + b] = 0;
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
        mine += (u64(other->hist[kBins + bin]) << 32) + other->hist[bin];
      }
    }
    u64 seg_total;
    const u64 in_seg_above = block_sum_above(mine, &seg_total, sm);
    const u64* x = cl.exchange(sm, seg_total);
    u64 all = 0, higher = 0;
    for (int q = 0; q < kCluster; ++q) {
      all += x[4 * q];
      if (q > cl.rank) higher += x[4 * q];
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
      if (x[4 * q] != ~0ull) {
        prefix |= uint32_t(x[4 * q]) << shift;
        base = x[4 * q + 1];
        *equal = x[4 * q + 2];
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
  const u64* x = cl.exchange(sm, block_count);
  u64 before = 0;
  for (int q = 0; q < cl.rank; ++q) before += x[4 * q];
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
  x = cl.exchange(sm, static_cast<u64>(sm.tie_idx));
  int64_t idx = INT64_MAX;
  for (int q = 0; q < kCluster; ++q) idx = min(idx, static_cast<int64_t>(x[4 * q]));
  return idx == INT64_MAX ? vocab - 1 : idx;
}

// exp(x) in 2^-40 units (x <= 0); the fast exp's ~1e-6 relative error is far below what a
// sampled distribution can show.
__device__ __forceinline__ u64 fixed_mass(float x) { return __float2ull_rn(__expf(x) * kMassOne); }

// x's bucket: kXBins - 1 for x = 0, 0 at and below the low end of the searched range. Monotone
// (a larger x never lands in a lower bucket), so equal logits share a bucket.
__device__ __forceinline__ uint32_t xbin(float x, float scale) {
  return kXBins - 1 - __float2uint_rz(fminf(-x * scale, static_cast<float>(kXBins - 1)));
}

// hist[b] += (count, w): w in three 14-bit slices, so that no 32-bit word overflows for up to 2^18
// elements per block and the adds need no carry (their results are not waited for).
__device__ __forceinline__ void add_split(Smem& sm, uint32_t b, u64 w, uint32_t count) {
  atomicAdd(&sm.hist[b], count);
  const uint32_t w0 = static_cast<uint32_t>(w) & 0x3fffu;
  const uint32_t w1 = static_cast<uint32_t>(w >> 14) & 0x3fffu;
  const uint32_t w2 = static_cast<uint32_t>(w >> 28);
  if (w0 != 0) atomicAdd(&sm.hist[kXBins + b], w0);
  if (w1 != 0) atomicAdd(&sm.hist[2 * kXBins + b], w1);
  if (w2 != 0) atomicAdd(&sm.hist[3 * kXBins + b], w2);
}

// The top-p filter's target mass: ceil(top_p x total), at least 1 and at most total (0 for none).
__device__ __forceinline__ u64 top_p_target(float top_p, u64 total) {
  if (total == 0) return 0;
  const u64 t = static_cast<u64>(ceil(static_cast<double>(top_p) * double(total)));
  return t < 1 ? 1 : t > total ? total : t;
}

// The draw's position in [0, total) of the kept masses, from the uniform u (total > 0).
__device__ __forceinline__ u64 draw_target(double u, u64 total) {
  const u64 t = static_cast<u64>(u * static_cast<double>(total));
  return t >= total ? total - 1 : t;
}

// Sorts a[0, p) descending; p a power of two.
__device__ void bitonic_sort_desc(u64* a, int p) {
  for (int k = 2; k <= p; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int l = i ^ j;
        if (l > i) {
          const u64 x = a[i], y = a[l];
          if ((i & k) == 0 ? x < y : x > y) {
            a[i] = y;
            a[l] = x;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The cut of a top-k or top-p filter over the elements key_of admits with weight_of > 0: in the
// order (key descending, row index ascending), the first element at which the running weight
// reaches target = target_of(total weight). Returns false when target is 0 or above the total;
// else *key = its key and *cut = its row index (the filter keeps key > *key, and key == *key at a
// row index <= *cut). key_weight(k) is the weight of an element with key k; x_of(i) its x, whose
// buckets span [-kXBins / scale, 0]. Uniform across the cluster.
template <typename KeyOf, typename WeightOf, typename KeyWeight, typename TargetOf, typename XOf>
__device__ bool find_cut(const KeyOf& key_of, const WeightOf& weight_of,
                         const KeyWeight& key_weight, const TargetOf& target_of, const XOf& x_of,
                         float scale, int n, int64_t start, int64_t vocab, Smem& sm, Cluster& cl,
                         uint32_t* key, int64_t* cut) {
  const int lane = threadIdx.x & 31;
  for (int b = threadIdx.x; b < 4 * kXBins; b += kThreads) sm.hist[b] = 0;
  if (threadIdx.x == 0) {
    sm.found_digit = -1;
    sm.list_n = 0;
    sm.cut_pos = 0;
  }
  __syncthreads();
  for (int i0 = threadIdx.x & ~31; i0 < n; i0 += kThreads) {
    const int i = i0 + lane;
    uint32_t k = 0, b = 0;
    u64 w = 0;
    if (i < n && key_of(i, k)) {
      w = weight_of(i);
      b = xbin(x_of(i), scale);
    }
    // A warp whose lanes all add to one bucket (ties, a narrow row) sums first.
    const uint32_t b0 = __shfl_sync(kFull, b, 0);
    if (__all_sync(kFull, w > 0 && b == b0)) {
      w = warp_sum(w);
      if (lane == 0) add_split(sm, b, w, 32);
    } else if (w > 0) {
      add_split(sm, b, w, 1);
    }
  }
  cl.group.sync();  // every block's histogram is complete
  // Block r merges the r-th segment of the buckets across the cluster; thread t holds one.
  constexpr int kSeg = kXBins / kCluster;
  const int bin = cl.rank * kSeg + static_cast<int>(threadIdx.x);
  u64 mine = 0, packed = 0;  // packed: the count per rank, 8 bits each (saturated)
  uint32_t count = 0;
  bool small = true;
  if (static_cast<int>(threadIdx.x) < kSeg) {
    for (int q = 0; q < kCluster; ++q) {
      const uint32_t* h = cl.group.map_shared_rank(sm.hist, q);
      const uint32_t c = h[bin];
      mine += u64(h[kXBins + bin]) + (u64(h[2 * kXBins + bin]) << 14) +
              (u64(h[3 * kXBins + bin]) << 28);
      count += c;
      small = small && c <= 255;
      packed |= u64(c < 255 ? c : 255) << (8 * q);
    }
  }
  u64 seg_total;
  const u64 in_seg_above = block_sum_above(mine, &seg_total, sm);
  const u64* x = cl.exchange(sm, seg_total);
  u64 all = 0, higher = 0;
  for (int q = 0; q < kCluster; ++q) {
    all += x[4 * q];
    if (q > cl.rank) higher += x[4 * q];
  }
  const u64 target = target_of(all);
  if (target == 0 || all < target) return false;
  const u64 gt = higher + in_seg_above;
  if (static_cast<int>(threadIdx.x) < kSeg && gt < target && target <= gt + mine) {
    sm.found_digit = bin;
    sm.found_count = small && count <= kList ? count : ~0u;
    sm.found_above = gt;
    sm.found_eq = mine;
    sm.found_packed = packed;
  }
  __syncthreads();
  const bool here = sm.found_digit >= 0;
  x = cl.exchange(sm, here ? (u64(sm.found_count) << 32 | uint32_t(sm.found_digit)) : ~0ull,
                  sm.found_above, sm.found_eq, sm.found_packed);
  uint32_t bstar = 0, cstar = 0;
  u64 above = 0, packs = 0;
  for (int q = 0; q < kCluster; ++q) {
    if (x[4 * q] != ~0ull) {
      bstar = static_cast<uint32_t>(x[4 * q]);
      cstar = static_cast<uint32_t>(x[4 * q] >> 32);
      above = x[4 * q + 1];
      packs = x[4 * q + 3];
    }
  }
  if (cstar != ~0u) {
    // Every block gathers the bucket's elements from the whole cluster, rank r's at its offset.
    uint32_t offset = 0;
    for (int q = 0; q < cl.rank; ++q) offset += (packs >> (8 * q)) & 0xffu;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      uint32_t k;
      if (key_of(i, k) && xbin(x_of(i), scale) == bstar && weight_of(i) > 0) {
        const uint32_t slot = offset + atomicAdd(&sm.list_n, 1u);
        const u64 v = u64(k) << 32 | (0xffffffffu - static_cast<uint32_t>(start + i));
        for (int q = 0; q < kCluster; ++q) cl.group.map_shared_rank(sm.list, q)[slot] = v;
      }
    }
    cl.group.sync();
    int p = 1;
    while (p < static_cast<int>(cstar)) p <<= 1;
    for (int j = static_cast<int>(cstar + threadIdx.x); j < p; j += kThreads) sm.list[j] = 0;
    __syncthreads();
    bitonic_sort_desc(sm.list, p);
    // Thread t walks list[4 t, 4 t + 4) from the weight of everything before it.
    const int j0 = 4 * static_cast<int>(threadIdx.x);
    const int j1 = min(j0 + 4, static_cast<int>(cstar));
    u64 wsum = 0;
    for (int j = j0; j < j1; ++j) wsum += key_weight(static_cast<uint32_t>(sm.list[j] >> 32));
    u64 list_total;
    const u64 after = block_sum_above(wsum, &list_total, sm);
    u64 run = above + (list_total - after - wsum);
    for (int j = j0; j < j1; ++j) {
      const u64 w = key_weight(static_cast<uint32_t>(sm.list[j] >> 32));
      if (run < target && target <= run + w) sm.cut_pos = j;
      run += w;
    }
    __syncthreads();
    const u64 e = sm.list[sm.cut_pos];
    *key = static_cast<uint32_t>(e >> 32);
    *cut = 0xffffffffu - static_cast<uint32_t>(e);
    __syncthreads();  // before thread 0 resets cut_pos for the next search
    return true;
  }
  // A crowded bucket: radix search inside it, then the tie among equal keys.
  auto in_bucket = [&](int i, uint32_t& k) {
    return key_of(i, k) && xbin(x_of(i), scale) == bstar;
  };
  auto rest = [&](u64) { return target - above; };
  u64 t2 = 0, above2 = 0, eq2 = 0;
  radix_search(in_bucket, weight_of, rest, n, sm, cl, key, &t2, &above2, &eq2);
  const u64 wk = key_weight(*key);
  const u64 need = (t2 - above2 + wk - 1) / wk;
  *cut = need < eq2 / wk ? nth_with_key(key_of, n, start, vocab, *key, need, sm, cl) : vocab;
  return true;
}

// Draws token j with probability w(j) / sum w over the tokens kept(j) admits, by inverting the
// CDF in token order: blocks hold contiguous slices in rank order and threads contiguous ranges
// of a slice; the thread holding the target scans its range and writes *token. `fallback` is
// written when nothing is kept.
template <typename Kept>
__device__ void draw(const Kept& kept, int n, int64_t start, double u, int fallback, int32_t* token,
                     Smem& sm, Cluster& cl) {
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * per), end = min(n, begin + per);
  u64 mine = 0;
  for (int i = begin; i < end; ++i) mine += kept(i);
  u64 block_total;
  const u64 after = block_sum_above(mine, &block_total, sm);
  u64 before = block_total - after - mine;
  const u64* x = cl.exchange(sm, block_total);
  u64 total = 0;
  for (int q = 0; q < kCluster; ++q) {
    total += x[4 * q];
    if (q < cl.rank) before += x[4 * q];
  }
  if (total == 0) {
    if (cl.rank == 0 && threadIdx.x == 0) *token = fallback;
    return;
  }
  const u64 target = draw_target(u, total);
  if (before <= target && target < before + mine) {  // this thread holds it
    u64 run = before;
    for (int i = begin; i < end; ++i) {
      const u64 w = kept(i);
      if (target < run + w) {
        *token = static_cast<int32_t>(start + i);
        break;
      }
      run += w;
    }
  }
}

// sample_kernel's draw for a row whose tokens outside its candidate list are -inf (n <= kThreads
// candidates, thread i holding the i-th): the same rules, sums and draw as the pass over the row,
// on the list alone. The row's order (key descending, token id ascending) and the token order of
// the draw are ranks counted over the list in shared memory. One block; every thread calls it.
static_assert(kSampleCandidates <= kThreads && kSampleCandidates <= 4 * kXBins &&
              2 * kSampleCandidates <= kList);
__device__ void sample_candidates(int32_t* token, const SampleCandidates& cand, int row_id, int n,
                                  const SampleParams& prm, int64_t vocab, Smem& sm) {
  const int i = static_cast<int>(threadIdx.x);
  const bool have = i < n;
  int idx = static_cast<int>(vocab);
  float l = __int_as_float(0xff800000);  // -inf: what the row holds outside the list
  if (have) {
    idx = cand.ids[int64_t(row_id) * kSampleCandidates + i];
    l = cand.logits[int64_t(row_id) * kSampleCandidates + i];
  }
  float m = -FLT_MAX;
  int best = static_cast<int>(vocab);
  if (have) take_better(m, best, l, idx);
  block_argmax(m, best, sm);
  // Nothing above -inf but NaN: the row's best is token 0, whose logit is then not finite.
  if (best >= vocab || prm.temperature < 1e-5f || !isfinite(m)) {
    if (i == 0) *token = best >= vocab ? 0 : best;
    return;
  }
  const float inv_t = 1.0f / prm.temperature;
  const float log_min_p = prm.min_p > 0.0f ? logf(prm.min_p) : -FLT_MAX;
  const float x = (l - m) * inv_t;
  bool keep = have && x > kMinLogRatio && x >= log_min_p;
  // (key << 32 | ~id): descending is the row's order; 0 for a token that is not kept.
  u64* ord = sm.list;
  u64* wt = sm.list + kSampleCandidates;
  uint32_t* ids = sm.hist;
  const u64 my_ord = u64(dev::ordered_key(l)) << 32 | (0xffffffffu - static_cast<uint32_t>(idx));
  auto rank_above = [&](u64 mine, bool with_weight) {  // kept entries before `mine`, or their mass
    u64 r = 0;
    for (int j = 0; j < n; ++j) {
      const u64 o = ord[j];
      if (o > mine) r += with_weight ? wt[j] : 1;
    }
    return r;
  };
  if (prm.top_k > 0 && prm.top_k < vocab) {
    const int kept = __syncthreads_count(keep);
    if (prm.top_k <= kept) {
      if (have) ord[i] = keep ? my_ord : 0;
      __syncthreads();
      keep = keep && rank_above(my_ord, false) < static_cast<u64>(prm.top_k);
      __syncthreads();
    }
  }
  const u64 mass = keep ? fixed_mass(x) : 0;
  if (prm.top_p < 1.0f) {
    u64 total;
    block_sum_above(mass, &total, sm);
    if (total > 0) {
      const u64 target = top_p_target(prm.top_p, total);
      if (have) {
        ord[i] = keep ? my_ord : 0;
        wt[i] = mass;
      }
      __syncthreads();
      // Kept while the mass ranked before it is below the target: up to the cut's token.
      keep = keep && rank_above(my_ord, true) < target;
      __syncthreads();
    }
  }
  const u64 w = keep ? mass : 0;
  u64 total;
  block_sum_above(w, &total, sm);
  if (total == 0) {
    if (i == 0) *token = best;
    return;
  }
  const u64 target = draw_target(uniform(prm.seed, prm.step), total);
  if (have) {
    ids[i] = static_cast<uint32_t>(idx);
    wt[i] = w;
  }
  __syncthreads();
  if (w > 0) {
    u64 before = 0;  // the mass of the kept tokens with lower ids
    for (int j = 0; j < n; ++j) {
      if (ids[j] < static_cast<uint32_t>(idx)) before += wt[j];
    }
    if (before <= target && target < before + w) *token = idx;
  }
}

template <bool kStaged>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, 2)
    sample_kernel(int32_t* __restrict__ tokens, const float* __restrict__ logits,
                  const SampleParams* __restrict__ params, int64_t vocab, int64_t per_block,
                  SampleCandidates cand) {
  extern __shared__ float4 staged_f4[];  // [per_block] when kStaged
  __shared__ Smem sm;
  Cluster cl{cg::this_cluster(), static_cast<int>(cg::this_cluster().block_rank())};
  if (cand.count != nullptr) {
    // A row whose list holds every token above -inf: block 0 draws from it, the others leave
    // before any cluster barrier (the whole cluster decides alike, from one count).
    const uint32_t n = cand.count[blockIdx.y];
    if (n <= kSampleCandidates) {
      if (cl.rank == 0) {
        sample_candidates(tokens + blockIdx.y, cand, static_cast<int>(blockIdx.y),
                          static_cast<int>(n), params[blockIdx.y], vocab, sm);
      }
      return;
    }
  }
  // No block may write into another's shared memory before that block has started: arrive at the
  // cluster barrier now, wait for the others just before the first exchange (compute-sanitizer
  // racecheck flagged the writes without it: "a block that might not have entered yet").
  dev::cluster_arrive_relaxed();
  const int row_id = blockIdx.y;
  const SampleParams prm = params[row_id];
  const float* row = logits + int64_t(row_id) * vocab;
  const int64_t start = min(vocab, cl.rank * per_block);
  const int n = static_cast<int>(min(vocab, start + per_block) - start);

  float m = -FLT_MAX, lo = FLT_MAX;  // lo: the smallest finite logit, for the buckets' range
  int best = static_cast<int>(vocab);
  const float* src = row + start;
  if constexpr (kStaged) {
    float* buf = reinterpret_cast<float*>(staged_f4);
    int i = threadIdx.x;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
      const float4* src4 = reinterpret_cast<const float4*>(src);
      const int n4 = n / 4;
      auto take4 = [&](float4 v, int q) {
        staged_f4[q] = v;
        const int j = static_cast<int>(start) + 4 * q;
        take_better(m, best, v.x, j);
        take_better(m, best, v.y, j + 1);
        take_better(m, best, v.z, j + 2);
        take_better(m, best, v.w, j + 3);
        lo = fminf(lo, fminf(finite_or_max(v.x), finite_or_max(v.y)));
        lo = fminf(lo, fminf(finite_or_max(v.z), finite_or_max(v.w)));
      };
      // Four loads in flight per thread before any is used: one block alone must pull its slice
      // from memory at a useful rate.
      int q = threadIdx.x;
      for (; q + 3 * kThreads < n4; q += 4 * kThreads) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcs(src4 + q + u * kThreads);
#pragma unroll
        for (int u = 0; u < 4; ++u) take4(v[u], q + u * kThreads);
      }
      for (; q < n4; q += kThreads) take4(__ldcs(src4 + q), q);
      i = 4 * n4 + threadIdx.x;
    }
    for (; i < n; i += kThreads) {
      const float v = src[i];
      buf[i] = v;
      take_better(m, best, v, static_cast<int>(start) + i);
      lo = fminf(lo, finite_or_max(v));
    }
    src = buf;
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      take_better(m, best, src[i], static_cast<int>(start) + i);
      lo = fminf(lo, finite_or_max(src[i]));
    }
  }
  block_argmax(m, best, sm);  // its barriers also publish the staged slice
  lo = block_min(lo, sm);
  dev::cluster_wait();
  {
    const u64* x = cl.exchange(sm, __float_as_uint(m), static_cast<u64>(best), __float_as_uint(lo));
    for (int q = 0; q < kCluster; ++q) {
      take_better(m, best, __uint_as_float(static_cast<uint32_t>(x[4 * q])),
                  static_cast<int>(x[4 * q + 1]));
      lo = fminf(lo, __uint_as_float(static_cast<uint32_t>(x[4 * q + 2])));
    }
  }
  if (best >= vocab) best = 0;
  m = row[best];
  if (prm.temperature < 1e-5f || !isfinite(m)) {  // model::kGreedyTemperature
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
    key = dev::ordered_key(l);
    return x > kMinLogRatio && x >= log_min_p;
  };
  auto mass = [&](int i) { return fixed_mass((src[i] - m) * inv_t); };
  auto x_of = [&](int i) { return (src[i] - m) * inv_t; };
  // Buckets span x from the lowest that can matter up to 0.
  const float x_floor = fmaxf(fmaxf(kMinLogRatio, log_min_p), (lo - m) * inv_t);
  auto bucket_scale = [](float x_low) {
    return x_low < 0.0f ? fminf(kXBins / -x_low, 1e30f) : 0.0f;
  };
  // ... then top_k: key > kk, or == kk at a row index <= kcut.
  uint32_t kk = 0;
  int64_t kcut = vocab;
  if (prm.top_k > 0 && prm.top_k < vocab) {
    auto one = [](int) -> u64 { return 1; };
    auto one_of_key = [](uint32_t) -> u64 { return 1; };
    auto top_k = [&](u64) -> u64 { return static_cast<u64>(prm.top_k); };
    if (!find_cut(c0, one, one_of_key, top_k, x_of, bucket_scale(x_floor), n, start, vocab, sm, cl,
                  &kk, &kcut)) {
      kk = 0;  // fewer candidates than top_k: keep them all
      kcut = vocab;
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
    auto mass_of_key = [&](uint32_t k) { return fixed_mass((dev::key_value(k) - m) * inv_t); };
    auto top_p = [&](u64 total) { return top_p_target(prm.top_p, total); };
    if (!find_cut(c1, mass, mass_of_key, top_p, x_of,
                  bucket_scale(fmaxf(x_floor, kMinMassLogRatio)), n, start, vocab, sm, cl, &pk,
                  &pcut)) {
      pk = 0;
      pcut = vocab;
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

// Room for the staged slice, and the largest shared-memory carveout so that two blocks fit per SM.
template <typename Kernel>
cudaError_t configure(Kernel kernel, size_t dynamic_smem) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(dynamic_smem));
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared);
}

}  // namespace

void sample(int32_t* tokens, const float* logits, const SampleParams* params, int num_rows,
            int64_t vocab, cudaStream_t s, const SampleCandidates& cand) {
  // At most 2^18 elements per block keep the bucket histogram's 32-bit words from overflowing.
  FLINT_CHECK(vocab > 0 && vocab <= kCluster * (int64_t(1) << 18), "sample: vocab {} (at most {})",
              vocab, kCluster * (int64_t(1) << 18));
  FLINT_CHECK(num_rows >= 0 && num_rows <= 65535, "sample: {} rows (at most 65535)", num_rows);
  FLINT_CHECK((cand.count == nullptr) == (cand.ids == nullptr) &&
                  (cand.count == nullptr) == (cand.logits == nullptr),
              "sample: a candidate list needs its count, ids and logits");
  if (num_rows == 0) return;
  const int64_t per_block = ceil_div(ceil_div(vocab, kCluster), 4) * 4;  // 16-byte aligned slices
  const dim3 grid(kCluster, num_rows);
  if (per_block <= kMaxStaged) {
    // Once per process; not a stream operation, so graph capture is unaffected.
    static const cudaError_t configured =
        configure(sample_kernel<true>, kMaxStaged * sizeof(float));
    FLINT_CUDA_CHECK(configured);
    sample_kernel<true><<<grid, kThreads, per_block * sizeof(float), s>>>(tokens, logits, params,
                                                                          vocab, per_block, cand);
  } else {
    static const cudaError_t configured = configure(sample_kernel<false>, 0);
    FLINT_CUDA_CHECK(configured);
    sample_kernel<false><<<grid, kThreads, 0, s>>>(tokens, logits, params, vocab, per_block, cand);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
