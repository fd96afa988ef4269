// Kernel timeline trace of a decode step (a diagnostic, compiled in only with -DFLINT_KTRACE=ON):
// thread 0 of one block of each traced launch (the recording block: block 0 unless ktrace_attach
// names another) takes the next record of a device buffer and stamps %globaltimer at fixed points
// (start, around the PDL wait, up to three kernel-specific marks, end), so `decode_step_bench
// --ktrace` can say where a kernel's time goes after its wait and how long each hand-off takes.
// Nothing of this is compiled in a normal build (ktrace_compiled()). Device side:
// kernels/ktrace.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// Trace points of a record (unset points stay 0).
enum KTracePoint : int {
  kKtStart = 0,      // the recording block's first instruction
  kKtWaitBegin = 1,  // before griddepcontrol.wait
  kKtWaitEnd = 2,    // after it: the previous kernel has finished
  kKtMarkA = 3,      // kernel-specific (ktrace.cuh lists them per kernel)
  kKtMarkB = 4,
  kKtMarkC = 5,
  kKtEnd = 6,  // the recording block's last instruction
  kKtPoints = 7,
};

// What a traced launch was.
enum class KTag : uint32_t {
  kNone = 0,
  kGemv = 1,          // A: -, B: activations staged, C: dot products done
  kGemvGated = 2,     // as kGemv
  kRoutedGateUp = 3,  // A: top-k done, B: staged, C: dots done
  kRouter = 4,        // as kGemv (as kGemvMma from 6 rows), then the last-block top-k to the end
  kMoeDown = 5,       // A: first weight loads issued, B: activations staged, C: dots done
  kAttention = 6,     // A: prologue done (q/k/v ready), B: tiles done, C: block merge done
  kGemvMma = 7,       // the tensor-core GEMV (3+ rows): A: warp 0 row sums, B: staged, C: mma done
};
const char* ktag_name(KTag t);

struct KTraceRecord {
  uint32_t tag = 0;
  uint32_t grid_x = 0, grid_y = 0, grid_z = 0;
  uint64_t t[kKtPoints] = {};
  // The latest end of any warp of the earlier traced launches, read by the recording block after
  // its wait: where the previous launch's last warp ended (0: not read).
  uint64_t prev_last_end = 0;
};

// Device buffer layout: a uint32 count (records taken, may exceed cap); from byte 128,
// kKTraceEndSlots uint64 slots 128 bytes apart, each the latest %globaltimer at which a warp of a
// traced launch ended (warps spread over the slots, so that their atomics do not queue on one
// address); records from byte kKTraceHeaderBytes.
inline constexpr int kKTraceEndSlots = 16;
inline constexpr int64_t kKTraceEndSlotBytes = 128;
inline constexpr int64_t kKTraceHeaderBytes = kKTraceEndSlotBytes * (kKTraceEndSlots + 1);
inline int64_t ktrace_buffer_bytes(int cap) {
  return kKTraceHeaderBytes + int64_t(cap) * int64_t(sizeof(KTraceRecord));
}

// True when the kernels were compiled with the trace points.
bool ktrace_compiled();
// Points every traced kernel at `buf` (ktrace_buffer_bytes(cap) bytes, device), or at nothing
// (null). The block of linear index `block` (x fastest) of each launch records, or its last
// block when the grid is smaller. Not a stream operation: call it outside graph capture, with no
// traced kernel running.
cudaError_t ktrace_attach(void* buf, int cap, int block = 0);

}  // namespace flint::cuda
