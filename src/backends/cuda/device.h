// Device memory and error checks for the CUDA backend: FLINT_CUDA_CHECK, the RAII DeviceBuffer, and
// fills used by dummy weights and tests. Test: tests/kernels/device_test.cu
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "core/result.h"

namespace flint::cuda {

// Owns one cudaMalloc allocation. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes`; an allocation the device cannot satisfy is an error value, not an abort.
  static Result<DeviceBuffer> allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Allocates or aborts; for workspaces sized from limits that were already checked.
DeviceBuffer must_allocate(size_t bytes);

// Free and total device memory in bytes.
std::pair<size_t, size_t> device_memory_info();
// True when a CUDA device can be used (tests skip otherwise).
bool device_available();

}  // namespace flint::cuda
