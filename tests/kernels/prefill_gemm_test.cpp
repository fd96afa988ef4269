// The prefill GEMMs (cuBLAS BF16, the tensor-core kernel for scaled BF16 and NVFP4, the fused
// SwiGLU gate|up) against cpu::linear on bf16-rounded activations, at awkward sizes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/linear.h"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/weights.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::random_weight;

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(::flint::f32_to_bf16(x));
  return v;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = ::flint::f32_to_bf16(v[i]);
  return b;
}

struct Gpu {
  cublasHandle_t cublas = nullptr;
  Gpu() { EXPECT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS); }
  ~Gpu() { cublasDestroy(cublas); }
};

// cpu::linear of `rows` rows of x: the reference every GEMM here is checked against.
std::vector<float> cpu_linear(const model::Linear& lin, const std::vector<float>& x, int rows,
                              int64_t out) {
  std::vector<float> y(int64_t(rows) * out);
  ThreadPool pool(2);
  cpu::linear(y.data(), x.data(), rows, lin, pool);
  return y;
}

// every_scale_byte: NVFP4 sub-scale bytes 0x00-0xFF (zeros, subnormals, bit 7, 480), with the
// absolute tolerance relative to the largest output.
void check_gemm(DType dt, float scale, int rows, int64_t out, int64_t in, bool use_cublas,
                bool every_scale_byte = false) {
  SCOPED_TRACE(fmt::format("dtype={} scale={} rows={} out={} in={} cublas={} every_scale_byte={}",
                           dt, scale, rows, out, in, use_cublas, every_scale_byte));
  Gpu gpu;
  const auto wbytes = every_scale_byte ? random_weight(dt, out, in, 100 + out + in, 0, 256)
                                       : random_weight(dt, out, in, 100 + out + in);
  const model::Linear lin{ConstTensorView(wbytes.data(), dt, {out, in}), scale};
  const auto x = round_bf16(random_floats(int64_t(rows) * in, 7 + rows));
  std::vector<float> want = cpu_linear(lin, x, rows, out);
  double atol = 2e-3;
  if (every_scale_byte) {
    double peak = 0;
    for (float v : want) peak = std::max(peak, double(std::fabs(v)));
    ASSERT_GT(peak, 100.0);  // the large scales are in play
    atol *= peak;
  }
  DeviceWeights owner;
  auto ref = owner.add_linear(lin, nullptr);
  ASSERT_TRUE(ref.has_value()) << ref.error().message;
  DeviceArray<uint16_t> dx(to_bf16_bits(x));
  DeviceArray<float> dy(int64_t(rows) * out);
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  gemm(use_cublas ? gpu.cublas : nullptr, dy.get(), out, xb, in, rows, *ref, false, nullptr);
  EXPECT_LE(testing::worst_ratio(dy.to_host(), want, atol, 2e-3), 1.0);
  gemm(use_cublas ? gpu.cublas : nullptr, dy.get(), out, xb, in, rows, *ref, true, nullptr);
  for (float& v : want) v *= 2;
  EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 2 * atol, 2e-3), 1.0);
}

