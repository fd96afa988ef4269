// RMSNorm, embedding and argmax kernels against the CPU reference ops; copy_words between pinned
// host and device memory.
#include <fmt/format.h>

#include <algorithm>

#include "backends/cpu/ops/rms_norm.h"
#include "backends/cuda/kernels/argmax.h"
#include "backends/cuda/kernels/copy_words.h"
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

// Host -> device from pinned memory, with the first words overlaid from device memory, then
// device -> pinned host, at sizes around the block (256) and grid (64 blocks) edges.
TEST(CopyWords, MovesWordsBetweenPinnedHostAndDeviceWithAnOverlay) {
  FLINT_REQUIRE_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(16385), int64_t(70001)}) {
    SCOPED_TRACE(n);
    int32_t *pin_in = nullptr, *pin_out = nullptr;
    ASSERT_EQ(cudaMallocHost(&pin_in, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&pin_out, n * 4), cudaSuccess);
    for (int64_t i = 0; i < n; ++i) pin_in[i] = static_cast<int32_t>(i * 2654435761u);
    const int64_t k = std::min<int64_t>(n, 37);
    std::vector<int32_t> over(k);
    for (int64_t i = 0; i < k; ++i) over[i] = -1 - static_cast<int32_t>(i);
    DeviceArray<int32_t> dover(over), dev(static_cast<size_t>(n));
    copy_words(dev.get(), pin_in, n, s, dover.get(), k);
    copy_words(pin_out, dev.get(), n, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += pin_out[i] != (i < k ? over[i] : pin_in[i]);
    EXPECT_EQ(bad, 0);
    const std::vector<int32_t> on_device = dev.to_host();
    EXPECT_TRUE(std::equal(on_device.begin(), on_device.end(), pin_out));
    cudaFreeHost(pin_in);
    cudaFreeHost(pin_out);
  }
  cudaStreamDestroy(s);
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
