// Row quantize/dequantize: hand-computed blocks and error bounds. Bit-exactness against the gguf
// package is in tests/python/formats/test_quant_interop.py.
#include "formats/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace flint::formats {
namespace {

TEST(Quant, F8E4M3DequantizeMatchesSpec) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t x = static_cast<uint8_t>(b);
    float got;
    dequantize_row(DType::kF8E4M3, &x, &got, 1);
    const int e = (b >> 3) & 0xF, m = b & 7;
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    float want = e == 0 ? m / 512.0f : (1.0f + m / 8.0f) * std::pow(2.0f, e - 7.0f);
    if (b & 0x80) want = -want;
    EXPECT_EQ(got, want) << b;
  }
}

TEST(Quant, Q8_0KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j * 8 - 127);  // amax 127 -> d = 1
  std::vector<uint8_t> q(34);
  quantize_row(DType::kQ8_0, x.data(), q.data(), 32);
  EXPECT_EQ(q[0], 0x00);
  EXPECT_EQ(q[1], 0x3C);  // f16 1.0
  for (int j = 0; j < 32; ++j) EXPECT_EQ(static_cast<int8_t>(q[2 + j]), j * 8 - 127) << j;
  std::vector<float> y(32);
  dequantize_row(DType::kQ8_0, q.data(), y.data(), 32);
  EXPECT_EQ(y, x);
}

TEST(Quant, Q4_1KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 16) - 3.0f;  // min -3, d = 1
  std::vector<uint8_t> q(20);
  quantize_row(DType::kQ4_1, x.data(), q.data(), 32);
  EXPECT_EQ(q[0], 0x00);
  EXPECT_EQ(q[1], 0x3C);  // d = 1.0
  EXPECT_EQ(q[2], 0x00);
  EXPECT_EQ(q[3], 0xC2);  // m = -3.0
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q[4 + j], j | (j << 4)) << j;
  std::vector<float> y(32);
  dequantize_row(DType::kQ4_1, q.data(), y.data(), 32);
  EXPECT_EQ(y, x);
}

TEST(Quant, RoundTripErrorIsBounded) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t n = 64 * 33;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  for (DType t : {DType::kQ8_0, DType::kQ4_1, DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> q(dtype_bytes_for(t, n));
    std::vector<float> y(n);
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    const int64_t bs = t == DType::kQ8_0 || t == DType::kQ4_1 ? 32 : 1;
    for (int64_t b = 0; b < n / bs; ++b) {
      float lo = x[b * bs], hi = x[b * bs], amax = 0;
      for (int64_t j = 0; j < bs; ++j) {
        lo = std::fmin(lo, x[b * bs + j]);
        hi = std::fmax(hi, x[b * bs + j]);
        amax = std::fmax(amax, std::fabs(x[b * bs + j]));
      }
      float tol = 0;
      if (t == DType::kQ8_0) tol = amax / 127.0f * 0.51f + amax * 1e-3f;
      if (t == DType::kQ4_1)
        tol = (hi - lo) / 15.0f * 0.51f + (hi - lo) * 2e-3f + std::fabs(lo) * 1e-3f;
      if (t == DType::kBF16) tol = amax / 256.0f;
      if (t == DType::kF16) tol = amax / 2048.0f;
      for (int64_t j = 0; j < bs; ++j) {
        ASSERT_LE(std::fabs(y[b * bs + j] - x[b * bs + j]), tol) << b << "," << j;
      }
    }
  }
}

TEST(Quant, PlainIntegerTypesDequantize) {
  const int8_t i8[3] = {-128, 0, 127};
  const uint8_t u8[2] = {0, 255};
  const int32_t i32[2] = {-70000, 70000};
  float y[3];
  dequantize_row(DType::kI8, i8, y, 3);
  EXPECT_EQ(y[0], -128.0f);
  EXPECT_EQ(y[2], 127.0f);
  dequantize_row(DType::kU8, u8, y, 2);
  EXPECT_EQ(y[1], 255.0f);
  dequantize_row(DType::kI32, i32, y, 2);
  EXPECT_EQ(y[0], -70000.0f);
  EXPECT_TRUE(can_quantize(DType::kNVFP4));
  EXPECT_FALSE(can_quantize(DType::kF8E4M3));
}

}  // namespace
}  // namespace flint::formats
