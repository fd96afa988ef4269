// RMSNorm, embedding and argmax kernels against the CPU reference ops.
#include <fmt/format.h>

#include <algorithm>

#include "backends/cpu/ops/rms_norm.h"
#include "backends/cuda/kernels/argmax.h"
#include "backends/cuda/kernels/rms_norm.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

TEST(RmsNorm, CudaMatchesCpuReference) {
  FLINT_REQUIRE_GPU();
  for (auto [rows, cols] : {std::pair{1, 64}, {7, 769}, {129, 4096}}) {
    SCOPED_TRACE(fmt::format("rows={} cols={}", rows, cols));
    const auto x = random_floats(int64_t(rows) * cols, rows, -3, 3);
    const auto w = random_floats(cols, 5, 0.5f, 1.5f);
    std::vector<float> want(x.size());
    cpu::rms_norm(want.data(), x.data(), w.data(), rows, cols, 1e-6f);
    DeviceArray<float> dx(x), dw(w), dy(x.size());
    rms_norm(dy.get(), cols, dx.get(), cols, dw.get(), rows, cols, 1e-6f, nullptr);
    EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-5, 1e-5), 1.0);
    // gathered rows, reversed
    std::vector<int32_t> idx(rows);
    for (int i = 0; i < rows; ++i) idx[i] = rows - 1 - i;
    DeviceArray<int32_t> didx(idx);
    rms_norm_rows(dy.get(), cols, dx.get(), cols, didx.get(), dw.get(), rows, cols, 1e-6f, nullptr);
    const auto got = dy.to_host();
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < cols; j += 97) {
        EXPECT_NEAR(got[int64_t(i) * cols + j], want[int64_t(idx[i]) * cols + j],
                    1e-5 + 1e-5 * std::abs(want[int64_t(idx[i]) * cols + j]));
      }
    }
  }
}

TEST(Argmax, MatchesFirstMaximum) {
  FLINT_REQUIRE_GPU();
  const int rows = 5;
  const int64_t vocab = 150144;
  auto x = random_floats(rows * vocab, 11, -10, 10);
  x[3 * vocab + 77] = 50.0f;  // a tie: the lower index must win
  x[3 * vocab + 90000] = 50.0f;
  DeviceArray<float> dx(x);
  DeviceArray<int32_t> ids(rows);
  argmax(ids.get(), dx.get(), rows, vocab, nullptr);
  const auto got = ids.to_host();
  for (int r = 0; r < rows; ++r) {
    const auto* row = x.data() + r * vocab;
    EXPECT_EQ(got[r], std::max_element(row, row + vocab) - row) << "row " << r;
  }
}

}  // namespace
}  // namespace flint::cuda
