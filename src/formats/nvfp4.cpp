// NVFP4 codec: ggml block encode/decode, ModelOpt conversion, engine-layout repack.
// Test partner: tests/unit/formats/nvfp4_test.cpp, tests/python/formats/test_quant_interop.py.
#include "formats/nvfp4.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "formats/quant.h"

namespace flint::formats {
namespace {

// ggml's doubled E2M1 table (kvalues_mxfp4); paired with the halved sub-scale.
constexpr int8_t kDoubledE2M1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float ue4m3_half(uint8_t x) { return ue4m3_to_f32(x) * 0.5f; }

// Nearest doubled-table entry to x for half-scale d; strict < so the first code wins ties.
uint8_t best_code(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(static_cast<float>(kDoubledE2M1[0]) * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kDoubledE2M1[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

// Element e (0..63) of a ggml block: sub-block e/16, byte 8*(e/16) + e%8, high nibble if e%16 >= 8.
uint8_t ggml_code(const uint8_t* block, int e) {
  const uint8_t byte = block[4 + 8 * (e / 16) + e % 8];
  return (e % 16) >= 8 ? byte >> 4 : byte & 0xF;
}

void check_dims(int64_t rows, int64_t cols) {
  FLINT_CHECK(rows >= 0 && cols >= 0 && cols % kNvfp4BlockSize == 0,
              "nvfp4: [{}, {}] is not a [rows, 64k] weight", rows, cols);
}

// ggml block -> (codes, scales) in the 2j-low layout; `scale_map` turns a ggml d byte into the
// output byte. Shared by the ModelOpt and engine conversions.
template <typename ScaleMap>
void blocks_to_planar(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* codes,
                      uint8_t* scales, ScaleMap scale_map) {
  const int64_t nb = cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = blocks + (r * nb + b) * kNvfp4BlockBytes;
      uint8_t* c = codes + r * (cols / 2) + b * (kNvfp4BlockSize / 2);
      for (int k = 0; k < kNvfp4BlockSize / 2; ++k) {
        c[k] = static_cast<uint8_t>(ggml_code(blk, 2 * k) | (ggml_code(blk, 2 * k + 1) << 4));
      }
      for (int s = 0; s < 4; ++s) scales[r * (cols / 16) + b * 4 + s] = scale_map(blk[s]);
    }
  }
}

template <typename ScaleMap>
void planar_to_blocks(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                      uint8_t* blocks, ScaleMap scale_map) {
  const int64_t nb = cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = blocks + (r * nb + b) * kNvfp4BlockBytes;
      const uint8_t* c = codes + r * (cols / 2) + b * (kNvfp4BlockSize / 2);
      for (int s = 0; s < 4; ++s) blk[s] = scale_map(scales[r * (cols / 16) + b * 4 + s]);
      for (int s = 0; s < 4; ++s) {
        for (int j = 0; j < 8; ++j) {
          const int lo = 16 * s + j;
          const int hi = lo + 8;
          const uint8_t lo_code = (c[lo / 2] >> (4 * (lo % 2))) & 0xF;
          const uint8_t hi_code = (c[hi / 2] >> (4 * (hi % 2))) & 0xF;
          blk[4 + 8 * s + j] = static_cast<uint8_t>(lo_code | (hi_code << 4));
        }
      }
    }
  }
}

}  // namespace

float e2m1_to_f32(uint8_t code) { return static_cast<float>(kDoubledE2M1[code & 0xF]) * 0.5f; }

