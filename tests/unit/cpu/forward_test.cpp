// The CPU forward pass against the NumPy reference (tests/reference/flint_ref.py) on many tiny
// random models, and against itself: incremental, chunked and batched steps equal one prefill.
#include "backends/cpu/forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/support/tiny_model.h"

namespace flint::cpu {
namespace {

using testing::TinyModel;
using testing::TinyOptions;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

// Logits of every position of each sequence, each run alone as one prefill.
std::vector<float> prefill_logits(CpuBackend& be, const std::vector<int32_t>& tokens,
                                  DType kv = DType::kF32) {
  SimpleSteps steps(1, static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(be.init_kv_cache(steps.kv_spec(kv)));
  steps.add(0, tokens, /*all_logits=*/true);
  std::vector<float> logits(tokens.size() * be.config().vocab_size);
  const Status st = be.forward(steps.take(), logits);
  EXPECT_TRUE(st) << (st ? "" : st.error().message);
  return logits;
}

// max |a - b| / max |b|
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

struct RefCase {
  std::string name;
  TinyOptions opt;
  std::vector<int64_t> seq_lens;
  double tolerance;
};

std::string python() {
  if (const char* p = std::getenv("FLINT_PYTHON")) return p;
  return std::string(FLINT_SOURCE_DIR) + "/.venv/bin/python";
}

std::vector<RefCase> reference_cases() {
  std::vector<RefCase> cases;
  TinyOptions base;  // full, sliding, sliding, full; window 5; 8 experts top-2; shared expert
  cases.push_back({"base_f32", base, {1, 13, 29}, 1e-4});
  {
    TinyOptions o = base;
    o.sliding_window = 1;
    o.num_experts_per_tok = 1;
    o.norm_topk_prob = false;
    o.routed_scaling_factor = 2.5f;
    o.seed = 2;
    cases.push_back({"window1_top1_noremorm_scaled", o, {17}, 1e-4});
  }
  {
    TinyOptions o = base;
    o.sliding_window = 2;
    o.num_experts = 4;
    o.num_experts_per_tok = 4;  // every expert
    o.expert_bias = true;
    o.shared_intermediate_size = 0;
    o.seed = 3;
    cases.push_back({"window2_all_experts_bias_noshared", o, {19}, 1e-4});
  }
  {
    TinyOptions o = base;
    o.num_layers = 5;
    o.sliding = {true, false, true, true, true};  // a sliding dense layer first, all-sliding tail
    o.num_dense = 2;
    o.expert_bias = true;
    o.norm_topk_prob = true;
    o.num_kv_heads = 1;  // GQA group of 4
    o.sink_scale = 4.0f;
    o.seed = 4;
    cases.push_back({"pattern_gqa4_bias_big_sinks", o, {23}, 1e-4});
  }
  {
    TinyOptions o = base;
    o.num_layers = 2;
    o.sliding = {true, true};
    o.num_dense = 0;
    o.num_kv_heads = 4;  // no grouping
    o.expert_bias = true;
    o.seed = 5;
    cases.push_back({"all_sliding_mha", o, {21}, 1e-4});
  }
  {
    // Window 513 needs sequences longer than 513; the model stays tiny.
    TinyOptions o;
    o.num_layers = 2;
    o.sliding = {true, false};
    o.num_dense = 0;
    o.hidden_size = 32;
    o.num_heads = 2;
    o.num_kv_heads = 1;
    o.head_dim = 16;
    o.moe_intermediate_size = 16;
    o.shared_intermediate_size = 16;
    o.num_experts = 4;
    o.sliding_window = 513;
    o.vocab_size = 64;
    o.seed = 6;
    cases.push_back({"window513", o, {600}, 1e-4});
  }
  {
    TinyOptions o = base;
    o.linear_dtype = DType::kBF16;
    o.expert_bias = true;
    o.seed = 7;
    cases.push_back({"bf16_weights", o, {15}, 1e-4});
  }
  {
    TinyOptions o = base;
    o.linear_dtype = DType::kNVFP4;
    o.seed = 8;
    cases.push_back({"nvfp4_weights", o, {15}, 1e-4});
  }
  return cases;
}

TEST(Forward, MatchesNumpyReference) {
  const auto root =
      std::filesystem::temp_directory_path() / ("flint_cpu_ref_" + std::to_string(::getpid()));
  std::vector<RefCase> cases = reference_cases();
  std::vector<TinyModel> models;
  std::vector<std::vector<std::vector<int32_t>>> tokens;
  std::string cmd = python() + " " + FLINT_SOURCE_DIR + "/tests/reference/flint_ref.py";
  for (size_t i = 0; i < cases.size(); ++i) {
    models.push_back(testing::make_tiny_model(cases[i].opt));
    std::vector<std::vector<int32_t>> seqs;
    for (size_t s = 0; s < cases[i].seq_lens.size(); ++s)
      seqs.push_back(
          random_tokens(cases[i].seq_lens[s], cases[i].opt.vocab_size, 100 + i * 10 + s));
    const auto dir = root / cases[i].name;
    std::filesystem::create_directories(dir);
    testing::write_reference_case(models.back(), dir.string(), seqs);
    tokens.push_back(seqs);
    cmd += " " + dir.string();
  }
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    CpuBackend be(models[i].weights, 2);
    const int64_t V = cases[i].opt.vocab_size;
    for (size_t s = 0; s < tokens[i].size(); ++s) {
      const std::vector<float> got = prefill_logits(be, tokens[i][s]);
      std::vector<float> want(got.size());
      std::ifstream f(root / cases[i].name / ("logits_" + std::to_string(s) + ".f32"),
                      std::ios::binary);
      f.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
      ASSERT_TRUE(f.good()) << "reference logits missing";
      const double err = rel_error(got, want);
      EXPECT_LT(err, cases[i].tolerance)
          << "sequence " << s << " of length " << tokens[i][s].size();
      // The comparison is only meaningful if the logits are not all alike.
      double spread = 0;
      for (int64_t v = 0; v < V; ++v)
        spread = std::max(spread, std::fabs(double{want[v]} - want[0]));
      EXPECT_GT(spread, 0.1);
    }
  }
  std::filesystem::remove_all(root);
}

TinyOptions ring_options(int64_t window) {
  TinyOptions o;
  o.sliding_window = window;
  o.expert_bias = true;
  o.seed = 40 + static_cast<uint64_t>(window);
  return o;
}

TEST(Forward, TokenByTokenDecodeEqualsPrefill) {
  for (int64_t window : {1, 2, 5}) {
    SCOPED_TRACE(fmt::format("window={}", window));
    const TinyModel m = testing::make_tiny_model(ring_options(window));
    CpuBackend be(m.weights, 2);
    const auto tokens = random_tokens(41, m.weights.config.vocab_size, 9);  // ring wraps 8+ times
    const std::vector<float> full = prefill_logits(be, tokens);
    SimpleSteps steps(1, 41);
    ASSERT_TRUE(be.init_kv_cache(steps.kv_spec(DType::kF32)));
    const int64_t V = m.weights.config.vocab_size;
    std::vector<float> one(V);
    for (size_t t = 0; t < tokens.size(); ++t) {
      steps.add(0, std::span(tokens).subspan(t, 1), true);
      ASSERT_TRUE(be.forward(steps.take(), one));
      for (int64_t v = 0; v < V; ++v) ASSERT_EQ(one[v], full[t * V + v]) << "position " << t;
    }
  }
}

TEST(Forward, UnevenChunkedPrefillEqualsPrefill) {
  const TinyModel m = testing::make_tiny_model(ring_options(5));
  CpuBackend be(m.weights, 2);
  const auto tokens = random_tokens(60, m.weights.config.vocab_size, 10);
  const std::vector<float> full = prefill_logits(be, tokens);
  SimpleSteps steps(1, 60);
  ASSERT_TRUE(be.init_kv_cache(steps.kv_spec(DType::kF32)));
  const int64_t V = m.weights.config.vocab_size;
  size_t at = 0;
  for (size_t chunk : {7, 1, 12, 3, 2, 16, 19}) {  // chunks shorter and longer than the window
    steps.add(0, std::span(tokens).subspan(at, chunk), true);
    std::vector<float> got(chunk * V);
    ASSERT_TRUE(be.forward(steps.take(), got));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], full[at * V + i]) << "chunk at " << at;
    at += chunk;
  }
  ASSERT_EQ(at, tokens.size());
}

