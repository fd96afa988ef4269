// CUDA graphs in CudaBackend: decode steps replayed from graphs give the same logits, bit for bit,
// as the un-captured forward, over many steps whose lengths, block-table widths and batch
// composition change, with prefill and mixed steps in between; and both stay within tolerance of
// the CPU backend.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyOptions;

// The engine's block tables are only as wide as the longest sequence needs; SimpleSteps' are
// always full width. Narrow them so the width changes from step to step as in the engine.
model::StepInput narrow_table(model::StepInput st, int64_t page_size) {
  int32_t width = 1;
  for (int32_t len : st.seq_lens)
    width = std::max<int32_t>(width, (len + page_size - 1) / page_size);
  std::vector<int32_t> table;
  for (int s = 0; s < st.num_seqs(); ++s) {
    const auto row = st.block_table.begin() + int64_t(s) * st.max_blocks_per_seq;
    table.insert(table.end(), row, row + width);
  }
  st.block_table = std::move(table);
  st.max_blocks_per_seq = width;
  return st;
}

void run_graph_vs_stream(const TinyOptions& o) {
  const auto m = cpu::testing::make_tiny_model(o);
  const int64_t V = o.vocab_size;
  constexpr int kSeqs = 5;
  constexpr int64_t kPage = 4;
  cpu::CpuBackend cpu_be(m.weights, 2);
  auto graph_be = CudaBackend::create(m.weights);
  auto plain_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(graph_be.has_value() && plain_be.has_value());
  (*plain_be)->set_graphs_enabled(false);
  cpu::SimpleSteps steps(kSeqs, 400, kPage);
  ASSERT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*graph_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*plain_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  std::mt19937_64 g(o.seed);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(g() % V);
    return t;
  };
  // Prefill of different lengths (un-captured). 25 tokens in all, so every step stays on the decode
  // kernels (CudaForward::kPrefillMinTokens): the prefill path's BF16 activations can flip
  // near-tied expert choices of these tiny random models and the 2e-3 bound against the CPU below
  // would then measure that, not the graphs (tests/gpu/prefill_test.cpp covers the prefill path).
  for (int s = 0; s < kSeqs; ++s) steps.add(s, tokens(1 + 2 * s), false);
  static_assert(kSeqs * kSeqs <= CudaForward::kPrefillMinTokens);
  int64_t bit_diffs = 0;
  double worst = 0;
  for (int step = 0; step < 150; ++step) {
    const model::StepInput st = narrow_table(steps.take(), kPage);
    const size_t n = st.logits_indices.size() * V;
    std::vector<float> want(n), a(n), b(n);
    ASSERT_TRUE(cpu_be.forward(st, want));
    const Status sa = (*graph_be)->forward(st, a);
    ASSERT_TRUE(sa) << sa.error().message;
    ASSERT_TRUE((*plain_be)->forward(st, b));
    if (n > 0 && std::memcmp(a.data(), b.data(), n * sizeof(float)) != 0) {
      ++bit_diffs;
      ADD_FAILURE() << "step " << step << ": graph replay differs from the un-captured forward";
    }
    double scale = 1, err = 0;
    for (size_t i = 0; i < n; ++i) {
      scale = std::max(scale, double(std::fabs(want[i])));
      err = std::max(err, std::fabs(double(a[i]) - want[i]));
    }
    worst = std::max(worst, err / scale);
    EXPECT_LT(err / scale, 2e-3) << "step " << step;
    int num_added = 0;
    // Next step: a changing subset of the sequences decodes one token each (its greedy token, so
    // the text follows the model); every 37th step one sequence gets a prefill chunk instead.
    for (int s = 0; s < kSeqs; ++s) {
      if ((step + s) % (s + 2) == 0 && !(s == kSeqs - 1 && num_added == 0)) continue;
      ++num_added;
      if (step % 37 == 36 && s == step % kSeqs) {
        steps.add(s, tokens(6), false);
        continue;
      }
      const int32_t t = static_cast<int32_t>(g() % V);
      steps.add(s, std::span<const int32_t>(&t, 1), false);
    }
  }
  const auto gs = (*graph_be)->graph_stats();
  std::printf(
      "  %lld replays, %lld captures, %lld un-captured steps, %zu graphs cached; worst "
      "relative diff vs cpu %.2e\n",
      static_cast<long long>(gs.replays), static_cast<long long>(gs.captures),
      static_cast<long long>(gs.uncaptured), gs.cached, worst);
  EXPECT_EQ(bit_diffs, 0);
  EXPECT_GT(gs.replays, 80);
  EXPECT_LT(gs.captures, gs.replays / 2);
  EXPECT_EQ((*plain_be)->graph_stats().replays, 0);
}

TEST(CudaBackendGraphs, ReplayMatchesUncapturedBitForBit) {
  FLINT_REQUIRE_GPU();
  for (DType dt : {DType::kBF16, DType::kNVFP4}) {
    SCOPED_TRACE(fmt::format("dtype={}", dt));
    std::printf("%s\n", std::string(dtype_name(dt)).c_str());
    TinyOptions o;
    o.linear_dtype = dt;
    o.expert_bias = true;
    o.seed = dt == DType::kBF16 ? 31 : 32;
    run_graph_vs_stream(o);
  }
}

TEST(CudaBackendGraphs, SlidingOnlyWithLongerContextMatches) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.num_layers = 3;
  o.sliding = {true, false, true};
  o.num_dense = 0;
  o.sliding_window = 7;
  o.seed = 33;
  run_graph_vs_stream(o);
}

// A decode shape seen only once is remembered without a graph; destroying the backend then must not
// leave a CUDA error pending (it once did, and the next test's first launch check aborted).
TEST(CudaBackendGraphs, DestroyWithShapeSeenOnceLeavesNoCudaError) {
  FLINT_REQUIRE_GPU();
  const auto m = cpu::testing::make_tiny_model(TinyOptions{});
  const int64_t V = m.weights.config.vocab_size;
  {
    auto be = CudaBackend::create(m.weights);
    ASSERT_TRUE(be.has_value());
    cpu::SimpleSteps steps(2, 32, 4);
    ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
    const std::vector<int32_t> prompt = {5, 6, 7}, next = {8};
    steps.add(0, prompt, false);
    steps.add(1, prompt, false);
    std::vector<float> logits(2 * V);
    ASSERT_TRUE((*be)->forward(steps.take(), logits));
    steps.add(0, next, false);
    steps.add(1, next, false);
    ASSERT_TRUE((*be)->forward(steps.take(), logits));
    const auto gs = (*be)->graph_stats();
    EXPECT_EQ(gs.cached, 1u);
    EXPECT_EQ(gs.captures, 0);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace flint::cuda
