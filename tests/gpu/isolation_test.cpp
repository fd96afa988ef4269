// One feature at a time (sliding attention, full attention, dense MLP, decode vs prefill): the
// CUDA logits against the CPU backend on one-layer tiny models, printing each error next to the
// CPU's own BF16-vs-F32 KV-cache difference (the noise floor of the comparison).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyOptions;

struct Iso {
  std::string name;
  TinyOptions opt;
  std::vector<size_t> chunks;  // one sequence, fed in these chunks, logits for every token
};

double run_iso(const Iso& c, double* cpu_noise) {
  const auto m = cpu::testing::make_tiny_model(c.opt);
  const int64_t V = c.opt.vocab_size;
  cpu::CpuBackend cb(m.weights, 2), cf(m.weights, 2);
  auto gb = CudaBackend::create(m.weights);
  EXPECT_TRUE(gb.has_value());
  if (!gb) return 1e9;
  cpu::SimpleSteps s1(1, 64, 4), s2(1, 64, 4), s3(1, 64, 4);
  EXPECT_TRUE(cb.init_kv_cache(s1.kv_spec(DType::kBF16)));
  EXPECT_TRUE(cf.init_kv_cache(s2.kv_spec(DType::kF32)));
  EXPECT_TRUE((*gb)->init_kv_cache(s3.kv_spec(DType::kBF16)));
  std::mt19937_64 g(5);
  std::vector<int32_t> toks(64);
  for (auto& t : toks) t = static_cast<int32_t>(g() % V);
  size_t at = 0;
  double worst = 0, noise = 0;
  for (size_t n : c.chunks) {
    for (auto* s : {&s1, &s2, &s3}) s->add(0, std::span(toks).subspan(at, n), true);
    at += n;
    std::vector<float> a(n * V), b(n * V), f(n * V);
    EXPECT_TRUE(cb.forward(s1.take(), a));
    EXPECT_TRUE(cf.forward(s2.take(), f));
    EXPECT_TRUE((*gb)->forward(s3.take(), b));
    double scale = 1;
    for (float x : a) scale = std::max(scale, double(std::fabs(x)));
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / scale);
      noise = std::max(noise, std::fabs(double(a[i]) - f[i]) / scale);
    }
  }
  *cpu_noise = noise;
  return worst;
}

TEST(CudaForward, EachFeatureMatchesCpuBackend) {
  FLINT_REQUIRE_GPU();
  TinyOptions one;
  one.num_layers = 1;
  one.num_dense = 0;
  one.num_kv_heads = 4;
  one.seed = 3;
  std::vector<Iso> cases;
  {
    Iso c{"sliding_w5_prefill", one, {4}};
    c.opt.sliding = {true};
    cases.push_back(c);
  }
  {
    Iso c{"sliding_w5_decode", one, {1, 1, 1, 1}};
    c.opt.sliding = {true};
    cases.push_back(c);
  }
  {
    Iso c{"full_prefill", one, {4}};
    c.opt.sliding = {false};
    cases.push_back(c);
  }
  {
    Iso c{"full_decode", one, {1, 1, 1, 1}};
    c.opt.sliding = {false};
    cases.push_back(c);
  }
  {
    Iso c{"dense_w1", one, {3}};
    c.opt.sliding = {true};
    c.opt.sliding_window = 1;
    c.opt.num_dense = 1;
    cases.push_back(c);
  }
  {
    Iso c{"moe_w1", one, {3}};
    c.opt.sliding = {true};
    c.opt.sliding_window = 1;
    cases.push_back(c);
  }
  {
    Iso c{"sliding_w5_norope_decode", one, {1, 1, 1}};
    c.opt.sliding = {true};
    cases.push_back(c);
  }
  {
    Iso c{"gqa2_sliding_decode", one, {3, 1, 1}};
    c.opt.sliding = {true};
    c.opt.num_kv_heads = 2;
    cases.push_back(c);
  }
  {
    Iso c{"gqa2_full_decode", one, {3, 1, 1}};
    c.opt.sliding = {false};
    c.opt.num_kv_heads = 2;
    cases.push_back(c);
  }
  {
    Iso c{"two_layers_decode", one, {3, 1, 1}};
    c.opt.num_layers = 2;
    c.opt.sliding = {false, true};
    cases.push_back(c);
  }
  {
    Iso c{"two_layers_dense_moe", one, {3, 1, 1}};
    c.opt.num_layers = 2;
    c.opt.num_dense = 1;
    c.opt.sliding = {true, true};
    c.opt.sliding_window = 1;
    cases.push_back(c);
  }
  {
    Iso c{"two_moe_layers_w1", one, {3, 1, 1}};
    c.opt.num_layers = 2;
    c.opt.sliding = {true, true};
    c.opt.sliding_window = 1;
    cases.push_back(c);
  }
  for (const Iso& c : cases) {
    double noise = 0;
    const double err = run_iso(c, &noise);
    std::printf("  %-26s cuda-vs-cpu %.2e   cpu bf16-vs-f32 kv %.2e\n", c.name.c_str(), err, noise);
    EXPECT_LT(err, std::max(2e-3, 3 * noise)) << c.name;
  }
}

}  // namespace
}  // namespace flint::cuda
