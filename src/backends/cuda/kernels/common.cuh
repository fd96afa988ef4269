// Device helpers shared by the kernels: warp reductions, bf16 vectors, NVFP4 decode, the
// weight-chunk loaders and activation staging (with a fused RMSNorm) of the GEMV-style kernels
// (gemv.cu, moe_router.cu, moe_experts.cu), and programmatic dependent launch (launch_pdl).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/ktrace.cuh"
#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

// Launches `kernel` with programmatic dependent launch (PDL) on a real stream: it may start while
// the previous kernel of the stream is still finishing, so its launch and prologue (weight loads)
// overlap that kernel's tail. Such a kernel must call dev::pdl_wait() before it reads anything an
// earlier kernel wrote and before its first global write. Works inside CUDA graph capture. On the
// legacy default stream (tests) it is a plain launch. `cluster`: the thread-block cluster shape
// (it must divide grid); a single block means no clusters.
template <typename... KArgs, typename... Args>
void launch_pdl_clusters(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t s, dim3 cluster, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (s != nullptr) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n++].val.clusterDim.z = cluster.z;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  FLINT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  launch_pdl_clusters(kernel, grid, block, smem, s, dim3(1, 1, 1), std::forward<Args>(args)...);
}

// The current device's SM count, read once (a device attribute: safe while a graph is captured).
inline int device_sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    FLINT_CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }();
  return n;
}

// Whether the current device is compute capability 9.x (Hopper), where the build's sm_90a code
// (wgmma) runs; read once.
inline bool device_is_sm90() {
  static const bool hopper = [] {
    int dev = 0, major = 0;
    FLINT_CUDA_CHECK(cudaGetDevice(&dev));
    FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
  }();
  return hopper;
}

}  // namespace flint::cuda

namespace flint::cuda::dev {

// A flag another grid sets (release: its stores, a fence, then the atomic), read with acquire
// semantics at GPU scope: the loads that follow, through L2, see what it stored before the flag.
__device__ __forceinline__ int ld_acquire_gpu(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// PDL: waits until every earlier kernel of the stream has finished and its writes are visible
// (a no-op when the kernel was launched without PDL).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// PDL: lets the next kernel of the stream launch once every block of this one has called this (or
// exited). Safe anywhere, because the next kernel reads nothing of ours before its pdl_wait().
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Thread-block cluster barrier in two halves, for every thread of every block of the cluster
// (sm_90). The arrival is relaxed: it publishes none of this thread's writes, so it suits a block
// that only has to wait for its peers (to have started, or to be done reading its shared memory);
// the wait has acquire semantics.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Order-preserving map of a float's bits to an unsigned key (larger float, larger key; -0 below
// +0), and back.
__device__ __forceinline__ uint32_t ordered_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// cos and sin of the NeoX RoPE angle pos * theta^(-2j/D) (cpu::rope_neox). The angle is formed
// and reduced to [-pi, pi] in double, since positions reach 262K and FP32 would lose the phase;
// the reduced angle then takes a float sincos (within ~3e-7 of the double one, and much cheaper
// than double pow and sincos).
__device__ __forceinline__ float2 rope_cos_sin(int32_t pos, int j, int D, double theta) {
  const double inv_freq = exp2(-2.0 * j / D * log2(theta));
  const double angle = double(pos) * inv_freq;
  constexpr double kTwoPi = 6.283185307179586;
  const float r = static_cast<float>(angle - rint(angle * (1.0 / kTwoPi)) * kTwoPi);
  float sn, cs;
  sincosf(r, &sn, &cs);
  return make_float2(cs, sn);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

// Unpacks 8 bf16 (one 16-byte load) to f32.
__device__ __forceinline__ void bf16x8_to_f32(const uint4& r, float (&f)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// An NVFP4 sub-scale byte as the repack stores it (weights.cpp: ggml's 0x7F, which decodes to 0,
// becomes 0x00, and bit 7, which ggml ignores, is cleared), returning half the UE4M3 value (to pair
// with the doubled E2M1 values of Chunk<kNVFP4>::decode2). Branch-free: the byte shifted left by 7
// is an fp16 whose exponent and mantissa are the UE4M3's, so it reads 2^-8 x the value, subnormals
// included.
__device__ __forceinline__ float ue4m3_half(uint32_t x) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>((x & 0x7fu) << 7))) * 128.0f;
}

template <DType W>
struct Chunk;

// 4 consecutive f32 weights.
template <>
struct Chunk<DType::kF32> {
  static constexpr int kElems = 4;
  float4 v;
  __device__ __forceinline__ void load(const LinearRef& L, int64_t row, int64_t c) {
    v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(L.w) + row * L.in) + c);
  }
  __device__ __forceinline__ float dot(const float* x, const float*) const {
    const float4 a = *reinterpret_cast<const float4*>(x);
    return v.x * a.x + v.y * a.y + v.z * a.z + v.w * a.w;
  }
  __device__ __forceinline__ void decode(float (&w)[kElems]) const {
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  }
};