TEST(Forward, BatchedSequencesEqualEachAlone) {
  const TinyModel m = testing::make_tiny_model(ring_options(5));
  CpuBackend be(m.weights, 2);
  const int64_t V = m.weights.config.vocab_size;
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(23, V, 11), random_tokens(9, V, 12),
                                                  random_tokens(31, V, 13)};
  std::vector<std::vector<float>> alone;
  for (const auto& s : seqs) alone.push_back(prefill_logits(be, s));

  // Step 1: prefill the first 20 / 9 / 14 tokens; then steps mixing decode tokens and chunks.
  SimpleSteps steps(3, 32);
  ASSERT_TRUE(be.init_kv_cache(steps.kv_spec(DType::kF32)));
  const std::vector<std::vector<size_t>> plan = {{20, 9, 14}, {1, 0, 10}, {1, 0, 1}, {1, 0, 6}};
  std::vector<size_t> at(3, 0);
  for (const auto& sizes : plan) {
    std::vector<std::pair<size_t, size_t>> rows;  // (seq, position) of each logits row
    for (size_t s = 0; s < 3; ++s) {
      if (sizes[s] == 0) continue;
      steps.add(static_cast<int>(s), std::span(seqs[s]).subspan(at[s], sizes[s]), true);
      for (size_t i = 0; i < sizes[s]; ++i) rows.emplace_back(s, at[s] + i);
      at[s] += sizes[s];
    }
    std::vector<float> got(rows.size() * V);
    ASSERT_TRUE(be.forward(steps.take(), got));
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_EQ(got[r * V + v], alone[rows[r].first][rows[r].second * V + v])
            << "seq " << rows[r].first << " position " << rows[r].second;
  }
  EXPECT_EQ(at, (std::vector<size_t>{23, 9, 31}));
}

