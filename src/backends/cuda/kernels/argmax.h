// Greedy sampling on the GPU: the arg max of each logits row. Test: tests/kernels/argmax_test.cu
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// ids[t] = argmax_j logits[t, j] (the lowest j among equal maxima). logits: [num_rows, vocab] f32.
void argmax(int32_t* ids, const float* logits, int num_rows, int64_t vocab, cudaStream_t s);

}  // namespace flint::cuda
