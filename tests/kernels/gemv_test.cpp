// The small-batch GEMV (F32, BF16 and NVFP4 weights) against cpu::linear, at awkward sizes.
#include "backends/cuda/kernels/gemv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/ops/linear.h"
#include "backends/cpu/ops/rms_norm.h"
#include "backends/cuda/weights.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::random_weight;

void check_gemv(DType dt, int rows, int64_t out, int64_t in, float scale) {
  SCOPED_TRACE(fmt::format("dtype={} rows={} out={} in={}", dt, rows, out, in));
  const auto wbytes = random_weight(dt, out, in, 1000 + out + in);
  const model::Linear lin{ConstTensorView(wbytes.data(), dt, {out, in}), scale};
  const auto x = random_floats(rows * in, 7 + rows);
  std::vector<float> want(rows * out);
  ThreadPool pool(2);
  cpu::linear(want.data(), x.data(), rows, lin, pool);

  DeviceWeights owner;
  auto ref = owner.add_linear(lin, nullptr);
  ASSERT_TRUE(ref.has_value()) << ref.error().message;
  if (dt == DType::kNVFP4) EXPECT_GT(owner.checked_rows(), 0);
  DeviceArray<float> dx(x), dy(rows * out);
  gemv(dy.get(), out, dx.get(), in, rows, *ref, false, nullptr);
  const auto got = dy.to_host();
  EXPECT_LE(testing::worst_ratio(got, want, 1e-4, 1e-4), 1.0);

  // accumulate: y += W x
  gemv(dy.get(), out, dx.get(), in, rows, *ref, true, nullptr);
  const auto twice = dy.to_host();
  std::vector<float> want2(want);
  for (float& v : want2) v *= 2;
  EXPECT_LE(testing::worst_ratio(twice, want2, 2e-4, 1e-4), 1.0);
}

// silu(Wg x) * (Wu x) by gemv_gated against two cpu::linear calls (the up matrix scaled by 0.5).
void check_gated(DType dt, int rows, int64_t out, int64_t in) {
  SCOPED_TRACE(fmt::format("gated dtype={} rows={} out={} in={}", dt, rows, out, in));
  const auto gb = random_weight(dt, out, in, 31), ub = random_weight(dt, out, in, 32);
  const model::Linear g{ConstTensorView(gb.data(), dt, {out, in}), 1.0f};
  const model::Linear u{ConstTensorView(ub.data(), dt, {out, in}), 0.5f};
  const auto x = random_floats(rows * in, 3);
  std::vector<float> yg(rows * out), yu(rows * out), want(rows * out);
  ThreadPool pool(2);
  cpu::linear(yg.data(), x.data(), rows, g, pool);
  cpu::linear(yu.data(), x.data(), rows, u, pool);
  for (size_t i = 0; i < want.size(); ++i) want[i] = yg[i] / (1.0f + std::exp(-yg[i])) * yu[i];
  DeviceWeights owner;
  auto rg = owner.add_linear(g, nullptr);
  auto ru = owner.add_linear(u, nullptr);
  ASSERT_TRUE(rg && ru);
  DeviceArray<float> dx(x), dy(rows * out);
  gemv_gated(dy.get(), out, dx.get(), in, rows, *rg, *ru, nullptr);
  EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-4, 1e-3), 1.0);
}

TEST(Gemv, F32MatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (int rows : {1, 3, 8, 13}) check_gemv(DType::kF32, rows, 129, 772, 1.0f);
}

TEST(Gemv, Bf16MatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (int rows : {1, 2, 8, 9}) check_gemv(DType::kBF16, rows, 769, 776, 1.0f);
  check_gemv(DType::kBF16, 1, 7, 2048, 1.0f);
}

TEST(Gemv, Nvfp4MatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (int rows : {1, 4, 8, 11}) check_gemv(DType::kNVFP4, rows, 129, 704, 0.37f);
  check_gemv(DType::kNVFP4, 1, 1, 4096, 1.0f);
}

// One activation row whose weight row takes more than one pass of a warp (BF16: two warps share
// each output row, gemv_split_kernel; NVFP4 keeps one warp a row); 1031 rows leave the last
// block's warps partly idle.
TEST(Gemv, OneRowLongerThanAPassMatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  check_gemv(DType::kNVFP4, 1, 1031, 4160, 0.37f);
  check_gemv(DType::kBF16, 1, 1031, 1096, 1.0f);
}