// 8 consecutive bf16 weights.
template <>
struct Chunk<DType::kBF16> {
  static constexpr int kElems = 8;
  uint4 raw;
  __device__ __forceinline__ void load(const LinearRef& L, int64_t row, int64_t c) {
    raw = __ldg(
        reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(L.w) + row * L.in) + c);
  }
  __device__ __forceinline__ float dot(const float* x, const float*) const {
    float f[8];
    bf16x8_to_f32(raw, f);
    const float4 a = *reinterpret_cast<const float4*>(x);
    const float4 b = *reinterpret_cast<const float4*>(x + 4);
    return f[0] * a.x + f[1] * a.y + f[2] * a.z + f[3] * a.w + f[4] * b.x + f[5] * b.y +
           f[6] * b.z + f[7] * b.w;
  }
  __device__ __forceinline__ void decode(float (&w)[kElems]) const { bf16x8_to_f32(raw, w); }
};

// 16 consecutive int8 weights (the greedy LM head's copy; its per-row scale multiplies the sum).
template <>
struct Chunk<DType::kI8> {
  static constexpr int kElems = 16;
  uint4 raw;
  __device__ __forceinline__ void load(const LinearRef& L, int64_t row, int64_t c) {
    raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const int8_t*>(L.w) + row * L.in) + c);
  }
  // The 4 bytes of v as floats, exactly: with the sign bit flipped, byte b reads b + 128, and
  // 0x4B0000 followed by it is the float 2^23 + b + 128.
  __device__ __forceinline__ static float4 to_f32(uint32_t v) {
    const uint32_t u = v ^ 0x80808080u;
    constexpr float kBias = 8388736.0f;  // 2^23 + 128
    return make_float4(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - kBias,
                       __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - kBias,
                       __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7442)) - kBias,
                       __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7443)) - kBias);
  }
  __device__ __forceinline__ float dot(const float* x, const float*) const {
    const uint32_t v[4] = {raw.x, raw.y, raw.z, raw.w};
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 f = to_f32(v[k]);
      const float4 a = *reinterpret_cast<const float4*>(x + 4 * k);
      s += f.x * a.x + f.y * a.y + f.z * a.z + f.w * a.w;
    }
    return s;
  }
  __device__ __forceinline__ void decode(float (&w)[kElems]) const {
    const uint32_t v[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 f = to_f32(v[k]);
      w[4 * k] = f.x;
      w[4 * k + 1] = f.y;
      w[4 * k + 2] = f.z;
      w[4 * k + 3] = f.w;
    }
  }
};

