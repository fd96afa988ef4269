// Small step-sized copies as kernels instead of cudaMemcpyAsync: a kernel on the compute stream
// reads or writes pinned host memory directly (unified addressing maps cudaMallocHost memory into
// the device's address space), so a decode step's upload and its tokens' way back do not hand
// the stream to a copy engine and back. Test: tests/kernels/small_ops_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flint::cuda {

// dst[i] = src[i] for i < n, except dst[i] = overlay[i] for i < overlay_n (overlay may be null).
// Either side may be pinned host memory (cudaMallocHost) or device memory.
void copy_words(int32_t* dst, const int32_t* src, int64_t n, cudaStream_t s,
                const int32_t* overlay = nullptr, int64_t overlay_n = 0);

}  // namespace flint::cuda