TEST(Forward, Bf16KvCacheStaysCloseToF32) {
  const TinyModel m = testing::make_tiny_model(ring_options(5));
  CpuBackend be(m.weights, 2);
  const auto tokens = random_tokens(30, m.weights.config.vocab_size, 14);
  const std::vector<float> f32 = prefill_logits(be, tokens, DType::kF32);
  const std::vector<float> bf16 = prefill_logits(be, tokens, DType::kBF16);
  const double err = rel_error(bf16, f32);
  EXPECT_LT(err, 2e-2);
  EXPECT_GT(err, 0.0);  // the cache really is BF16
}

class ForwardBadInput : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(be_.init_kv_cache(steps_.kv_spec(DType::kF32))); }
  std::string error_of(const model::StepInput& step) {
    std::vector<float> logits(64 * m_.weights.config.vocab_size);
    const Status st = be_.forward(step, logits);
    return st ? std::string() : st.error().message;
  }
  TinyModel m_ = testing::make_tiny_model(ring_options(5));
  CpuBackend be_{m_.weights, 2};
  SimpleSteps steps_{1, 16};
};

TEST_F(ForwardBadInput, RejectsTokenOutsideVocabulary) {
  const std::vector<int32_t> toks = {1, 2, static_cast<int32_t>(m_.weights.config.vocab_size)};
  steps_.add(0, toks, false);
  EXPECT_EQ(error_of(steps_.take()),
            "cpu forward: token id 96 at row 2 is outside the vocabulary [0, 96)");
  const std::vector<int32_t> neg = {-1};
  steps_.add(0, neg, false);
  EXPECT_NE(error_of(steps_.take()).find("token id -1"), std::string::npos);
}

TEST_F(ForwardBadInput, RejectsEmptyStep) {
  EXPECT_EQ(error_of(model::StepInput{}), "cpu forward: empty step (no tokens)");
}

TEST_F(ForwardBadInput, RejectsPositionsOverMaxLength) {
  m_.weights.config.max_position_embeddings = 8;
  const auto toks = random_tokens(9, m_.weights.config.vocab_size, 1);
  steps_.add(0, toks, false);
  EXPECT_EQ(error_of(steps_.take()),
            "cpu forward: sequence 0 reaches length 9, over max_position_embeddings 8");
}

TEST_F(ForwardBadInput, RejectsInconsistentStep) {
  const std::vector<int32_t> toks = {1, 2, 3};
  steps_.add(0, toks, false);
  model::StepInput step = steps_.take();
  step.positions[1] = 7;
  EXPECT_EQ(error_of(step), "cpu forward: token 1 of sequence 0 has position 7, expected 1");
  step.positions[1] = 1;
  step.ring_ids[0] = 5;
  EXPECT_EQ(error_of(step), "cpu forward: ring id 5 of sequence 0 outside [0, 1)");
}

}  // namespace
}  // namespace flint::cpu
