// The whole CUDA forward pass against the CPU backend on tiny random models of varied
// configuration (F32/BF16/NVFP4 weights, windows that wrap, GQA ratios, expert bias, several
// sequences mixing prefill chunks and decode tokens), and greedy generation token for token.
#include "backends/cpu/forward.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cuda/cuda_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyModel;
using cpu::testing::TinyOptions;

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

struct Case {
  std::string name;
  TinyOptions opt;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  TinyOptions base;
  base.expert_bias = true;
  {
    TinyOptions o = base;
    o.linear_dtype = DType::kBF16;
    o.seed = 71;
    out.push_back({"bf16_window5", o});
  }
  {
    TinyOptions o = base;
    o.linear_dtype = DType::kNVFP4;
    o.seed = 72;
    out.push_back({"nvfp4_window5", o});
  }
  {
    TinyOptions o = base;
    o.num_kv_heads = 1;  // 4 query heads per kv head
    o.head_dim = 32;
    o.hidden_size = 128;
    o.sliding_window = 3;
    o.norm_topk_prob = false;
    o.routed_scaling_factor = 1.5f;
    o.seed = 73;
    out.push_back({"f32_gqa4_hd32_window3", o});
  }
  {
    TinyOptions o = base;
    o.num_layers = 3;
    o.sliding = {true, true, true};
    o.num_dense = 0;
    o.num_kv_heads = 4;
    o.sliding_window = 1;
    o.seed = 74;
    out.push_back({"all_sliding_mha_window1", o});
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Runs the same steps on both backends and compares every logits row.
void compare_steps(const TinyModel& m, int64_t page_size) {
  const int64_t V = m.weights.config.vocab_size;
  cpu::CpuBackend cpu_be(m.weights, 2);
  auto gpu_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(gpu_be.has_value()) << gpu_be.error().message;
  cpu::SimpleSteps steps(3, 64, page_size);
  ASSERT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*gpu_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(40, V, 1), random_tokens(12, V, 2),
                                                  random_tokens(30, V, 3)};
  // Prefill chunks (some longer than the window), then decode tokens mixed with chunks.
  const std::vector<std::vector<size_t>> plan = {{11, 3, 7}, {1, 4, 1},  {1, 0, 9}, {13, 1, 1},
                                                 {1, 1, 1},  {1, 3, 11}, {12, 0, 1}};
  std::vector<size_t> at(3, 0);
  double worst = 0;
  for (size_t p = 0; p < plan.size(); ++p) {
    for (size_t s = 0; s < 3; ++s) {
      const size_t n = std::min(plan[p][s], seqs[s].size() - at[s]);
      if (n == 0) continue;
      steps.add(static_cast<int>(s), std::span(seqs[s]).subspan(at[s], n), p % 2 == 0);
      at[s] += n;
    }
    const model::StepInput st = steps.take();
    std::vector<float> want(st.logits_indices.size() * V), got(want.size());
    ASSERT_TRUE(cpu_be.forward(st, want));
    const Status gs = (*gpu_be)->forward(st, got);
    ASSERT_TRUE(gs) << gs.error().message;
    const double scale = std::max(1.0, max_abs(want));
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i)
      err = std::max(err, std::fabs(double(got[i]) - want[i]));
    worst = std::max(worst, err / scale);
    EXPECT_LT(err / scale, 2e-3) << "step " << p << ": max |diff| " << err << " at scale " << scale;
  }
  ::testing::Test::RecordProperty("worst_relative_diff", fmt::format("{:.2e}", worst));
  std::printf("  worst max|diff|/max|logit| over the steps: %.2e\n", worst);
}

TEST(CudaForward, LogitsMatchCpuBackend) {
  FLINT_REQUIRE_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::printf("%s\n", c.name.c_str());
    compare_steps(cpu::testing::make_tiny_model(c.opt), 4);
  }
}

