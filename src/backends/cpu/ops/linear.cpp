// Linear: each output row of W is dequantized once into a per-thread buffer and dotted with every
// token, so quantized weights are decoded once per step, not once per token.
#include "backends/cpu/ops/linear.h"

#include <vector>

#include "backends/cpu/ops/weight_rows.h"

namespace flint::cpu {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void linear(float* out, const float* x, int64_t num_tokens, const model::Linear& w,
            ThreadPool& pool) {
  const int64_t n_out = w.out(), n_in = w.in();
  FLINT_CHECK(!w.w.empty(), "linear: empty weight");
  const bool direct = w.w.dtype() == DType::kF32;
  pool.parallel_for(
      n_out,
      [&](int64_t begin, int64_t end) {
        std::vector<float> row_buf(direct ? 0 : static_cast<size_t>(n_in));
        for (int64_t r = begin; r < end; ++r) {
          const float* row = w.w.data<float>() + r * w.w.row_stride();
          if (!direct) {
            weight_row(w.w, r, row_buf.data());
            row = row_buf.data();
          }
          for (int64_t t = 0; t < num_tokens; ++t)
            out[t * n_out + r] = dot(x + t * n_in, row, n_in) * w.scale;
        }
      },
      /*grain=*/16);
}

}  // namespace flint::cpu
