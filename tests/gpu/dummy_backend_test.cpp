// `flint serve --load-format dummy --device cuda`: CudaBackend::create_dummy and
// create_profiled_dummy_backend generate random weights on the GPU (no host weights) and run steps
// on both paths (decode and prefill), for BF16 and NVFP4 linear layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/memory_plan.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

// The tiny test config (the shapes tests/gpu/forward_test.cpp checks for BF16 and NVFP4): a dense
// layer and MoE layers with a shared expert, full and sliding layers, every input dim 64.
model::FlintConfig small_config() {
  cpu::testing::TinyOptions o;
  o.vocab_size = 1000;
  return cpu::testing::make_tiny_model(o).weights.config;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const float e = std::fabs(a[i] - b[i]);
    d = std::isnan(e) ? INFINITY : std::max(d, e);
  }
  return d;
}

// Every value finite and the row not constant (random weights give distinct logits).
void expect_usable_rows(const std::vector<float>& logits, int64_t vocab) {
  for (size_t r = 0; r * vocab < logits.size(); ++r) {
    const float* row = logits.data() + r * vocab;
    bool finite = true, varies = false;
    for (int64_t i = 0; i < vocab; ++i) {
      finite = finite && std::isfinite(row[i]);
      varies = varies || row[i] != row[0];
    }
    EXPECT_TRUE(finite) << "row " << r;
    EXPECT_TRUE(varies) << "row " << r;
  }
}

int32_t greedy_token(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

TEST(CudaBackendDummy, RunsPrefillAndDecodeStepsForBf16AndNvfp4) {
  FLINT_REQUIRE_GPU();
  const model::FlintConfig c = small_config();
  const int64_t V = c.vocab_size;
  for (DType dt : {DType::kBF16, DType::kNVFP4}) {
    SCOPED_TRACE(fmt::format("linear dtype {}", dt));
    auto be = CudaBackend::create_dummy(c, dt, /*seed=*/7);
    ASSERT_TRUE(be.has_value()) << be.error().message;
    EXPECT_EQ((*be)->config().vocab_size, V);
    cpu::SimpleSteps steps(2, 128, 16);
    ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
    // 7 + 40 prompt tokens: over 32 tokens, so the prefill path; then decode steps.
    for (int s = 0; s < 2; ++s) {
      std::vector<int32_t> prompt(s == 0 ? 7 : 40);
      std::iota(prompt.begin(), prompt.end(), 3 + 100 * s);
      steps.add(s, prompt, false);
    }
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE(fmt::format("step {}", step));
      const model::StepInput st = steps.take();
      ASSERT_EQ(st.logits_indices.size(), 2u);
      std::vector<float> logits(2 * V);
      const Status fs = (*be)->forward(st, logits);
      ASSERT_TRUE(fs) << fs.error().message;
      expect_usable_rows(logits, V);
      for (int s = 0; s < 2; ++s) {
        const int32_t next = greedy_token(logits.data() + s * V, V);
        steps.add(s, std::span<const int32_t>(&next, 1), false);
      }
    }
  }
}

// --seed picks the weights: the same seed gives the same logits, another seed other logits.
TEST(CudaBackendDummy, SeedDeterminesTheWeights) {
  FLINT_REQUIRE_GPU();
  const model::FlintConfig c = small_config();
  auto logits_for = [&](uint64_t seed) {
    auto be = CudaBackend::create_dummy(c, DType::kBF16, seed);
    EXPECT_TRUE(be.has_value()) << be.error().message;
    std::vector<float> logits(c.vocab_size, NAN);
    if (!be) return logits;
    cpu::SimpleSteps steps(1, 64, 16);
    EXPECT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
    const std::vector<int32_t> prompt = {5, 17, 29, 41, 53};
    steps.add(0, prompt, false);
    const Status st = (*be)->forward(steps.take(), logits);
    EXPECT_TRUE(st) << st.error().message;
    return logits;
  };
  const std::vector<float> a = logits_for(3), b = logits_for(3), other = logits_for(4);
  EXPECT_LT(max_abs_diff(a, b), 1e-4f);
  EXPECT_GT(max_abs_diff(a, other), 1e-2f);
}

TEST(CudaBackendDummy, RefusesAConfigTheKernelsCannotRead) {
  FLINT_REQUIRE_GPU();
  model::FlintConfig c = small_config();
  c.hidden_size = 96;  // not a multiple of NVFP4's 64-element blocks (BF16 would take it)
  auto be = CudaBackend::create_dummy(c, DType::kNVFP4, 1);
  ASSERT_FALSE(be.has_value());
  EXPECT_EQ(be.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(be.error().message.find("hidden_size"), std::string::npos) << be.error().message;
}

// What serve does: the profiled backend on dummy weights, then the engine's real KV cache.
TEST(CudaBackendDummy, ProfiledBackendThenServesSteps) {
  FLINT_REQUIRE_GPU();
  const model::FlintConfig c = small_config();
  for (DType dt : {DType::kBF16, DType::kNVFP4}) {
    SCOPED_TRACE(fmt::format("linear dtype {}", dt));
    ProfileShape shape;
    shape.num_tokens = 129;
    shape.num_seqs = 4;
    shape.max_model_len = 256;
    GpuMemoryFacts facts;
    auto be = create_profiled_dummy_backend(c, dt, /*seed=*/1, shape, &facts);
    ASSERT_TRUE(be.has_value()) << be.error().message;
    EXPECT_GT(facts.total, 0);
    cpu::SimpleSteps steps(3, 256, 16);
    ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> prompt(1 + 20 * s);
      std::iota(prompt.begin(), prompt.end(), 11 * s);
      steps.add(s, prompt, false);
    }
    std::vector<float> logits(3 * c.vocab_size);
    const Status st = (*be)->forward(steps.take(), logits);
    ASSERT_TRUE(st) << st.error().message;
    expect_usable_rows(logits, c.vocab_size);
  }
}

}  // namespace
}  // namespace flint::cuda
