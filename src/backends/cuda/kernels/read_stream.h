// The memory-bandwidth floor: a read-only stream over a large buffer, for `flint bench`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// Reads `bytes` (a multiple of 16) from `src` and writes one checksum per block into `sink`
// ([read_stream_blocks()] floats) so the reads cannot be optimised away.
void read_stream(const void* src, int64_t bytes, float* sink, cudaStream_t s);
int read_stream_blocks();

}  // namespace flint::cuda
