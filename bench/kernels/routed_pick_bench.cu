// The routed gate/up kernel's in-block pick, alone: 512 blocks of 256 threads (four an SM, as
// gemv_routed_kernel runs them at batch 1), each reading the E router sums and a copy of the sum
// of squares of gemv_route_partials (kRouteAccStride doubles apart, L2-resident), forming the
// logits and picking the token's top_k with top_k_token_block (moe_topk.cuh). Each block times
// itself with %globaltimer from before its loads to the read of its pick after the last barrier;
// the table gives the median over launches of the blocks' mean. The loads go through L1 (ld.ca),
// as the kernel's do. Rows: the loads through L2 only (ld.cg, the kernel's loads before the
// forty-fourth session) and two barriers (the logits stored to shared memory and read back, so
// that the loads stay); the same through L1; the loads, every
// thread's key (top_k_token_block's first half: the sigmoid, the selection key, its store to shared
// memory) and two barriers; the whole pick in every block; slot picks (block b serves slot
// b % top_k, and only the first block of each slot makes the whole pick with its weights), with
// the mean of the last slot's blocks, which pick the most; then the same two rows
// with top_k_token_block_rank (picks by rank, no chain of picks; the kernel picks its slot-only
// blocks so, but its first blocks' whole picks in turn). Exits 1 when the two forms'
// ids or weights differ in any bit, or a block's slot pick is not the whole pick's.
// Usage: routed_pick_bench [--blocks 512] [--experts 256] [--top-k 6] [--launches 50]
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe_topk.cuh"

namespace {

using namespace flint::cuda;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// What a block does after its loads (see the file comment).
enum class Mode { kLoadsL2, kLoads, kKeys, kPick, kSlot, kRankPick, kRankSlot };

template <Mode kMode>
__global__ void __launch_bounds__(kThreads, 4)
    pick_kernel(const double* acc, const float* bias, MoeRouting r, int hidden, int32_t* ids_out,
                float* w_out, uint64_t* ns_out, int32_t* slot_out) {
  __shared__ float score[kThreads];
  __shared__ int32_t pick_ids[32];
  __shared__ float pick_w[32];
  const int E = r.num_experts, e = threadIdx.x;
  const int slot = static_cast<int>(blockIdx.x % r.top_k);
  const float b = e < E ? bias[e] : 0.0f;
  __syncthreads();
  const uint64_t t0 = now_ns();
  const double* ss_p = acc + int64_t(E + (e >> 5) % kRouteSsCopies) * kRouteAccStride;
  const double* ae_p = acc + int64_t(e) * kRouteAccStride;
  double ss, ae = 0.0;
  if constexpr (kMode == Mode::kLoadsL2) {  // through L2 only, as the kernel loaded them before
    ss = __ldcg(ss_p);
    if (e < E) ae = __ldcg(ae_p);
  } else {  // through L1, as the kernel loads them
    ss = __ldca(ss_p);
    if (e < E) ae = __ldca(ae_p);
  }
  const float logit = static_cast<float>(ae) * rsqrtf(static_cast<float>(ss) / hidden + 1e-6f);
  if constexpr (kMode == Mode::kPick || kMode == Mode::kSlot) {
    const bool whole = kMode == Mode::kPick || blockIdx.x < static_cast<unsigned>(r.top_k);
    dev::top_k_token_block<kWarps>(logit, b, r, score, pick_ids, pick_w, whole ? -1 : slot);
  } else if constexpr (kMode == Mode::kRankPick || kMode == Mode::kRankSlot) {
    const bool whole = kMode == Mode::kRankPick || blockIdx.x < static_cast<unsigned>(r.top_k);
    dev::top_k_token_block_rank<kWarps>(logit, b, r, score, pick_ids, pick_w, whole ? -1 : slot);
  } else if constexpr (kMode == Mode::kKeys) {
    __shared__ uint32_t key[kThreads];
    const float sc = dev::sigmoid_score(logit);
    score[e] = sc;
    key[e] = e < E ? dev::ordered_bits(dev::selection_key(sc, b)) : 0u;
    __syncthreads();
    if (e < 32) pick_ids[e] = static_cast<int32_t>(key[(e * 8) % kThreads] & 0xff);
  } else {
    score[e] = logit;
    __syncthreads();
    if (e < 32) pick_ids[e] = score[e * 8] > 1e30f ? -1 : e;  // the logits are read: loads stay
  }
  __syncthreads();
  const int32_t mine = pick_ids[slot];
  const uint64_t t1 = now_ns();
  if (threadIdx.x == 0) {
    ns_out[blockIdx.x] = t1 - t0;
    slot_out[blockIdx.x] = mine;
    if (blockIdx.x == 0) {
      for (int k = 0; k < r.top_k; ++k) {
        ids_out[k] = pick_ids[k];
        w_out[k] = pick_w[k];
      }
    }
  }
}

// The bench links nothing of flint's (so that it can be built against another tree's headers with
// nvcc alone): errors are reported here.
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "routed_pick_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A whole decimal integer, or false.
bool parse_int(const char* text, int& out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX) return false;
  out = static_cast<int>(v);
  return true;
}

