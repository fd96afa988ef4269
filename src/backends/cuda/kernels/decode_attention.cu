// Split-KV decode attention on tensor cores. Block = (kv head, split, row), 8 warps; each warp
// streams its own 16-key tiles of K and V into shared memory with cp.async (kStages deep) and runs
// S = Q K^T and O += P V as mma.m16n8k16 with the G <= 8 query heads of the kv head as rows 0..7
// and their bf16 low parts as rows 8..15, so q and p keep ~16 mantissa bits (fp32-like results)
// at no extra mma. The block merges its warps; in a small grid of 2 .. 8 splits
// (decode_attention_uses_cluster) the (row, kv head)'s blocks form a cluster and merge through
// distributed shared memory, each a slice of the outputs; otherwise the last block to finish
// (atomic counter) merges them from global memory; either adds the sink. On decode steps the
// kernel also does the q/k RMSNorm, RoPE and the cache write of the new K/V (fused variant).
// Launched with PDL on a real stream (see attention_block for what runs before the wait).
// Reference: backends/cpu/ops/attention.cpp   Test: tests/kernels/attention_decode_test.cpp
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/decode_attention.cuh"

namespace flint::cuda {
namespace {

using namespace attn;

template <int D, bool kFused, SplitMerge kMerge>
__global__ void __launch_bounds__(kThreads, 1) decode_attention_kernel(AttnKernelArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  dev::ktrace_begin(KTag::kAttention);
  attention_block<D, kFused, kMerge, true>(args, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.z,
                                           smem);
  dev::ktrace_end();
}

template <int D, bool kFused, SplitMerge kMerge>
void launch(const AttnKernelArgs& k, dim3 grid, cudaStream_t s) {
  constexpr auto kernel = decode_attention_kernel<D, kFused, kMerge>;
  constexpr int kSmem = smem_bytes<D>();
  // Once per process and instantiation; not a stream operation, so graph capture is unaffected.
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  FLINT_CUDA_CHECK(configured);
  // kCluster: one cluster per (kv head, row), its blocks the splits (grid.y == num_splits <= 8).
  const dim3 cluster(1, kMerge == SplitMerge::kCluster ? grid.y : 1, 1);
  launch_pdl_clusters(kernel, grid, dim3(kThreads), size_t(kSmem), s, cluster, k);
}

template <bool kFused, SplitMerge kMerge>
void launch_head_dim(const AttnKernelArgs& k, dim3 grid, cudaStream_t s) {
  switch (k.a.head_dim) {
    case 16:
      launch<16, kFused, kMerge>(k, grid, s);
      break;
    case 32:
      launch<32, kFused, kMerge>(k, grid, s);
      break;
    case 64:
      launch<64, kFused, kMerge>(k, grid, s);
      break;
    case 128:
      launch<128, kFused, kMerge>(k, grid, s);
      break;
    default:
      FLINT_FAIL("decode_attention: head_dim {} is not supported (16, 32, 64, 128)", k.a.head_dim);
  }
}

template <bool kFused>
void launch_any(const AttnKernelArgs& k, int num_rows, cudaStream_t s) {
  const DecodeAttentionArgs& a = k.a;
  FLINT_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
                  a.num_heads / a.num_kv_heads <= kMaxGroup,
              "decode_attention: {} heads over {} kv heads (at most {} per kv head)", a.num_heads,
              a.num_kv_heads, kMaxGroup);
  FLINT_CHECK(a.num_splits >= 1 && a.num_splits <= kAttentionMaxSplits,
              "decode_attention: {} splits (1..{})", a.num_splits, kAttentionMaxSplits);
  FLINT_CHECK(!a.sliding || k.kv.window > 0, "decode_attention: sliding layer without a window");
  const int num_sms = device_sm_count();
  const bool cluster =
      decode_attention_uses_cluster(num_rows, a.num_kv_heads, a.num_splits, num_sms);
  FLINT_CHECK(a.num_splits == 1 || cluster || (k.part != nullptr && k.counters != nullptr),
              "decode_attention: {} splits over {} rows need a workspace and counters",
              a.num_splits, num_rows);
  if (num_rows == 0) return;
  const dim3 grid(a.num_kv_heads, a.num_splits, num_rows);
  if (cluster) {
    launch_head_dim<kFused, SplitMerge::kCluster>(k, grid, s);
  } else {
    launch_head_dim<kFused, SplitMerge::kGlobal>(k, grid, s);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool decode_attention_uses_cluster(int num_rows, int num_kv_heads, int num_splits, int num_sms) {
  return num_splits > 1 && num_splits <= kAttentionClusterMaxSplits &&
         int64_t(num_rows) * num_kv_heads * num_splits <= num_sms / 2;
}

int decode_attention_splits(int num_rows, int num_kv_heads, int64_t max_keys, int num_sms) {
  const int64_t blocks = std::max<int64_t>(1, int64_t(num_rows) * num_kv_heads);
  const int64_t by_sms = std::max<int64_t>(1, num_sms / blocks);
  const int64_t by_keys =
      (std::max<int64_t>(max_keys, 1) + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_sms, by_keys), 1, kAttentionMaxSplits));
}

void decode_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                      const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                      int num_rows, const DecodeAttentionArgs& a, float* workspace,
                      int32_t* counters, cudaStream_t s) {
  const AttnKernelArgs k{q,         k_cache,  v_cache, k_step, v_step,      sinks,   out,
                         workspace, counters, kv,      a,      DecodeQkv{}, nullptr, nullptr};
  launch_any<false>(k, num_rows, s);
}

void decode_attention_fused(float* out, const DecodeQkv& qkv, __nv_bfloat16* k_cache,
                            __nv_bfloat16* v_cache, const float* sinks, const TokenKv& kv,
                            int num_rows, const DecodeAttentionArgs& a, float* workspace,
                            int32_t* counters, cudaStream_t s) {
  FLINT_CHECK(qkv.qkv != nullptr && qkv.q_norm != nullptr && qkv.k_norm != nullptr,
              "decode_attention_fused: missing projections or norm weights");
  const AttnKernelArgs k{nullptr,   k_cache,  v_cache, nullptr, nullptr, sinks,   out,
                         workspace, counters, kv,      a,       qkv,     k_cache, v_cache};
  launch_any<true>(k, num_rows, s);
}

}  // namespace flint::cuda
