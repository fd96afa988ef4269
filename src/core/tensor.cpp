// Shape formatting.
#include "core/tensor.h"

namespace flint {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ",";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace flint
