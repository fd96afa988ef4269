// The persistent decode kernels for head_dim 32, one file per head_dim so nvcc builds them in
// parallel (decode_persistent.cuh).
#include "backends/cuda/kernels/decode_persistent.cuh"

namespace flint::cuda::persistent {

void* kernel_d32(int nb, DType w) { return kernel_for_head_dim<32>(nb, w); }

}  // namespace flint::cuda::persistent