// f32 activations (not rounded to bf16) through gemm_f32_activations against cpu::linear: F32 by
// SGEMM, BF16 by the hi/lo split, both to f32-like precision; NVFP4 and scaled weights are refused.
TEST(PrefillGemm, F32ActivationsThroughCublasKeepF32Precision) {
  FLINT_REQUIRE_GPU();
  Gpu gpu;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (auto [rows, out, in] : {std::tuple{9, 1000, 256}, {40, 333, 2048}, {1, 64, 64}}) {
      SCOPED_TRACE(fmt::format("dtype={} rows={} out={} in={}", dt, rows, out, in));
      const auto wbytes = random_weight(dt, out, in, 300 + out + in);
      const model::Linear lin{ConstTensorView(wbytes.data(), dt, {out, in}), 1.0f};
      const auto x = random_floats(int64_t(rows) * in, 11 + rows);
      const std::vector<float> want = cpu_linear(lin, x, rows, out);
      DeviceWeights owner;
      auto ref = owner.add_linear(lin, nullptr);
      ASSERT_TRUE(ref.has_value()) << ref.error().message;
      DeviceArray<float> dx(x), dy(int64_t(rows) * out);
      DeviceArray<uint16_t> scratch(2 * int64_t(rows) * in);
      ASSERT_TRUE(gemm_f32_activations(gpu.cublas, dy.get(), out, dx.get(), in, rows, *ref,
                                       reinterpret_cast<__nv_bfloat16*>(scratch.get()), nullptr));
      // bf16 activations alone would be off by ~4e-3 relative; the split keeps ~2^-16.
      EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-4, 1e-4), 1.0);
    }
  }
  for (DType dt : {DType::kNVFP4, DType::kBF16}) {
    const auto wbytes = random_weight(dt, 64, 64, 5);
    const model::Linear lin{ConstTensorView(wbytes.data(), dt, {64, 64}),
                            dt == DType::kBF16 ? 0.5f : 1.0f};  // scaled BF16: a row scale
    DeviceWeights owner;
    auto ref = owner.add_linear(lin, nullptr);
    ASSERT_TRUE(ref.has_value()) << ref.error().message;
    DeviceArray<float> dx(std::vector<float>(64, 1.0f)), dy(64);
    DeviceArray<uint16_t> scratch(2 * 64);
    EXPECT_FALSE(gemm_f32_activations(gpu.cublas, dy.get(), 64, dx.get(), 64, 1, *ref,
                                      reinterpret_cast<__nv_bfloat16*>(scratch.get()), nullptr))
        << fmt::format("{}", dt);
  }
}

TEST(PrefillGemm, CublasBf16MatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (auto [rows, out, in] :
       {std::tuple{1, 64, 64}, {7, 200, 72}, {129, 129, 200}, {300, 520, 256}}) {
    check_gemm(DType::kBF16, 1.0f, rows, out, in, true);
  }
}

// Both tile kernels: warpgroup MMAs (the default on Hopper) and mma.sync (gemm_use_wgmma).
TEST(PrefillGemm, TensorCoreBf16AndNvfp4MatchCpuLinear) {
  FLINT_REQUIRE_GPU();
  for (bool wgmma : {true, false}) {
    SCOPED_TRACE(wgmma ? "wgmma kernel" : "mma.sync kernel");
    gemm_use_wgmma(wgmma);
    for (auto [rows, out, in] :
         {std::tuple{1, 64, 64}, {7, 200, 128}, {129, 129, 192}, {300, 520, 256}, {17, 8, 64}}) {
      check_gemm(DType::kNVFP4, 0.37f, rows, out, in, false);
      check_gemm(DType::kBF16, 0.5f, rows, out, in, true);  // scaled BF16 takes our kernel
      check_gemm(DType::kBF16, 1.0f, rows, out, in, false);
    }
    check_gemm(DType::kNVFP4, 1.0f, 40, 96, 1024, false, /*every_scale_byte=*/true);
  }
  gemm_use_wgmma(true);  // the default
}

TEST(PrefillGemm, DequantizedNvfp4ThroughCublasMatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  Gpu gpu;
  for (auto [rows, out, in] : {std::tuple{1, 64, 64}, {33, 200, 192}, {300, 520, 256}}) {
    SCOPED_TRACE(fmt::format("rows={} out={} in={}", rows, out, in));
    // The largest case has sub-scale bytes of every value (zeros, subnormals, bit 7, 480).
    const auto wbytes = out == 520 ? random_weight(DType::kNVFP4, out, in, 31 + out, 0, 256)
                                   : random_weight(DType::kNVFP4, out, in, 31 + out);
    const model::Linear lin{ConstTensorView(wbytes.data(), DType::kNVFP4, {out, in}), 0.37f};
    const auto x = round_bf16(random_floats(int64_t(rows) * in, 17 + rows));
    const std::vector<float> want = cpu_linear(lin, x, rows, out);
    DeviceWeights owner;
    auto ref = owner.add_linear(lin, nullptr);
    ASSERT_TRUE(ref.has_value()) << ref.error().message;
    DeviceArray<uint16_t> dw(int64_t(out) * in), dx(to_bf16_bits(x));
    DeviceArray<float> dy(int64_t(rows) * out);
    auto* wb = reinterpret_cast<__nv_bfloat16*>(dw.get());
    dequantize_bf16(wb, *ref, nullptr);
    const LinearRef b{DType::kBF16, out, in, 1, wb, nullptr, nullptr};
    gemm(gpu.cublas, dy.get(), out, reinterpret_cast<const __nv_bfloat16*>(dx.get()), in, rows, b,
         false, nullptr);
    // The row scale is folded into the bf16 weights (2^-9 relative per weight), so the error
    // scales with the outputs, not with each one: tolerance relative to max |want|.
    double scale = 0;
    for (float v : want) scale = std::max(scale, double(std::fabs(v)));
    EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-2 * scale, 3e-2), 1.0);
  }
}

