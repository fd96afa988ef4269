// The prefill path (steps over CudaForward::kPrefillMinTokens tokens) against the CPU backend:
// BF16 and NVFP4 tiny models, several sequences with chunks longer than the window mixed with
// decode tokens and chunks that continue a cached prefix, and decode steps of more sequences than
// that threshold (one new token each: the split-KV decode attention inside the prefill path) or
// of more than one LM-head GEMV pass of rows (the head through cuBLAS).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyOptions;

struct Case {
  const char* name;
  DType dt;
  int64_t window, kv_heads, head_dim;
};

struct RowStats {
  double worst = 0;             // max |diff| / max |logit| over all rows of all steps
  int rows = 0, rows_over = 0;  // logits rows, and rows whose own max |diff| > tol * scale
};

TinyOptions case_options(const Case& k, int64_t top_k, uint64_t seed) {
  TinyOptions o;
  o.linear_dtype = k.dt;
  o.sliding_window = k.window;
  o.num_kv_heads = k.kv_heads;
  o.head_dim = k.head_dim;
  o.expert_bias = true;
  if (top_k > 0) o.num_experts_per_tok = top_k;
  o.seed = seed;
  return o;
}

// Adds every logits row of one step to st: its max |diff| over the step's max |logit| (at least 1).
void add_rows(RowStats& st, const std::vector<float>& want, const std::vector<float>& got,
              size_t rows, int64_t V, double tol) {
  double scale = 1;
  for (float x : want) scale = std::max(scale, double(std::fabs(x)));
  for (size_t r = 0; r < rows; ++r) {
    double err = 0;
    for (int64_t j = 0; j < V; ++j)
      err = std::max(err, std::fabs(double(got[r * V + j]) - want[r * V + j]));
    st.worst = std::max(st.worst, err / scale);
    st.rows += 1;
    st.rows_over += err / scale > tol;
  }
}

// A tiny model on the CPU and the GPU backend, both with a bf16 KV cache for `steps`.
struct BackendPair {
  cpu::testing::TinyModel m;
  cpu::CpuBackend cpu_be;
  std::unique_ptr<CudaBackend> gpu_be;

  BackendPair(const TinyOptions& o, const cpu::SimpleSteps& steps)
      : m(cpu::testing::make_tiny_model(o)), cpu_be(m.weights, 2) {
    auto g = CudaBackend::create(m.weights);
    EXPECT_TRUE(g.has_value());
    if (!g) return;
    gpu_be = std::move(g).value();
    EXPECT_TRUE(cpu_be.init_kv_cache(steps.kv_spec(DType::kBF16)));
    EXPECT_TRUE(gpu_be->init_kv_cache(steps.kv_spec(DType::kBF16)));
  }

  // Runs `in` on both; adds its logits rows to st unless st is null. False if the GPU failed.
  bool forward(const model::StepInput& in, RowStats* st, double tol) {
    const int64_t V = m.weights.config.vocab_size;
    std::vector<float> want(in.logits_indices.size() * V), got(want.size());
    EXPECT_TRUE(cpu_be.forward(in, want));
    const Status gs = gpu_be->forward(in, got);
    EXPECT_TRUE(gs) << gs.error().message;
    if (!gs) return false;
    if (st != nullptr) add_rows(*st, want, got, in.logits_indices.size(), V, tol);
    return true;
  }
};

// Runs six mixed steps (every one over the prefill threshold) on both backends.
RowStats run_case(const Case& k, int64_t top_k, double tol) {
  const TinyOptions o = case_options(k, top_k, 81);
  const int64_t V = o.vocab_size;
  RowStats st;
  cpu::SimpleSteps steps(3, 256, 16);
  BackendPair b(o, steps);
  if (!b.gpu_be) return st;
  std::mt19937_64 g(4);
  std::vector<std::vector<int32_t>> seqs(3, std::vector<int32_t>(200));
  for (auto& s : seqs)
    for (auto& t : s) t = static_cast<int32_t>(g() % V);
  const std::vector<std::vector<size_t>> plan = {{40, 0, 23}, {1, 70, 17}, {65, 1, 1},
                                                 {1, 1, 90},  {33, 1, 1},  {1, 60, 19}};
  std::vector<size_t> at(3, 0);
  for (size_t p = 0; p < plan.size(); ++p) {
    for (size_t s = 0; s < 3; ++s) {
      const size_t n = std::min(plan[p][s], seqs[s].size() - at[s]);
      if (n == 0) continue;
      steps.add(static_cast<int>(s), std::span(seqs[s]).subspan(at[s], n), true);
      at[s] += n;
    }
    const model::StepInput step = steps.take();
    EXPECT_GT(step.num_tokens(), CudaForward::kPrefillMinTokens);
    if (!b.forward(step, &st, tol)) return st;
  }
  return st;
}

