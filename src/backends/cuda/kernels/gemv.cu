// Small-batch GEMV: one output row per warp, 16-byte weight loads (fetched before the PDL wait),
// up to 8 activation rows per pass, an optional fused RMSNorm of the input; NVFP4 is decoded in
// registers. From kGemvMmaMinRows rows on, the plain (not gated, not expert) GEMV runs on tensor
// cores instead (gemv_mma.cuh). Reference: cpu::linear.   Test: tests/kernels/gemv_test.cpp
// Bench: flint bench.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_core.cuh"
#include "backends/cuda/kernels/gemv_mma.cuh"
#include "backends/cuda/kernels/gemv_narrow.cuh"
#include "backends/cuda/kernels/moe_experts.h"

namespace flint::cuda {
namespace {

using dev::GemvArgs;
constexpr int64_t kMaxSmemBytes = 200 * 1024;
constexpr int kExpertTwoRowTokens = 3;

// One-row F32/BF16 GEMVs whose rows take more than one pass, over a matrix of at most
// kL2RestMaxBytes, request every pass after the first into L2 before their PDL wait
// (GemvArgs::l2_rest): the first pass's loads stay in registers, and the rest comes from L2
// after the wait instead of one DRAM round trip a pass. At Flint's size, BF16: the qkv projection
// (second pass of two), the o projection (second of two in the split kernel; it launches while
// attention runs, see decode_attention's early_dependents), the dense layers' MLP and the shared
// expert's gate/up slots (passes 2-4, gemv_gated_routed_experts). H200, ms per
// step (scripts/gpu.sh sweep, five rounds, twenty-fourth session), off / on: BF16 b1 1K greedy
// head 2.163 / 2.142, FP32 head 2.283 / 2.260, 100K 2.868 / 2.835 and 2.992 / 2.959; NVFP4 (not
// served) 1.703 / 1.701. Measured and not kept in the same sweeps: without the size limit (the LM
// heads too) BF16 1K 2.147 / 2.277, no better, the FP32 head worse; NVFP4 too (its o projection's
// second pass), 1.715 / 1.722 (three rounds); moe_down's later passes once its picks are counted,
// 2.185 against 2.163. And, each in a sweep of its own (five rounds, BF16 b1 1K greedy head): the
// BF16 qkv's first 320 blocks also requesting the rows of blocks 320-639 (its second wave),
// 2.150 / 2.175; the routed gate/up requesting its routed slots' later passes right after the pick
// (one request a 128-byte line), 2.140 / 2.178. Requests into L2 pay while DRAM is idle (here:
// while attention runs or before a PDL wait) and cost while the kernel streams its own weights.
constexpr int64_t kL2RestMaxBytes = int64_t(32) << 20;
bool l2_rest_serves(const LinearRef& w, int num_rows) {
  return num_rows == 1 && w.dtype != DType::kNVFP4 && w.out * w.row_bytes() <= kL2RestMaxBytes;
}

// At one activation row, four blocks per SM (<= 64 registers), so that a step's grids (up to 8
// pairs x 64 blocks for the experts) run in one wave.
template <DType W, int NB, bool kGated, int R>
__global__ void __launch_bounds__(dev::kGemvThreads, NB == 1 ? (R > 1 ? 3 : 4) : 1)
    gemv_kernel(GemvArgs args) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(kGated ? KTag::kGemvGated : KTag::kGemv);
  dev::pdl_launch_dependents();
  dev::gemv_block<W, NB, kGated, R>(args, reinterpret_cast<float*>(smem4));
  dev::ktrace_end();
}

// One activation row, two warps per output row (16 warps, 8 rows a block): each lane reads half
// the chunks of a row that takes more than one pass in one warp (gemv_block's kSplit).
template <DType W>
__global__ void __launch_bounds__(2 * dev::kGemvThreads, 2) gemv_split_kernel(GemvArgs args) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(KTag::kGemv);
  dev::pdl_launch_dependents();
  dev::gemv_block<W, 1, false, 1, 1, 0, 2>(args, reinterpret_cast<float*>(smem4));
  dev::ktrace_end();
}

// kGemvMmaMinRows+ activation rows on tensor cores (gemv_mma.cuh): 16 TM output rows x 8 token
// rows per block; kGated: silu(gate) * up.
template <DType W, int TM, bool kGated>
__global__ void __launch_bounds__(dev::kGemvThreads, 2) gemv_mma_kernel(GemvArgs args) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(KTag::kGemvMma);
  dev::pdl_launch_dependents();
  dev::gemv_mma_block<W, TM, 2, kGated>(args, smem4);
  dev::ktrace_end();
}

// Blocks per SM the narrow kernels are built for: three of 8 warps (<= 85 registers: the qkv
// projection's 320 blocks in one wave) unless a lane holds four NVFP4 chunk pairs (two), one of 16.
template <DType W, int U, int kWarps>
constexpr int narrow_min_blocks() {
  return kWarps == 16 ? 1 : (W == DType::kNVFP4 && U > 2 ? 2 : 3);
}

// One or two activation rows on tensor cores (gemv_narrow.cuh): 16 output rows a block.
template <DType W, int NB, int U, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, narrow_min_blocks<W, U, kWarps>())
    gemv_narrow_kernel(GemvArgs args) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(KTag::kGemv);
  dev::pdl_launch_dependents();
  dev::narrow_block<W, NB, U, kWarps>(args, smem4);
  dev::ktrace_end();
}

// The gated experts with the top-k in the kernel (gemv_gated_routed_experts): one pair per block.
template <DType W, int kTopK, int kW = dev::kGemvWarps>
__global__ void __launch_bounds__(kW * 32, 32 / kW) gemv_routed_kernel(GemvArgs args) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(KTag::kRoutedGateUp);
  dev::pdl_launch_dependents();
  dev::gemv_block<W, 1, true, 1, 1, kTopK, 1, false, kW>(args, reinterpret_cast<float*>(smem4));
  dev::ktrace_end();
}

template <DType W, int kTopK, int kW = dev::kGemvWarps>
void launch_routed_k(const GemvArgs& a, size_t smem, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_routed_kernel<W, kTopK, kW>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.a.out, kW)), static_cast<unsigned>(a.num_rows));
  launch_pdl(gemv_routed_kernel<W, kTopK, kW>, grid, dim3(kW * 32), smem, s, a);
}