// One row over more blocks of 8 output rows than an H100/H200 holds at once (5123 rows: 641
// blocks against 528 resident, like the qkv projection), with and without the fused RMSNorm: the
// rows past the first wave match cpu::linear like the others. NVFP4 gives each warp two rows (321
// blocks, one wave), the last block's second rows partly past the end. F32 and BF16 run in every
// one-wave mode (gemv.h's kGemvWave*; 0 is the plain grid and its second wave): 1024 wide, a pass
// of four chunks a lane a row; 2048, two; 2056 (BF16) and 1036 (F32), three, the last of one or
// three chunks, so that a warp's passes span rows and end inside one. Two activation rows keep the
// plain grid.
TEST(Gemv, OneRowOverMoreThanAWaveOfBlocksMatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  const auto normed = [](DType dt) {
    SCOPED_TRACE(fmt::format("normed dtype={}", dt));
    const int64_t out = 5123, in = 2048;
    const auto wb = random_weight(dt, out, in, 71);
    const model::Linear lin{ConstTensorView(wb.data(), dt, {out, in}), 1.0f};
    const auto x = random_floats(in, 72, -3, 3);
    const auto nw = random_floats(in, 73, 0.5f, 1.5f);
    std::vector<float> xn(in), want(out);
    cpu::rms_norm(xn.data(), x.data(), nw.data(), 1, in, 1e-6f);
    ThreadPool pool(2);
    cpu::linear(want.data(), xn.data(), 1, lin, pool);
    DeviceWeights owner;
    auto ref = owner.add_linear(lin, nullptr);
    ASSERT_TRUE(ref.has_value());
    DeviceArray<float> dx(x), dnw(nw), dy(out);
    gemv(dy.get(), out, dx.get(), in, 1, *ref, false, nullptr, GemvNorm{dnw.get(), 1e-6f});
    EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-4, 1e-4), 1.0);
  };
  check_gemv(DType::kNVFP4, 1, 5123, 2048, 0.5f);
  check_gemv(DType::kNVFP4, 2, 5123, 2048, 0.5f);
  normed(DType::kNVFP4);
  for (const int mode : {0, 4, 2, 5, -4}) {
    SCOPED_TRACE(fmt::format("wave mode {}", mode));
    testing::WaveMode wave(mode);
    check_gemv(DType::kBF16, 1, 5123, 1024, 1.0f);
    check_gemv(DType::kBF16, 1, 5123, 2056, 1.0f);
    check_gemv(DType::kF32, 1, 5123, 1036, 1.0f);
    normed(DType::kBF16);
  }
}

// The dense MLP's gate/up at Flint's shape (NVFP4, one row, 6151 x 2048: 769 blocks of 8 rows, a
// second wave on an H100/H200) against silu(g) * u formed from the GPU's own plain GEMVs of the
// same matrices, within (1e-6, 1e-5): against cpu::linear it misses (1e-4, 1e-3) by ~2x (H100,
// the thirty-eighth session), because |g| reaches ~250 here and each GEMV's 1e-4-relative rounding
// is multiplied by |silu'(g) u|; the plain GEMVs themselves are held to cpu::linear above.
TEST(Gemv, GatedOneRowOverASecondWaveIsSiluOfItsOwnGemvs) {
  FLINT_REQUIRE_GPU();
  const DType dt = DType::kNVFP4;
  const int64_t out = 6151, in = 2048;
  const auto gb = random_weight(dt, out, in, 31), ub = random_weight(dt, out, in, 32);
  const model::Linear g{ConstTensorView(gb.data(), dt, {out, in}), 1.0f};
  const model::Linear u{ConstTensorView(ub.data(), dt, {out, in}), 0.5f};
  DeviceWeights owner;
  auto rg = owner.add_linear(g, nullptr);
  auto ru = owner.add_linear(u, nullptr);
  ASSERT_TRUE(rg && ru);
  DeviceArray<float> dx(random_floats(in, 3)), dy(out), dg(out), du(out);
  gemv_gated(dy.get(), out, dx.get(), in, 1, *rg, *ru, nullptr);
  gemv(dg.get(), out, dx.get(), in, 1, *rg, false, nullptr);
  gemv(du.get(), out, dx.get(), in, 1, *ru, false, nullptr);
  const auto gh = dg.to_host(), uh = du.to_host();
  std::vector<float> want(out);
  for (int64_t i = 0; i < out; ++i) want[i] = gh[i] / (1.0f + std::exp(-gh[i])) * uh[i];
  EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-6, 1e-5), 1.0);
  float gmax = 0.0f;
  for (float v : gh) gmax = std::max(gmax, std::abs(v));
  EXPECT_GT(gmax, 50.0f);  // the large |g| the note above is about
}

// One BF16 row whose weight rows take three or four passes: the passes after the first are
// requested into L2 before the PDL wait (gemv.cu's l2_rest_serves) and must give what cpu::linear
// gives. 2048 x 6144 runs on the split kernel (three passes of two warps), 2200 x 3000 on the
// plain one (three passes of one warp; 6000-byte rows start inside 128-byte lines), and the gated
// 67 x 2048 reads four passes of each matrix.
TEST(Gemv, OneRowLaterPassesThroughL2MatchCpuLinear) {
  FLINT_REQUIRE_GPU();
  check_gemv(DType::kBF16, 1, 2048, 6144, 1.0f);
  check_gemv(DType::kBF16, 1, 2200, 3000, 1.0f);
  check_gated(DType::kBF16, 1, 67, 2048);
}

