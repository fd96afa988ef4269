// Device side of the kernel timeline trace (ktrace.h): ktrace_begin(tag) at a traced kernel's
// first line, ktrace_mark(point) at its marks, ktrace_end() after its block function returns.
// Only thread 0 of one block records (block 0 unless ktrace_attach names another); at ktrace_end
// lane 0 of every warp of every block also raises one of the buffer's latest-end slots, whose
// maximum the next launch's recording block reads after its wait (the previous launch's
// stragglers). Without FLINT_KTRACE every call is empty.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/ktrace.h"

namespace flint::cuda {

#ifdef FLINT_KTRACE
// Each translation unit's kernels read their own copy of the buffer pointer; every copy registers
// its setter here at static initialisation, and ktrace_attach calls them all (ktrace.cu).
using KTraceAttachFn = cudaError_t (*)(void* buf, int cap, int block);
bool ktrace_register(KTraceAttachFn fn);

namespace {
__device__ unsigned char* g_ktrace_buf = nullptr;
__device__ int g_ktrace_cap = 0;
__device__ int g_ktrace_block = 0;  // the linear block index that records (kt_recorder)
cudaError_t ktrace_attach_here(void* buf, int cap, int block) {
  unsigned char* p = static_cast<unsigned char*>(buf);
  cudaError_t e = cudaMemcpyToSymbol(g_ktrace_buf, &p, sizeof p);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_ktrace_cap, &cap, sizeof cap);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_ktrace_block, &block, sizeof block);
  return e;
}
[[maybe_unused]] const bool g_ktrace_registered = ktrace_register(&ktrace_attach_here);
}  // namespace
#endif

namespace dev {

#ifdef FLINT_KTRACE
struct KtSlot {
  uint32_t slot, check;  // check == ~slot once ktrace_begin took a record in this block
  // The end slots as the recording block found them after its wait: copied by cp.async at the wait
  // end, read at ktrace_end, so that the copy's round trip does not hold up the traced block.
  unsigned long long ends[kKTraceEndSlots];
};
__device__ __forceinline__ KtSlot& kt_slot() {
  __shared__ KtSlot s;
  return s;
}
// Thread 0 of the block whose linear index (x fastest, then y, then z) is the attached one,
// clamped to the grid (block 0 unless the bench's --ktrace-block says otherwise).
__device__ __forceinline__ bool kt_recorder() {
  const unsigned last = gridDim.x * gridDim.y * gridDim.z - 1;
  const unsigned lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return threadIdx.x == 0 && threadIdx.y == 0 &&
         lin == min(static_cast<unsigned>(g_ktrace_block), last);
}
__device__ __forceinline__ uint64_t kt_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ KTraceRecord* kt_record(uint32_t i) {
  return reinterpret_cast<KTraceRecord*>(g_ktrace_buf + kKTraceHeaderBytes) + i;
}
__device__ __forceinline__ unsigned long long* kt_end_slot(int i) {
  return reinterpret_cast<unsigned long long*>(g_ktrace_buf + kKTraceEndSlotBytes * (i + 1));
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
  r->prev_last_end = 0;
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
  KTraceRecord* r = kt_record(s.slot);
  r->t[point] = kt_now();
  // After the wait every warp of the previous launch has ended: the latest end is its last one.
  if (point == kKtWaitEnd) {
    // Uncommitted: they join this thread's next cp.async group, if the kernel commits one.
#pragma unroll
    for (int i = 0; i < kKTraceEndSlots; ++i) {
      const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(&kt_slot().ends[i]));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(kt_end_slot(i))
                   : "memory");
    }
  } else if (point == kKtEnd && r->t[kKtWaitEnd] != 0) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    unsigned long long last = 0;
#pragma unroll
    for (int i = 0; i < kKTraceEndSlots; ++i) last = max(last, kt_slot().ends[i]);
    r->prev_last_end = last;
  }
#endif
}

__device__ __forceinline__ void ktrace_end() {
#ifdef FLINT_KTRACE
  if (g_ktrace_buf != nullptr && (threadIdx.x & 31) == 0) {
    const unsigned w = (blockIdx.x + blockIdx.y + blockIdx.z) * 37u + (threadIdx.x >> 5);
    atomicMax(kt_end_slot(static_cast<int>(w % kKTraceEndSlots)),
              static_cast<unsigned long long>(kt_now()));
  }
#endif
  ktrace_mark(kKtEnd);
}

}  // namespace dev
}  // namespace flint::cuda
