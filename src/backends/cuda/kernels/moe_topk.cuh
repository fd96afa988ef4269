// The MoE top-k of one token (sigmoid scores, optional selection bias, ties to the lower id,
// normalised/scaled weights, then the shared-expert slots) by one warp, shared by moe_route
// (moe_router.cu) and the persistent decode kernel (decode_persistent.cu), or by a whole block
// (the gate/up kernel's in-block routing, gemv_core.cuh).
// Reference: cpu::route (spec section 2.5).   Test: tests/kernels/moe_test.cpp
#pragma once

#include <cfloat>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/moe_router.h"

namespace flint::cuda::dev {

__device__ __forceinline__ float sigmoid_score(float logit) { return 1.0f / (1.0f + expf(-logit)); }
// The selection key of a score: plus the bias; a NaN still yields k valid, distinct experts.
__device__ __forceinline__ float selection_key(float score, float bias) {
  const float k = score + bias;
  return isnan(k) ? -FLT_MAX : k;
}

// Keys of E <= 32 kPer experts in registers: lane l holds experts l + 32 i. All loads are issued
// before the first is used (a loop over the experts would wait on each in turn).
template <int kPer>
struct RegisterKeys {
  float key[kPer];  // -inf once picked, and past the experts
  __device__ __forceinline__ void load(const float* logits, const float* bias, int E,
                                       float* score) {
    const int lane = threadIdx.x & 31;
    float v[kPer], b[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      v[i] = e < E ? __ldcg(logits + e) : 0.0f;
      b[i] = e < E && bias != nullptr ? bias[e] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      key[i] = -INFINITY;
      if (e < E) {
        score[e] = sigmoid_score(v[i]);
        key[i] = selection_key(score[e], b[i]);
      }
    }
  }
  // This lane's best key and expert (ties to the lower id: strictly greater, ids ascending).
  __device__ __forceinline__ void best(int E, float& bv, int& be) const {
    const int lane = threadIdx.x & 31;
    bv = -INFINITY;
    be = E;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (key[i] > bv) {
        bv = key[i];
        be = lane + 32 * i;
      }
    }
  }
  __device__ __forceinline__ void retire(int e) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i == e) key[i] = -INFINITY;
    }
  }
};

// Keys of any E in shared memory (this warp's [E] scratch): the path of E > 256.
struct SharedKeys {
  float* key;
  __device__ __forceinline__ void load(const float* logits, const float* bias, int E,
                                       float* score) {
    for (int e = threadIdx.x & 31; e < E; e += 32) {
      score[e] = sigmoid_score(__ldcg(logits + e));
      key[e] = selection_key(score[e], bias != nullptr ? bias[e] : 0.0f);
    }
  }
  __device__ __forceinline__ void best(int E, float& bv, int& be) const {
    bv = -INFINITY;
    be = E;
    for (int e = threadIdx.x & 31; e < E; e += 32) {
      if (key[e] > bv) {
        bv = key[e];
        be = e;
      }
    }
  }
  __device__ __forceinline__ void retire(int e) {
    __syncwarp();  // every lane has read the keys of this round
    if ((threadIdx.x & 31) == 0) key[e] = -INFINITY;
    __syncwarp();
  }
};

// The bits of a float as an unsigned that orders like the float (-0 is made +0 first).
__device__ __forceinline__ uint32_t ordered_bits(float v) {
  const uint32_t b = __float_as_uint(v + 0.0f);
  return (b & 0x80000000u) != 0 ? ~b : b | 0x80000000u;
}

// The warp's best expert of the lanes' (key, expert) candidates: the greatest key, ties to the
// lower id. Two redux.sync instructions (max of the ordered key bits, then min of the ids holding
// it) where five shuffle rounds of two values each made the same pick.
__device__ __forceinline__ int warp_best(float best, int best_e) {
  const uint32_t mine = ordered_bits(best);
  const uint32_t top = __reduce_max_sync(0xffffffffu, mine);
  return static_cast<int>(
      __reduce_min_sync(0xffffffffu, mine == top ? static_cast<uint32_t>(best_e) : 0xffffffffu));
}

