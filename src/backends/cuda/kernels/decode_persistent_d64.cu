// The persistent decode kernels for head_dim 64 (decode_persistent.cuh).
#include "backends/cuda/kernels/decode_persistent.cuh"

namespace flint::cuda::persistent {

template <DType W>
void* kernel_for(int nb) {
  return nb == 1 ? reinterpret_cast<void*>(persistent_decode_kernel<64, 1, W>)
                 : reinterpret_cast<void*>(persistent_decode_kernel<64, 8, W>);
}

void* kernel_d64(int nb, DType w) {
  switch (w) {
    case DType::kNVFP4:
      return kernel_for<DType::kNVFP4>(nb);
    case DType::kBF16:
      return kernel_for<DType::kBF16>(nb);
    case DType::kF32:
      return kernel_for<DType::kF32>(nb);
    default:
      return nullptr;
  }
}

}  // namespace flint::cuda::persistent
