// Element types shared by every layer, including ggml block-quantized types, and the scalar
// conversions (bf16/f16/e4m3 <-> f32) that the CPU reference uses.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace flint {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP float8 e4m3fn (bias 7, max 448, 0x7F/0xFF NaN)
  kU8,
  kI8,
  kI32,
  kI64,
  kQ8_0,   // ggml block of 32: f16 scale + 32 int8
  kQ4_1,   // ggml block of 32: f16 d, f16 m, 16 bytes of nibbles
  kNVFP4,  // ggml block of 64: 4 UE4M3 sub-scales + 32 bytes of E2M1 nibbles (36 bytes)
};

// Elements per storage block (1 for plain types).
int64_t dtype_block_size(DType t);
// Bytes per storage block (the element size for plain types).
int64_t dtype_block_bytes(DType t);
bool dtype_is_quantized(DType t);
std::string_view dtype_name(DType t);

// Bytes taken by `n` elements, or -1 if n is not a multiple of the block size or would overflow.
int64_t dtype_bytes_for(DType t, int64_t n);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (quietened), as torch and numpy (ml_dtypes) do.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// OCP e4m3fn decode (0x7F and 0xFF are NaN).
float e4m3_to_f32(uint8_t x);

}  // namespace flint

template <>
struct fmt::formatter<flint::DType> : fmt::formatter<std::string_view> {
  auto format(flint::DType t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(flint::dtype_name(t), ctx);
  }
};