// BF16, one token: the whole-block pick's kernel in blocks of 16 warps, half as many (the pick in
// the first 8 warps, pick_expert), with the o projection at 16 rows a block (kRouteWideRows).
// H100, first 40 layers, ms per step (forty-sixth session, docs/PERFORMANCE.md, three rounds
// against main): BF16 b1 1K 1.913 -> 1.885, 32K 2.144 -> 2.141. With 16 warps at every dtype and
// batch, NVFP4 b1 1K 1.346 -> 1.350 and b2 1K 1.897 -> 1.927, BF16 b2 1K 2.986 -> 3.003: those
// keep blocks of 8.
constexpr int kRoutedWarps = 16;

template <DType W>
void launch_routed(const GemvArgs& a, size_t smem, cudaStream_t s) {
  // Up to 256 experts the selection bias is loaded before the PDL wait. With the picks on
  // redux.sync (moe_topk.cuh), H200 ms per step: NVFP4 b1 1K 2.376 -> 2.344, BF16 b1 1K
  // 2.938 -> 2.869 (scripts/gpu.sh sweep, two rounds). With the whole block picking
  // (top_k_token_block) instead of warp 0 (scripts/gpu.sh ab, three rounds): NVFP4 b1 1K
  // 2.196 -> 2.115, 100K 2.952 -> 2.854; BF16 b1 1K 2.703 -> 2.590. The fallback for more
  // experts or picks is the other kernel: in this one its code cost registers (spills of 60
  // bytes where 8 were) and the whole gain. The block's pick with one barrier, by warp 0 on keys
  // sorted in registers (thirty-ninth session, H100, first 40 layers, scripts/gpu.sh ab): NVFP4
  // b1 1K 1.366 -> 1.352, b2 1.965 -> 1.922; BF16 b1 1K 1.947 -> 1.931.
  if (routed_top_k_in_block(a.route)) {
    if (W == DType::kBF16 && a.num_rows <= a.pairs_per_token) {
      return launch_routed_k<W, 2, kRoutedWarps>(a, smem, s);
    }
    return launch_routed_k<W, 2>(a, smem, s);
  }
  launch_routed_k<W, 1>(a, smem, s);
}

template <DType W, int TM, bool kGated>
void launch_mma_tm(const GemvArgs& a, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_mma_kernel<W, TM, kGated>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.a.out, dev::kMmaRows * TM)),
                  static_cast<unsigned>(ceil_div(a.num_rows, dev::kMmaTokens)));
  launch_pdl(gemv_mma_kernel<W, TM, kGated>, grid, dim3(dev::kGemvThreads),
             static_cast<size_t>(dev::mma_smem_bytes<W>(a.a.in)), s, a);
}

// Outputs far beyond one wave of 16-row blocks (the LM head) take 64 rows per block, so that
// fewer blocks stage the same activations.
template <DType W, bool kGated>
void launch_mma(const GemvArgs& a, cudaStream_t s) {
  if (!kGated && a.a.out >= kGemvMmaWideRows) {
    launch_mma_tm<W, 4, false>(a, s);
  } else {
    launch_mma_tm<W, 1, kGated>(a, s);
  }
}