// One and two activation rows on the narrow tensor-core path (gemv_narrow.cuh): 16 output rows a
// block, K split over 16 warps when the blocks fit one per SM and 8 otherwise, each token's 16-bit
// parts in the mma's columns. 37 rows: one partial block; 2056 x 4096: 129 blocks of 16 warps, the
// last half empty (BF16: two passes, the second requested into L2 before the wait); 5123 x 2048:
// 321 blocks of 8 warps (BF16 two passes again); 100 x 6144: NVFP4 four quads a warp in one pass
// (BF16 would take three passes, which the narrow path declines: the CUDA-core GEMV runs it).
// Every narrow shape on (the default leaves some to the CUDA-core GEMV), then also with 8 warps at
// every shape.
TEST(Gemv, NarrowRowsMatchCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (unsigned mode : {unsigned(kNarrowAll), unsigned(kNarrowAll | kNarrowWarps8)}) {
    testing::NarrowMode narrow(mode);
    for (DType dt : {DType::kBF16, DType::kNVFP4}) {
      for (int rows : {1, 2}) {
        check_gemv(dt, rows, 37, 704, 0.37f);
        check_gemv(dt, rows, 2056, 4096, 0.5f);
        check_gemv(dt, rows, 5123, 2048, 0.5f);
      }
      check_gemv(dt, 1, 100, 6144, 1.0f);
    }
  }
}

// Sub-scale bytes of every value, 0x00-0xFF: ggml reads 0x00, 0x7F and 0x80 as 0, ignores bit 7
// otherwise (0xFF is 480) and has subnormals (e == 0). The repack maps them to the bytes the
// kernels' branch-free decode reads; the one-row CUDA-core and the tensor-core paths must agree
// with cpu::linear on all of them.
TEST(Gemv, Nvfp4EverySubScaleByteMatchesCpu) {
  FLINT_REQUIRE_GPU();
  const int64_t out = 37, in = 1024;  // 37 x 64 sub-blocks: every byte value, ~9 times each
  const auto wb = random_weight(DType::kNVFP4, out, in, 91, /*scale_lo=*/0, /*scale_span=*/256);
  const model::Linear lin{ConstTensorView(wb.data(), DType::kNVFP4, {out, in}), 1.0f};
  DeviceWeights owner;
  auto ref = owner.add_linear(lin, nullptr);
  ASSERT_TRUE(ref.has_value()) << ref.error().message;
  EXPECT_GT(owner.checked_rows(), 0);
  ThreadPool pool(2);
  for (int rows : {1, 3, 8}) {
    SCOPED_TRACE(fmt::format("rows={}", rows));
    const auto x = random_floats(rows * in, 92 + rows);
    std::vector<float> want(rows * out);
    cpu::linear(want.data(), x.data(), rows, lin, pool);
    float peak = 0;
    for (float v : want) peak = std::max(peak, std::abs(v));
    ASSERT_GT(peak, 100.0f);  // the large scales are in play
    DeviceArray<float> dx(x), dy(rows * out);
    gemv(dy.get(), out, dx.get(), in, rows, *ref, false, nullptr);
    EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-5 * peak, 1e-4), 1.0);
  }
}

// Rows run on tensor cores with the activations split into 16-bit parts (8 rows: two parts in
// gemv_mma.cuh; 1-2 rows: the narrow path, two f16 or three bf16 parts); NVFP4's f16 parts are
// rescaled per row by a power of two. Rows far outside f16's range (1e6), tiny rows (1e-7) and a
// row of zeros keep f32-like precision (the rows' different scales also catch mixed-up rows).
void check_magnitudes(DType dt, const std::vector<float>& mag) {
  const int rows = static_cast<int>(mag.size());
  const int64_t out = 40, in = 1088;
  SCOPED_TRACE(fmt::format("dtype={} rows={}", dt, rows));
  const auto wb = random_weight(dt, out, in, 71);
  const model::Linear lin{ConstTensorView(wb.data(), dt, {out, in}), 1.0f};
  auto x = random_floats(rows * in, 72, -1, 1);
  for (int i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < in; ++k) x[i * in + k] *= mag[i];
  }
  std::vector<float> want(rows * out);
  ThreadPool pool(2);
  cpu::linear(want.data(), x.data(), rows, lin, pool);
  DeviceWeights owner;
  auto ref = owner.add_linear(lin, nullptr);
  ASSERT_TRUE(ref.has_value());
  DeviceArray<float> dx(x), dy(rows * out);
  gemv(dy.get(), out, dx.get(), in, rows, *ref, false, nullptr);
  const auto got = dy.to_host();
  for (int i = 0; i < rows; ++i) {
    SCOPED_TRACE(fmt::format("row {} (x ~ {:g})", i, mag[i]));
    const std::vector<float> g(got.begin() + i * out, got.begin() + (i + 1) * out);
    const std::vector<float> w(want.begin() + i * out, want.begin() + (i + 1) * out);
    double scale = 0;
    for (float v : w) scale = std::max(scale, double(std::fabs(v)));
    if (mag[i] == 0.0f) {
      EXPECT_EQ(g, w);
      continue;
    }
    EXPECT_LE(testing::worst_ratio(g, w, 1e-5 * scale, 1e-4), 1.0);
  }
}

