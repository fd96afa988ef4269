// Fused MoE router: the router GEMV (gemv_core.cuh, RMSNorm fused into its input), then the last
// block to finish picks the sigmoid top-k of every token, one warp per token.
// Reference: cpu::route (spec section 2.5).   Test: tests/kernels/moe_test.cpp
#include <algorithm>

#include "backends/cuda/kernels/gemv_core.cuh"
#include "backends/cuda/kernels/gemv_mma.cuh"
#include "backends/cuda/kernels/moe_router.h"
#include "backends/cuda/kernels/moe_topk.cuh"

namespace flint::cuda {
namespace {

constexpr int kR = 1;  // one router row per warp: the router is short (E rows), so more blocks
constexpr int64_t kMaxSmemBytes = 200 * 1024;

struct RouteArgs {
  dev::GemvArgs g;  // y = logits [num_tokens, E]
  int32_t* ids;
  float* weights;
  const float* bias;
  int32_t* counter;  // null: the logits only (moe_route_logits)
  MoeRouting r;
  int router_blocks_x = 0;  // > 0: blocks x >= this of the launch do other work (not counted)
  // Not null (moe_route_kernel): the blocks x == 0 also write their staged rows (times the norm
  // weight) here ([num_rows, in], unpadded), so that the gate/up kernel reads them instead of
  // normalising again.
  float* x_out = nullptr;
  float* x_inv_out = nullptr;  // with x_out: the rows' 1 / rms (1 without a norm weight)
};

// Top-k of token t by one warp into the launch's ids/weights; scratch: [2E] floats.
__device__ void top_k_token(const RouteArgs& a, int t, float* scratch) {
  const int slots = a.r.top_k + a.r.num_shared_slots;
  dev::top_k_token(a.g.y + int64_t(t) * a.g.y_stride, a.bias, a.r, scratch,
                   a.ids + int64_t(t) * slots, a.weights + int64_t(t) * slots);
}

// After the logits GEMV: the last block of the launch to finish (an atomic counter) picks every
// token's experts, one warp per token; smem: [kGemvWarps][2E] floats of scratch.
__device__ void route_tail(const RouteArgs& a, float* smem) {
  __shared__ bool last;
  if (a.counter == nullptr) return;
  // Publish this block's logits, then count it; the last block sees every block's logits.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int bx = a.router_blocks_x > 0 ? a.router_blocks_x : static_cast<int>(gridDim.x);
    last = atomicAdd(a.counter, 1) == bx * static_cast<int>(gridDim.y) - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int warp = threadIdx.x >> 5, E = a.r.num_experts;
  float* score = smem + int64_t(warp) * 2 * E;
  for (int t = warp; t < a.g.num_rows; t += dev::kGemvWarps) {
    top_k_token(a, t, score);
  }
  if (threadIdx.x == 0) *a.counter = 0;  // ready for the next launch
}

template <DType W, int NB, int UX>
__global__ void __launch_bounds__(dev::kGemvThreads, 1) moe_route_kernel(RouteArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  dev::ktrace_begin(KTag::kRouter);
  dev::pdl_launch_dependents();
  dev::gemv_block<W, NB, false, kR, UX>(a.g, smem);
  if (a.x_out != nullptr && blockIdx.x == 0) {
    // The rows gemv_block staged (times the norm weight) for this block's group stay in smem:
    // written here with their 1 / rms, not in gemv_block, whose other kernels' registers the code
    // would cost.
    const int64_t K = a.g.a.in, PK = dev::padded_len(K);
    const int row0 = static_cast<int>(blockIdx.y) * NB;
    const int nb = min(NB, a.g.num_rows - row0);
    for (int i = 0; i < nb; ++i) {
      float4* dst = reinterpret_cast<float4*>(a.x_out + (row0 + i) * K);
      for (int64_t j = threadIdx.x; j < K / 4; j += blockDim.x) {
        dst[j] = *reinterpret_cast<const float4*>(smem + i * PK + dev::pad_idx(4 * j));
      }
      if (threadIdx.x == 0) {
        a.x_inv_out[row0 + i] =
            a.g.norm != nullptr ? dev::staged_inv<NB, dev::kGemvWarps>(i, K, a.g.eps) : 1.0f;
      }
    }
  }
  route_tail(a, smem);
  dev::ktrace_end();
}

// BF16 router weights and kRouteMmaMinRows+ token rows: the logits on tensor cores, the
// activations in three bf16 parts (all 24 bits of f32: logits as close to the CPU's as the f32
// GEMV's, so near-tied picks agree as often), then the same tail (its scratch reuses the staged
// rows' shared memory).
constexpr int kRouteParts = 3;
// H200, NVFP4 at 1K context, against the CUDA-core router: 3 rows 0.6% slower (4.404 -> 4.430 ms
// a step), 8 rows 3.4% faster (8.516 -> 8.229). With the per-warp staging (gemv_mma.cuh; eleventh
// session, scripts/gpu.sh sweep, two rounds, ms per step, 6 rows then 3 rows as the threshold):
// NVFP4 b3 4.376 / 4.398, b4 4.873 / 4.809, b5 5.415 / 5.367; BF16 b3 5.316 / 5.319, b4 5.755 /
// 5.674, b5 6.638 / 6.579. So from 4 rows.
constexpr int kRouteMmaMinRows = 4;
// The router's logits on tensor cores, then route_tail. With a.router_blocks_x > 0, the blocks
// x >= router_blocks_x compute the shared expert's gate/up for the same token rows instead (`sh`:
// the dense gated GEMV on tensor cores, BF16 weights; moe_route_shared).
__global__ void __launch_bounds__(dev::kGemvThreads, 2)
    moe_route_mma_kernel(RouteArgs a, dev::GemvArgs sh) {
  extern __shared__ float4 smem4[];
  dev::ktrace_begin(KTag::kRouter);
  dev::pdl_launch_dependents();
  if (a.router_blocks_x > 0 && static_cast<int>(blockIdx.x) >= a.router_blocks_x) {
    dev::gemv_mma_block<DType::kBF16, 1, 2, true>(sh, smem4, blockIdx.x - a.router_blocks_x,
                                                  blockIdx.y);
    dev::ktrace_end();
    return;
  }
  dev::gemv_mma_block<DType::kBF16, 1, kRouteParts>(a.g, smem4);
  route_tail(a, reinterpret_cast<float*>(smem4));
  dev::ktrace_end();
}

// moe_route_mma_kernel for the router's rows, plus `shared` rows of the shared expert when given.
void launch_route_mma(RouteArgs a, const dev::GemvArgs* shared, size_t smem, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(moe_route_mma_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const int64_t router_x = ceil_div(a.g.a.out, dev::kMmaRows);
  int64_t shared_x = 0;
  if (shared != nullptr) {
    a.router_blocks_x = static_cast<int>(router_x);
    shared_x = ceil_div(shared->a.out, dev::kMmaRows);
  }
  const dim3 grid(static_cast<unsigned>(router_x + shared_x),
                  static_cast<unsigned>(ceil_div(a.g.num_rows, dev::kMmaTokens)));
  launch_pdl(moe_route_mma_kernel, grid, dim3(dev::kGemvThreads), smem, s, a,
             shared != nullptr ? *shared : dev::GemvArgs{});
}

// Launches moe_route_mma_kernel if it serves this call (moe_route has checked in % 8 for BF16).
bool try_mma(const RouteArgs& a, cudaStream_t s) {
  const int64_t K = a.g.a.in;
  const size_t smem =
      std::max<size_t>(dev::mma_smem_bytes<DType::kBF16, kRouteParts>(K),
                       size_t(dev::kGemvWarps) * 2 * a.r.num_experts * sizeof(float));
  if (a.g.num_rows < kRouteMmaMinRows || smem > size_t(kMaxSmemBytes)) return false;
  launch_route_mma(a, nullptr, smem, s);
  return true;
}

// Top-k only, over logits computed elsewhere: one warp per token.
__global__ void moe_router_kernel(RouteArgs a) {
  extern __shared__ float4 smem4[];
  float* score = reinterpret_cast<float*>(smem4);
  top_k_token(a, blockIdx.x, score);
}

template <DType W, int NB, int UX = 1>
void launch_nb(const RouteArgs& a, int groups, cudaStream_t s) {
  const size_t smem = std::max<size_t>(NB * dev::padded_len(a.g.a.in),
                                       size_t(dev::kGemvWarps) * 2 * a.r.num_experts) *
                      sizeof(float);
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(moe_route_kernel<W, NB, UX>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  FLINT_CHECK(smem <= size_t(kMaxSmemBytes), "moe_route: {} bytes of shared memory", smem);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.g.a.out, dev::kGemvWarps * kR)),
                  static_cast<unsigned>(groups));
  launch_pdl(moe_route_kernel<W, NB, UX>, grid, dim3(dev::kGemvThreads), smem, s, a);
}

template <DType W>
void launch_w(const RouteArgs& a, cudaStream_t s) {
  if constexpr (W == DType::kBF16) {
    if (try_mma(a, s)) return;
  }
  const int n = a.g.num_rows;
  // Up to 8 token rows per block, fewer when they would not fit in shared memory.
  int nb = n >= 8 ? 8 : n > 2 ? 4 : n;
  while (nb > 1 && nb * dev::padded_len(a.g.a.in) * int64_t(sizeof(float)) > kMaxSmemBytes) nb /= 2;
  const int groups = static_cast<int>(ceil_div(n, nb));
  // One or two tokens: the router row in one pass (one DRAM round trip), twice the loads per lane
  // (at two: NVFP4 b2 1K 3.156 -> 3.073 ms, BF16 3.841 -> 3.745; H200, scripts/gpu.sh ab).
  constexpr int kPass = 32 * dev::gemv_unroll<W, false, kR>() * dev::Chunk<W>::kElems;
  const bool long_row = a.g.a.in > kPass;  // longer than one pass of single loads
  switch (nb) {
    case 1:
      long_row ? launch_nb<W, 1, 2>(a, groups, s) : launch_nb<W, 1>(a, groups, s);
      break;
    case 2:
      long_row ? launch_nb<W, 2, 2>(a, groups, s) : launch_nb<W, 2>(a, groups, s);
      break;
    case 4:
      launch_nb<W, 4>(a, groups, s);
      break;
    default:
      launch_nb<W, 8>(a, groups, s);
      break;
  }
}

}  // namespace

