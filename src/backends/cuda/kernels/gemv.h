// Decode-size linear layers: y = W x for a few f32 activation rows, reading each weight once per 8
// rows and dequantizing NVFP4 in registers (W4A16-style; the activations stay f32, or, on tensor
// cores from kGemvMmaMinRows rows on, are split into two 16-bit parts that keep ~22 bits).
#pragma once

#include <cuda_runtime.h>

#include <string_view>

#include "backends/cuda/kernels/linear_ref.h"
#include "core/result.h"

namespace flint::cuda {

// An RMSNorm fused into the input of a GEMV: x is replaced by x / sqrt(mean(x^2) + eps) * weight
// (f32 sums), as cpu::rms_norm. weight: [W.in] f32 (16-byte aligned), or null for no norm.
struct GemvNorm {
  const float* weight = nullptr;
  float eps = 0.0f;
};

// y[b, r] = s_r * sum_k W[r, k] x'[b, k] for b < num_rows, where x' is x (or norm(x)); adds to y
// instead when `accumulate`. x: [num_rows, W.in] f32 (row stride x_stride, 16-byte aligned rows),
// or, with x_rows ([num_rows] int32, device), row b of x' is row x_rows[b] of x.
// y: [num_rows, W.out] f32 (row stride y_stride). Any num_rows; 8 rows share one pass over W.
// W must be a single matrix (num_experts == 1). Launched with PDL (common.cuh).
void gemv(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
          const LinearRef& w, bool accumulate, cudaStream_t s, const GemvNorm& norm = {},
          const int32_t* x_rows = nullptr);

// y[b, r] = silu(Wg x')[b, r] * (Wu x')[b, r]: the gated half of a SwiGLU MLP (dense or shared).
void gemv_gated(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
                const LinearRef& gate, const LinearRef& up, cudaStream_t s,
                const GemvNorm& norm = {});

// What gemv_gated_experts may know ahead of the ids (all optional; they change no result).
struct ExpertHints {
  // Slots p % pairs_per_token >= fixed_from always hold expert fixed_id0 + (slot - fixed_from)
  // (the shared expert's slices, which the router appends): their weights are requested before
  // the PDL wait. The ids array must still hold those ids.
  int fixed_from = 1 << 30;
  int fixed_id0 = 0;
  // The fixed slots' act rows are already written (moe_route_shared): their blocks do nothing.
  bool skip_fixed = false;
};

// Routed experts, gated half: for pair p < num_pairs, with e = expert_ids[p] and token
// t = p / pairs_per_token: act[p, :] = silu(Wg_e x'[t]) * (Wu_e x'[t]).
// expert_ids: [num_pairs] int32 (device); x: [num_pairs / pairs_per_token, in] f32;
// act: [num_pairs, out] f32.
void gemv_gated_experts(float* act, const float* x, int64_t x_stride, int num_pairs,
                        int pairs_per_token, const int32_t* expert_ids, const LinearRef& gate,
                        const LinearRef& up, cudaStream_t s, const GemvNorm& norm = {},
                        const ExpertHints& hints = {});

// The one-token o projection with the MoE router's first half in its tail, so that no router
// kernel runs between it and the routed gate/up (gemv_gated_routed_experts with route_acc):
// y[r] += (W x)[r] for the one row x ([W.in] f32, 16-byte aligned), as gemv with `accumulate`;
// then x_out[r] = y[r] * norm[r] (the updated rows times the next RMSNorm's weight) and, added
// into acc ([E + kRouteSsCopies] entries kRouteAccStride doubles apart, route_acc_doubles(E) in
// all, zero before the launch; entry e is acc[e * kRouteAccStride]), acc[e] += sum_r router[e, r]
// * x_out[r] and acc[E + c] += sum_r y[r]^2 for every copy c, so that the router's logits are
// acc[e] / sqrt(acc[E] / W.out + eps).
// The sums are added by 8-row blocks in any order, as doubles of float partials: exact in practice,
// so the logits do not change from run to run. Returns false, launching nothing, for what it does
// not serve: router not F32/BF16, more than kRouteTailMaxExperts experts, W.out % 8 != 0,
// router.in != W.out, no norm weight; the caller runs gemv and the router then.
inline constexpr int kRouteTailMaxExperts = 256;
inline constexpr int kRouteAccStride = 16;  // one 128-byte line an entry
// acc[E + c], c < kRouteSsCopies, each hold the whole sum of squares: the routed gate/up's warp w
// reads copy w % kRouteSsCopies (one line read by every warp of 512 blocks queued at its L2 slice).
inline constexpr int kRouteSsCopies = 8;
// The doubles of one token's acc: E + kRouteSsCopies entries.
constexpr int64_t route_acc_doubles(int64_t E) { return (E + kRouteSsCopies) * kRouteAccStride; }
bool gemv_route_partials(float* y, const float* x, const LinearRef& w, const LinearRef& router,
                         const float* norm, float* x_out, double* acc, cudaStream_t s);

// The narrow path: gemv() of one or two activation rows on tensor cores
// (kernels/gemv_narrow.cuh), where these bits say (the rest run the CUDA-core GEMV).
// kNarrowDefault is what measured faster: two rows (H100, the first 40 layers of Flint, ms per
// decode step at 1K: NVFP4 b2 2.158 -> 1.962, BF16 b2 3.055 -> 2.967); one row measured no faster
// for NVFP4 (1.384 -> 1.389 with the qkv and o projections on it) and slower for BF16 (1.941 ->
// 2.109 with the qkv projection on it), so one row stays on CUDA cores (docs/PERFORMANCE.md,
// thirty-seventh session). FLINT_NARROW=<bits> in the environment replaces the default (read at
// the first GEMV), for experiments, and so does set_gemv_narrow (tests), which returns the bits it
// replaced (~0u: back to the default).
enum : unsigned {
  kNarrowFp4One = 1,    // NVFP4, one row (the qkv projection, the dense down)
  kNarrowFp4Two = 4,    // NVFP4, two rows
  kNarrowBf16One = 8,   // BF16, one row
  kNarrowBf16Two = 32,  // BF16, two rows
  kNarrowWarps8 = 64,   // 8 warps a block at every shape (else 16 when the blocks fit one per SM)
  kNarrowAll = kNarrowFp4One | kNarrowFp4Two | kNarrowBf16One | kNarrowBf16Two,
};
inline constexpr unsigned kNarrowDefault = kNarrowFp4Two | kNarrowBf16Two;
unsigned set_gemv_narrow(unsigned mode);
// FLINT_NARROW's value: a decimal sum of kNarrow* bits (0 for none), or kInvalidArgument naming
// the variable. An unusable value stops the first GEMV with that message.
Result<unsigned> parse_gemv_narrow(std::string_view text);

// The one-wave GEMV (gemv.cu's gemv_wave_kernel): one dense activation row of F32/BF16 weights
// whose plain grid of 8-row blocks needs a second wave (BF16's qkv projection: 640 blocks against
// 528 resident on an H100/H200) runs as one wave of resident blocks, each block's rows' passes
// shared out evenly among its warps. Modes: 0 off (the plain grid); 4 or 2, passes of that many
// 16-byte chunks a lane at four blocks an SM; 5, passes of two at five blocks an SM; negative, as
// the positive mode without requesting a warp's later passes into L2 before the PDL wait. Written
// in the forty-seventh session, when no device was lent: not yet run or timed on a GPU, so off by
// default. FLINT_GEMV_WAVE=<mode> replaces the default (read at the first GEMV that could take
// it), for experiments, and so does set_gemv_wave (tests), which returns the mode it replaced
// (kGemvWaveUnset: back to the default).
inline constexpr int kGemvWaveDefault = 0;
inline constexpr int kGemvWaveUnset = 1;
int set_gemv_wave(int mode);
// FLINT_GEMV_WAVE's value: one of the modes above in decimal, or kInvalidArgument naming the
// variable. An unusable value stops the first GEMV that reads it with that message.
Result<int> parse_gemv_wave(std::string_view text);

// Rows per pass of the small-batch kernels.
inline constexpr int kGemvMaxRows = 8;
// gemv() and gemv_gated() of at least this many rows run on tensor cores (NVFP4 and BF16 weights;
// 16 output rows x 8 token rows per block, the activations split into two 16-bit parts). H200,
// NVFP4 at 1K context: 2 rows 7% slower than the CUDA-core GEMV, 4 rows 6% faster, 8 rows 18%
// faster. (gemv() of two rows takes the narrow path instead, kNarrowDefault.)
inline constexpr int kGemvMmaMinRows = 3;
// ... and with at least this many output rows (the LM head), 64 of them per block, so that fewer
// blocks stage the same activation rows.
inline constexpr int64_t kGemvMmaWideRows = 16384;

}  // namespace flint::cuda
