// Host side of the kernel timeline trace (ktrace.h): the registry of every translation unit's
// buffer-pointer setter.
#include <vector>

#include "backends/cuda/kernels/ktrace.cuh"

namespace flint::cuda {

const char* ktag_name(KTag t) {
  switch (t) {
    case KTag::kGemv:
      return "gemv";
    case KTag::kGemvGated:
      return "gemv_gated";
    case KTag::kRoutedGateUp:
      return "routed_gate_up";
    case KTag::kRouter:
      return "router";
    case KTag::kMoeDown:
      return "moe_down";
    case KTag::kAttention:
      return "attention";
    case KTag::kGemvMma:
      return "gemv_mma";
    case KTag::kNone:
      break;
  }
  return "untagged";
}

#ifdef FLINT_KTRACE
namespace {
std::vector<KTraceAttachFn>& registry() {
  static std::vector<KTraceAttachFn> fns;
  return fns;
}
}  // namespace

bool ktrace_register(KTraceAttachFn fn) {
  registry().push_back(fn);
  return true;
}

bool ktrace_compiled() { return true; }

cudaError_t ktrace_attach(void* buf, int cap, int block) {
  for (KTraceAttachFn fn : registry()) {
    if (const cudaError_t e = fn(buf, cap, block); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
#else
bool ktrace_compiled() { return false; }
cudaError_t ktrace_attach(void*, int, int) { return cudaErrorNotSupported; }
#endif

}  // namespace flint::cuda
