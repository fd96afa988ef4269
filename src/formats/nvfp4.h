// NVFP4 codec: the ggml block (GGML_TYPE_NVFP4, spec sec. 4.3), the ModelOpt layout (sec. 4.2), and
// the engine layout that the CUDA kernels read. Test partner: tests/unit/formats/nvfp4_test.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/result.h"

namespace flint::formats {

inline constexpr int kNvfp4BlockSize = 64;     // elements per ggml block
inline constexpr int kNvfp4SubBlockSize = 16;  // elements per UE4M3 sub-scale
inline constexpr int kNvfp4BlockBytes = 36;  // uint8 d[4] (UE4M3), then uint8 qs[32] (E2M1 nibbles)

// The E2M1 value of a 4-bit code (0x0..0xF -> 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the negatives).
// Code 0x8 decodes to +0, as ggml's integer table does, so decodes stay bit-identical to ggml.
float e2m1_to_f32(uint8_t code);

// ggml's UE4M3 sub-scale decode (full value, not ggml's halved one): 0x00 and 0x7F are 0, bit 7 is
// ignored, otherwise e == 0 ? m * 2^-9 : (1 + m/8) * 2^(e-7).
float ue4m3_to_f32(uint8_t x);

// ggml_fp32_to_ue4m3 bit for bit: x <= 0 or NaN -> 0; clamps to 448; subnormals round half up and
// saturate at 0x07; normals round half up on the first dropped bit; exponent >= 15 -> 0x7E.
uint8_t f32_to_ue4m3(float x);

// The ggml reference quantizer (quantize_row_nvfp4_ref): per 16 values d = f32_to_ue4m3(amax / 6),
// then each value takes the nearest E2M1 code (first code wins ties). n % 64 == 0.
void nvfp4_quantize_row(const float* src, uint8_t* dst, int64_t n);
// dequantize_row_nvfp4: E2M1(code) * UE4M3(d). No global scale. n % 64 == 0.
void nvfp4_dequantize_row(const uint8_t* src, float* dst, int64_t n);

// Global scale that makes the largest sub-scale of a tensor with absolute maximum `amax` land on
// 240 (0x77), the largest UE4M3 value that ggml's encoder reaches without its jump to 448.
// Quantize x / global with nvfp4_quantize_row and store `global` as the tensor's `.scale`.
float nvfp4_global_scale_for(float amax);

// Quantizes a [rows, cols] F32 or BF16 weight (cols % 64 == 0) to ggml blocks [rows, cols/64] with
// a per-tensor global scale, and returns that scale (store it as the F32 `<name>.scale`):
// W ~= dequant(blocks) * scale. Merged expert tensors call this once per expert.
float nvfp4_quantize_weight(DType src_type, const void* src, int64_t rows, int64_t cols,
                            uint8_t* blocks);

// ---- ModelOpt layout (HF safetensors exports) for a weight W[rows, cols], cols % 64 == 0 ----
//   codes  [rows, cols/2]  uint8: element 2j in the low nibble, 2j+1 in the high nibble
//   scales [rows, cols/16] float8_e4m3fn bytes (sign bit 0, never 0x7F)
//   value = E2M1(code) * e4m3(scale) * weight_scale_2 (the global scale travels separately)

// ggml blocks -> ModelOpt. Fails only if a sub-scale is 0xFF (ggml decodes it as 480, which
// e4m3fn cannot hold).
Status nvfp4_ggml_to_modelopt(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* codes,
                              uint8_t* scales);
// ModelOpt -> ggml blocks. Fails on a negative or NaN scale, which the ggml block cannot hold.
Status nvfp4_modelopt_to_ggml(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, uint8_t* blocks);

// ---- Engine layout: what the CUDA kernels read, for a weight W[rows, cols], cols % 64 == 0 ----
//   codes  [rows, cols/2]  uint8, row-major: element 2j in the low nibble, 2j+1 in the high nibble
//   scales [rows, cols/16] uint8, row-major: 7-bit unsigned E4M3, bit 7 always 0, no NaN:
//          value = e == 0 ? m * 2^-9 : (1 + m/8) * 2^(e-7)  (so 0x00 is 0 and 0x7F is 480)
//   W[r, c] = E2M1(codes nibble) * value(scales[r, c/16]), bit-identical to the ggml decode; the
//   tensor's global `.scale` is applied by the caller, as for ggml blocks.

// One sub-scale byte, ggml -> engine (0x7F, which ggml decodes to 0, -> 0x00; bit 7, which ggml
// ignores, cleared) and engine -> ggml (0x7F -> 0xFF, both 480). Both decode to the same value.
uint8_t nvfp4_engine_scale_byte(uint8_t ggml);
uint8_t nvfp4_ggml_scale_byte(uint8_t engine);

// Lossless repack of ggml blocks [rows, cols/64] into the engine layout.
void nvfp4_pack_engine(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* codes,
                       uint8_t* scales);
// The inverse: engine layout back to ggml blocks that decode to the same values.
void nvfp4_unpack_engine(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                         uint8_t* blocks);
// Engine-layout scale byte decode, and one row's decode (the reference for the kernels).
float nvfp4_engine_scale_to_f32(uint8_t s);
void nvfp4_engine_dequantize_row(const uint8_t* codes, const uint8_t* scales, float* dst,
                                 int64_t cols);

}  // namespace flint::formats