// Loads the token's keys, then picks the k best one at a time: each lane its best, then the
// warp's (ties to the lower id), which is retired. Writes ids/weights as top_k_token describes.
template <class Keys>
__device__ __forceinline__ void pick_top_k(Keys& keys, const float* logits, const float* bias,
                                           const MoeRouting& r, float* score, int32_t* out_ids,
                                           float* out_w) {
  const int lane = threadIdx.x & 31;
  const int E = r.num_experts;
  keys.load(logits, bias, E, score);
  __syncwarp();
  // Pick k < 32 is kept by lane k and stored once, normalised, after the loop (one store per
  // pick, no read-back of out_w); picks past 32 are stored by lane 0 and scaled in place.
  float picked_sum = 0.0f, my_w = 0.0f;
  int my_id = 0;
  for (int k = 0; k < r.top_k; ++k) {
    float best;
    int best_e;
    keys.best(E, best, best_e);
    best_e = warp_best(best, best_e);
    keys.retire(best_e);
    const float sc = score[best_e];
    if (k < 32 && lane == k) {
      my_w = sc;
      my_id = best_e;
    } else if (k >= 32 && lane == 0) {
      out_ids[k] = best_e;
      out_w[k] = sc;
    }
    picked_sum += sc;
  }
  const float scale = (r.norm_topk_prob ? 1.0f / picked_sum : 1.0f) * r.routed_scaling_factor;
  if (lane < r.top_k) {
    out_ids[lane] = my_id;
    out_w[lane] = my_w * scale;
  }
  if (lane == 0) {
    for (int k = 32; k < r.top_k; ++k) out_w[k] *= scale;
    for (int j = 0; j < r.num_shared_slots; ++j) {
      out_ids[r.top_k + j] = E + j;
      out_w[r.top_k + j] = 1.0f;
    }
  }
  __syncwarp();
}

// logits: the token's [E] router logits (read through L2: other blocks wrote them); bias: [E] or
// null; scratch: [2E] floats of this warp (shared memory); out_ids/out_w: the token's slots
// (shared or global memory), written by lane 0: the top_k experts by sigmoid(logit) + bias (ties
// to the lower id) with their sigmoid scores (normalised over the picks when norm_topk_prob,
// times routed_scaling_factor), then the shared-expert slots (ids E + j, weight 1). Up to 256
// experts the keys stay in registers. Every lane of the warp must call it.
__device__ inline void top_k_token(const float* logits, const float* bias, const MoeRouting& r,
                                   float* scratch, int32_t* out_ids, float* out_w) {
  if (r.num_experts <= 32 * 8) {
    RegisterKeys<8> keys;
    pick_top_k(keys, logits, bias, r, scratch, out_ids, out_w);
  } else {
    SharedKeys keys{scratch + r.num_experts};
    pick_top_k(keys, logits, bias, r, scratch, out_ids, out_w);
  }
}

// The barrier of the block's first kThreads threads (named barrier 1), or __syncthreads() for
// kThreads 0: the whole-block picks below run in the first 8 warps of a larger block too.
template <int kThreads>
__device__ __forceinline__ void pick_sync() {
  if constexpr (kThreads == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
  }
}

// The comparator of top_k_token_block's sorting network: (ka, ia) and (kb, ib) in descending
// order of key, ties to the lower id. Selects: written as a conditional swap, ptxas made each
// comparator a divergent branch (routed_pick_bench, H100, 512 blocks: the pick took 2.81 us, 2.45
// with selects).
__device__ __forceinline__ void order_pair(uint32_t& ka, int& ia, uint32_t& kb, int& ib) {
  const bool swap = kb > ka || (kb == ka && ib < ia);
  const uint32_t k0 = swap ? kb : ka, k1 = swap ? ka : kb;
  const int i0 = swap ? ib : ia, i1 = swap ? ia : ib;
  ka = k0, kb = k1, ia = i0, ib = i1;
}

