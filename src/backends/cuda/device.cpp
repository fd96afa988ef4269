// DeviceBuffer: RAII device memory. Test: tests/kernels/device_test.cu
#include "backends/cuda/device.h"

namespace flint::cuda {

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.data_, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free allocation error
    const auto [free_b, total_b] = device_memory_info();
    return make_error(ErrorCode::kOutOfMemory,
                      "cuda: cannot allocate {:.2f} GiB ({} free of {:.2f} GiB): {}",
                      bytes / 1073741824.0, fmt::format("{:.2f} GiB", free_b / 1073741824.0),
                      total_b / 1073741824.0, cudaGetErrorString(err));
  }
  b.size_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

DeviceBuffer must_allocate(size_t bytes) {
  auto b = DeviceBuffer::allocate(bytes);
  FLINT_CHECK(b.has_value(), "{}", b.error().message);
  return std::move(b).value();
}

std::pair<size_t, size_t> device_memory_info() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {free_b, total_b};
}

bool device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

}  // namespace flint::cuda
