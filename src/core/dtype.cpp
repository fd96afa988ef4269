// DType sizes and names, and the f16 / e4m3 scalar conversions.
#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace flint {

int64_t dtype_block_size(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_1:
      return 32;
    case DType::kNVFP4:
      return 64;
    default:
      return 1;
  }
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_1:
      return 20;
    case DType::kNVFP4:
      return 36;
  }
  return 0;
}

bool dtype_is_quantized(DType t) { return dtype_block_size(t) > 1; }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_1:
      return "Q4_1";
    case DType::kNVFP4:
      return "NVFP4";
  }
  return "?";
}

int64_t dtype_bytes_for(DType t, int64_t n) {
  const int64_t bs = dtype_block_size(t);
  if (n < 0 || n % bs != 0) return -1;
  const int64_t blocks = n / bs;
  const int64_t bb = dtype_block_bytes(t);
  if (blocks > std::numeric_limits<int64_t>::max() / bb) return -1;
  return blocks * bb;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x47800000u) {  // >= 65536: overflow unless it rounds down to 65504
    // values in [65520, inf) round to inf
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  }
  float a;
  std::memcpy(&a, &absx, 4);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {                // subnormal half: quantum 2^-24, round half to even
    const float scaled = a * 16777216.0f;    // exact (power of two)
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest-even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // normal: round mantissa from 23 to 10 bits, nearest-even
  uint32_t m = absx + 0xfffu + ((absx >> 13) & 1u);
  m -= 0x38000000u;  // rebias exponent 127 -> 15
  return static_cast<uint16_t>(sign | (m >> 13));
}

float e4m3_to_f32(uint8_t x) {
  const uint32_t sign = x >> 7;
  const uint32_t exp = (x >> 3) & 0xfu;
  const uint32_t man = x & 7u;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                     : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  return sign ? -v : v;
}

}  // namespace flint