// The most picks top_k_token_block and top_k_token_block_rank make.
inline constexpr int kBlockTopKMax = 8;

// The whole pick's weights, by one warp once out_ids[0 .. top_k) holds the picks (visible to it):
// the picked scores summed in pick order (as top_k_token sums them), normalised when
// norm_topk_prob, times routed_scaling_factor; then the shared-expert slots (ids E + j, weight 1).
// score: [E] sigmoid scores. For top_k <= kBlockTopKMax. lane, E and K are the caller's (its lane,
// r.num_experts, r.top_k), passed so that the routed gate/up compiles to the very cubin that was
// measured and tested (read again in here, its PTX differed).
__device__ __forceinline__ void store_pick_weights(const float* score, const MoeRouting& r,
                                                   int lane, int E, int K, int32_t* out_ids,
                                                   float* out_w) {
  float picked_sum = 0.0f, my_w = 0.0f;
#pragma unroll
  for (int p = 0; p < kBlockTopKMax; ++p) {
    if (p >= K) break;
    const float sc = score[out_ids[p]];
    if (lane == p) my_w = sc;
    picked_sum += sc;
  }
  const float scale = (r.norm_topk_prob ? 1.0f / picked_sum : 1.0f) * r.routed_scaling_factor;
  if (lane < K) out_w[lane] = my_w * scale;
  if (lane < r.num_shared_slots) {
    out_ids[K + lane] = E + lane;
    out_w[K + lane] = 1.0f;
  }
}

