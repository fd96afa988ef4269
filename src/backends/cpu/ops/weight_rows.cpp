// Row dequantization for the CPU backend.
#include "backends/cpu/ops/weight_rows.h"

#include "formats/quant.h"

namespace flint::cpu {

void weight_row(ConstTensorView w, int64_t row, float* out) {
  const int64_t cols = w.cols();
  const int64_t row_bytes = dtype_bytes_for(w.dtype(), w.row_stride());
  FLINT_CHECK(row_bytes >= 0 && row >= 0 && row < w.rows(), "weight_row: row {} of {}", row,
              w.shape());
  const auto* base = static_cast<const uint8_t*>(w.raw()) + row * row_bytes;
  formats::dequantize_row(w.dtype(), base, out, cols);
}

std::vector<float> weight_vector(ConstTensorView w) {
  std::vector<float> v(static_cast<size_t>(w.numel()));
  if (w.numel() == 0) return v;
  const int64_t rows = w.rows(), cols = w.cols();
  for (int64_t r = 0; r < rows; ++r) weight_row(w, r, v.data() + r * cols);
  return v;
}

}  // namespace flint::cpu
