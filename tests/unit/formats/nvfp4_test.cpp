// NVFP4 codec tests: UE4M3 scales, ggml nibble order, quantizer accuracy, the engine repack and the
// ModelOpt conversion. Bit-exactness against gguf/ggml lives in tests/python/formats.
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace flint::formats {
namespace {

// Spec sec. 4.3, written out independently of the library.
float spec_ue4m3(uint8_t x) {
  if (x == 0x00 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF;
  const int m = x & 7;
  return e == 0 ? static_cast<float>(m) / 512.0f
                : (1.0f + static_cast<float>(m) / 8.0f) * std::pow(2.0f, static_cast<float>(e - 7));
}

std::vector<uint8_t> random_blocks(int64_t n_blocks, uint32_t seed, bool modelopt_safe) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(n_blocks * kNvfp4BlockBytes));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  if (modelopt_safe) {
    for (int64_t i = 0; i < n_blocks; ++i)
      for (int s = 0; s < 4; ++s) b[i * kNvfp4BlockBytes + s] = static_cast<uint8_t>(rng() % 0x7F);
  }
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(Nvfp4, Ue4m3DecodeMatchesSpec) {
  for (int x = 0; x < 256; ++x) {
    EXPECT_EQ(ue4m3_to_f32(static_cast<uint8_t>(x)), spec_ue4m3(static_cast<uint8_t>(x))) << x;
  }
  EXPECT_EQ(ue4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(ue4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(ue4m3_to_f32(0x01), 1.0f / 512.0f);
  EXPECT_EQ(ue4m3_to_f32(0xFF), 480.0f);  // bit 7 ignored, only 0x7F itself is special
  EXPECT_EQ(ue4m3_to_f32(0x80), 0.0f);
}

TEST(Nvfp4, Ue4m3EncodeInvertsDecodeBelow248) {
  for (int x = 1; x < 0x78; ++x) {
    EXPECT_EQ(f32_to_ue4m3(ue4m3_to_f32(static_cast<uint8_t>(x))), x) << x;
  }
  // ggml's encoder: anything that rounds to exponent 15 becomes 0x7E (448).
  EXPECT_EQ(f32_to_ue4m3(248.0f), 0x7E);
  EXPECT_EQ(f32_to_ue4m3(300.0f), 0x7E);
  EXPECT_EQ(f32_to_ue4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_ue4m3(0.0f), 0);
  EXPECT_EQ(f32_to_ue4m3(-2.0f), 0);
  EXPECT_EQ(f32_to_ue4m3(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(f32_to_ue4m3(1.0f / 2048.0f), 0);  // 0.25 of the smallest subnormal step
  EXPECT_EQ(f32_to_ue4m3(1.0f / 1024.0f), 1);  // half a step rounds up
  EXPECT_EQ(f32_to_ue4m3(1.0625f), 0x39);      // ties round up (first dropped bit), not to even
  EXPECT_EQ(f32_to_ue4m3(1.0624f), 0x38);
}

TEST(Nvfp4, DequantizeUsesGgmlNibbleOrder) {
  std::vector<uint8_t> blk(kNvfp4BlockBytes, 0);
  blk[0] = 0x38;      // sub-block 0 scale 1.0
  blk[1] = 0x40;      // sub-block 1 scale 2.0
  blk[4 + 0] = 0x72;  // element 0 = code 2 (1.0), element 8 = code 7 (6.0)
  blk[4 + 8] = 0xA1;  // element 16 = code 1 (0.5 * 2), element 24 = code 0xA (-1.0 * 2)
  std::vector<float> y(kNvfp4BlockSize);
  nvfp4_dequantize_row(blk.data(), y.data(), kNvfp4BlockSize);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[8], 6.0f);
  EXPECT_EQ(y[16], 1.0f);
  EXPECT_EQ(y[24], -2.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[40], 0.0f);
}

TEST(Nvfp4, QuantizeReproducesGridValuesExactly) {
  // Every sub-block holds E2M1 values times a UE4M3 scale, with amax == 6 * scale.
  const float table[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::mt19937 rng(11);
  std::vector<float> x(kNvfp4BlockSize * 7);
  for (size_t s = 0; s < x.size() / 16; ++s) {
    const float scale = ue4m3_to_f32(static_cast<uint8_t>(0x08 + rng() % 0x68));
    for (int j = 0; j < 16; ++j) {
      const float v = table[rng() % 8] * scale;
      x[s * 16 + j] = (rng() % 2) ? -v : v;
    }
    x[s * 16 + rng() % 16] = 6.0f * scale;
  }
  std::vector<uint8_t> q(x.size() / 64 * kNvfp4BlockBytes);
  nvfp4_quantize_row(x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  nvfp4_dequantize_row(q.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] == 0 ? 0.0f : x[i]) << i;
}

TEST(Nvfp4, GlobalScaleQuantizationErrorIsBounded) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 37.0f);
  const int64_t n = 64 * 129;
  std::vector<float> x(n);
  float amax = 0;
  for (auto& v : x) amax = std::fmax(amax, std::fabs(v = normal(rng)));
  const float global = nvfp4_global_scale_for(amax);
  std::vector<float> scaled(n);
  for (int64_t i = 0; i < n; ++i) scaled[i] = x[i] / global;
  std::vector<uint8_t> q(n / 64 * kNvfp4BlockBytes);
  nvfp4_quantize_row(scaled.data(), q.data(), n);
  std::vector<float> y(n);
  nvfp4_dequantize_row(q.data(), y.data(), n);
  for (int64_t s = 0; s < n / 16; ++s) {
    float sub_amax = 0;
    for (int j = 0; j < 16; ++j) sub_amax = std::fmax(sub_amax, std::fabs(x[s * 16 + j]));
    for (int j = 0; j < 16; ++j) {
      // Largest E2M1 gap is 2 (4 -> 6), so the error is at most one scale step (~amax/6).
      EXPECT_LE(std::fabs(y[s * 16 + j] * global - x[s * 16 + j]), sub_amax / 6.0f * 1.07f + 1e-6f);
    }
  }
}

TEST(Nvfp4, QuantizeWeightFromBf16MatchesF32Path) {
  const int64_t rows = 3, cols = 128;
  std::mt19937 rng(15);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> bf16(rows * cols);
  std::vector<float> f32(rows * cols);
  for (size_t i = 0; i < f32.size(); ++i) {
    bf16[i] = f32_to_bf16(normal(rng));
    f32[i] = bf16_to_f32(bf16[i]);
  }
  std::vector<uint8_t> a(rows * 2 * kNvfp4BlockBytes), b(a.size()), c(a.size());
  const float ga = nvfp4_quantize_weight(DType::kBF16, bf16.data(), rows, cols, a.data());
  const float gb = nvfp4_quantize_weight(DType::kF32, f32.data(), rows, cols, b.data());
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(a, b);
  // Same as dividing by the global scale and running the reference quantizer.
  float amax = 0;
  for (float v : f32) amax = std::fmax(amax, std::fabs(v));
  EXPECT_EQ(ga, nvfp4_global_scale_for(amax));
  for (float& v : f32) v /= ga;
  nvfp4_quantize_row(f32.data(), c.data(), rows * cols);
  EXPECT_EQ(a, c);
  // The largest sub-scale lands on 240 (0x77), below the encoder's jump to 448.
  uint8_t max_scale = 0;
  for (int64_t i = 0; i < rows * 2; ++i)
    for (int s = 0; s < 4; ++s) max_scale = std::max(max_scale, a[i * kNvfp4BlockBytes + s]);
  EXPECT_EQ(max_scale, 0x77);
}

// Every ggml sub-scale byte: its engine byte has bit 7 clear and decodes to the same value (the
// CUDA kernels' branch-free decode reads engine bytes), and mapping back gives a ggml byte of
// that value too. The three bytes ggml reads as 0 (0x00, 0x7F, 0x80) all become 0x00.
TEST(Nvfp4, EngineScaleBytesKeepEveryGgmlValue) {
  for (int x = 0; x < 256; ++x) {
    const auto g = static_cast<uint8_t>(x);
    const uint8_t e = nvfp4_engine_scale_byte(g);
    ASSERT_EQ(e & 0x80, 0) << x;
    EXPECT_EQ(nvfp4_engine_scale_to_f32(e), ue4m3_to_f32(g)) << x;
    EXPECT_EQ(ue4m3_to_f32(nvfp4_ggml_scale_byte(e)), ue4m3_to_f32(g)) << x;
  }
  EXPECT_EQ(nvfp4_engine_scale_byte(0x7F), 0x00);
  EXPECT_EQ(nvfp4_engine_scale_byte(0x80), 0x00);
  EXPECT_EQ(nvfp4_engine_scale_byte(0xFF), 0x7F);
  EXPECT_EQ(nvfp4_engine_scale_to_f32(0x7F), 480.0f);
  EXPECT_EQ(nvfp4_ggml_scale_byte(0x7F), 0xFF);
}

TEST(Nvfp4, EngineRepackDecodesBitIdentical) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 64}, {7, 192}, {129, 128}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    const auto blocks = random_blocks(rows * cols / 64, 13, /*modelopt_safe=*/false);
    std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / 16);
    nvfp4_pack_engine(blocks.data(), rows, cols, codes.data(), scales.data());
    for (uint8_t s : scales) ASSERT_EQ(s & 0x80, 0);
    std::vector<float> want(cols), got(cols);
    for (int64_t r = 0; r < rows; ++r) {
      nvfp4_dequantize_row(blocks.data() + r * (cols / 64) * kNvfp4BlockBytes, want.data(), cols);
      nvfp4_engine_dequantize_row(codes.data() + r * cols / 2, scales.data() + r * cols / 16,
                                  got.data(), cols);
      ASSERT_TRUE(same_bits(want, got)) << "row " << r;
      // The documented decode: E2M1(code 2j low, 2j+1 high) * scale value.
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t code = (codes[r * cols / 2 + c / 2] >> (4 * (c % 2))) & 0xF;
        const float v =
            e2m1_to_f32(code) * nvfp4_engine_scale_to_f32(scales[r * cols / 16 + c / 16]);
        ASSERT_EQ(v, want[c]) << r << "," << c;
      }
    }
    std::vector<uint8_t> back(blocks.size());
    nvfp4_unpack_engine(codes.data(), scales.data(), rows, cols, back.data());
    std::vector<float> a(rows * cols), b(rows * cols);
    nvfp4_dequantize_row(blocks.data(), a.data(), rows * cols);
    nvfp4_dequantize_row(back.data(), b.data(), rows * cols);
    EXPECT_TRUE(same_bits(a, b));
  }
}