// The tensor-core GEMV, when it serves this call: kGemvMmaMinRows+ rows, NVFP4 or BF16 weights (a
// row scale is applied after the sum; check_weight has made `in` a multiple of their chunk),
// staged rows within shared memory. kGated: the dense MLP's gate/up. Its CUDA-core version
// decoded each weight once for 8 rows but spent the FMAs on CUDA cores, 768 blocks at one per SM
// (59 us a launch at 8 rows, --ktrace). H200, 1K, ms per step (scripts/gpu.sh sweep, 3 rounds,
// twelfth session): NVFP4 b8 6.815 -> 6.754, BF16 b8 8.231 -> 8.183; b3-b4 within 0.3%.
template <bool kGated>
bool try_mma(const GemvArgs& a, cudaStream_t s) {
  if (a.num_rows < kGemvMmaMinRows || a.a.num_experts != 1 || a.a.out == 0) return false;
  switch (a.a.dtype) {
    case DType::kNVFP4:
      if (dev::mma_smem_bytes<DType::kNVFP4>(a.a.in) > kMaxSmemBytes) return false;
      launch_mma<DType::kNVFP4, kGated>(a, s);
      break;
    case DType::kBF16:
      if (dev::mma_smem_bytes<DType::kBF16>(a.a.in) > kMaxSmemBytes) return false;
      launch_mma<DType::kBF16, kGated>(a, s);
      break;
    default:
      return false;
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
  return true;
}

// An experiment mode kept in `slot`: while it holds `unset`, the first call stores `fallback`, or
// the environment variable `var` parsed by `parse` where it is set (an unusable value stops with
// parse's message).
template <typename T>
T env_mode(std::atomic<T>& slot, T unset, T fallback, const char* var,
           Result<T> (*parse)(std::string_view)) {
  T m = slot.load(std::memory_order_relaxed);
  if (m == unset) {
    m = fallback;
    if (const char* v = std::getenv(var)) {
      const Result<T> parsed = parse(v);
      FLINT_CHECK(parsed.has_value(), "{}", parsed.error().message);
      m = *parsed;
    }
    slot.store(m, std::memory_order_relaxed);
  }
  return m;
}

// Where the narrow path runs (gemv.h's kNarrow* bits): kNarrowDefault unless FLINT_NARROW (read
// at the first GEMV) or set_gemv_narrow says otherwise.
std::atomic<unsigned> g_narrow_mode{~0u};
unsigned narrow_mode() {
  return env_mode(g_narrow_mode, ~0u, kNarrowDefault, "FLINT_NARROW", parse_gemv_narrow);
}
// Whether the narrow path serves a GEMV of `rows` activation rows of W.
bool narrow_on(DType W, int rows) {
  const bool fp4 = W == DType::kNVFP4;
  const unsigned bit =
      rows == 2 ? (fp4 ? kNarrowFp4Two : kNarrowBf16Two) : (fp4 ? kNarrowFp4One : kNarrowBf16One);
  return (narrow_mode() & bit) != 0;
}

// Warps a block: 16 when the 16-row blocks fit one per SM (the o projection: 128 blocks), so that
// the grid keeps as many warps streaming weights; 8 otherwise (the qkv projection: 320 blocks).
int narrow_warps(const LinearRef& w) {
  if (narrow_mode() & kNarrowWarps8) return 8;
  return ceil_div(w.out, dev::kMmaRows) <= int64_t(device_sm_count()) ? 16 : 8;
}

// NVFP4 chunk pairs a lane holds per pass: all of its row share in one pass when that is at most
// four (the qkv projection's 2048-wide rows: two at 8 warps; the o projection's 4096: two at 16
// warps, four at 8), requested before the PDL wait. (BF16's 8-element chunks take passes of four,
// the later ones requested into L2 before the wait.)
int narrow_fp4_unroll(const LinearRef& w, int warps) {
  const int64_t quads = ceil_div(w.in / dev::Chunk<DType::kNVFP4>::kElems, int64_t(4));
  return ceil_div(quads, int64_t(warps)) <= 2 ? 2 : 4;
}

template <DType W, int NB, int U, int kWarps>
void launch_narrow_k(const GemvArgs& a, cudaStream_t s) {
  const auto kernel = gemv_narrow_kernel<W, NB, U, kWarps>;
  static const bool configured = [kernel] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  launch_pdl(kernel, dim3(static_cast<unsigned>(ceil_div(a.a.out, dev::kMmaRows))),
             dim3(kWarps * 32), static_cast<size_t>(dev::narrow_smem_bytes<W, NB>(a.a.in)), s, a);
}

template <DType W, int NB, int U, int kWarps>
bool launch_narrow_if_served(const GemvArgs& a, cudaStream_t s) {
  if (!dev::narrow_serves<W, U, kWarps>(a.a.in)) return false;
  launch_narrow_k<W, NB, U, kWarps>(a, s);
  return true;
}

// The shape narrow_warps / narrow_fp4_unroll pick, when the narrow path serves it (rows staged in
// registers, parts in shared memory); false otherwise. BF16 always takes passes of four.
template <DType W, int NB>
bool try_narrow_nb(const GemvArgs& a, cudaStream_t s) {
  if (!narrow_on(W, NB) || dev::narrow_smem_bytes<W, NB>(a.a.in) > kMaxSmemBytes) return false;
  const int warps = narrow_warps(a.a);
  if constexpr (W == DType::kNVFP4) {
    if (narrow_fp4_unroll(a.a, warps) == 2) {
      return warps == 16 ? launch_narrow_if_served<W, NB, 2, 16>(a, s)
                         : launch_narrow_if_served<W, NB, 2, 8>(a, s);
    }
  }
  return warps == 16 ? launch_narrow_if_served<W, NB, 4, 16>(a, s)
                     : launch_narrow_if_served<W, NB, 4, 8>(a, s);
}

// The narrow path, when it serves this call: 1-2 activation rows, one NVFP4 or BF16 matrix.
bool try_narrow(const GemvArgs& a, cudaStream_t s) {
  if (a.num_rows < 1 || a.num_rows > dev::kNarrowMaxTokens || a.a.num_experts != 1 ||
      a.a.out == 0 || a.expert_ids != nullptr) {
    return false;
  }
  bool done = false;
  switch (a.a.dtype) {
    case DType::kNVFP4:
      done = a.num_rows == 1 ? try_narrow_nb<DType::kNVFP4, 1>(a, s)
                             : try_narrow_nb<DType::kNVFP4, 2>(a, s);
      break;
    case DType::kBF16:
      done = a.num_rows == 1 ? try_narrow_nb<DType::kBF16, 1>(a, s)
                             : try_narrow_nb<DType::kBF16, 2>(a, s);
      break;
    default:
      return false;
  }
  if (done) FLINT_CUDA_CHECK(cudaGetLastError());
  return done;
}

template <DType W, int NB, bool kGated, int R>
void launch_r(const GemvArgs& a, int groups, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<W, NB, kGated, R>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.a.out, dev::kGemvWarps * R)),
                  static_cast<unsigned>(groups));
  const size_t smem = NB * dev::padded_len(a.a.in) * sizeof(float);
  launch_pdl(gemv_kernel<W, NB, kGated, R>, grid, dim3(dev::kGemvThreads), smem, s, a);
}

// The split kernel serves a one-row BF16 dense GEMV whose row takes more than one pass of a warp
// and whose 16-warp blocks fit in one wave at two per SM (the o projection: 2048 rows of 4096, 16
// chunks a lane in four passes, now two). H200, ms per decode step (sweep, three rounds, graph,
// base / split): BF16 b1 1K 2.466 / 2.431, 100K 3.148 / 3.109; NVFP4 (4 chunks a lane in two
// passes, then one) lost, b1 1K 1.966 / 1.999, 100K 2.701 / 2.710, so it keeps one warp a row.
template <DType W>
bool split_serves(const GemvArgs& a) {
  constexpr int U = dev::gemv_unroll<W, false, 1>();
  return a.expert_ids == nullptr && a.num_rows == 1 &&
         ceil_div(a.a.out, dev::kGemvWarps) <= 2 * int64_t(device_sm_count()) &&
         a.a.in / dev::Chunk<W>::kElems > 32 * U;
}
template <DType W>
bool try_split(const GemvArgs& a, cudaStream_t s) {
  if (!split_serves<W>(a)) return false;
  const int64_t blocks = ceil_div(a.a.out, dev::kGemvWarps);
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_split_kernel<W>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const size_t smem = dev::padded_len(a.a.in) * sizeof(float);
  launch_pdl(gemv_split_kernel<W>, dim3(static_cast<unsigned>(blocks)), dim3(2 * dev::kGemvThreads),
             smem, s, a);
  return true;
}