TEST(Gemv, TensorCoreRowsKeepPrecisionAtAnyMagnitude) {
  FLINT_REQUIRE_GPU();
  static_assert(kGemvMmaMinRows <= 8);
  testing::NarrowMode narrow(kNarrowAll);
  for (DType dt : {DType::kBF16, DType::kNVFP4}) {
    check_magnitudes(dt, {1e6f, 1e-7f, 1.0f, 0.0f, 3e4f, 1.0f, 7e-3f, 65504.0f});
    check_magnitudes(dt, {1e6f, 1e-7f});
    check_magnitudes(dt, {0.0f, 65504.0f});
    for (float m : {1e6f, 1e-7f, 0.0f, 3e4f}) check_magnitudes(dt, {m});
  }
}

TEST(Gemv, WideOutputOnTensorCoresMatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  // 64 output rows per block past kGemvMmaWideRows (the LM head); a last block of 37 rows.
  static_assert(kGemvMmaMinRows <= 5);
  check_gemv(DType::kNVFP4, 5, kGemvMmaWideRows + 37, 192, 0.5f);
  check_gemv(DType::kBF16, 9, kGemvMmaWideRows + 37, 96, 1.0f);
}

TEST(Gemv, FusedRmsNormOverGatheredRowsMatchesCpu) {
  FLINT_REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kNVFP4}) {
    // 3 and 8 rows of 4160: the tensor-core GEMV stages rows past 2048 in two pieces.
    for (auto [rows, in] : {std::pair<int, int64_t>{1, 832},
                            {1, 4160},
                            {5, 832},
                            {9, 832},
                            {2, 2560},
                            {3, 4160},
                            {8, 4160}}) {
      const int64_t out = 33;
      SCOPED_TRACE(fmt::format("dtype={} rows={} in={}", dt, rows, in));
      const auto wb = random_weight(dt, out, in, 51);
      const model::Linear lin{ConstTensorView(wb.data(), dt, {out, in}), 0.75f};
      const int src_rows = rows + 3;
      const auto x = random_floats(src_rows * in, 61 + rows, -3, 3);
      const auto nw = random_floats(in, 62, 0.5f, 1.5f);
      std::vector<int32_t> idx(rows);
      for (int i = 0; i < rows; ++i) idx[i] = src_rows - 1 - 2 * i % src_rows;
      std::vector<float> xg(rows * in), xn(rows * in), want(rows * out);
      for (int i = 0; i < rows; ++i) {
        std::copy_n(x.begin() + int64_t(idx[i]) * in, in, xg.begin() + int64_t(i) * in);
      }
      cpu::rms_norm(xn.data(), xg.data(), nw.data(), rows, in, 1e-6f);
      ThreadPool pool(2);
      cpu::linear(want.data(), xn.data(), rows, lin, pool);
      DeviceWeights owner;
      auto ref = owner.add_linear(lin, nullptr);
      ASSERT_TRUE(ref.has_value());
      DeviceArray<float> dx(x), dnw(nw), dy(rows * out);
      DeviceArray<int32_t> didx(idx);
      gemv(dy.get(), out, dx.get(), in, rows, *ref, false, nullptr, GemvNorm{dnw.get(), 1e-6f},
           didx.get());
      EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-4, 1e-4), 1.0);
    }
  }
}

TEST(Gemv, GatedMatchesSiluOfCpuLinears) {
  FLINT_REQUIRE_GPU();
  // 1-2 rows on CUDA cores, 3+ (5, 11: two token groups) on tensor cores.
  for (auto [dt, rows] :
       {std::pair{DType::kBF16, 1}, std::pair{DType::kBF16, 5}, std::pair{DType::kNVFP4, 2},
        std::pair{DType::kNVFP4, 5}, std::pair{DType::kNVFP4, 11}}) {
    check_gated(dt, rows, 67, 192);
  }
}

}  // namespace
}  // namespace flint::cuda