// 32 consecutive NVFP4 weights: half a ggml block (two 16-element sub-blocks, 16 code bytes and
// 2 scale bytes). Byte t < 8 holds elements t (low) and t+8 (high); byte 8+t holds 16+t and 24+t.
template <>
struct Chunk<DType::kNVFP4> {
  static constexpr int kElems = 32;
  uint4 q;
  uint32_t s;  // the two UE4M3 sub-scales, decoded at use (one register while the load flies)
  __device__ __forceinline__ void load(const LinearRef& L, int64_t row, int64_t c) {
    q = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(L.w) + row * (L.in / 2)) +
              c);
    s = __ldg(reinterpret_cast<const uint16_t*>(L.sc + row * (L.in / 16)) + c);
  }
  __device__ __forceinline__ float d0() const { return ue4m3_half(s & 0xffu); }
  __device__ __forceinline__ float d1() const { return ue4m3_half(s >> 8); }
  // Both sub-scales at once, as 2^-7 x ue4m3_half: one fp16 pair (see ue4m3_half).
  __device__ __forceinline__ float2 scales_2m7() const {
    const uint32_t bits = ((s & 0x7fu) << 7) | ((s & 0x7f00u) << 15);
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
  // Two E2M1 codes (the same nibble of each 16-bit half of v) as 2^-15 x the doubled E2M1 value
  // in an fp16 pair: code bits s e e m land on the fp16 sign, exponent and top mantissa bit.
  __device__ __forceinline__ static float2 decode2(uint32_t v) {
    const uint32_t bits = ((v & 0x00070007u) << 9) | ((v & 0x00080008u) << 12);
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
  // w0, w1: the 8 code bytes of one 16-element sub-block (byte j: element j low, j+8 high);
  // x: its 16 activations (16-byte aligned). Returns 2^-15 x sum(doubled code x activation).
  __device__ __forceinline__ static float half_dot(uint32_t w0, uint32_t w1, const float* x) {
    // Nibble k of the low half of w0 (h = 0) or w1 (h = 1) is element 4h + (k&1 ? 8 : 0) + (k>>1);
    // of its high half, that + 2.
    // Two fmaf chains: `s += p.x * a + p.y * b` compiled to FMUL + FFMA + FADD per pair
    // (scripts/sass-mix.sh), the chains to two FFMA.
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t w = h == 0 ? w0 : w1;
      const float4 a = *reinterpret_cast<const float4*>(x + 4 * h);      // elements 4h .. 4h+3
      const float4 b = *reinterpret_cast<const float4*>(x + 8 + 4 * h);  // 8+4h .. 8+4h+3
      float2 p = decode2(w);                                             // elements 4h, 4h+2
      s0 = fmaf(p.x, a.x, s0);
      s1 = fmaf(p.y, a.z, s1);
      p = decode2(w >> 4);  // 8+4h, 8+4h+2
      s0 = fmaf(p.x, b.x, s0);
      s1 = fmaf(p.y, b.z, s1);
      p = decode2(w >> 8);  // 4h+1, 4h+3
      s0 = fmaf(p.x, a.y, s0);
      s1 = fmaf(p.y, a.w, s1);
      p = decode2(w >> 12);  // 8+4h+1, 8+4h+3
      s0 = fmaf(p.x, b.y, s0);
      s1 = fmaf(p.y, b.w, s1);
    }
    return s0 + s1;
  }
  __device__ __forceinline__ float dot(const float* x, const float*) const {
    const float2 d = scales_2m7();  // 2^22 = 2^15 (half_dot) x 2^7 (scales_2m7), exact
    return 4194304.0f * (d.x * half_dot(q.x, q.y, x) + d.y * half_dot(q.z, q.w, x + 16));
  }
  // One 16-element sub-block as real values times the sub-scale s (exact in f32).
  __device__ __forceinline__ static void decode16(uint32_t w0, uint32_t w1, float s, float* o) {
    float2 p;
    p = decode2(w0);
    o[0] = p.x * s;
    o[2] = p.y * s;
    p = decode2(w0 >> 4);
    o[8] = p.x * s;
    o[10] = p.y * s;
    p = decode2(w0 >> 8);
    o[1] = p.x * s;
    o[3] = p.y * s;
    p = decode2(w0 >> 12);
    o[9] = p.x * s;
    o[11] = p.y * s;
    p = decode2(w1);
    o[4] = p.x * s;
    o[6] = p.y * s;
    p = decode2(w1 >> 4);
    o[12] = p.x * s;
    o[14] = p.y * s;
    p = decode2(w1 >> 8);
    o[5] = p.x * s;
    o[7] = p.y * s;
    p = decode2(w1 >> 12);
    o[13] = p.x * s;
    o[15] = p.y * s;
  }
  // The 32 weights (without row_scale), for reuse across several activation rows.
  __device__ __forceinline__ void decode(float (&w)[kElems]) const {
    decode16(q.x, q.y, 32768.0f * d0(), w);
    decode16(q.z, q.w, 32768.0f * d1(), w + 16);
  }
};

// sum_k w[k] x[k] over N decoded weights; x is 16-byte aligned and contiguous (one chunk).
template <int N>
__device__ __forceinline__ float dot_decoded(const float (&w)[N], const float* x) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < N; k += 4) {
    const float4 a = *reinterpret_cast<const float4*>(x + k);
    s += w[k] * a.x + w[k + 1] * a.y + w[k + 2] * a.z + w[k + 3] * a.w;
  }
  return s;
}

// Activations staged in shared memory: each 32-element group is followed by 4 pad floats, so
// lanes reading consecutive chunks hit distinct banks with 16-byte loads.
__host__ __device__ constexpr int64_t padded_len(int64_t n) { return (n + 31) / 32 * 36; }
__device__ __forceinline__ int64_t pad_idx(int64_t e) { return (e >> 5) * 36 + (e & 31); }

__device__ __forceinline__ float row_scale(const LinearRef& L, int64_t row) {
  return L.row_scale != nullptr ? __ldg(L.row_scale + row) : 1.0f;
}

