// Q/K norm + RoPE + KV write: one block of eight warps per token, each warp taking every eighth of
// its H + 2 Hkv heads, the head staged in shared memory so the NeoX pairs (j, j + D/2) can be
// rotated in place. The angles (dev::rope_cos_sin, double-precision exp2/log2) are the same for
// every head of a token: the block computes them once, into shared memory. Computing them per head
// (one warp per (token, head)) made the angles most of the kernel's time: 36 heads recomputed them.
// Reference: spec 2.3 steps 2-3 (tests/kernels/reference.h). Tests:
// tests/kernels/attention_decode_test.cpp (against the fused decode kernel), CudaPrefill.*
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/qk_norm_rope_kv.h"

namespace flint::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kWarps = 8;  // one block per token; kWarps * 32 >= kMaxHeadDim / 2 angles

__global__ void __launch_bounds__(kWarps * 32)
    qk_norm_rope_kv_kernel(float* __restrict__ q_out, const float* __restrict__ qkv,
                           const float* __restrict__ q_norm, const float* __restrict__ k_norm,
                           __nv_bfloat16* __restrict__ k_step, __nv_bfloat16* __restrict__ v_step,
                           const int32_t* __restrict__ positions, QkNormRopeArgs a) {
  __shared__ float xs[kWarps][kMaxHeadDim];
  __shared__ float2 rot[kMaxHeadDim / 2];
  const int t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int D = a.head_dim, half = D / 2;
  const int H = a.num_heads, Hkv = a.num_kv_heads;
  if (a.rope && threadIdx.x < half) {
    rot[threadIdx.x] = dev::rope_cos_sin(positions[t], threadIdx.x, D, a.rope_theta);
  }
  __syncthreads();
  float* x = xs[warp];
  for (int head = warp; head < H + 2 * Hkv; head += kWarps) {
    const float* src = qkv + int64_t(t) * (H + 2 * Hkv) * D + int64_t(head) * D;
    const bool is_q = head < H;
    const bool is_k = !is_q && head < H + Hkv;
    float ss = 0.0f;
    for (int j = lane; j < D; j += 32) {
      x[j] = src[j];
      ss += x[j] * x[j];
    }
    if (is_q || is_k) {
      const float inv = rsqrtf(dev::warp_sum(ss) / static_cast<float>(D) + a.eps);
      const float* w = is_q ? q_norm : k_norm;
      for (int j = lane; j < D; j += 32) x[j] = x[j] * inv * w[j];
      __syncwarp();
      if (a.rope) {
        for (int j = lane; j < half; j += 32) {
          const float c = rot[j].x, s = rot[j].y;
          const float x0 = x[j], x1 = x[j + half];
          x[j] = x0 * c - x1 * s;
          x[j + half] = x1 * c + x0 * s;
        }
        __syncwarp();
      }
    }
    if (is_q) {
      float* dst = q_out + (int64_t(t) * H + head) * D;
      for (int j = lane; j < D; j += 32) dst[j] = x[j];
    } else {
      const int kvh = is_k ? head - H : head - H - Hkv;
      __nv_bfloat16* dst = (is_k ? k_step : v_step) + (int64_t(t) * Hkv + kvh) * D;
      for (int j = lane; j < D; j += 32) dst[j] = __float2bfloat16(x[j]);
    }
    __syncwarp();  // x is reused by this warp's next head
  }
}

// One block per row; threads walk its K and V values in 16-byte vectors (row_vecs of them).
__global__ void kv_cache_write_kernel(uint4* __restrict__ k_cache, uint4* __restrict__ v_cache,
                                      const uint4* __restrict__ k_step,
                                      const uint4* __restrict__ v_step, TokenKv kv, int row_vecs,
                                      bool sliding) {
  const int t = blockIdx.x;
  const int32_t pos = kv.positions[t];
  const int seq = kv.seq_idx[t];
  int64_t slot;
  if (sliding) {
    if (pos < kv.seq_lens[seq] - kv.window) return;  // overwritten later in this step anyway
    slot = int64_t(kv.ring_ids[seq]) * kv.window + pos % kv.window;
  } else {
    slot = kv.slot_mapping[t];
  }
  for (int i = threadIdx.x; i < row_vecs; i += blockDim.x) {
    k_cache[slot * row_vecs + i] = k_step[int64_t(t) * row_vecs + i];
    v_cache[slot * row_vecs + i] = v_step[int64_t(t) * row_vecs + i];
  }
}

}  // namespace

void kv_cache_write(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k_step,
                    const __nv_bfloat16* v_step, const TokenKv& kv, int num_tokens,
                    int num_kv_heads, int head_dim, bool sliding, cudaStream_t s) {
  if (num_tokens == 0) return;
  FLINT_CHECK(!sliding || kv.window > 0, "kv_cache_write: sliding layer without a window");
  // Rows of whole 16-byte vectors: the attention kernels take head_dim 16, 32, 64 or 128 only.
  const int row = num_kv_heads * head_dim;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  FLINT_CHECK(
      row % 8 == 0 && aligned(k_cache) && aligned(v_cache) && aligned(k_step) && aligned(v_step),
      "kv_cache_write: rows of {} bf16 and the buffers must be 16-byte aligned", row);
  kv_cache_write_kernel<<<num_tokens, 64, 0, s>>>(
      reinterpret_cast<uint4*>(k_cache), reinterpret_cast<uint4*>(v_cache),
      reinterpret_cast<const uint4*>(k_step), reinterpret_cast<const uint4*>(v_step), kv, row / 8,
      sliding);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void qk_norm_rope_kv(float* q_out, const float* qkv, const float* q_norm, const float* k_norm,
                     __nv_bfloat16* k_step, __nv_bfloat16* v_step, const int32_t* positions,
                     int num_tokens, const QkNormRopeArgs& a, cudaStream_t s) {
  FLINT_CHECK(a.head_dim % 2 == 0 && a.head_dim <= kMaxHeadDim,
              "qk_norm_rope_kv: head_dim {} must be even and at most {}", a.head_dim, kMaxHeadDim);
  if (num_tokens == 0) return;
  qk_norm_rope_kv_kernel<<<num_tokens, kWarps * 32, 0, s>>>(q_out, qkv, q_norm, k_norm, k_step,
                                                            v_step, positions, a);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
