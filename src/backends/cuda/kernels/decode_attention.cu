// Split-KV decode attention. Block = (kv head, split, token row), 4 warps. A group of D/8 lanes
// owns one key at a time (16-byte K/V loads); each group keeps an online softmax for the G query
// heads of its kv head over a tile of keys; the block merges its groups, and a second kernel
// merges the splits and adds the sink. Reference: tests/kernels/reference.h (spec 2.3).
// Test: tests/kernels/decode_attention_test.cu
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/decode_attention.h"

namespace flint::cuda {
namespace {

constexpr int kWarps = 4;

struct AttnKernelArgs {
  const float* q;
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  const __nv_bfloat16* k_step;
  const __nv_bfloat16* v_step;
  TokenKv kv;
  DecodeAttentionArgs a;
  float* part;  // [num_tokens, H, S, D + 2]: D accumulators, then m, l
};

__device__ __forceinline__ int64_t key_slot(const TokenKv& kv, bool sliding, int seq, int64_t p) {
  if (sliding) return int64_t(kv.ring_ids[seq]) * kv.window + p % kv.window;
  const int32_t page = kv.block_table[int64_t(seq) * kv.max_blocks_per_seq + p / kv.page_size];
  return int64_t(page) * kv.page_size + p % kv.page_size;
}

template <int D, int G>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(AttnKernelArgs args) {
  constexpr int KL = D / 8;          // lanes per key
  constexpr int KPW = 32 / KL;       // keys per warp at a time
  constexpr int NG = kWarps * KPW;   // key groups per block
  constexpr int T = G >= 8 ? 2 : 4;  // keys per group per tile
  __shared__ float sm_m[NG][G], sm_l[NG][G];
  __shared__ float sm_acc[NG][G][D];

  const int kvh = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
  const int Hkv = args.a.num_kv_heads, H = args.a.num_heads, S = args.a.num_splits;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % KL;  // which 8 channels
  const int gi = warp * KPW + lane / KL;
  const TokenKv& kv = args.kv;
  const bool sliding = args.a.sliding;
  const int seq = kv.seq_idx[t];
  const int64_t pos = kv.positions[t];
  const int64_t first = sliding ? max(int64_t(0), pos - kv.window + 1) : 0;
  const int64_t count = pos - first + 1;
  const int64_t per_split = (count + S - 1) / S;
  const int64_t begin = first + split * per_split;
  const int64_t end = min(first + count, begin + per_split);
  const int32_t q_start = kv.query_start_loc[seq];
  const int64_t first_new = kv.seq_lens[seq] - (kv.query_start_loc[seq + 1] - q_start);

  float qv[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qp = args.q + (int64_t(t) * H + kvh * G + g) * D + sub * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) qv[g][i] = qp[i] * args.a.scale;
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  for (int64_t base = begin; base < end; base += int64_t(NG) * T) {
    uint4 kr[T], vr[T];
    bool valid[T];
#pragma unroll
    for (int u = 0; u < T; ++u) {
      const int64_t p = base + int64_t(u) * NG + gi;
      valid[u] = p < end;
      if (valid[u]) {
        const bool in_step = p >= first_new;
        const int64_t row = in_step ? q_start + (p - first_new) : key_slot(kv, sliding, seq, p);
        const int64_t off = (row * Hkv + kvh) * D + sub * 8;
        kr[u] = __ldg(reinterpret_cast<const uint4*>((in_step ? args.k_step : args.k_cache) + off));
        vr[u] = __ldg(reinterpret_cast<const uint4*>((in_step ? args.v_step : args.v_cache) + off));
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float sc[T][G];
#pragma unroll
    for (int u = 0; u < T; ++u) {
      float kf[8];
      dev::bf16x8_to_f32(kr[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d += qv[g][i] * kf[i];
#pragma unroll
        for (int o = KL / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u][g] = valid[u] ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < T; ++u) mx = fmaxf(mx, sc[u][g]);
      if (mx == -INFINITY) continue;  // nothing valid yet for this group
      const float corr = __expf(m[g] - mx);
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
      m[g] = mx;
#pragma unroll
      for (int u = 0; u < T; ++u) {
        const float p = __expf(sc[u][g] - mx);
        l[g] += p;
        float vf[8];
        dev::bf16x8_to_f32(vr[u], vf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] += p * vf[i];
      }
    }
  }

  // Merge the NG groups of this block.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (sub == 0) {
      sm_m[gi][g] = m[g];
      sm_l[gi][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_acc[gi][g][sub * 8 + i] = acc[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kWarps * 32) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int j = 0; j < NG; ++j) M = fmaxf(M, sm_m[j][g]);
    float L = 0.0f, A = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int j = 0; j < NG; ++j) {
        const float w = __expf(sm_m[j][g] - M);
        L += sm_l[j][g] * w;
        A += sm_acc[j][g][d] * w;
      }
    }
    float* pp = args.part + ((int64_t(t) * H + kvh * G + g) * S + split) * (D + 2);
    pp[d] = A;
    if (d == 0) {
      pp[D] = M;
      pp[D + 1] = L;
    }
  }
}

__global__ void merge_splits_kernel(float* __restrict__ out, const float* __restrict__ part,
                                    const float* __restrict__ sinks, int H, int D, int S) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float* pp = part + (int64_t(t) * H + h) * S * (D + 2);
  const float sink = sinks != nullptr ? sinks[h] : -INFINITY;
  float M = sink;
  for (int s = 0; s < S; ++s) M = fmaxf(M, pp[s * (D + 2) + D]);
  float Z = sink == -INFINITY ? 0.0f : __expf(sink - M);
  for (int s = 0; s < S; ++s) {
    const float ms = pp[s * (D + 2) + D];
    if (ms != -INFINITY) Z += pp[s * (D + 2) + D + 1] * __expf(ms - M);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < S; ++s) {
      const float ms = pp[s * (D + 2) + D];
      if (ms != -INFINITY) o += pp[s * (D + 2) + d] * __expf(ms - M);
    }
    out[(int64_t(t) * H + h) * D + d] = o / Z;
  }
}

