// Causal GQA attention with the sliding-window mask and the learned per-head sink (spec 2.3 steps
// 4-6), over a step's flattened batch: earlier positions come from the KV cache, this step's own
// positions from k/v. Test partner: tests/unit/cpu/forward_test.cpp.
#pragma once

#include <cstdint>

#include "backends/cpu/kv_cache.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/step.h"

namespace flint::cpu {

// out: [num_tokens, num_heads * head_dim]; q: [num_tokens, num_heads * head_dim];
// k, v: [num_tokens, num_kv_heads * head_dim] (this step's keys and values, after norm and RoPE);
// sinks: [num_heads]. The step must already be validated (CpuBackend::forward does it).
void attention(float* out, const float* q, const float* k, const float* v,
               const model::StepInput& step, int64_t layer, const model::FlintConfig& cfg,
               const float* sinks, const KvCache& cache, ThreadPool& pool);

// Stores this step's k/v into the cache: full layers at slot_mapping, sliding layers at ring slot
// position % sliding_window (only the last sliding_window positions of each sequence). Call after
// attention() for the layer, so a long chunk never overwrites a slot one of its tokens still reads.
void kv_cache_write(KvCache& cache, const float* k, const float* v, const model::StepInput& step,
                    int64_t layer, const model::FlintConfig& cfg);

}  // namespace flint::cpu
