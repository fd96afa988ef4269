// HostBuffer: RAII, move-only, 64-byte-aligned host memory. (DeviceBuffer lives in backends/cuda.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace flint {

class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    FLINT_CHECK(data_ != nullptr, "host allocation of {} bytes failed", bytes);
  }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(HostBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  size_t size() const { return size_; }
  void zero() {
    if (data_) std::memset(data_, 0, size_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flint
