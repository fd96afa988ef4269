// The persistent decode kernel's host side: which models it supports, the launch shape and the
// cooperative launch. The device code is in decode_persistent.cuh, compiled per head_dim in
// decode_persistent_d*.cu. Test: tests/gpu/persistent_test.cpp
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/decode_attention.cuh"
#include "backends/cuda/kernels/decode_persistent.h"

namespace flint::cuda {
namespace persistent {
// decode_persistent_d<D>.cu: the kernel for head_dim D, 1 (nb 1) or 8 (nb 2-8) row slots and
// linear weights of dtype w (F32, BF16 or NVFP4); null for anything else.
void* kernel_d16(int nb, DType w);
void* kernel_d32(int nb, DType w);
void* kernel_d64(int nb, DType w);
void* kernel_d128(int nb, DType w);
}  // namespace persistent

namespace {

using dev::padded_len;
constexpr int kThreads = attn::kThreads;
constexpr int kWarps = attn::kWarps;
constexpr int kMaxSlots = kPersistentMaxSlots;
constexpr int kMaxExperts = kPersistentMaxExperts;

void* pick_kernel(int head_dim, int nb, DType w) {
  switch (head_dim) {
    case 16:
      return persistent::kernel_d16(nb, w);
    case 32:
      return persistent::kernel_d32(nb, w);
    case 64:
      return persistent::kernel_d64(nb, w);
    case 128:
      return persistent::kernel_d128(nb, w);
    default:
      return nullptr;
  }
}

size_t attention_smem(int head_dim) {
  switch (head_dim) {
    case 16:
      return attn::smem_bytes<16>();
    case 32:
      return attn::smem_bytes<32>();
    case 64:
      return attn::smem_bytes<64>();
    default:
      return attn::smem_bytes<128>();
  }
}

// Empty when `L` (rows x in, one matrix or a stack) is readable by the kernel's GEMV as `want`.
std::string check_linear(const LinearRef& L, const char* name, int64_t in, DType want) {
  const int ce = gemv_chunk_elems(L.dtype);
  if (L.w == nullptr || ce == 0 || L.dtype != want) {
    return fmt::format("{}: dtype {} (the kernel for these weights reads {})", name, L.dtype, want);
  }
  if (L.in != in || L.in % ce != 0) return fmt::format("{}: in {} (want {})", name, L.in, in);
  if (L.dtype == DType::kNVFP4 && L.sc == nullptr) return fmt::format("{}: no scales", name);
  return {};
}

}  // namespace

PersistentDecodeShape persistent_decode_shape(const PersistentLayer* layers, int num_layers,
                                              const PersistentDecodeArgs& a) {
  PersistentDecodeShape sh;
  auto fail = [&](std::string why) {
    sh.why = std::move(why);
    return sh;
  };
  const int H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_dim;
  if (pick_kernel(D, 1, DType::kBF16) == nullptr) return fail(fmt::format("head_dim {}", D));
  if (Hkv <= 0 || H % Hkv != 0 || H / Hkv > attn::kMaxGroup) {
    return fail(fmt::format("{} heads over {} kv heads", H, Hkv));
  }
  if (a.hidden % 4 != 0) return fail(fmt::format("hidden {}", a.hidden));
  const int E = a.routing.num_experts, slots = a.routing.slots();
  int64_t max_in = std::max<int64_t>(a.hidden, int64_t(H) * D);
  // One weight dtype for every linear layer but the router (F32 or BF16).
  const DType w = num_layers > 0 ? layers[0].qkv.dtype : DType::kBF16;
  if (pick_kernel(D, 1, w) == nullptr) return fail(fmt::format("linear weights in {}", w));
  int64_t moe_token = 0;
  for (int l = 0; l < num_layers; ++l) {
    const PersistentLayer& L = layers[l];
    std::string why = check_linear(L.qkv, "qkv", a.hidden, w);
    if (why.empty()) why = check_linear(L.o, "o", int64_t(H) * D, w);
    if (why.empty() && L.qkv.out != int64_t(H + 2 * Hkv) * D) why = "qkv rows";
    if (why.empty() && L.o.out != a.hidden) why = "o rows";
    if (L.dense) {
      if (why.empty()) why = check_linear(L.gate, "gate", a.hidden, w);
      if (why.empty()) why = check_linear(L.up, "up", a.hidden, w);
      if (why.empty()) why = check_linear(L.down, "down", L.gate.out, w);
      if (why.empty() && (L.up.out != L.gate.out || L.up.dtype != L.gate.dtype ||
                          L.down.out != a.hidden || L.gate.out % 4 != 0)) {
        why = "dense MLP shapes";
      }
      max_in = std::max(max_in, L.gate.out);
    } else {
      if (why.empty())
        why = check_linear(L.router, "router", a.hidden,
                           L.router.dtype == DType::kF32 ? DType::kF32 : DType::kBF16);
      if (why.empty()) why = check_linear(L.exp_gate, "experts gate", a.hidden, w);
      if (why.empty()) why = check_linear(L.exp_up, "experts up", a.hidden, w);
      if (why.empty()) why = check_linear(L.exp_down, "experts down", L.exp_gate.out, w);
      if (why.empty() && (L.router.out != E || E > kMaxExperts || slots > kMaxSlots || slots <= 0 ||
                          L.exp_up.out != L.exp_gate.out || L.exp_up.dtype != L.exp_gate.dtype ||
                          L.exp_down.out != a.hidden || L.exp_gate.out % 4 != 0 ||
                          L.exp_gate.num_experts < E + a.routing.num_shared_slots)) {
        why = "MoE shapes";
      }
      moe_token = std::max(moe_token, slots * padded_len(L.exp_gate.out));
    }
    if (!why.empty()) return fail(fmt::format("layer {}: {}", l, why));
  }
  // Shared memory: the attention tiles, or one staged row of the widest input (8 when they fit).
  const size_t need_min = std::max({attention_smem(D), size_t(padded_len(max_in)) * 4,
                                    size_t(moe_token) * 4, size_t(2 * kWarps * E) * 4});
  const size_t want = std::max(
      need_min, size_t(kPersistentMaxRows) * std::max<size_t>(padded_len(max_in), moe_token) * 4);
  int dev = 0, optin = 0, sms = 0;
  FLINT_CUDA_CHECK(cudaGetDevice(&dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  size_t avail = optin;
  for (int nb : {1, 8}) {
    cudaFuncAttributes fa{};
    FLINT_CUDA_CHECK(cudaFuncGetAttributes(&fa, pick_kernel(D, nb, w)));
    avail = std::min(avail, size_t(optin) > fa.sharedSizeBytes ? optin - fa.sharedSizeBytes : 0);
  }
  if (need_min > avail) {
    return fail(fmt::format("{} bytes of shared memory needed, {} available", need_min, avail));
  }
  sh.smem = std::min(want, avail);
  for (int nb : {1, 8}) {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(pick_kernel(D, nb, w),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(sh.smem)));
  }
  int per_sm = 0;
  FLINT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pick_kernel(D, 8, w),
                                                                 kThreads, sh.smem));
  if (per_sm < 1) return fail("no block fits on an SM");
  sh.grid = sms;
  sh.dtype = w;  // one block per SM: the attention tiles take most of the shared memory
  sh.ok = true;
  return sh;
}

void persistent_decode(const PersistentDecodeArgs& a, const PersistentDecodeShape& shape,
                       cudaStream_t s) {
  FLINT_CHECK(shape.ok, "persistent_decode: unsupported model ({})", shape.why);
  FLINT_CHECK(a.num_rows >= 1 && a.num_rows <= kPersistentMaxRows,
              "persistent_decode: {} rows (1..{})", a.num_rows, kPersistentMaxRows);
  FLINT_CHECK(a.full_splits >= 1 && a.full_splits <= kAttentionMaxSplits && a.sliding_splits >= 1 &&
                  a.sliding_splits <= kAttentionMaxSplits,
              "persistent_decode: splits {} / {}", a.full_splits, a.sliding_splits);
  void* k = pick_kernel(a.head_dim, a.num_rows == 1 ? 1 : 8, shape.dtype);
  const int64_t floats = static_cast<int64_t>(shape.smem / 4);
  void* params[] = {const_cast<PersistentDecodeArgs*>(&a), const_cast<int64_t*>(&floats)};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(shape.grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = shape.smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  FLINT_CUDA_CHECK(cudaLaunchKernelExC(&cfg, k, params));
}

}  // namespace flint::cuda
