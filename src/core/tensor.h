// TensorView: a non-owning view of a tensor (data, dtype, device, shape, row stride). Shapes are
// PyTorch-order ([rows, cols], last dim contiguous); a weight W[out, in] has shape {out, in}.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace flint {

enum class Device : uint8_t { kCpu, kCuda };

inline constexpr int kMaxDims = 4;

// Up to 4 dims; dims() beyond ndim are 1.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    FLINT_CHECK(dims.size() <= kMaxDims, "shape: {} dims > {}", dims.size(), kMaxDims);
    for (int64_t d : dims) dims_[ndim_++] = d;
  }
  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  void push_back(int64_t d) {
    FLINT_CHECK(ndim_ < kMaxDims, "shape: too many dims");
    dims_[ndim_++] = d;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }
  int64_t last() const { return ndim_ == 0 ? 1 : dims_[ndim_ - 1]; }
  bool operator==(const Shape& o) const {
    if (ndim_ != o.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  std::string str() const;

 private:
  std::array<int64_t, kMaxDims> dims_{1, 1, 1, 1};
  int ndim_ = 0;
};

template <typename Ptr>
class BasicTensorView {
 public:
  BasicTensorView() = default;
  BasicTensorView(Ptr data, DType dtype, Shape shape, Device device = Device::kCpu)
      : data_(data), dtype_(dtype), shape_(shape), device_(device), row_stride_(shape.last()) {}
  BasicTensorView(Ptr data, DType dtype, Shape shape, Device device, int64_t row_stride)
      : data_(data), dtype_(dtype), shape_(shape), device_(device), row_stride_(row_stride) {}
  template <typename P2>
  BasicTensorView(const BasicTensorView<P2>& o)  // NOLINT: mutable -> const view
      : data_(o.raw()),
        dtype_(o.dtype()),
        shape_(o.shape()),
        device_(o.device()),
        row_stride_(o.row_stride()) {}

  Ptr raw() const { return data_; }
  template <typename T>
  auto data() const {
    if constexpr (std::is_const_v<std::remove_pointer_t<Ptr>>) {
      return static_cast<const T*>(data_);
    } else {
      return static_cast<T*>(data_);
    }
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t cols() const { return shape_.last(); }
  int64_t rows() const { return shape_.last() == 0 ? 0 : numel() / shape_.last(); }
  // Elements between the starts of consecutive rows (== cols() when contiguous).
  int64_t row_stride() const { return row_stride_; }
  bool contiguous() const { return row_stride_ == cols(); }
  bool empty() const { return data_ == nullptr; }
  // Bytes covered by a contiguous view (block-quantized types count whole blocks).
  int64_t nbytes() const { return dtype_bytes_for(dtype_, numel()); }

 private:
  Ptr data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
  int64_t row_stride_ = 0;
};

using TensorView = BasicTensorView<void*>;
using ConstTensorView = BasicTensorView<const void*>;

}  // namespace flint

template <>
struct fmt::formatter<flint::Shape> : fmt::formatter<std::string> {
  auto format(const flint::Shape& s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.str(), ctx);
  }
};
