// Token embedding lookup into the f32 residual stream. Test: tests/kernels/embedding_test.cu
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace flint::cuda {

// out[t, :] = table[token_ids[t], :] as f32. table: [vocab_size, hidden] F32 or BF16;
// token_ids: [num_tokens] int32 (device), each < vocab_size (checked on the host by the caller);
// out: [num_tokens, hidden] f32.
void embedding(float* out, const void* table, DType dtype, const int32_t* token_ids, int num_tokens,
               int64_t hidden, cudaStream_t s);

}  // namespace flint::cuda