// The first kNormVec float4 of a thread's share of an RMSNorm weight, loaded before the PDL wait
// (weights do not depend on earlier kernels). Covers K <= 4 * kNormVec * blockDim.x; the rest is
// read when it is used.
inline constexpr int kNormVec = 2;
struct NormPrefetch {
  float4 v[kNormVec];
};

__device__ __forceinline__ void prefetch_norm(NormPrefetch& p, const float* norm, int64_t K) {
  if (norm == nullptr) return;
  const int64_t n4 = K / 4;
#pragma unroll
  for (int k = 0; k < kNormVec; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j < n4) p.v[k] = __ldg(reinterpret_cast<const float4*>(norm) + j);
  }
}

// The warps' sums of squares of the rows stage_rows staged, [warp][row]: one array per kernel
// (a function's __shared__ variable is static), read again by staged_inv.
template <int NB>
__device__ __forceinline__ float (&stage_red())[32][NB] {
  __shared__ float red[32][NB];
  return red;
}

// 1 / sqrt(mean(x^2) + eps) of staged row i (stage_rows with a norm weight, after its barrier,
// in a block of kW warps): the kW partial sums loaded together and added as a tree, the same
// order in every thread of the block. A loop over the warps' sums (one dependent shared load and
// add at a time) put 0.2-0.9 us on the end of each GEMV that uses it (scripts/gpu.sh ktrace).
template <int NB, int kW>
__device__ __forceinline__ float staged_inv(int i, int64_t K, float eps) {
  static_assert(kW >= 1 && kW <= 32, "staged_inv: 1-32 warps");
  const float(&red)[32][NB] = stage_red<NB>();
  float v[kW];
#pragma unroll
  for (int w = 0; w < kW; ++w) v[w] = red[w][i];
#pragma unroll
  for (int step = 1; step < kW; step *= 2) {
#pragma unroll
    for (int w = 0; w + step < kW; w += 2 * step) v[w] += v[w + step];
  }
  return rsqrtf(v[0] / static_cast<float>(K) + eps);
}

// Copies nb (<= NB) activation rows of K f32 (row i starts at x + row[i] * x_stride; K % 4 == 0,
// 16-byte aligned rows) into xs in the padded layout, PK floats per row. With a norm weight each
// row is stored times the weight (x * norm) and the warps' sums of squares of x are left for
// staged_inv: the consumer scales its dot products by 1 / sqrt(mean(x^2) + eps) at the end, so
// the GEMV that consumes a normed input needs no separate RMSNorm launch, and staging needs one
// barrier, not two (before, the rows were rescaled in place between two barriers). `pf` holds
// the prefetched part of the norm weight (prefetch_norm). Ends with __syncthreads(). Every thread
// of the block must call it; blockDim.x is a multiple of 32 and at most 1024.
template <int NB>
__device__ __forceinline__ void stage_rows(float* xs, int64_t PK, const float* x, int64_t x_stride,
                                           const int64_t (&row)[NB], int nb, int64_t K,
                                           const float* norm, const NormPrefetch& pf) {
  const int64_t n4 = K / 4, bd = blockDim.x;
  const bool normed = norm != nullptr;
  float ss[NB];
  auto times = [](float4 v, const float4& w) {
    v.x *= w.x;
    v.y *= w.y;
    v.z *= w.z;
    v.w *= w.w;
    return v;
  };
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    ss[i] = 0.0f;
    if (i >= nb) continue;
    const float4* src = reinterpret_cast<const float4*>(x + row[i] * x_stride);
    float* dst = xs + i * PK;
    float4 v[kNormVec];
#pragma unroll
    for (int k = 0; k < kNormVec; ++k) {  // all loads first: several in flight per thread
      const int64_t j = threadIdx.x + k * bd;
      if (j < n4) v[k] = src[j];
    }
#pragma unroll
    for (int k = 0; k < kNormVec; ++k) {
      const int64_t j = threadIdx.x + k * bd;
      if (j < n4) {
        *reinterpret_cast<float4*>(dst + pad_idx(4 * j)) = normed ? times(v[k], pf.v[k]) : v[k];
        ss[i] += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
      }
    }
    for (int64_t j = threadIdx.x + kNormVec * bd; j < n4; j += bd) {
      const float4 u = src[j];
      *reinterpret_cast<float4*>(dst + pad_idx(4 * j)) =
          normed ? times(u, __ldg(reinterpret_cast<const float4*>(norm) + j)) : u;
      ss[i] += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
    }
  }
  if (normed) {
    float(&red)[32][NB] = stage_red<NB>();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      const float v = warp_sum(ss[i]);
      if (lane == 0) red[warp][i] = v;
    }
  }
  __syncthreads();
}

}  // namespace flint::cuda::dev