TEST(Nvfp4, ModelOptRoundTripIsLossless) {
  const int64_t rows = 5, cols = 256;
  const auto blocks = random_blocks(rows * cols / 64, 14, /*modelopt_safe=*/true);
  std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / 16), back(blocks.size());
  ASSERT_TRUE(nvfp4_ggml_to_modelopt(blocks.data(), rows, cols, codes.data(), scales.data()));
  ASSERT_TRUE(nvfp4_modelopt_to_ggml(codes.data(), scales.data(), rows, cols, back.data()));
  EXPECT_EQ(back, blocks);
  // Element 2j of a row sits in the low nibble of byte j.
  std::vector<float> y(cols);
  nvfp4_dequantize_row(blocks.data(), y.data(), cols);
  for (int64_t c = 0; c < cols; ++c) {
    const uint8_t code = (codes[c / 2] >> (4 * (c % 2))) & 0xF;
    EXPECT_EQ(e2m1_to_f32(code) * spec_ue4m3(scales[c / 16]), y[c]) << c;
  }
}

TEST(Nvfp4, ModelOptRejectsNegativeOrNanScale) {
  std::vector<uint8_t> codes(32, 0x11), scales(4, 0x38), blocks(kNvfp4BlockBytes);
  scales[2] = 0xB8;
  auto st = nvfp4_modelopt_to_ggml(codes.data(), scales.data(), 1, 64, blocks.data());
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("weight_scale[0, 2]"), std::string::npos) << st.error().message;
  scales[2] = 0x7F;
  EXPECT_FALSE(nvfp4_modelopt_to_ggml(codes.data(), scales.data(), 1, 64, blocks.data()));
}

TEST(Nvfp4, GgmlScale0xFFCannotBecomeModelOpt) {
  std::vector<uint8_t> blocks(kNvfp4BlockBytes, 0), codes(32), scales(4);
  blocks[3] = 0xFF;
  auto st = nvfp4_ggml_to_modelopt(blocks.data(), 1, 64, codes.data(), scales.data());
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("0xFF"), std::string::npos);
}

}  // namespace
}  // namespace flint::formats
