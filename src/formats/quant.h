// Row-wise dequantize/quantize for every element type flint stores, ggml block types included.
// Test partner: tests/unit/formats/quant_test.cpp and tests/python/formats/test_quant_interop.py.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace flint::formats {

// True if dequantize_row / quantize_row handle `type`.
bool can_dequantize(DType type);
bool can_quantize(DType type);

// Decodes n elements of `type` to f32. Handles F32, F16, BF16, F8_E4M3, U8, I8, I32, Q8_0, Q4_1 and
// NVFP4 (the ggml block alone, without the tensor's global `.scale`: the caller multiplies by it).
// n must be a multiple of the block size; anything else is a bug and aborts.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Encodes n f32 values. Handles F32, F16, BF16 (round to nearest even), Q8_0 and Q4_1 (ggml's
// reference quantizers, as the gguf package implements them) and NVFP4 (quantize_row_nvfp4_ref).
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace flint::formats
