// Device helpers shared by the kernels: warp reductions, bf16 vectors, NVFP4 decode, and the
// weight-chunk loaders used by the GEMV-style kernels (gemv.cu, moe_experts.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda::dev {

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

// ggml's UE4M3 decode, returning half the value (to pair with the doubled E2M1 table), as
// ggml_ue4m3_to_fp32: 0x00 and 0x7F are 0, bit 7 is ignored.
__device__ __forceinline__ float ue4m3_half(uint32_t x) {
  x &= 0xffu;
  if (x == 0u || x == 0x7fu) return 0.0f;
  const int e = (x >> 3) & 0xf;
  const int m = x & 7;
  if (e == 0) return static_cast<float>(m) * (1.0f / 1024.0f);
  return static_cast<float>(8 + m) * __int_as_float((e - 11 + 127) << 23);
}

// Doubled E2M1 values (ggml kvalues_mxfp4), placed in shared memory by each kernel that decodes.
__device__ __forceinline__ void init_e2m1_lut(float* lut) {
  if (threadIdx.x < 16) {
    const int c = threadIdx.x & 7;
    const int e = c >> 1, m = c & 1;
    const float mag = e == 0 ? static_cast<float>(m) : static_cast<float>((2 + m) << (e - 1));
    lut[threadIdx.x] = threadIdx.x & 8 ? -mag : mag;
  }
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
};

// 32 consecutive NVFP4 weights: half a ggml block (two 16-element sub-blocks, 16 code bytes and
// 2 scale bytes). Byte t < 8 holds elements t (low) and t+8 (high); byte 8+t holds 16+t and 24+t.
template <>
struct Chunk<DType::kNVFP4> {
  static constexpr int kElems = 32;
  uint4 q;
  float d0, d1;
  __device__ __forceinline__ void load(const LinearRef& L, int64_t row, int64_t c) {
    q = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(L.w) + row * (L.in / 2)) +
              c);
    const uint16_t s = __ldg(reinterpret_cast<const uint16_t*>(L.sc + row * (L.in / 16)) + c);
    d0 = ue4m3_half(s & 0xffu);
    d1 = ue4m3_half(s >> 8);
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
    const float4 a0 = *reinterpret_cast<const float4*>(x);
    const float4 a1 = *reinterpret_cast<const float4*>(x + 4);
    const float4 b0 = *reinterpret_cast<const float4*>(x + 8);
    const float4 b1 = *reinterpret_cast<const float4*>(x + 12);
    // Nibble k of w0's low half is element (k&1 ? 8 : 0) + (k>>1); of its high half, + 2.
    float s = 0.0f;
    float2 p;
    p = decode2(w0);
    s += p.x * a0.x + p.y * a0.z;  // elements 0, 2
    p = decode2(w0 >> 4);
    s += p.x * b0.x + p.y * b0.z;  // 8, 10
    p = decode2(w0 >> 8);
    s += p.x * a0.y + p.y * a0.w;  // 1, 3
    p = decode2(w0 >> 12);
    s += p.x * b0.y + p.y * b0.w;  // 9, 11
    p = decode2(w1);
    s += p.x * a1.x + p.y * a1.z;  // 4, 6
    p = decode2(w1 >> 4);
    s += p.x * b1.x + p.y * b1.z;  // 12, 14
    p = decode2(w1 >> 8);
    s += p.x * a1.y + p.y * a1.w;  // 5, 7
    p = decode2(w1 >> 12);
    s += p.x * b1.y + p.y * b1.w;  // 13, 15
    return s;
  }
  __device__ __forceinline__ float dot(const float* x, const float*) const {
    return 32768.0f * (d0 * half_dot(q.x, q.y, x) + d1 * half_dot(q.z, q.w, x + 16));
  }
};

// Activations staged in shared memory: each 32-element group is followed by 4 pad floats, so
// lanes reading consecutive chunks hit distinct banks with 16-byte loads.
__host__ __device__ constexpr int64_t padded_len(int64_t n) { return (n + 31) / 32 * 36; }
__device__ __forceinline__ int64_t pad_idx(int64_t e) { return (e >> 5) * 36 + (e & 31); }

__device__ __forceinline__ float row_scale(const LinearRef& L, int64_t row) {
  return L.row_scale != nullptr ? __ldg(L.row_scale + row) : 1.0f;
}

}  // namespace flint::cuda::dev