struct Times {
  double all, last_slot;  // medians over launches of the mean block time (ns)
};

template <Mode kMode>
Times median_block_ns(const double* acc, const float* bias, const MoeRouting& r, int blocks,
                      int launches, int32_t* ids, float* w, uint64_t* ns, int32_t* slot_ids) {
  std::vector<double> all, last;
  std::vector<uint64_t> host(blocks);
  for (int it = 0; it < launches + 5; ++it) {
    pick_kernel<kMode><<<blocks, kThreads>>>(acc, bias, r, 2048, ids, w, ns, slot_ids);
    check(cudaGetLastError(), "cudaGetLastError");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (it < 5) continue;  // warm-up
    check(cudaMemcpy(host.data(), ns, blocks * sizeof(uint64_t), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    double sum = 0.0, sum_last = 0.0;
    int n_last = 0;
    for (int b = 0; b < blocks; ++b) {
      sum += static_cast<double>(host[b]);
      if (b % r.top_k == r.top_k - 1) sum_last += static_cast<double>(host[b]), ++n_last;
    }
    all.push_back(sum / blocks);
    last.push_back(n_last > 0 ? sum_last / n_last : 0.0);
  }
  std::sort(all.begin(), all.end());
  std::sort(last.begin(), last.end());
  return {all[all.size() / 2], last[last.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 512, E = 256, top_k = 6, launches = 50;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    int* dst = k == "--blocks"     ? &blocks
               : k == "--experts"  ? &E
               : k == "--top-k"    ? &top_k
               : k == "--launches" ? &launches
                                   : nullptr;
    if (dst == nullptr) {
      std::fprintf(stderr, "routed_pick_bench: unknown option %s\n", k.c_str());
      return 2;
    }
    if (i + 1 == argc || !parse_int(argv[i + 1], *dst)) {
      std::fprintf(stderr, "routed_pick_bench: %s needs an integer value\n", k.c_str());
      return 2;
    }
  }
  if (blocks < 1 || blocks > (1 << 20) || E < 1 || E > kThreads || top_k < 1 ||
      top_k > dev::kBlockTopKMax || top_k > E || launches < 1 || launches > 100000) {
    std::fprintf(stderr,
                 "routed_pick_bench: need 1 <= --blocks <= 2^20, 1 <= --experts <= %d, 1 <= "
                 "--top-k <= min(%d, experts), 1 <= --launches <= 100000\n",
                 kThreads, dev::kBlockTopKMax);
    return 2;
  }
  // Router sums of a 2048-wide row: logits in about [-4, 4], small selection biases.
  std::vector<double> acc(size_t(route_acc_doubles(E)), 0.0);
  std::vector<float> bias(E);
  uint32_t state = 12345;
  auto uniform = [&] {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) / 16777216.0;
  };
  for (int e = 0; e < E; ++e) {
    acc[size_t(e) * kRouteAccStride] = (uniform() - 0.5) * 8.0;
    bias[e] = static_cast<float>((uniform() - 0.5) * 0.1);
  }
  for (int c = 0; c < kRouteSsCopies; ++c)  // sum of squares: 1 / rms = 1
    acc[size_t(E + c) * kRouteAccStride] = 2048.0;
  double* d_acc = nullptr;
  float *d_bias = nullptr, *d_w = nullptr;
  int32_t* d_ids = nullptr;
  uint64_t* d_ns = nullptr;
  int32_t* d_slot = nullptr;  // each block's pick for its slot
  check(cudaMalloc(&d_acc, acc.size() * sizeof(double)), "cudaMalloc");
  check(cudaMalloc(&d_bias, E * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&d_ids, 32 * sizeof(int32_t)), "cudaMalloc");
  check(cudaMalloc(&d_w, 32 * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&d_ns, size_t(blocks) * sizeof(uint64_t)), "cudaMalloc");
  check(cudaMalloc(&d_slot, size_t(blocks) * sizeof(int32_t)), "cudaMalloc");
  check(cudaMemcpy(d_acc, acc.data(), acc.size() * sizeof(double), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  check(cudaMemcpy(d_bias, bias.data(), E * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  const MoeRouting r{E, top_k, 2, true, 2.5f};  // Flint: two shared-expert slots
  const Times loads_l2 =
      median_block_ns<Mode::kLoadsL2>(d_acc, d_bias, r, blocks, launches, d_ids, d_w, d_ns, d_slot);
  const Times loads =
      median_block_ns<Mode::kLoads>(d_acc, d_bias, r, blocks, launches, d_ids, d_w, d_ns, d_slot);
  const Times keys =
      median_block_ns<Mode::kKeys>(d_acc, d_bias, r, blocks, launches, d_ids, d_w, d_ns, d_slot);
  const Times pick =
      median_block_ns<Mode::kPick>(d_acc, d_bias, r, blocks, launches, d_ids, d_w, d_ns, d_slot);
  int32_t ids[32];
  float w[32];
  check(cudaMemcpy(ids, d_ids, top_k * sizeof(int32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(w, d_w, top_k * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  // Each block's pick for its slot, for the check against the whole pick below.
  auto slot_picks = [&] {
    std::vector<int32_t> v(blocks);
    check(cudaMemcpy(v.data(), d_slot, blocks * sizeof(int32_t), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    return v;
  };
  const Times slot =
      median_block_ns<Mode::kSlot>(d_acc, d_bias, r, blocks, launches, d_ids, d_w, d_ns, d_slot);
  const std::vector<int32_t> slot_ids = slot_picks();
  const Times rank_pick = median_block_ns<Mode::kRankPick>(d_acc, d_bias, r, blocks, launches,
                                                           d_ids, d_w, d_ns, d_slot);
  int32_t rank_ids[32];
  float rank_w[32];
  check(cudaMemcpy(rank_ids, d_ids, top_k * sizeof(int32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(rank_w, d_w, top_k * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  const Times rank_slot = median_block_ns<Mode::kRankSlot>(d_acc, d_bias, r, blocks, launches,
                                                           d_ids, d_w, d_ns, d_slot);
  const std::vector<int32_t> rank_slot_ids = slot_picks();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("%s: %d blocks of %d threads, E %d, top_k %d, median of %d launches\n\n", prop.name,
              blocks, kThreads, E, top_k, launches);
  std::printf(
      "| block | ns from the loads to the pick read | last slot's blocks |\n|---|---:|---:|\n");
  std::printf("| loads through L2 only (ld.cg) + 2 barriers | %.0f | %.0f |\n", loads_l2.all,
              loads_l2.last_slot);
  std::printf("| loads + 2 barriers | %.0f | %.0f |\n", loads.all, loads.last_slot);
  std::printf("| loads + keys + 2 barriers | %.0f | %.0f |\n", keys.all, keys.last_slot);
  std::printf("| whole pick in every block + barrier | %.0f | %.0f |\n", pick.all, pick.last_slot);
  std::printf("| in turn: slot only past a slot's first block + barrier | %.0f | %.0f |\n",
              slot.all, slot.last_slot);
  std::printf("| by rank: whole pick in every block + barrier | %.0f | %.0f |\n", rank_pick.all,
              rank_pick.last_slot);
  std::printf("| by rank: slot only past a slot's first block + barrier | %.0f | %.0f |\n",
              rank_slot.all, rank_slot.last_slot);
  std::printf("\npick:");
  for (int k = 0; k < top_k; ++k) std::printf(" %d (%.9g)", ids[k], w[k]);
  std::printf("\n");
  int bad = 0;
  for (int k = 0; k < top_k; ++k) {
    if (rank_ids[k] != ids[k] || std::memcmp(&rank_w[k], &w[k], sizeof(float)) != 0) {
      std::fprintf(stderr, "routed_pick_bench: by rank, pick %d is %d (%.9g), in turn %d (%.9g)\n",
                   k, rank_ids[k], rank_w[k], ids[k], w[k]);
      ++bad;
    }
  }
  for (int b = 0; b < blocks; ++b) {
    for (const auto* v : {&slot_ids, &rank_slot_ids}) {
      if ((*v)[b] != ids[b % top_k]) {
        std::fprintf(stderr,
                     "routed_pick_bench: block %d picked %d for slot %d (%s), the whole pick %d\n",
                     b, (*v)[b], b % top_k, v == &slot_ids ? "in turn" : "by rank", ids[b % top_k]);
        ++bad;
      }
    }
  }
  return bad == 0 ? 0 : 1;
}