void moe_router(int32_t* ids, float* weights, const float* logits, const float* bias,
                int num_tokens, const MoeRouting& r, cudaStream_t s) {
  FLINT_CHECK(r.num_experts > 0 && r.top_k > 0 && r.top_k <= r.num_experts,
              "moe_router: top_k {} of {} experts", r.top_k, r.num_experts);
  if (num_tokens == 0) return;
  RouteArgs a{};
  a.g.y = const_cast<float*>(logits);
  a.g.y_stride = r.num_experts;
  a.ids = ids;
  a.weights = weights;
  a.bias = bias;
  a.r = r;
  const size_t smem = 2 * sizeof(float) * r.num_experts;
  moe_router_kernel<<<num_tokens, 32, smem, s>>>(a);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

namespace {

// The router GEMV's arguments (logits into `logits`), checked.
RouteArgs route_args(const float* x, int64_t x_stride, int num_tokens, const LinearRef& router,
                     const GemvNorm& norm, float* logits, const MoeRouting& r) {
  FLINT_CHECK(r.num_experts > 0 && r.top_k > 0 && r.top_k <= r.num_experts &&
                  router.out == r.num_experts && router.num_experts == 1,
              "moe_route: top_k {} of {} experts, router [{}, {}]", r.top_k, r.num_experts,
              router.out, router.in);
  FLINT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0 && logits != nullptr,
              "moe_route: unaligned activations or no logits scratch");
  RouteArgs a{};
  a.g =
      dev::GemvArgs{router,        {},         x, x_stride, nullptr, norm.weight, norm.eps, logits,
                    r.num_experts, num_tokens, 1, nullptr,  false};
  a.r = r;
  return a;
}

void dispatch(const RouteArgs& a, cudaStream_t s) {
  if (a.g.num_rows == 0) return;
  const LinearRef& router = a.g.a;
  switch (router.dtype) {
    case DType::kF32:
      FLINT_CHECK(router.in % 4 == 0, "moe_route: in {} % 4", router.in);
      launch_w<DType::kF32>(a, s);
      break;
    case DType::kBF16:
      FLINT_CHECK(router.in % 8 == 0, "moe_route: in {} % 8", router.in);
      launch_w<DType::kBF16>(a, s);
      break;
    case DType::kNVFP4:
      FLINT_CHECK(router.in % 64 == 0 && router.sc != nullptr, "moe_route: in {} % 64", router.in);
      launch_w<DType::kNVFP4>(a, s);
      break;
    default:
      FLINT_FAIL("moe_route: unsupported router dtype {}", router.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace {

// route_args plus the top-k's outputs and block counter (moe_route's arguments), checked.
RouteArgs picking_args(int32_t* ids, float* weights, const float* x, int64_t x_stride,
                       int num_tokens, const LinearRef& router, const GemvNorm& norm,
                       const float* bias, const MoeRouting& r, const MoeRouteScratch& scratch) {
  FLINT_CHECK(scratch.counter != nullptr, "moe_route: no block counter");
  RouteArgs a = route_args(x, x_stride, num_tokens, router, norm, scratch.logits, r);
  a.ids = ids;
  a.weights = weights;
  a.bias = bias;
  a.counter = scratch.counter;
  return a;
}

}  // namespace

void moe_route(int32_t* ids, float* weights, const float* x, int64_t x_stride, int num_tokens,
               const LinearRef& router, const GemvNorm& norm, const float* bias,
               const MoeRouting& r, const MoeRouteScratch& scratch, cudaStream_t s) {
  dispatch(picking_args(ids, weights, x, x_stride, num_tokens, router, norm, bias, r, scratch), s);
}

bool moe_route_shared(int32_t* ids, float* weights, const float* x, int64_t x_stride,
                      int num_tokens, const LinearRef& router, const GemvNorm& norm,
                      const float* bias, const MoeRouting& r, const MoeRouteScratch& scratch,
                      const MoeSharedGateUp& shared, cudaStream_t s) {
  const LinearRef& g = shared.gate;
  const LinearRef& u = shared.up;
  // BF16 experts only. H200, 1K context, ms per step (scripts/gpu.sh sweep, 3 rounds, twelfth
  // session), without / with: BF16 b4 5.670 / 5.609, b8 8.231 / 7.924 (gate/up's 2048 blocks at
  // b8 lose 512); NVFP4 b4 4.789 / 5.003, b8 6.815 / 6.806 (its gate/up is bound by instruction
  // issue, and the shared slices' mma blocks lengthen the router's launch more than they save).
  const bool usable = r.num_shared_slots > 0 && num_tokens >= kRouteMmaMinRows &&
                      router.dtype == DType::kBF16 && shared.act != nullptr &&
                      g.dtype == DType::kBF16 && u.dtype == DType::kBF16 && g.out == u.out &&
                      g.in == u.in && g.in == router.in && g.num_experts == u.num_experts &&
                      g.num_experts >= r.num_experts + r.num_shared_slots && g.out > 0 &&
                      g.w != nullptr && u.w != nullptr && g.in % gemv_chunk_elems(g.dtype) == 0;
  const size_t smem = static_cast<size_t>(
      std::max({dev::mma_smem_bytes<DType::kBF16, kRouteParts>(router.in),
                int64_t(dev::kGemvWarps) * 2 * r.num_experts * int64_t(sizeof(float)),
                dev::mma_smem_bytes<DType::kBF16>(g.in)}));
  if (!usable || smem > size_t(kMaxSmemBytes)) {
    moe_route(ids, weights, x, x_stride, num_tokens, router, norm, bias, r, scratch, s);
    return false;
  }
  const RouteArgs a =
      picking_args(ids, weights, x, x_stride, num_tokens, router, norm, bias, r, scratch);
  const int slots = r.slots();
  const LinearRef sg = g.experts(r.num_experts, r.num_shared_slots);
  const LinearRef su = u.experts(r.num_experts, r.num_shared_slots);
  // Token t's shared slots are act rows t * slots + top_k.., contiguous: one row of sg.out.
  dev::GemvArgs sh{sg,
                   su,
                   x,
                   x_stride,
                   nullptr,
                   norm.weight,
                   norm.eps,
                   shared.act + int64_t(r.top_k) * g.out,
                   int64_t(slots) * g.out,
                   num_tokens,
                   1,
                   nullptr,
                   false};
  launch_route_mma(a, &sh, smem, s);
  FLINT_CUDA_CHECK(cudaGetLastError());
  return true;
}

void moe_route_logits(float* logits, const float* x, int64_t x_stride, int num_tokens,
                      const LinearRef& router, const GemvNorm& norm, const MoeRouting& r,
                      cudaStream_t s, float* x_out, float* x_inv_out) {
  static_assert(kRouteNormedMaxRows <= kRouteMmaMinRows, "x_out: the CUDA-core router only");
  FLINT_CHECK(x_out == nullptr || num_tokens < kRouteNormedMaxRows,
              "moe_route_logits: normed rows of {} tokens (fewer than {})", num_tokens,
              kRouteNormedMaxRows);
  if (x_out != nullptr) {
    const float* x_end = x + (num_tokens - 1) * x_stride + router.in;
    FLINT_CHECK((x_out + num_tokens * router.in <= x || x_end <= x_out) &&
                    reinterpret_cast<uintptr_t>(x_out) % 16 == 0,
                "moe_route_logits: the normed rows overlap x or are unaligned");
  }
  FLINT_CHECK((x_out == nullptr) == (x_inv_out == nullptr),
              "moe_route_logits: normed rows and their scales go together");
  RouteArgs a = route_args(x, x_stride, num_tokens, router, norm, logits, r);
  a.x_out = x_out;
  a.x_inv_out = x_inv_out;
  dispatch(a, s);
}

}  // namespace flint::cuda
