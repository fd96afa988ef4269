// Row dequantize/quantize for plain and ggml block types. Q8_0 and Q4_1 follow ggml's reference
// quantizers (quantize_row_q8_0_ref / quantize_row_q4_1_ref), which the gguf package reproduces.
// Test partner: tests/unit/formats/quant_test.cpp, tests/python/formats/test_quant_interop.py.
#include "formats/quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "formats/nvfp4.h"

namespace flint::formats {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

template <typename T>
void plain_to_f32(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<float>(v);
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * 34;
    const float d = f16_to_f32(load_u16(blk));
    for (int j = 0; j < 32; ++j)
      dst[b * 32 + j] = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
  }
}

void quantize_q8_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + b * 32;
    uint8_t* blk = dst + b * 34;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(blk, f32_to_f16(d));
    for (int j = 0; j < 32; ++j) {
      blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
    }
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * 20;
    const float d = f16_to_f32(load_u16(blk));
    const float m = f16_to_f32(load_u16(blk + 2));
    for (int j = 0; j < 16; ++j) {
      dst[b * 32 + j] = static_cast<float>(blk[4 + j] & 0xF) * d + m;
      dst[b * 32 + j + 16] = static_cast<float>(blk[4 + j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + b * 32;
    uint8_t* blk = dst + b * 20;
    float lo = FLT_MAX;
    float hi = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < lo) lo = x[j];
      if (x[j] > hi) hi = x[j];
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(blk, f32_to_f16(d));
    store_u16(blk + 2, f32_to_f16(lo));
    for (int j = 0; j < 16; ++j) {
      const auto q0 = static_cast<int>((x[j] - lo) * id + 0.5f);
      const auto q1 = static_cast<int>((x[j + 16] - lo) * id + 0.5f);
      blk[4 + j] = static_cast<uint8_t>((q0 > 15 ? 15 : q0) | ((q1 > 15 ? 15 : q1) << 4));
    }
  }
}

}  // namespace

bool can_dequantize(DType type) { return type != DType::kI64; }

bool can_quantize(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_1:
    case DType::kNVFP4:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  FLINT_CHECK(n >= 0 && n % dtype_block_size(type) == 0, "dequantize_row: {} elements of {}", n,
              type);
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(s + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
      return;
    case DType::kF8E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(s[i]);
      return;
    case DType::kU8:
      plain_to_f32<uint8_t>(src, dst, n);
      return;
    case DType::kI8:
      plain_to_f32<int8_t>(src, dst, n);
      return;
    case DType::kI32:
      plain_to_f32<int32_t>(src, dst, n);
      return;
    case DType::kQ8_0:
      dequantize_q8_0(s, dst, n);
      return;
    case DType::kQ4_1:
      dequantize_q4_1(s, dst, n);
      return;
    case DType::kNVFP4:
      nvfp4_dequantize_row(s, dst, n);
      return;
    case DType::kI64:
      break;
  }
  FLINT_FAIL("dequantize_row: unsupported type {}", type);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  FLINT_CHECK(n >= 0 && n % dtype_block_size(type) == 0, "quantize_row: {} elements of {}", n,
              type);
  auto* d = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_f16(src[i]));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_bf16(src[i]));
      return;
    case DType::kQ8_0:
      quantize_q8_0(src, d, n);
      return;
    case DType::kQ4_1:
      quantize_q4_1(src, d, n);
      return;
    case DType::kNVFP4:
      nvfp4_quantize_row(src, d, n);
      return;
    default:
      break;
  }
  FLINT_FAIL("quantize_row: unsupported type {}", type);
}

}  // namespace flint::formats
