// Hopper warpgroup MMA (wgmma.mma_async) helpers for the prefill attention and GEMM kernels:
// shared-memory matrix descriptors (no swizzle, 128-byte swizzle), the shapes they issue, the
// fences and waits around them, and what warp specialization uses (mbarriers, setmaxnreg, named
// barriers).
// The 128 threads of a warpgroup issue each wgmma together. Layout rules (PTX ISA, "Shared Memory
// Matrix Layout"): an operand is built of 8 x 16-byte core matrices, each 128 contiguous bytes.
// K-major (the reduction dimension contiguous): LBO is the step between core matrices along K, SBO
// the step between 8-row groups along M/N. MN-major (imm-trans 1): SBO is the step between 8-column
// groups along M/N, LBO the step between 8-row groups along K.
// wgmma exists only in code compiled for sm_90a: FLINT_WGMMA is 1 there (device passes) and 0 in
// every other pass, where the helpers trap; callers launch their wgmma kernels only on devices of
// compute capability 9.0 (the build targets 90a there, CMakeLists.txt).
// Tests: tests/kernels/prefill_attention_test.cpp, prefill_gemm_test.cpp (through the kernels)
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLINT_WGMMA 1
#else
#define FLINT_WGMMA 0
#endif

namespace flint::cuda::dev {

// Descriptor of a no-swizzle operand at shared address `addr` (bytes, 16-aligned).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffffu) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

// Descriptor of a K-major operand in the 128-byte-swizzle layout at shared address `addr` (its
// 8-row atoms 1024-byte aligned): rows of 64 bf16 (128 bytes) one after another, 16-byte chunk c
// of row r at chunk c ^ (r % 8) of the row; SBO one 8-row atom (1024 bytes), LBO unused (1). The
// k16 steps inside the 64-wide atom start 32 bytes further each.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3ffffu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// Before the first wgmma of a batch: orders this thread's earlier register writes (accumulators,
// A fragments) before the warpgroup's MMAs read them.
__device__ __forceinline__ void wgmma_fence() {
#if FLINT_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if FLINT_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// Waits until at most N committed batches of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if FLINT_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
// Shared memory written by ordinary stores or cp.async must be made visible to the async proxy
// (which wgmma reads through) by its writers, before the barrier that publishes it.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if FLINT_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}
// Shared-memory barriers (mbarrier) of a warp-specialized kernel: a producer's arrivals publish
// a stage, consumers' arrivals free it. `bar` is the shared address of an 8-byte barrier.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if FLINT_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  __trap();
#endif
}
// One arrival (release at CTA scope: this thread's earlier writes are seen by the waiters).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if FLINT_WGMMA
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
#else
  __trap();
#endif
}
// Waits until the barrier's phase of parity `parity` has completed (acquire at CTA scope).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if FLINT_WGMMA
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  __trap();
#endif
}
// The warpgroup's register budget: lowered by a producer, raised by consumers (every thread of
// the warpgroup executes it; N a multiple of 8 in 24..256).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if FLINT_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if FLINT_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}
// A barrier of `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
// __syncthreads').
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Keeps the compiler from moving reads or writes of `r` across this point: accumulators an
// asynchronous wgmma still owns must not be touched before wgmma_wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// d (+)= A B, m64n64k16: A (64 x 16) and B (16 x 64) from shared memory, both K-major; d: 32
// f32 per thread (the mma.sync m16n8 accumulator layout per warp, warp w holding rows 16w..16w+15,
// eight n8 tiles). accumulate == false overwrites d.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   bool accumulate) {
#if FLINT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
#else
  __trap();
#endif
}

// d (+)= A B, m64n128k16: A (64 x 16) and B (16 x 128) from shared memory, both K-major; d: 64
// f32 per thread (as m64n64k16_ss, sixteen n8 tiles). accumulate == false overwrites d.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a,
                                                    uint64_t desc_b, bool accumulate) {
#if FLINT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
#else
  __trap();
#endif
}

// d += A B, m64n128k16: A (64 x 16) from registers (4 bf16x2 per thread in the mma.sync m16n8k16
// A layout, warp w holding rows 16w..16w+15), B (16 x 128) from shared memory MN-major; d: 64 f32.
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                    uint64_t desc_b) {
#if FLINT_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
      ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}

}  // namespace flint::cuda::dev