// Blocks of gemv_kernel<W, 1, false, R> resident at once on the device with up to
// kOneRowSmemCap bytes of staged row each, read once. The kernel's dynamic shared memory limit is
// raised to kMaxSmemBytes first: under the default 48 KiB, which counts the kernel's static shared
// memory too, the query answers 0 blocks. (That 0 had kept the first form of try_two_rows off,
// and since 8cc56fc gave the GEMV kernels static shared memory, the BF16 wave kernel too: it
// looped 528 resident blocks over the qkv projection's 640. Measured again with the query fixed,
// it made BF16 b1 1K slower, 2.321 -> 2.348 ms, and was removed.) Device attributes only (safe
// while a graph is captured).
constexpr size_t kOneRowSmemCap = 48 * 1024;
template <DType W, int R>
int64_t resident_one_row() {
  static const int64_t resident = [] {
    const auto kernel = gemv_kernel<W, 1, false, R>;
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    int per_sm = 0;
    FLINT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, kernel, dev::kGemvThreads, kOneRowSmemCap));
    FLINT_CHECK(per_sm > 0, "gemv: no SM holds a one-row block of {} bytes", kOneRowSmemCap);
    return int64_t(per_sm) * device_sm_count();
  }();
  return resident;
}

// A one-row NVFP4 dense GEMV whose one-row-a-warp grid needs a second wave of blocks while two
// rows a warp fit in one (the qkv projection: 640 blocks of 8 rows against 528 resident, 320
// of 16 rows against 396) runs with two rows a warp. Every block then requests all its weights
// before the PDL wait; the second wave's blocks requested theirs only once a slot was free, after
// the wait, and the next kernel waited for them (--ktrace: the qkv's hand-off 3.93 us against
// the o projection's 1.04). H200, ms per step (scripts/gpu.sh sweep, three rounds, one build):
// NVFP4 b1 1K 1.888 -> 1.840, 100K 2.618 -> 2.568, b2 unchanged. Two activation rows as well
// (102 registers, two blocks per SM) lost, b2 1K 2.727 -> 2.830, and so did BF16 b1, 2.319 ->
// 2.387, so both keep the plain grid.
template <DType W>
bool try_two_rows(const GemvArgs& a, int groups, cudaStream_t s) {
  if (a.expert_ids != nullptr || a.num_rows != 1 ||
      dev::padded_len(a.a.in) * sizeof(float) > kOneRowSmemCap) {
    return false;
  }
  const int64_t blocks = ceil_div(a.a.out, dev::kGemvWarps);
  if (blocks <= resident_one_row<W, 1>() ||
      ceil_div(a.a.out, 2 * dev::kGemvWarps) > resident_one_row<W, 2>()) {
    return false;
  }
  launch_r<W, 1, false, 2>(a, groups, s);
  return true;
}

// A one-row F32/BF16 dense GEMV whose one-row-a-warp grid needs a second wave (BF16's qkv
// projection: 640 blocks of 8 rows against 528 resident) as one wave of G resident blocks, the
// work spread evenly: block b takes rows [b out / G, (b + 1) out / G) (9 or 10 of the qkv's 5120
// at G 528), and its rows' passes of 32 x U chunks (two a 2048-wide BF16 row at U 4) are shared
// out among its 8 warps in order (2 or 3 each there), so that no warp reads more than 1.5 rows
// (U 4; 1.25 at U 2) where the plain grid's second wave reads a whole row more after the first.
// A warp's passes lie next to each other in memory: it loads the first before the PDL wait and
// requests the rest into L2 (args.l2_rest). Each stretch of a row in one warp leaves its warp sum
// in shared memory at the index of its first pass; thread i then adds row i's passes in order.
// The plain grid's second-wave blocks (112 x 8 rows) start only once first-wave blocks have
// ended, and load all their weights after that: the qkv's last warps ended 3.5 us after block 0
// (H200, --ktrace, thirty-fifth session). Not yet run on a GPU: off by default (gemv.h's
// kGemvWaveDefault; docs/PERFORMANCE.md, forty-seventh session, says how to measure it).
constexpr int kWaveMaxParts = 128;  // a block's rows x passes
template <DType W, int U, int kB>
__global__ void __launch_bounds__(dev::kGemvThreads, kB) gemv_wave_kernel(GemvArgs a) {
  extern __shared__ float4 smem4[];
  __shared__ float part[kWaveMaxParts];
  dev::ktrace_begin(KTag::kGemv);
  dev::pdl_launch_dependents();
  using C = dev::Chunk<W>;
  float* xs = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t K = a.a.in, out = a.a.out, nc = K / C::kElems, PK = dev::padded_len(K);
  constexpr int64_t kStep = int64_t(32) * U;  // chunks a pass
  const int P = static_cast<int>((nc + kStep - 1) / kStep);
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t rb0 = b * out / G, rows = (b + 1) * out / G - rb0;
  const int units = static_cast<int>(rows) * P;
  const int u0 = warp * units / dev::kGemvWarps, u1 = (warp + 1) * units / dev::kGemvWarps;
  for (int i = threadIdx.x; i < units; i += blockDim.x)
    part[i] = 0.0f;  // before stage_rows' barrier
  C w[U];
  auto load = [&](int u) {
    const int64_t row = rb0 + u / P, base = int64_t(u % P) * kStep;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t c = base + lane + 32 * k;
      if (c < nc) w[k].load(a.a, row, c);
    }
  };
  if (u0 < u1) {
    load(u0);  // weights do not depend on earlier kernels: fetch them before the wait
    if (a.l2_rest && u0 + 1 < u1) {
      // Chunk offsets from the block's first row: units u0 + 1 .. u1 - 1, one stretch of memory.
      auto chunk_of = [&](int u) { return int64_t(u / P) * nc + int64_t(u % P) * kStep; };
      const int64_t end =
          int64_t((u1 - 1) / P) * nc + std::min(nc, int64_t((u1 - 1) % P + 1) * kStep);
      dev::l2_lines(static_cast<const uint8_t*>(a.a.w) + rb0 * nc * 16, chunk_of(u0 + 1) * 16,
                    end * 16, lane, 32);
    }
  }
  dev::NormPrefetch pf;
  dev::prefetch_norm(pf, a.norm, K);
  dev::ktrace_mark(kKtWaitBegin);
  dev::pdl_wait();
  dev::ktrace_mark(kKtWaitEnd);
  const int64_t xrow[1] = {a.x_rows != nullptr ? int64_t(a.x_rows[0]) : 0};
  dev::stage_rows<1>(xs, PK, a.x, a.x_stride, xrow, 1, K, a.norm, pf);
  dev::ktrace_mark(kKtMarkB);
  float acc = 0.0f;
  for (int u = u0; u < u1; ++u) {
    if (u > u0) load(u);
    const int64_t base = int64_t(u % P) * kStep;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t c = base + lane + 32 * k;
      if (c < nc) acc += w[k].dot(xs + dev::pad_idx(c * C::kElems), nullptr);
    }
    if (u + 1 == u1 || (u + 1) % P == 0) {  // the end of this warp's stretch of a row
      const float s = dev::warp_sum(acc);
      if (lane == 0) part[std::max(u0, u / P * P)] = s;
      acc = 0.0f;
    }
  }
  dev::ktrace_mark(kKtMarkC);
  __syncthreads();
  if (threadIdx.x < rows) {
    float v = 0.0f;
    for (int p = 0; p < P; ++p) v += part[threadIdx.x * P + p];
    const int64_t row = rb0 + threadIdx.x;
    v *= dev::row_scale(a.a, row);
    if (a.norm != nullptr) v *= dev::staged_inv<1, dev::kGemvWarps>(0, K, a.eps);
    float* yp = a.y + row;
    *yp = a.accumulate ? *yp + v : v;
  }
  dev::ktrace_end();
}

