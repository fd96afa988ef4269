// The persistent decode kernel (kernels/decode_persistent.h): decode steps of 1-8 sequences give
// the same logits as the layered decode path (a launch per op) and stay within tolerance of the
// CPU backend, over many steps whose batch composition and context lengths change (windows that
// wrap, contexts past a page), for F32, BF16 and NVFP4 weights, head_dim 16-128, dense and MoE
// layers, expert bias and shared-expert slices; and a model it cannot run falls back cleanly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyOptions;

struct Diffs {
  double vs_layered = 0;  // worst relative difference, persistent vs layered
  double vs_cpu = 0;      // worst relative difference, persistent vs the CPU backend
};

double rel_diff(const std::vector<float>& a, const std::vector<float>& want) {
  double scale = 1, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    err = std::max(err, std::fabs(double(a[i]) - want[i]));
  }
  return err / scale;
}

// Runs `steps_n` steps on a persistent backend, a layered one and the CPU; the first steps are
// short prefills (kept under CudaForward::kPrefillMinTokens tokens so they also run on the f32
// decode kernels), then a changing subset of up to 8 sequences decodes each step.
Diffs run_persistent_vs_layered(const TinyOptions& o, int num_seqs, int steps_n) {
  const auto m = cpu::testing::make_tiny_model(o);
  const int64_t V = o.vocab_size;
  constexpr int64_t kPage = 4;
  cpu::CpuBackend cpu_be(m.weights, 2);
  auto pers = CudaBackend::create(m.weights);
  auto layered = CudaBackend::create(m.weights);
  EXPECT_TRUE(pers.has_value() && layered.has_value());
  Diffs d;
  if (!pers.has_value() || !layered.has_value()) return d;
  (*pers)->set_persistent_decode(true);  // off by default: an experiment (forward.h)
  cpu::SimpleSteps steps(num_seqs, 600, kPage);
  EXPECT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
  EXPECT_TRUE((*pers)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  EXPECT_TRUE((*layered)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  EXPECT_TRUE((*pers)->persistent_decode_available())
      << (*pers)->persistent_decode_unavailable_reason();
  std::mt19937_64 g(o.seed);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(g() % V);
    return t;
  };
  for (int s = 0; s < num_seqs; ++s) steps.add(s, tokens(1 + s % 3), false);
  for (int step = 0; step < steps_n; ++step) {
    const model::StepInput st = steps.take();
    const size_t n = st.logits_indices.size() * V;
    std::vector<float> want(n), a(n), b(n);
    EXPECT_TRUE(cpu_be.forward(st, want));
    const Status sa = (*pers)->forward(st, a);
    EXPECT_TRUE(sa) << sa.error().message;
    EXPECT_TRUE((*layered)->forward(st, b));
    // Batch 1 sums exactly as the layered GEMVs do; at 2-8 rows the persistent kernel decodes each
    // weight chunk once for all rows (as the layered path does from 4 rows up), so rounding
    // differs a little and, with NVFP4, feeds back through the KV cache.
    const double vl = rel_diff(a, b), vc = rel_diff(a, want);
    EXPECT_LT(vl, 1e-3) << "step " << step << " (" << st.num_seqs() << " sequences)";
    EXPECT_LT(vc, 2e-3) << "step " << step;
    d.vs_layered = std::max(d.vs_layered, vl);
    d.vs_cpu = std::max(d.vs_cpu, vc);
    // Next: sequence s decodes unless (step + s) % (s + 2) == 0; at least one always does.
    int added = 0;
    for (int s = 0; s < num_seqs; ++s) {
      if ((step + s) % (s + 2) == 0 && !(s == num_seqs - 1 && added == 0)) continue;
      ++added;
      const int32_t t = static_cast<int32_t>(g() % V);
      steps.add(s, std::span<const int32_t>(&t, 1), false);
    }
  }
  EXPECT_GT((*pers)->persistent_steps(), steps_n / 2);
  EXPECT_EQ((*layered)->persistent_steps(), 0);
  return d;
}

TEST(PersistentDecode, MatchesLayeredPathAndCpuAcrossDtypesAndShapes) {
  FLINT_REQUIRE_GPU();
  struct Case {
    const char* name;
    TinyOptions o;
    int seqs;
  };
  std::vector<Case> cases;
  {
    TinyOptions o;  // F32, head_dim 16, window 5, one dense layer, shared expert
    cases.push_back({"f32 d16", o, 8});
  }
  {
    TinyOptions o;
    o.linear_dtype = DType::kBF16;
    o.head_dim = 32;
    o.num_heads = 8;
    o.num_kv_heads = 2;
    o.expert_bias = true;
    o.seed = 7;
    cases.push_back({"bf16 d32 gqa4 bias", o, 6});
  }
  {
    TinyOptions o;
    o.linear_dtype = DType::kNVFP4;
    o.hidden_size = 128;
    o.head_dim = 64;
    o.num_heads = 8;
    o.num_kv_heads = 1;
    o.moe_intermediate_size = 64;
    o.shared_intermediate_size = 128;  // two slices
    o.num_experts = 16;
    o.num_experts_per_tok = 4;
    o.routed_scaling_factor = 2.5f;
    o.sliding_window = 9;
    o.seed = 11;
    cases.push_back({"nvfp4 d64 gqa8 two shared slices", o, 3});
  }
  {
    TinyOptions o;
    o.linear_dtype = DType::kBF16;
    o.hidden_size = 128;
    o.head_dim = 128;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.num_layers = 3;
    o.num_dense = 2;
    o.intermediate_size = 256;
    o.norm_topk_prob = false;
    o.seed = 5;
    cases.push_back({"bf16 d128 two dense layers", o, 1});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Diffs d = run_persistent_vs_layered(c.o, c.seqs, 60);
    std::printf("  %-36s worst relative diff: vs layered %.2e, vs cpu %.2e\n", c.name, d.vs_layered,
                d.vs_cpu);
  }
}

TEST(PersistentDecode, UnslicedSharedExpertFallsBackToTheLayeredPath) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.shared_intermediate_size = 96;  // not a multiple of the routed 64: kept as its own MLP
  const auto m = cpu::testing::make_tiny_model(o);
  auto be = CudaBackend::create(m.weights);
  ASSERT_TRUE(be.has_value());
  (*be)->set_persistent_decode(true);
  cpu::CpuBackend cpu_be(m.weights, 2);
  cpu::SimpleSteps steps(2, 64, 4);
  ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
  EXPECT_FALSE((*be)->persistent_decode_available());
  EXPECT_NE((*be)->persistent_decode_unavailable_reason().find("shared expert"), std::string::npos)
      << (*be)->persistent_decode_unavailable_reason();
  const int32_t prompt[] = {3, 9, 27};
  steps.add(0, prompt, false);
  steps.add(1, std::span<const int32_t>(prompt, 1), false);
  for (int step = 0; step < 6; ++step) {
    const model::StepInput st = steps.take();
    std::vector<float> a(st.logits_indices.size() * o.vocab_size), want(a.size());
    ASSERT_TRUE((*be)->forward(st, a));
    ASSERT_TRUE(cpu_be.forward(st, want));
    EXPECT_LT(rel_diff(a, want), 2e-3) << "step " << step;
    for (int s = 0; s < 2; ++s) {
      const int32_t t = static_cast<int32_t>((step * 7 + s) % o.vocab_size);
      steps.add(s, std::span<const int32_t>(&t, 1), false);
    }
  }
  EXPECT_EQ((*be)->persistent_steps(), 0);
}

}  // namespace
}  // namespace flint::cuda
