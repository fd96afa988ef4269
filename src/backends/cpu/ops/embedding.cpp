// Token embedding lookup: no scaling (spec 2.1).
#include "backends/cpu/ops/embedding.h"

#include "backends/cpu/ops/weight_rows.h"

namespace flint::cpu {

void embedding(float* out, ConstTensorView table, std::span<const int32_t> token_ids) {
  const int64_t d = table.cols();
  for (size_t t = 0; t < token_ids.size(); ++t) {
    FLINT_CHECK(token_ids[t] >= 0 && token_ids[t] < table.rows(), "embedding: id {} of {}",
                token_ids[t], table.rows());
    weight_row(table, token_ids[t], out + static_cast<int64_t>(t) * d);
  }
}

}  // namespace flint::cpu