// Where gemv_wave_kernel runs (gemv.h's kGemvWave* modes): kGemvWaveDefault unless FLINT_GEMV_WAVE
// (read at the first GEMV that could take it) or set_gemv_wave says otherwise.
std::atomic<int> g_wave_mode{kGemvWaveUnset};
int wave_mode() {
  return env_mode(g_wave_mode, kGemvWaveUnset, kGemvWaveDefault, "FLINT_GEMV_WAVE",
                  parse_gemv_wave);
}

template <DType W, int U, int kB = 4>
bool launch_wave(GemvArgs a, bool l2, cudaStream_t s) {
  const auto kernel = gemv_wave_kernel<W, U, kB>;
  static const bool configured = [kernel] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  // Resident blocks at this row's staging size (kB 5 does not fit five of kOneRowSmemCap an SM).
  // Device attributes only (safe while a graph is captured); launches run at capture time.
  const size_t smem = dev::padded_len(a.a.in) * sizeof(float);
  int per_sm = 0;
  FLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, dev::kGemvThreads, smem));
  const int64_t resident = int64_t(per_sm) * device_sm_count();
  const int64_t passes = ceil_div(a.a.in / dev::Chunk<W>::kElems, int64_t(32) * U);
  if (resident == 0 || a.a.out > 2 * dev::kGemvWarps * resident ||
      ceil_div(a.a.out, resident) * passes > kWaveMaxParts) {
    return false;
  }
  a.l2_rest = a.l2_rest && l2;
  launch_pdl(kernel, dim3(static_cast<unsigned>(resident)), dim3(dev::kGemvThreads), smem, s, a);
  return true;
}

// gemv_wave_kernel, where it serves: one dense activation row whose plain grid of 8-row blocks
// needs more than one wave (but less than two rows a warp), its row staged within kOneRowSmemCap.
template <DType W>
bool try_wave(const GemvArgs& a, cudaStream_t s) {
  const int mode = wave_mode();
  if (mode == 0 || a.expert_ids != nullptr || a.num_rows != 1 ||
      dev::padded_len(a.a.in) * sizeof(float) > kOneRowSmemCap ||
      ceil_div(a.a.out, dev::kGemvWarps) <= resident_one_row<W, 1>()) {
    return false;
  }
  switch (std::abs(mode)) {
    case 2:
      return launch_wave<W, 2>(a, mode > 0, s);
    case 5:
      return launch_wave<W, 2, 5>(a, mode > 0, s);
    default:
      return launch_wave<W, 4>(a, mode > 0, s);
  }
}

// gemv_route_partials: the one-row GEMV of gemv_kernel (kSplit 1) or gemv_split_kernel (kSplit
// 2), then the tail. The router's [E, 8] slice of the block's 8 rows (16 bytes an expert in BF16,
// 32 in F32) and the 8 norm weights are copied to shared memory with cp.async before the PDL
// wait. That prologue costs: --ktrace (NVFP4 b1 1K), the o blocks' time before their wait went
// from 1.33 to 1.95 us and the sliding attention's hand-off to them from 2.46 to 2.92, the same
// with a plain load of the norm weights as with cp.async; the copies issued after the wait instead
// (their round trip on the tail) lost: 1.852 against 1.831 (twenty-third session). After the GEMV
// each thread of an expert adds the 8 products with the updated rows (times the norm weight) in row
// order, thread 0 the rows' sum of squares, and each adds its sum to acc with one double atomic.
// The partial sums of floats are exact in a double in practice, so the order of the 256 blocks'
// atomics changes nothing. Each acc entry has a 128-byte line of its own (kRouteAccStride): atomics
// on one line are serialised. H200, ms per step, NVFP4 b1 1K (scripts/gpu.sh sweep, three rounds,
// one build each; docs/PERFORMANCE.md has the rest): entries 8 bytes apart 1.936 against the router
// kernel's 1.853; a line an entry 1.839 / 1.839; 4 copies of each entry in its line (block b adds
// to copy b % 4) 1.855 against 1.839 for one; the blocks of a cluster of 8 first adding their sums
// through DSMEM, one atomic a cluster, 1.886 against 1.855 (BF16 2.447 against 2.306); the landed
// form 1.844 against 1.855.
constexpr int kRouteRows = dev::kGemvWarps;  // rows per block: one a warp
// BF16's two-warp split at 16 rows a block of 32 warps where the rows divide (Flint's o
// projection: 128 blocks, not 256 of 16 warps); with kRoutedWarps above (forty-sixth session: the
// two alone, H100, BF16 b1 1K 1.905 -> 1.895 and 1.893). NVFP4's one warp a row at 16 rows a block
// measured 1.343 -> 1.340 and keeps 8.
constexpr int kRouteWideRows = 16;
struct RouteTail {
  const void* w;  // router [E, ld] (F32 or BF16)
  bool f32;
  int E;
  int64_t ld;
  const float* norm;  // [ld]
  float* x_out;       // [ld]
  double* acc;        // [E + kRouteSsCopies][kRouteAccStride]
};