// Prompts of num_seqs sequences (sequence s: prompt_len(s) tokens) in one step, then six decode
// steps of all of them; top-8 of 8 experts. With more than kPrefillMinTokens sequences the decode
// steps run through the prefill path; with more than kLmHeadGemvRows, the LM head through cuBLAS
// (both paths).
template <class PromptLen>
RowStats run_many_decode(const Case& k, int num_seqs, double tol, PromptLen prompt_len) {
  const TinyOptions o = case_options(k, 8, 83);
  const int64_t V = o.vocab_size;
  RowStats st;
  cpu::SimpleSteps steps(num_seqs, 128, 16);
  BackendPair b(o, steps);
  if (!b.gpu_be) return st;
  std::mt19937_64 g(5);
  for (int step = 0; step < 7; ++step) {
    for (int s = 0; s < num_seqs; ++s) {
      const size_t n = step == 0 ? size_t(prompt_len(s)) : 1;
      std::vector<int32_t> toks(n);
      for (auto& t : toks) t = static_cast<int32_t>(g() % V);
      steps.add(s, toks, false);
    }
    const model::StepInput in = steps.take();
    EXPECT_EQ(in.logits_indices.size(), size_t(num_seqs));
    // The prompts (step 0) are covered by the cases above.
    if (!b.forward(in, step == 0 ? nullptr : &st, tol)) return st;
  }
  return st;
}

const Case kCases[] = {{"bf16_w5_gqa2", DType::kBF16, 5, 2, 16},
                       {"nvfp4_w5_gqa2", DType::kNVFP4, 5, 2, 16},
                       {"bf16_w37_mha_hd64", DType::kBF16, 37, 4, 64},
                       {"nvfp4_w2_gqa4_hd32", DType::kNVFP4, 2, 1, 32}};

// bf16 activations into the GEMMs and bf16 P in attention (the decode path keeps f32).
constexpr double kTol = 1e-2;

TEST(CudaPrefill, LongChunksMatchCpuBackendWithEveryExpertSelected) {
  FLINT_REQUIRE_GPU();
  // top-k = all 8 experts: no routing choice, so every row must match.
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const RowStats st = run_case(k, 8, kTol);
    std::printf("  %-20s top-8 of 8: worst %.2e, rows over %.0e: %d of %d\n", k.name, st.worst,
                kTol, st.rows_over, st.rows);
    EXPECT_EQ(st.rows_over, 0);
    EXPECT_GT(st.rows, 0);
  }
}

TEST(CudaPrefill, LongChunksMatchCpuBackendUpToRoutingFlips) {
  FLINT_REQUIRE_GPU();
  // top-2 of 8: the bf16 activations move router logits by ~1e-3, which flips the odd near-tied
  // top-k choice against the CPU; such a token's logits differ by a few percent. A kernel bug
  // would move most rows, so at most 5% of the rows may be off.
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const RowStats st = run_case(k, 0, kTol);
    std::printf("  %-20s top-2 of 8: worst %.2e, rows over %.0e: %d of %d\n", k.name, st.worst,
                kTol, st.rows_over, st.rows);
    EXPECT_LE(st.rows_over * 20, st.rows);
    EXPECT_GT(st.rows, 0);
  }
}

// Every case's decode steps of num_seqs sequences: no logits row over tol.
template <class PromptLen>
void expect_decode_steps_match(int num_seqs, double tol, PromptLen prompt_len) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const RowStats st = run_many_decode(k, num_seqs, tol, prompt_len);
    std::printf("  %-20s %d-sequence decode steps: worst %.2e, rows over %.0e: %d of %d\n", k.name,
                num_seqs, st.worst, tol, st.rows_over, st.rows);
    EXPECT_EQ(st.rows_over, 0);
    EXPECT_EQ(st.rows, 6 * num_seqs);
  }
}

TEST(CudaPrefill, DecodeStepsOfManySequencesMatchCpuBackend) {
  FLINT_REQUIRE_GPU();
  static_assert(40 > CudaForward::kPrefillMinTokens);
  // Prompts of 1 .. 58 tokens: inside and across the windows.
  expect_decode_steps_match(40, kTol, [](int s) { return 1 + (s * 7) % 58; });
}

// 16 sequences: the layered decode path (f32 activations, close to the CPU) with the LM head of
// more than one GEMV pass through cuBLAS, which must keep that precision.
TEST(CudaPrefill, LayeredDecodeStepsWithSixteenLogitsRowsMatchCpuBackend) {
  FLINT_REQUIRE_GPU();
  static_assert(24 <= CudaForward::kPrefillMinTokens && 16 > CudaForward::kLmHeadGemvRows);
  // Prompts of 1 or 2 tokens, so that the prompt step (24 tokens) stays on the layered path too:
  // a prefill-path prompt step leaves bf16-rounded K/V that move the later logits by ~2e-3.
  expect_decode_steps_match(16, 1e-3, [](int s) { return 1 + s % 2; });
}

}  // namespace
}  // namespace flint::cuda
