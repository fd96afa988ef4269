// Prefill-size linear layers with bf16 activations and f32 accumulation: cuBLAS for plain BF16
// weights, and our own tensor-core kernels (warpgroup MMAs on Hopper, mma.sync elsewhere) for NVFP4
// (W4A16: E2M1 x UE4M3 decoded to bf16 in shared memory, exact; the per-row global scale applied in
// the epilogue), for scaled BF16, for the fused SwiGLU gate|up and for expert groups
// (moe_grouped.h). Test: tests/kernels/prefill_gemm_test.cpp
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/linear_ref.h"

namespace flint::cuda {

// Rows of one GEMM tile of the tensor-core kernel: dense problems and grouped problems with many
// rows per expert are cut into tiles of kGemmTileRows, grouped problems with few rows per expert
// (decode steps of many sequences) into tiles of kGemmSmallTileRows, so that an expert with two
// rows does not pay for 128.
inline constexpr int kGemmTileRows = 128;
inline constexpr int kGemmSmallTileRows = 32;

// Whether tiles of kGemmTileRows run on the warpgroup-MMA kernel on Hopper (the default) or on the
// mma.sync kernel (which other devices always use): a process-wide switch, for tests and
// measurements of both.
void gemm_use_wgmma(bool on);

// out[r, c] = bf16(x[r, c]). x: [rows, cols] f32 (row stride x_stride); out: bf16 (out_stride).
void cast_to_bf16(__nv_bfloat16* out, int64_t out_stride, const float* x, int64_t x_stride,
                  int rows, int64_t cols, cudaStream_t s);

// out[i] = f32(in[i]) for n elements.
void widen_bf16(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t s);

// out = W as bf16 [W.out * W.num_experts, W.in] (NVFP4 decoded, times the row scale), so that a
// prefill-size GEMM over an NVFP4 matrix can run through cuBLAS.
void dequantize_bf16(__nv_bfloat16* out, const LinearRef& w, cudaStream_t s);

// y[m, n] = sum_k W[n, k] x[m, k] in plain f32 (cuBLAS SGEMM; no TF32): the router, whose top-k
// must see the same logits as the decode path. w: [out, in] f32; x: [rows, in] f32.
void gemm_f32(cublasHandle_t cublas, float* y, int64_t y_stride, const float* x, int64_t x_stride,
              int rows, const float* w, int64_t out, int64_t in, cudaStream_t s);

// Rows of f32 activations through cuBLAS at close to f32 precision (the LM head of a step with
// more logits rows than one GEMV pass holds): y[m, :] = W x[m, :] for F32 weights by SGEMM (no
// TF32), for plain BF16 weights by two bf16 GEMMs over x split into high and low bf16 parts
// (x = hi + lo to ~16 mantissa bits), the second accumulated onto the first in f32.
// x: [rows, W.in] f32 (row stride x_stride); y: [rows, W.out] f32; scratch: 2 * rows * W.in bf16.
// Returns false, launching nothing, for weights it does not take (NVFP4, a row scale, an expert
// stack, W.in % 8 != 0): the caller then runs the GEMV.
bool gemm_f32_activations(cublasHandle_t cublas, float* y, int64_t y_stride, const float* x,
                          int64_t x_stride, int rows, const LinearRef& w, __nv_bfloat16* scratch,
                          cudaStream_t s);

// y[m, n] = s_n * sum_k W[n, k] x[m, k] (added to y when `accumulate`). x: [rows, W.in] bf16;
// y: [rows, W.out] f32. W: BF16 or NVFP4, one matrix; W.in % 8 == 0 (NVFP4: % 64).
// `cublas` must be bound to no other stream work than `s` (the launcher sets its stream).
void gemm(cublasHandle_t cublas, float* y, int64_t y_stride, const __nv_bfloat16* x,
          int64_t x_stride, int rows, const LinearRef& w, bool accumulate, cudaStream_t s);

// act[m, n] = silu((Wg x)[m, n]) * (Wu x)[m, n] as bf16: the gated half of a SwiGLU MLP.
// act: [rows, gate.out] bf16 (row stride act_stride).
void gemm_gated(__nv_bfloat16* act, int64_t act_stride, const __nv_bfloat16* x, int64_t x_stride,
                int rows, const LinearRef& gate, const LinearRef& up, cudaStream_t s);

// Rows grouped by expert for the grouped GEMMs: row r of a problem belongs to tile i when
// tiles[i] = {expert, r_begin, r_end, 0} holds it (r_end - r_begin <= tile_rows); tiles with
// expert < 0 are empty. The activation row of r is gather[r] (or r when gather is null), and the
// output row r is multiplied by row_weight[r] when given.
struct GemmGroups {
  const int4* tiles = nullptr;  // [num_tiles]
  int num_tiles = 0;
  int tile_rows = kGemmTileRows;      // kGemmTileRows or kGemmSmallTileRows
  const int32_t* gather = nullptr;    // [rows] or null
  const float* row_weight = nullptr;  // [rows] or null
};

// Grouped gated half: act[r, :] = silu(Wg_e x[gather r]) * (Wu_e x[gather r]) for r in expert e's
// tiles. gate/up: expert stacks. act: [rows, gate.out] bf16.
void grouped_gemm_gated(__nv_bfloat16* act, int64_t act_stride, const __nv_bfloat16* x,
                        int64_t x_stride, const GemmGroups& g, const LinearRef& gate,
                        const LinearRef& up, cudaStream_t s);

// Grouped plain: y[r, :] = row_weight[r] * (W_e x[gather r]) (stored, not added). y: [rows, W.out]
// f32.
void grouped_gemm(float* y, int64_t y_stride, const __nv_bfloat16* x, int64_t x_stride,
                  const GemmGroups& g, const LinearRef& w, cudaStream_t s);

}  // namespace flint::cuda