template <DType W, int kSplit, int kRows = kRouteRows>
__global__ void __launch_bounds__(kSplit* kRows * 32, 1024 / (kSplit * kRows * 32))
    gemv_route_kernel(GemvArgs args, RouteTail rt) {
  extern __shared__ float4 smem4[];
  __shared__ __align__(16) uint4 s_w[kRouteTailMaxExperts * 2 * kRows / 8];
  __shared__ __align__(16) float s_g[kRows];
  __shared__ float s_y[kRows], s_x[kRows];
  dev::ktrace_begin(KTag::kGemv);
  // gemv_block lets the next kernel launch after the wait (args.trigger_after_wait).
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  const int per = (rt.f32 ? 2 : 1) * kRows / 8;  // 16-byte pieces of an expert's slice
  const size_t es = rt.f32 ? 4 : 2;
  for (int i = threadIdx.x; i < rt.E * per; i += blockDim.x) {
    const int e = i / per, h = i % per;
    dev::cp_async16(
        &s_w[i], static_cast<const unsigned char*>(rt.w) + (e * rt.ld + row0) * es + h * 16, true);
  }
  if (threadIdx.x < kRows / 4)
    dev::cp_async16(&s_g[4 * threadIdx.x], rt.norm + row0 + 4 * threadIdx.x, true);
  dev::cp_async_commit();
  // NVFP4, one warp a row: the o projection's 4096-wide rows take two passes of U 2, and kPipe
  // requests the second before the first's dots (64 registers, no spill). H100, first 40 layers,
  // ms per step (scripts/gpu.sh ab, three rounds, thirty-eighth session): NVFP4 b1 1K 1.379 ->
  // 1.365, 32K 1.642 -> 1.620 (two rows take the narrow path: unchanged). BF16's two-warp split
  // (two passes of one warp's U 4) measured no gain (1.941 -> 1.950).
  // Measured and not kept (docs/PERFORMANCE.md, thirty-eighth session): the same in the routed
  // gate/up, whose 64 registers then spill, and BF16's qkv projection and moe_down.
  constexpr bool kPipe = W == DType::kNVFP4 && kSplit == 1;
  dev::gemv_block<W, 1, false, 1, 1, 0, kSplit, kPipe, kRows>(args, reinterpret_cast<float*>(smem4),
                                                              s_y);
  dev::cp_async_wait<0>();
  __syncthreads();
  if (threadIdx.x < kRows) {
    const float x = s_y[threadIdx.x] * s_g[threadIdx.x];
    s_x[threadIdx.x] = x;
    rt.x_out[row0 + threadIdx.x] = x;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < rt.E; e += blockDim.x) {
    float w[kRows];
    // Expert e's slice: kRows / 4 float4 (F32) or kRows / 8 uint4 of BF16 pairs.
    static_assert(kRows % 8 == 0, "gemv_route_kernel: rows a block in 16-byte BF16 pieces");
    if (rt.f32) {
#pragma unroll
      for (int q = 0; q < kRows / 4; ++q) {
        const float4 v = reinterpret_cast<const float4*>(s_w)[e * (kRows / 4) + q];
        w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int q = 0; q < kRows / 8; ++q) {
        const uint4 v = s_w[e * (kRows / 8) + q];
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w[8 * q + 2 * j] = __uint_as_float(u[j] << 16);
          w[8 * q + 2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kRows; ++i) sum += w[i] * s_x[i];
    atomicAdd(rt.acc + int64_t(e) * kRouteAccStride, static_cast<double>(sum));
  }
  if (threadIdx.x < kRouteSsCopies) {  // each copy of the sum of squares (gemv.h)
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kRows; ++i) ss += s_y[i] * s_y[i];
    atomicAdd(rt.acc + int64_t(rt.E + threadIdx.x) * kRouteAccStride, static_cast<double>(ss));
  }
  dev::ktrace_end();
}

template <DType W, int kSplit, int kRows = kRouteRows>
void launch_route(const GemvArgs& a, const RouteTail& rt, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_route_kernel<W, kSplit, kRows>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const size_t smem = dev::padded_len(a.a.in) * sizeof(float);
  launch_pdl(gemv_route_kernel<W, kSplit, kRows>,
             dim3(static_cast<unsigned>(ceil_div(a.a.out, int64_t(kRows)))),
             dim3(kSplit * kRows * 32), smem, s, a, rt);
}

// One output row per warp, eight per block: many small blocks keep every SM busy at batch 1.
template <DType W, int NB, bool kGated>
void launch_nb(const GemvArgs& a, int groups, cudaStream_t s) {
  if constexpr (NB == 1 && !kGated && W == DType::kBF16) {
    if (try_split<W>(a, s)) return;
  }
  if constexpr (NB == 1 && !kGated && (W == DType::kBF16 || W == DType::kF32)) {
    if (try_wave<W>(a, s)) return;
  }
  if constexpr (NB == 1 && !kGated && W == DType::kNVFP4) {
    if (try_two_rows<W>(a, groups, s)) return;
  }
  // NVFP4 experts' gate/up of 3+ tokens: two rows per warp (80 registers, three blocks per SM), so
  // half as many blocks each stage the token's normed row; the sums are the same. H200, ms per
  // decode step (graph, 1K context), one row / two: b3 4.673 / 4.579, b4 5.340 / 5.192 (moe_down
  // at U 2), b8 8.433 / 8.120 (moe_down at U 4); b2 3.533 / 3.568 lost, and BF16 lost at b1-b8.
  if constexpr (NB == 1 && kGated && W == DType::kNVFP4) {
    if (a.expert_ids != nullptr && a.num_rows >= kExpertTwoRowTokens * a.pairs_per_token) {
      return launch_r<W, 1, true, 2>(a, groups, s);
    }
  }
  launch_r<W, NB, kGated, 1>(a, groups, s);
}

template <DType W, bool kGated>
void launch_w(const GemvArgs& a, int nb_template, int groups, cudaStream_t s) {
  switch (nb_template) {
    case 1:
      launch_nb<W, 1, kGated>(a, groups, s);
      break;
    case 2:
      launch_nb<W, 2, kGated>(a, groups, s);
      break;
    case 4:
      launch_nb<W, 4, kGated>(a, groups, s);
      break;
    default:
      launch_nb<W, 8, kGated>(a, groups, s);
      break;
  }
}

template <bool kGated>
void launch(const GemvArgs& a, int nb_template, int groups, cudaStream_t s) {
  if (groups == 0 || a.a.out == 0) return;
  switch (a.a.dtype) {
    case DType::kF32:
      launch_w<DType::kF32, kGated>(a, nb_template, groups, s);
      break;
    case DType::kBF16:
      launch_w<DType::kBF16, kGated>(a, nb_template, groups, s);
      break;
    case DType::kNVFP4:
      launch_w<DType::kNVFP4, kGated>(a, nb_template, groups, s);
      break;
    default:
      FLINT_FAIL("gemv: unsupported weight dtype {}", a.a.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void check_weight(const LinearRef& w) {
  FLINT_CHECK(dev::padded_len(w.in) * int64_t(sizeof(float)) <= kMaxSmemBytes,
              "gemv: in {} is too long to stage in shared memory", w.in);
  const int ce = gemv_chunk_elems(w.dtype);
  FLINT_CHECK(ce > 0, "gemv: unsupported weight dtype {}", w.dtype);
  FLINT_CHECK(w.w != nullptr && w.in % ce == 0, "gemv: weight [{}, {}] {} needs in % {} == 0",
              w.out, w.in, w.dtype, ce);
  FLINT_CHECK(w.dtype != DType::kNVFP4 || w.sc != nullptr, "gemv: NVFP4 weight without scales");
}

void check_x(const float* x, int64_t x_stride) {
  FLINT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0,
              "gemv: activations must be 16-byte aligned rows (stride {})", x_stride);
}

// Rows per pass: up to 8, fewer when the staged activations would not fit in shared memory.
int nb_for(int n, int64_t in) {
  int nb = n >= 8 ? 8 : n > 2 ? 4 : n;
  while (nb > 1 && nb * dev::padded_len(in) * int64_t(sizeof(float)) > kMaxSmemBytes) nb /= 2;
  return nb;
}

}  // namespace

Result<unsigned> parse_gemv_narrow(std::string_view text) {
  constexpr unsigned kMax = kNarrowAll | kNarrowWarps8;
  unsigned v = 0;
  bool ok = !text.empty() && text.size() <= 3;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) v = 10 * v + unsigned(c - '0');
  }
  if (!ok || (v & ~kMax) != 0) {
    return Error{
        ErrorCode::kInvalidArgument,
        fmt::format("FLINT_NARROW must be a sum of gemv.h's kNarrow* bits ({}, {}, {}, {}, "
                    "{}), got '{}'",
                    unsigned(kNarrowFp4One), unsigned(kNarrowFp4Two), unsigned(kNarrowBf16One),
                    unsigned(kNarrowBf16Two), unsigned(kNarrowWarps8), text)};
  }
  return v;
}