template <int D>
void launch_d(const AttnKernelArgs& k, int G, dim3 grid, cudaStream_t s) {
  switch (G) {
    case 1:
      decode_attention_kernel<D, 1><<<grid, kWarps * 32, 0, s>>>(k);
      break;
    case 2:
      decode_attention_kernel<D, 2><<<grid, kWarps * 32, 0, s>>>(k);
      break;
    case 4:
      decode_attention_kernel<D, 4><<<grid, kWarps * 32, 0, s>>>(k);
      break;
    case 8:
      decode_attention_kernel<D, 8><<<grid, kWarps * 32, 0, s>>>(k);
      break;
    default:
      FLINT_FAIL("decode_attention: {} query heads per kv head is not supported", G);
  }
}

}  // namespace

int decode_attention_splits(int num_tokens, int num_kv_heads, int64_t max_keys, int max_splits) {
  constexpr int64_t kMinKeysPerSplit = 128;
  const int64_t want = ceil_div(kAttentionTargetBlocks, std::max(1, num_tokens * num_kv_heads));
  const int64_t by_keys = ceil_div(std::max<int64_t>(max_keys, 1), kMinKeysPerSplit);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, by_keys), 1, max_splits));
}

void decode_attention(float* out, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                      const __nv_bfloat16* v_step, const float* sinks, const TokenKv& kv,
                      int num_tokens, const DecodeAttentionArgs& a, float* workspace,
                      cudaStream_t s) {
  FLINT_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 && a.num_splits >= 1,
              "decode_attention: {} heads, {} kv heads, {} splits", a.num_heads, a.num_kv_heads,
              a.num_splits);
  FLINT_CHECK(!a.sliding || kv.window > 0, "decode_attention: sliding layer without a window");
  if (num_tokens == 0) return;
  const AttnKernelArgs k{q, k_cache, v_cache, k_step, v_step, kv, a, workspace};
  const int G = a.num_heads / a.num_kv_heads;
  const dim3 grid(a.num_kv_heads, a.num_splits, num_tokens);
  switch (a.head_dim) {
    case 16:
      launch_d<16>(k, G, grid, s);
      break;
    case 32:
      launch_d<32>(k, G, grid, s);
      break;
    case 64:
      launch_d<64>(k, G, grid, s);
      break;
    case 128:
      launch_d<128>(k, G, grid, s);
      break;
    default:
      FLINT_FAIL("decode_attention: head_dim {} is not supported (16, 32, 64, 128)", a.head_dim);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
  merge_splits_kernel<<<dim3(num_tokens, a.num_heads), a.head_dim, 0, s>>>(
      out, workspace, sinks, a.num_heads, a.head_dim, a.num_splits);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
