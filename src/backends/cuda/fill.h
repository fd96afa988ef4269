// Random fills on the device (counter-based hash, so results depend only on seed and index).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// Fills `n` bf16 values with uniform(-amp, amp) from a counter-based hash of (seed, index).
void fill_uniform_bf16(void* dst, int64_t n, float amp, uint64_t seed, cudaStream_t s);
// Fills `n` f32 values with uniform(lo, hi).
void fill_uniform_f32(float* dst, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s);
// Fills `n` bytes with random values in [lo, hi] (inclusive).
void fill_random_bytes(uint8_t* dst, int64_t n, uint8_t lo, uint8_t hi, uint64_t seed,
                       cudaStream_t s);

}  // namespace flint::cuda
