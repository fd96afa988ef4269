// LinearRef: how a kernel sees one weight matrix on the device (or a stack of experts of the same
// shape). Plain data, host- and device-visible. Built by backends/cuda/weights.cu.
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"

namespace flint::cuda {

// W[out, in] in F32, BF16 or NVFP4. NVFP4 is kept in the engine layout made at load time: the
// E2M1 codes of each row are contiguous (in/2 bytes, each 32-byte ggml block body in ggml nibble
// order: byte j of a 16-element sub-block holds element j low and j+8 high), and the UE4M3
// sub-scales are a separate [rows, in/16] byte array, so 16-byte loads stay aligned. The scale
// bytes are engine bytes (formats::nvfp4_engine_scale_byte: bit 7 clear, ggml's 0x7F as 0x00),
// which the kernels decode without branches (ue4m3_half). The real value is
// E2M1 x UE4M3 x row_scale[row] (row_scale: the tensor's global scale, per row so that
// concatenated tensors such as q|k|v keep their own).
struct LinearRef {
  DType dtype = DType::kBF16;
  int64_t out = 0;  // rows per matrix (per expert for a stack)
  int64_t in = 0;
  int64_t num_experts = 1;      // matrices stacked along rows: expert e is rows [e*out, (e+1)*out)
  const void* w = nullptr;      // F32/BF16/I8: [num_experts*out, in]; NVFP4: [.., in/2] bytes
  const uint8_t* sc = nullptr;  // NVFP4: [num_experts*out, in/16] UE4M3 sub-scales
  // NVFP4 (global) and I8 (the greedy head's copy): [num_experts*out] scale per row, or null (1).
  const float* row_scale = nullptr;

  // Bytes that reading `rows` whole rows costs.
  int64_t row_bytes() const {
    if (dtype == DType::kNVFP4) return in / 2 + in / 16;
    return in * (dtype == DType::kF32 ? 4 : dtype == DType::kI8 ? 1 : 2);
  }
  int64_t matrix_bytes() const { return row_bytes() * out; }

  // Experts [e0, e0 + n) of a stack as one matrix of n * out rows (a range outside the stack is a
  // bug: FLINT_CHECK).
  LinearRef experts(int64_t e0, int64_t n) const {
    FLINT_CHECK(e0 >= 0 && n > 0 && e0 + n <= num_experts,
                "LinearRef::experts: [{}, {}) outside a stack of {} experts", e0, e0 + n,
                num_experts);
    LinearRef r = *this;
    const int64_t row0 = e0 * out;
    const int64_t code_bytes = dtype == DType::kNVFP4 ? in / 2 : row_bytes();
    r.w = static_cast<const uint8_t*>(w) + row0 * code_bytes;
    if (sc != nullptr) r.sc = sc + row0 * (in / 16);
    if (row_scale != nullptr) r.row_scale = row_scale + row0;
    r.out = n * out;
    r.num_experts = 1;
    return r;
  }
};

// Elements per chunk the GEMV-style kernels load at once (16 bytes of F32/BF16 codes, a 32-byte
// NVFP4 block body): a weight's `in` must be a multiple. 0 for a dtype they cannot read.
inline constexpr int gemv_chunk_elems(DType t) {
  return t == DType::kNVFP4 ? 64 : t == DType::kBF16 ? 8 : t == DType::kF32 ? 4 : 0;
}

}  // namespace flint::cuda
