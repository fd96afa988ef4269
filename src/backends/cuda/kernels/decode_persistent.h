// The persistent decode kernel: every layer of a decode step (one new token for each of up to 8
// sequences) in ONE launch. Its blocks (one per SM, all resident) walk the layers phase by phase
// (qkv, attention, o, router or dense gate/up, experts gate/up, experts down) and meet at a grid
// barrier between phases instead of ending one kernel and launching the next; each phase
// prefetches the next phases' weights into L2. Embedding before and the LM head after stay
// separate launches (forward.cpp).
// EXPERIMENT, off by default (CudaForward::set_persistent_decode): correct, but on the H200 it
// is slower than the layered path (NVFP4 batch 1, 1K: 5.96 vs 2.76 ms). Nsight Compute: 687 M
// instructions per step issued by 8 warps per SM (255 registers: the attention code sets the
// register budget) at 0.13 IPC per scheduler, i.e. issue-bound; the barriers cost ~3 us each.
// A version worth having needs far fewer registers (more warps) and fewer instructions per byte.
// Reference: the layered decode path (forward.cpp) and cpu::forward.
// Test: tests/gpu/persistent_test.cpp (vs the layered path and the CPU backend).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/kv_layout.h"
#include "backends/cuda/kernels/linear_ref.h"
#include "backends/cuda/kernels/moe_router.h"

namespace flint::cuda {

inline constexpr int kPersistentMaxRows = 8;
inline constexpr int kPersistentMaxSlots = 32;      // routed + shared slots per token
inline constexpr int kPersistentMaxExperts = 1024;  // top-k scratch: 2 E floats per warp

// One layer as the persistent kernel reads it: a device array of these is built once per model.
struct PersistentLayer {
  LinearRef qkv, o;
  LinearRef gate, up, down;                      // dense layers
  LinearRef router, exp_gate, exp_up, exp_down;  // MoE layers (shared expert sliced in the stacks)
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* sinks = nullptr;        // [H] or null
  const float* expert_bias = nullptr;  // [E] or null
  __nv_bfloat16* k_cache = nullptr;
  __nv_bfloat16* v_cache = nullptr;
  bool sliding = false, rope = false, dense = false;
};

struct PersistentDecodeArgs {
  const PersistentLayer* layers = nullptr;  // device array
  int num_layers = 0;
  int num_rows = 0;  // decode rows, 1..kPersistentMaxRows
  int64_t hidden = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  float attn_scale = 1.0f;
  double rope_theta = 10000.0;
  int full_splits = 1, sliding_splits = 1;  // decode_attention_splits() of the step
  MoeRouting routing;
  TokenKv kv;
  float* h = nullptr;       // [rows, hidden] residual stream: the embeddings in, the last layer out
  float* qkv = nullptr;     // [rows, (H + 2 Hkv) D]
  float* attn = nullptr;    // [rows, H D]
  float* act = nullptr;     // [rows * slots, I_moe] or [rows, I_dense]
  float* logits = nullptr;  // [rows, E] router logits
  float* weights = nullptr;  // [rows, slots] routing weights
  int32_t* ids = nullptr;    // layer l's routing [rows, slots] at ids + l * ids_layer_stride
  int64_t ids_layer_stride = 0;
  float* attn_part = nullptr;        // decode_attention_workspace() floats
  int32_t* attn_counters = nullptr;  // decode_attention_counters(), zero
  uint32_t* barrier = nullptr;       // 2 words, zero before the first launch
  // Optional (benchmarks): %globaltimer ns when block 0 starts, reaches and leaves each grid
  // barrier, and ends: 2 + 2 x (barriers) values; null for none.
  uint64_t* trace = nullptr;
};

// The launch shape for a model; `why` is set (and ok false) when the kernel cannot run it.
struct PersistentDecodeShape {
  bool ok = false;
  std::string why;
  int grid = 0;                // blocks: all resident at once
  size_t smem = 0;             // dynamic shared memory bytes
  DType dtype = DType::kBF16;  // of the linear weights (the router may be F32 or BF16)
};

// Checks the model shape (`layers` on the host, same pointers as the device array) against what
// the kernel supports and sizes the launch for this device.
PersistentDecodeShape persistent_decode_shape(const PersistentLayer* layers, int num_layers,
                                              const PersistentDecodeArgs& a);

// Runs the layers of one decode step. `a.num_rows` rows; `shape` from persistent_decode_shape.
void persistent_decode(const PersistentDecodeArgs& a, const PersistentDecodeShape& shape,
                       cudaStream_t s);

}  // namespace flint::cuda
