// Device side of the kernel timeline trace (ktrace.h): ktrace_begin(tag) at a traced kernel's
// first line, ktrace_mark(point) at its marks, ktrace_end() after its block function returns.
// Only thread 0 of block 0 records. Without FLINT_KTRACE every call is empty.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/ktrace.h"

namespace flint::cuda {

#ifdef FLINT_KTRACE
// Each translation unit's kernels read their own copy of the buffer pointer; every copy registers
// its setter here at static initialisation, and ktrace_attach calls them all (ktrace.cu).
using KTraceAttachFn = cudaError_t (*)(void* buf, int cap);
bool ktrace_register(KTraceAttachFn fn);

namespace {
__device__ unsigned char* g_ktrace_buf = nullptr;
__device__ int g_ktrace_cap = 0;
cudaError_t ktrace_attach_here(void* buf, int cap) {
  unsigned char* p = static_cast<unsigned char*>(buf);
  cudaError_t e = cudaMemcpyToSymbol(g_ktrace_buf, &p, sizeof p);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_ktrace_cap, &cap, sizeof cap);
  return e;
}
[[maybe_unused]] const bool g_ktrace_registered = ktrace_register(&ktrace_attach_here);
}  // namespace
#endif

namespace dev {

#ifdef FLINT_KTRACE
struct KtSlot {
  uint32_t slot, check;  // check == ~slot once ktrace_begin took a record in this block
};
__device__ __forceinline__ KtSlot& kt_slot() {
  __shared__ KtSlot s;
  return s;
}
__device__ __forceinline__ bool kt_recorder() {
  return threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x == 0 && blockIdx.y == 0 &&
         blockIdx.z == 0;
}
__device__ __forceinline__ uint64_t kt_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ KTraceRecord* kt_record(uint32_t i) {
  return reinterpret_cast<KTraceRecord*>(g_ktrace_buf + kKTraceHeaderBytes) + i;
}
#endif

__device__ __forceinline__ void ktrace_begin([[maybe_unused]] KTag tag) {
#ifdef FLINT_KTRACE
  if (!kt_recorder()) return;
  const uint64_t t = kt_now();
  KtSlot& s = kt_slot();
  s.slot = 0;
  s.check = 0;
  if (g_ktrace_buf == nullptr) return;
  const uint32_t i = atomicAdd(reinterpret_cast<unsigned int*>(g_ktrace_buf), 1u);
  if (i >= static_cast<uint32_t>(g_ktrace_cap)) return;
  KTraceRecord* r = kt_record(i);
  r->tag = static_cast<uint32_t>(tag);
  r->grid_x = gridDim.x;
  r->grid_y = gridDim.y;
  r->grid_z = gridDim.z;
  for (int p = 0; p < kKtPoints; ++p) r->t[p] = 0;
  r->t[kKtStart] = t;
  s.slot = i;
  s.check = ~i;
#endif
}

__device__ __forceinline__ void ktrace_mark([[maybe_unused]] int point) {
#ifdef FLINT_KTRACE
  if (!kt_recorder() || g_ktrace_buf == nullptr) return;
  const KtSlot& s = kt_slot();
  if (s.check != ~s.slot || s.slot >= static_cast<uint32_t>(g_ktrace_cap)) return;
  kt_record(s.slot)->t[point] = kt_now();
#endif
}

__device__ __forceinline__ void ktrace_end() { ktrace_mark(kKtEnd); }

}  // namespace dev
}  // namespace flint::cuda