TEST(CudaForward, LongPrefillOverWindow513MatchesCpuBackend) {
  FLINT_REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kNVFP4}) {
    SCOPED_TRACE(fmt::format("dtype={}", dt));
    TinyOptions o;
    o.num_layers = 2;
    o.sliding = {true, false};
    o.num_dense = 0;
    o.hidden_size = 64;
    o.num_heads = 2;
    o.num_kv_heads = 1;
    o.head_dim = 64;
    o.moe_intermediate_size = 64;
    o.shared_intermediate_size = 128;  // two slices of the routed size
    o.num_experts = 4;
    o.sliding_window = 513;
    o.vocab_size = 64;
    o.linear_dtype = dt;
    // Every expert selected: the 600-token chunk runs the prefill path, whose bf16 activations
    // would otherwise flip near-tied top-k choices against the CPU (tests/gpu/prefill_test.cpp).
    o.num_experts_per_tok = o.num_experts;
    o.seed = 6;
    const TinyModel m = cpu::testing::make_tiny_model(o);
    const int64_t V = o.vocab_size;
    cpu::CpuBackend cpu_be(m.weights, 2);
    auto gpu_be = CudaBackend::create(m.weights);
    ASSERT_TRUE(gpu_be.has_value()) << gpu_be.error().message;
    cpu::SimpleSteps steps(1, 700);
    ASSERT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
    ASSERT_TRUE((*gpu_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
    const auto toks = random_tokens(620, V, 5);
    for (auto [from, n] : {std::pair<size_t, size_t>{0, 600}, {600, 1}, {601, 19}}) {
      steps.add(0, std::span(toks).subspan(from, n), true);
      const model::StepInput st = steps.take();
      std::vector<float> want(n * V), got(n * V);
      ASSERT_TRUE(cpu_be.forward(st, want));
      ASSERT_TRUE((*gpu_be)->forward(st, got));
      double err = 0;
      for (size_t i = 0; i < got.size(); ++i)
        err = std::max(err, std::fabs(double(got[i]) - want[i]));
      std::printf("  %s chunk at %zu: max|diff| %.3e, max|logit| %.3e\n",
                  std::string(dtype_name(dt)).c_str(), from, err, max_abs(want));
      // The prefill path feeds bf16 activations to its GEMMs; the decode path keeps f32.
      const double tol = int(n) > CudaForward::kPrefillMinTokens ? 1e-2 : 2e-3;
      EXPECT_LT(err / std::max(1.0, max_abs(want)), tol) << "chunk at " << from;
    }
  }
}

TEST(CudaForward, GreedyGenerationMatchesCpuFor64Tokens) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.seed = 90;
  const TinyModel m = cpu::testing::make_tiny_model(o);
  const int64_t V = o.vocab_size;
  cpu::CpuBackend cpu_be(m.weights, 2);
  auto gpu_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(gpu_be.has_value()) << gpu_be.error().message;
  cpu::SimpleSteps cs(1, 128), gs(1, 128);
  ASSERT_TRUE(cpu_be.init_kv_cache(cs.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*gpu_be)->init_kv_cache(gs.kv_spec(DType::kBF16)));
  std::vector<int32_t> cpu_tok = random_tokens(9, V, 8), gpu_tok = cpu_tok;
  std::vector<float> lc(V), lg(V);
  double min_margin = 1e9;
  cs.add(0, cpu_tok, false);
  gs.add(0, gpu_tok, false);
  for (int step = 0; step < 64; ++step) {
    ASSERT_TRUE(cpu_be.forward(cs.take(), lc));
    ASSERT_TRUE((*gpu_be)->forward(gs.take(), lg));
    const int32_t a = static_cast<int32_t>(std::max_element(lc.begin(), lc.end()) - lc.begin());
    const int32_t b = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    std::vector<float> sorted(lc);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    min_margin = std::min(min_margin, double(sorted[0] - sorted[1]));
    ASSERT_EQ(a, b) << "step " << step << " (cpu top-2 margin " << sorted[0] - sorted[1] << ")";
    const int32_t next[1] = {a};
    cs.add(0, next, false);
    gs.add(0, next, false);
  }
  std::printf("  64 greedy tokens identical; smallest cpu top-2 margin %.4f\n", min_margin);
}

TEST(CudaForward, RejectsBadSteps) {
  FLINT_REQUIRE_GPU();
  const TinyModel m = cpu::testing::make_tiny_model(TinyOptions{});
  auto be = CudaBackend::create(m.weights);
  ASSERT_TRUE(be.has_value());
  cpu::SimpleSteps steps(1, 16);
  ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  std::vector<float> logits(16 * m.weights.config.vocab_size);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(m.weights.config.vocab_size)};
  steps.add(0, bad, false);
  const Status st = (*be)->forward(steps.take(), logits);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("token id 96 outside [0, 96)"), std::string::npos)
      << st.error().message;
  EXPECT_FALSE((*be)->forward(model::StepInput{}, logits));
}

}  // namespace
}  // namespace flint::cuda