unsigned set_gemv_narrow(unsigned mode) {
  const unsigned before = narrow_mode();
  g_narrow_mode.store(mode == ~0u ? kNarrowDefault : mode, std::memory_order_relaxed);
  return before;
}

Result<int> parse_gemv_wave(std::string_view text) {
  for (const int m : {0, 4, 2, 5, -4, -2, -5}) {
    if (text == std::to_string(m)) return m;
  }
  return Error{ErrorCode::kInvalidArgument,
               fmt::format("FLINT_GEMV_WAVE must be 0, 4, 2, 5, -4, -2 or -5 (gemv.h's "
                           "kGemvWave* modes), got '{}'",
                           text)};
}

int set_gemv_wave(int mode) {
  const int before = wave_mode();
  g_wave_mode.store(mode == kGemvWaveUnset ? kGemvWaveDefault : mode, std::memory_order_relaxed);
  return before;
}

bool routed_top_k_in_block(const MoeRouting& r) {
  return r.num_experts <= 256 && r.top_k <= dev::kBlockTopKMax;
}

void gemv(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
          const LinearRef& w, bool accumulate, cudaStream_t s, const GemvNorm& norm,
          const int32_t* x_rows) {
  check_weight(w);
  check_x(x, x_stride);
  FLINT_CHECK(w.num_experts == 1, "gemv: expert stack passed to the dense gemv");
  GemvArgs a{w, {},       x,        x_stride, x_rows,  norm.weight, norm.eps,
             y, y_stride, num_rows, 1,        nullptr, accumulate};
  a.l2_rest = l2_rest_serves(w, num_rows);
  if (try_narrow(a, s)) return;
  if (try_mma<false>(a, s)) return;
  const int nb = nb_for(num_rows, w.in);
  launch<false>(a, nb, static_cast<int>(ceil_div(num_rows, nb)), s);
}