float ue4m3_to_f32(uint8_t x) {
  if (x == 0x00 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF;
  const int m = x & 7;
  return e == 0 ? std::ldexp(static_cast<float>(m), -9)
                : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

uint8_t f32_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int fexp = static_cast<int>((bits >> 23) & 0xFF) - 127;
  int e = fexp + 7;
  if (e <= 0) {
    const int man = static_cast<int>(x * 512.0f + 0.5f);
    if (man < 1) return 0;
    return static_cast<uint8_t>(man > 7 ? 7 : man);
  }
  if (e >= 15) return 0x7E;
  int m = static_cast<int>((bits >> 20) & 7) + static_cast<int>((bits >> 19) & 1);
  if (m > 7) {
    m = 0;
    if (++e >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((e << 3) | m);
}

void nvfp4_quantize_row(const float* src, uint8_t* dst, int64_t n) {
  FLINT_CHECK(n % kNvfp4BlockSize == 0, "nvfp4: row of {} is not a multiple of 64", n);
  for (int64_t i = 0; i < n / kNvfp4BlockSize; ++i) {
    uint8_t* blk = dst + i * kNvfp4BlockBytes;
    for (int s = 0; s < 4; ++s) {
      const float* x = src + i * kNvfp4BlockSize + s * kNvfp4SubBlockSize;
      float amax = 0.0f;
      for (int j = 0; j < kNvfp4SubBlockSize; ++j) amax = std::fmax(amax, std::fabs(x[j]));
      const uint8_t ue = f32_to_ue4m3(amax / 6.0f);
      blk[s] = ue;
      const float d = ue4m3_half(ue);
      for (int j = 0; j < 8; ++j) {
        blk[4 + 8 * s + j] =
            static_cast<uint8_t>(best_code(x[j], d) | (best_code(x[j + 8], d) << 4));
      }
    }
  }
}

void nvfp4_dequantize_row(const uint8_t* src, float* dst, int64_t n) {
  FLINT_CHECK(n % kNvfp4BlockSize == 0, "nvfp4: row of {} is not a multiple of 64", n);
  for (int64_t i = 0; i < n / kNvfp4BlockSize; ++i) {
    const uint8_t* blk = src + i * kNvfp4BlockBytes;
    float* y = dst + i * kNvfp4BlockSize;
    for (int s = 0; s < 4; ++s) {
      const float d = ue4m3_half(blk[s]);
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = blk[4 + 8 * s + j];
        y[16 * s + j] = static_cast<float>(kDoubledE2M1[q & 0xF]) * d;
        y[16 * s + j + 8] = static_cast<float>(kDoubledE2M1[q >> 4]) * d;
      }
    }
  }
}

float nvfp4_global_scale_for(float amax) {
  return amax > 0.0f && std::isfinite(amax) ? amax / (6.0f * 240.0f) : 1.0f;
}

float nvfp4_quantize_weight(DType src_type, const void* src, int64_t rows, int64_t cols,
                            uint8_t* blocks) {
  FLINT_CHECK(src_type == DType::kF32 || src_type == DType::kBF16, "nvfp4: cannot quantize from {}",
              src_type);
  check_dims(rows, cols);
  const int64_t row_bytes = dtype_bytes_for(src_type, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  std::vector<float> row(static_cast<size_t>(cols));
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(src_type, s + r * row_bytes, row.data(), cols);
    for (float v : row) amax = std::fmax(amax, std::fabs(v));
  }
  const float global = nvfp4_global_scale_for(amax);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(src_type, s + r * row_bytes, row.data(), cols);
    for (float& v : row) v /= global;
    nvfp4_quantize_row(row.data(), blocks + r * (cols / kNvfp4BlockSize) * kNvfp4BlockBytes, cols);
  }
  return global;
}

Status nvfp4_ggml_to_modelopt(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* codes,
                              uint8_t* scales) {
  check_dims(rows, cols);
  const int64_t n_scales = rows * (cols / kNvfp4SubBlockSize);
  const int64_t nb = cols / kNvfp4BlockSize;
  for (int64_t i = 0; i < n_scales; ++i) {
    if (blocks[(i / 4) * kNvfp4BlockBytes + i % 4] == 0xFF) {
      return make_error(ErrorCode::kUnsupported,
                        "nvfp4: sub-scale 0xFF at row {} block {} decodes to 480, which e4m3fn "
                        "cannot hold",
                        (i / 4) / nb, (i / 4) % nb);
    }
  }
  blocks_to_planar(blocks, rows, cols, codes, scales, nvfp4_engine_scale_byte);
  return ok();
}

Status nvfp4_modelopt_to_ggml(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, uint8_t* blocks) {
  check_dims(rows, cols);
  const int64_t per_row = cols / kNvfp4SubBlockSize;
  for (int64_t i = 0; i < rows * per_row; ++i) {
    if ((scales[i] & 0x80) != 0 || scales[i] == 0x7F) {
      return make_error(ErrorCode::kInvalidFile,
                        "nvfp4: weight_scale[{}, {}] is 0x{:02x}, expected a non-negative finite "
                        "e4m3 value",
                        i / per_row, i % per_row, scales[i]);
    }
  }
  planar_to_blocks(codes, scales, rows, cols, blocks, [](uint8_t s) { return s; });
  return ok();
}

void nvfp4_pack_engine(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* codes,
                       uint8_t* scales) {
  check_dims(rows, cols);
  blocks_to_planar(blocks, rows, cols, codes, scales, nvfp4_engine_scale_byte);
}

void nvfp4_unpack_engine(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                         uint8_t* blocks) {
  check_dims(rows, cols);
  planar_to_blocks(codes, scales, rows, cols, blocks, nvfp4_ggml_scale_byte);
}

uint8_t nvfp4_engine_scale_byte(uint8_t ggml) {
  return ggml == 0x7F ? uint8_t{0} : static_cast<uint8_t>(ggml & 0x7F);
}

uint8_t nvfp4_ggml_scale_byte(uint8_t engine) {
  FLINT_CHECK((engine & 0x80) == 0, "nvfp4: engine scale byte 0x{:02x} has bit 7 set", engine);
  return engine == 0x7F ? uint8_t{0xFF} : engine;
}

float nvfp4_engine_scale_to_f32(uint8_t s) {
  const int e = (s >> 3) & 0xF;
  const int m = s & 7;
  return e == 0 ? std::ldexp(static_cast<float>(m), -9)
                : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

void nvfp4_engine_dequantize_row(const uint8_t* codes, const uint8_t* scales, float* dst,
                                 int64_t cols) {
  FLINT_CHECK(cols % kNvfp4BlockSize == 0, "nvfp4: row of {} is not a multiple of 64", cols);
  for (int64_t c = 0; c < cols; ++c) {
    const uint8_t code = (codes[c / 2] >> (4 * (c % 2))) & 0xF;
    // Same arithmetic as the ggml decode (doubled table times half scale), so bits match.
    dst[c] =
        static_cast<float>(kDoubledE2M1[code]) * (nvfp4_engine_scale_to_f32(scales[c / 16]) * 0.5f);
  }
}

}  // namespace flint::formats