// The top-k of one token by a whole block of kW = 8 warps, for E <= 32 kW experts and top_k <=
// kBlockTopKMax: the same picks, scores and weights as top_k_token (the same order: key
// descending, ties to the lower id; the picked scores summed in pick order), with a shorter
// dependent chain. Thread i scores expert i (`logit` and `bias`: expert i's router logit and
// selection bias, loaded ahead by the caller, e.g. the bias before a PDL wait) and stores its key;
// after one barrier warp 0 picks alone: lane l sorts the keys of experts kW l .. kW l + kW - 1 in
// registers (a 19-comparator network), then each pick is one redux.sync over the lanes' first
// keys, and the lanes holding it shift their lists. Each pick's winners are counted by a ballot
// off that chain; when a pick had two (the same key first in two lanes), the picks are made again
// with a second redux a pick, for the lower id. score: [E] floats of shared memory; out_ids/out_w:
// shared memory, as top_k_token describes them. slot >= 0: only out_ids[0 .. slot] are written
// (slot + 1 picks; no scores summed, no weights, no shared slots), what a block serving one routed
// slot needs. Every thread of the block (kSync 0), or each of its first kSync threads (named
// barrier 1: pick_sync), must call it; it holds one barrier, and out_ids/out_w are written by warp
// 0 only (the caller synchronises before reading them from other warps). H100, 512 blocks of 256
// threads at once as in the routed gate/up, E 256, top_k 6, from the router sums' loads to the pick
// read after the last barrier (bench/kernels/routed_pick_bench.cu, fortieth session,
// docs/PERFORMANCE.md): the last slot's blocks 2439 ns in the thirty-ninth session's form (a redux
// pair a pick, every block the whole pick with its weights, one copy of the sum of squares), 1564
// now; the loads alone take 1075 of it. A scratch probe timing the old form's phases by clock64
// (not kept): ~1600 of its ~4300 cycles were the loads, ~195 each pick.
template <int kW, int kSync = 0>
__device__ __forceinline__ void top_k_token_block(float logit, float bias, const MoeRouting& r,
                                                  float* score, int32_t* out_ids, float* out_w,
                                                  int slot = -1) {
  static_assert(kW == 8, "top_k_token_block: a sorting network of 8 keys a lane");
  __shared__ __align__(16) uint32_t skey[32 * kW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = r.num_experts, K = r.top_k, e = threadIdx.x;
  // ordered_bits of a key is never 0 (NaN keys are -FLT_MAX): 0 marks "no expert".
  uint32_t key = 0;
  if (e < E) {
    const float sc = sigmoid_score(logit);
    score[e] = sc;
    key = ordered_bits(selection_key(sc, bias));
  }
  skey[e] = key;
  pick_sync<kSync>();
  if (warp != 0) return;
  uint32_t k[kW];
  int id[kW];
  // This lane's keys, sorted descending by (key, -id).
  auto load_sorted = [&] {
    const uint4 lo = reinterpret_cast<const uint4*>(skey)[2 * lane];
    const uint4 hi = reinterpret_cast<const uint4*>(skey)[2 * lane + 1];
    k[0] = lo.x, k[1] = lo.y, k[2] = lo.z, k[3] = lo.w, k[4] = hi.x, k[5] = hi.y, k[6] = hi.z,
    k[7] = hi.w;
#pragma unroll
    for (int j = 0; j < kW; ++j) id[j] = kW * lane + j;
    auto cas = [&](int a, int b) { order_pair(k[a], id[a], k[b], id[b]); };
    cas(0, 1), cas(2, 3), cas(4, 5), cas(6, 7);
    cas(0, 2), cas(1, 3), cas(4, 6), cas(5, 7);
    cas(1, 2), cas(5, 6);
    cas(0, 4), cas(1, 5), cas(2, 6), cas(3, 7);
    cas(2, 4), cas(3, 5);
    cas(1, 2), cas(3, 4), cas(5, 6);
  };
  auto shift_if = [&](bool won) {  // this lane's first key was picked: shift the rest up
#pragma unroll
    for (int j = 0; j + 1 < kW; ++j) {
      k[j] = won ? k[j + 1] : k[j];
      id[j] = won ? id[j + 1] : id[j];
    }
    k[kW - 1] = won ? 0u : k[kW - 1];
  };
  load_sorted();
  const int n = slot < 0 ? K : slot + 1;
  // One redux a pick; the lanes holding the pick's key shift, and the first of them stores its
  // id (the ballot and the store are off the chain from one redux to the next).
  unsigned tie = 0;  // a pick with two winners: a tie across lanes
#pragma unroll
  for (int p = 0; p < kBlockTopKMax; ++p) {
    if (p >= n) break;
    const uint32_t top = __reduce_max_sync(0xffffffffu, k[0]);
    const bool won = k[0] == top;
    const unsigned b = __ballot_sync(0xffffffffu, won);
    tie |= b & (b - 1u);
    if (lane == __ffs(b) - 1) out_ids[p] = id[0];
    shift_if(won);
  }
  if (tie != 0) {  // warp-uniform and rare: again, each pick the lower id among its key's lanes
    __syncwarp();  // the winners' stores to out_ids before lane 0's below
    load_sorted();
#pragma unroll
    for (int p = 0; p < kBlockTopKMax; ++p) {
      if (p >= n) break;
      const uint32_t top = __reduce_max_sync(0xffffffffu, k[0]);
      const int best = static_cast<int>(
          __reduce_min_sync(0xffffffffu, k[0] == top ? static_cast<uint32_t>(id[0]) : 0xffffffffu));
      if (lane == 0) out_ids[p] = best;
      shift_if(id[0] == best);
    }
  }
  if (slot >= 0) return;
  __syncwarp();
  store_pick_weights(score, r, lane, E, K, out_ids, out_w);
}

// top_k_token_block's picks by rank instead of in turn: the same contract (E <= 32 kW experts,
// top_k <= kBlockTopKMax; slot >= 0: out_ids[0 .. slot] only) and the same ids, scores and
// weights, with no dependent chain of picks. Each thread keys its expert; each warp's greatest key
// goes to shared memory (one redux); after a barrier, a key is a candidate when fewer than n warps
// (n = the picks needed) have a greater greatest key: then every key of the top n is one (the n
// warps of the n greatest maxima hold n keys at least that great), and every key ahead of a
// candidate is one too, so a candidate's rank among the candidates is its rank among all. The
// candidates append (key, id) to a list (a warp-aggregated shared-memory atomic); after a second
// barrier each counts the entries ahead of it (greater key, or the same key and a lower id: the
// order of the picks, ties to the lower id) and a rank below n stores its id at out_ids[rank].
// The list's unused entries are zero, a key below every expert's, so that it is read two entries
// at a time. The whole pick (slot < 0) then has a third barrier, and warp 0 sums the picked scores
// in pick order as top_k_token does. Every thread of the block must call it (or of its first kSync
// threads, as top_k_token_block); out_ids/out_w are written by any warp (the caller synchronises
// before reading them).
// H100, routed_pick_bench (512 blocks, E 256, top_k 6; forty-third session, docs/PERFORMANCE.md):
// the slot picks of the last slot's blocks 1503 ns against 1564 in turn, but the whole pick 2367
// against 2310 (the third barrier). So the routed gate/up picks a slot's expert by rank and its
// block x == 0, which records the pick and its weights for moe_down, in turn: NVFP4 b1 32K 1.600 ->
// 1.583 ms a step (five rounds), where every block by rank gained 0.2% at most.
template <int kW, int kSync = 0>
__device__ __forceinline__ void top_k_token_block_rank(float logit, float bias, const MoeRouting& r,
                                                       float* score, int32_t* out_ids, float* out_w,
                                                       int slot = -1) {
  static_assert(kW == 8, "top_k_token_block_rank: eight warps, a thread per expert");
  __shared__ __align__(16) uint32_t wmax[kW];
  __shared__ __align__(16) uint2 cand[32 * kW];  // (ordered key bits, id)
  __shared__ int ncand;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = r.num_experts, K = r.top_k, e = threadIdx.x;
  const int n = slot < 0 ? K : slot + 1;
  uint32_t key = 0;  // ordered_bits of a key is never 0 (NaN keys are -FLT_MAX): 0 is "none"
  if (e < E) {
    const float sc = sigmoid_score(logit);
    score[e] = sc;
    key = ordered_bits(selection_key(sc, bias));
  }
  cand[e] = make_uint2(0u, 0u);
  const uint32_t m = __reduce_max_sync(0xffffffffu, key);
  if (lane == 0) wmax[warp] = m;
  if (e == 0) ncand = 0;
  pick_sync<kSync>();
  const uint4 w0 = reinterpret_cast<const uint4*>(wmax)[0];
  const uint4 w1 = reinterpret_cast<const uint4*>(wmax)[1];
  const int greater = int(w0.x > key) + int(w0.y > key) + int(w0.z > key) + int(w0.w > key) +
                      int(w1.x > key) + int(w1.y > key) + int(w1.z > key) + int(w1.w > key);
  const bool mine = key != 0u && greater < n;
  const unsigned b = __ballot_sync(0xffffffffu, mine);
  int base = 0;
  if (lane == __ffs(b) - 1) base = atomicAdd(&ncand, __popc(b));
  base = __shfl_sync(0xffffffffu, base, b != 0u ? __ffs(b) - 1 : 0);
  if (mine) cand[base + __popc(b & ((1u << lane) - 1u))] = make_uint2(key, uint32_t(e));
  pick_sync<kSync>();
  if (mine) {
    const int pairs = (ncand + 1) >> 1;
    const uint4* c = reinterpret_cast<const uint4*>(cand);
    const uint32_t id = uint32_t(e);
    int rank = 0;
    for (int j = 0; j < pairs; ++j) {
      const uint4 q = c[j];  // entries (q.x, q.y) and (q.z, q.w)
      rank += int((q.x > key) | ((q.x == key) & (q.y < id)));
      rank += int((q.z > key) | ((q.z == key) & (q.w < id)));
    }
    if (rank < n) out_ids[rank] = e;
  }
  if (slot >= 0) return;
  pick_sync<kSync>();
  if (warp != 0) return;
  store_pick_weights(score, r, lane, E, K, out_ids, out_w);
}

}  // namespace flint::cuda::dev