bool gemv_route_partials(float* y, const float* x, const LinearRef& w, const LinearRef& router,
                         const float* norm, float* x_out, double* acc, cudaStream_t s) {
  if (w.num_experts != 1 || router.num_experts != 1 || router.in != w.out ||
      w.out % kRouteRows != 0 || router.out < 1 || router.out > kRouteTailMaxExperts ||
      (router.dtype != DType::kF32 && router.dtype != DType::kBF16) || norm == nullptr ||
      (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kNVFP4)) {
    return false;
  }
  check_weight(w);
  check_x(x, w.in);
  FLINT_CHECK(router.w != nullptr && y != nullptr && x_out != nullptr && acc != nullptr,
              "gemv_route_partials: null buffer");
  GemvArgs a{w, {}, x, w.in, nullptr, nullptr, 0.0f, y, w.out, 1, 1, nullptr, true};
  // It follows attention, which lets it launch early (decode_attention's early_dependents): the
  // routed gate/up launches once every block here has passed its wait, not at their start
  // (forward.cpp has the measurements).
  a.trigger_after_wait = true;
  a.l2_rest = l2_rest_serves(w, 1);
  const RouteTail rt{
      router.w, router.dtype == DType::kF32, static_cast<int>(router.out), w.out, norm, x_out, acc};
  switch (w.dtype) {
    case DType::kF32:
      launch_route<DType::kF32, 1>(a, rt, s);
      break;
    case DType::kBF16:
      // The o projection's BF16 row in two warps, as gemv would run it (try_split).
      if (split_serves<DType::kBF16>(a)) {
        if (w.out % kRouteWideRows == 0) {
          launch_route<DType::kBF16, 2, kRouteWideRows>(a, rt, s);
        } else {
          launch_route<DType::kBF16, 2>(a, rt, s);
        }
      } else {
        launch_route<DType::kBF16, 1>(a, rt, s);
      }
      break;
    default:
      launch_route<DType::kNVFP4, 1>(a, rt, s);
      break;
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
  return true;
}

void gemv_gated(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
                const LinearRef& gate, const LinearRef& up, cudaStream_t s, const GemvNorm& norm) {
  check_weight(gate);
  check_weight(up);
  check_x(x, x_stride);
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in,
              "gemv_gated: gate [{}, {}] {} vs up [{}, {}] {}", gate.out, gate.in, gate.dtype,
              up.out, up.in, up.dtype);
  GemvArgs a{gate, up,       x,        x_stride, nullptr, norm.weight, norm.eps,
             y,    y_stride, num_rows, 1,        nullptr, false};
  a.l2_rest = l2_rest_serves(gate, num_rows);
  if (try_mma<true>(a, s)) return;
  const int nb = nb_for(num_rows, gate.in);
  launch<true>(a, nb, static_cast<int>(ceil_div(num_rows, nb)), s);
}

void gemv_gated_experts(float* act, const float* x, int64_t x_stride, int num_pairs,
                        int pairs_per_token, const int32_t* expert_ids, const LinearRef& gate,
                        const LinearRef& up, cudaStream_t s, const GemvNorm& norm,
                        const ExpertHints& hints) {
  check_weight(gate);
  check_weight(up);
  check_x(x, x_stride);
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in &&
                  gate.num_experts == up.num_experts && pairs_per_token > 0,
              "gemv_gated_experts: gate/up mismatch");
  FLINT_CHECK(hints.fixed_from >= 0 &&
                  (hints.fixed_from >= pairs_per_token ||
                   (hints.fixed_id0 >= 0 &&
                    hints.fixed_id0 + pairs_per_token - hints.fixed_from <= gate.num_experts)),
              "gemv_gated_experts: fixed slots {}.. with ids {}.. outside the {} experts",
              hints.fixed_from, hints.fixed_id0, gate.num_experts);
  GemvArgs a{gate, up,       x,         x_stride,        nullptr,    norm.weight, norm.eps,
             act,  gate.out, num_pairs, pairs_per_token, expert_ids, false};
  a.fixed_from = hints.fixed_from;
  a.fixed_id0 = hints.fixed_id0;
  a.skip_fixed = hints.skip_fixed;
  launch<true>(a, 1, num_pairs, s);
}

void gemv_gated_routed_experts(float* act, const float* x, int64_t x_stride, int num_tokens,
                               const float* logits, const float* bias, const MoeRouting& r,
                               int32_t* ids, float* weights, const LinearRef& gate,
                               const LinearRef& up, cudaStream_t s, const GemvNorm& norm,
                               int32_t* pick_ready, const float* x_inv, const double* route_acc,
                               float route_eps) {
  check_weight(gate);
  check_weight(up);
  check_x(x, x_stride);
  const int slots = r.slots();
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in &&
                  gate.num_experts == up.num_experts &&
                  gate.num_experts >= r.num_experts + r.num_shared_slots,
              "gemv_gated_routed_experts: gate/up mismatch");
  FLINT_CHECK((logits != nullptr) != (route_acc != nullptr),
              "gemv_gated_routed_experts: pass the router's logits or gemv_route_partials' sums, "
              "exactly one");
  FLINT_CHECK(r.num_experts > 0 && r.top_k > 0 && r.top_k <= r.num_experts && slots <= 32 &&
                  ids != nullptr && weights != nullptr,
              "gemv_gated_routed_experts: top_k {} of {} experts, {} slots", r.top_k, r.num_experts,
              slots);
  FLINT_CHECK(x_inv == nullptr || norm.weight == nullptr,
              "gemv_gated_routed_experts: rows normed twice (a norm weight and x_inv)");
  FLINT_CHECK(route_acc == nullptr ||
                  (norm.weight == nullptr && x_inv == nullptr && routed_top_k_in_block(r)),
              "gemv_gated_routed_experts: the route sums need pre-normed rows and the block top-k "
              "(top_k {} of {} experts)",
              r.top_k, r.num_experts);
  if (num_tokens == 0 || gate.out == 0) return;
  GemvArgs a{gate,        up,       x,    x_stride, nullptr,
             norm.weight, norm.eps, act,  gate.out, num_tokens * slots,
             slots,       nullptr,  false};
  a.x_inv = x_inv;
  a.l2_rest = l2_rest_serves(gate, num_tokens);  // its fixed slots only
  a.route_acc = route_acc;
  if (route_acc != nullptr) a.eps = route_eps;
  a.fixed_from = r.top_k;
  a.fixed_id0 = r.num_experts;
  a.route_logits = logits;
  a.route_bias = bias;
  a.route = r;
  a.ids_out = ids;
  a.w_out = weights;
  a.pick_ready = pick_ready;
  // The staged input row, or the top-k's scratch before it.
  const size_t smem =
      std::max<size_t>(dev::padded_len(gate.in), size_t(2) * r.num_experts) * sizeof(float);
  FLINT_CHECK(smem <= size_t(kMaxSmemBytes), "gemv_gated_routed_experts: {} bytes of shared memory",
              smem);
  switch (gate.dtype) {
    case DType::kF32:
      launch_routed<DType::kF32>(a, smem, s);
      break;
    case DType::kBF16:
      launch_routed<DType::kBF16>(a, smem, s);
      break;
    case DType::kNVFP4:
      launch_routed<DType::kNVFP4>(a, smem, s);
      break;
    default:
      FLINT_FAIL("gemv_gated_routed_experts: unsupported weight dtype {}", gate.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flint::cuda