TEST(PrefillGemm, RouterSgemmMatchesCpuLinear) {
  FLINT_REQUIRE_GPU();
  Gpu gpu;
  for (auto [rows, out, in] : {std::tuple{1, 8, 64}, {129, 256, 200}}) {
    SCOPED_TRACE(fmt::format("rows={} out={} in={}", rows, out, in));
    const auto w = random_floats(int64_t(out) * in, 41, -0.5f, 0.5f);
    const auto x = random_floats(int64_t(rows) * in, 42);
    const model::Linear lin{ConstTensorView(w.data(), DType::kF32, {out, in}), 1.0f};
    const std::vector<float> want = cpu_linear(lin, x, rows, out);
    DeviceArray<float> dw(w), dx(x), dy(want.size());
    gemm_f32(gpu.cublas, dy.get(), out, dx.get(), in, rows, dw.get(), out, in, nullptr);
    EXPECT_LE(testing::worst_ratio(dy.to_host(), want, 1e-5, 1e-5), 1.0);
  }
}

TEST(PrefillGemm, GatedMatchesCpuSwiGlu) {
  FLINT_REQUIRE_GPU();
  for (const bool wgmma : {true, false})
    for (DType dt : {DType::kBF16, DType::kNVFP4}) {
      gemm_use_wgmma(wgmma);
      SCOPED_TRACE(wgmma ? "wgmma kernel" : "mma.sync kernel");
      for (auto [rows, inter, in] : {std::tuple{1, 64, 64}, {130, 200, 128}, {257, 512, 192}}) {
        SCOPED_TRACE(fmt::format("dtype={} rows={} inter={} in={}", dt, rows, inter, in));
        const auto gb = random_weight(dt, inter, in, 11), ub = random_weight(dt, inter, in, 12);
        const model::Linear gl{ConstTensorView(gb.data(), dt, {inter, in}), 0.8f};
        const model::Linear ul{ConstTensorView(ub.data(), dt, {inter, in}), 1.25f};
        const auto x = round_bf16(random_floats(int64_t(rows) * in, 3 + rows));
        std::vector<float> g(int64_t(rows) * inter), u(g.size()), want(g.size());
        ThreadPool pool(2);
        cpu::linear(g.data(), x.data(), rows, gl, pool);
        cpu::linear(u.data(), x.data(), rows, ul, pool);
        for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        DeviceWeights owner;
        auto gr = owner.add_linear(gl, nullptr);
        auto ur = owner.add_linear(ul, nullptr);
        ASSERT_TRUE(gr.has_value() && ur.has_value());
        DeviceArray<uint16_t> dx(to_bf16_bits(x)), dact(g.size());
        gemm_gated(reinterpret_cast<__nv_bfloat16*>(dact.get()), inter,
                   reinterpret_cast<const __nv_bfloat16*>(dx.get()), in, rows, *gr, *ur, nullptr);
        const auto bits = dact.to_host();
        std::vector<float> got(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) got[i] = bf16_to_f32(bits[i]);
        EXPECT_LE(testing::worst_ratio(got, want, 1e-2, 1e-2), 1.0);
      }
    }
  gemm_use_wgmma(true);  // the default
}

}  // namespace
}  // namespace flint::cuda
