// CudaBackend::forward_sample: greedy rows give the arg max of the logits forward() returns, top-k
// rows stay among the k best and draw what sample() draws from forward()'s logits, and a (seed,
// step) reproduces its token.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "backends/cpu/forward.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/greedy_head.h"
#include "backends/cuda/kernels/sampling.h"
#include "backends/cuda/weights.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using cpu::testing::TinyOptions;
using testing::DeviceArray;

TEST(CudaBackendSample, MatchesLogitsOfForward) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 1000;
  o.seed = 41;
  const auto m = cpu::testing::make_tiny_model(o);
  const int64_t V = o.vocab_size;
  constexpr int kSeqs = 4;
  auto logits_be = CudaBackend::create(m.weights);
  auto sample_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(logits_be.has_value() && sample_be.has_value());
  ASSERT_TRUE((*sample_be)->can_sample());
  cpu::SimpleSteps steps(kSeqs, 128, 16);
  ASSERT_TRUE((*logits_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*sample_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  std::vector<int32_t> last(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    std::vector<int32_t> prompt(5 + 3 * s);
    std::iota(prompt.begin(), prompt.end(), 17 * s);
    steps.add(s, prompt, false);
  }
  for (int step = 0; step < 40; ++step) {
    const model::StepInput st = steps.take();
    ASSERT_EQ(st.logits_indices.size(), size_t(kSeqs));
    std::vector<float> logits(kSeqs * V);
    ASSERT_TRUE((*logits_be)->forward(st, logits));
    std::vector<model::DeviceSampling> params(kSeqs);
    params[0].temperature = 0.0f;  // greedy
    params[1].temperature = 1.0f;  // top-3
    params[1].top_k = 3;
    params[2].temperature = 0.8f;  // nucleus
    params[2].top_p = 0.5f;
    params[3].temperature = 1.0f;  // top-1 with min_p
    params[3].top_k = 1;
    params[3].min_p = 0.1f;
    for (int s = 0; s < kSeqs; ++s) {
      params[s].seed = 5 + s;
      params[s].step = step;
    }
    std::vector<int32_t> tokens(kSeqs, -1);
    const Status ss = (*sample_be)->forward_sample(st, params, tokens);
    ASSERT_TRUE(ss) << ss.error().message;
    for (int s = 0; s < kSeqs; ++s) {
      const float* row = logits.data() + s * V;
      std::vector<int32_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      const auto rank = std::find(order.begin(), order.end(), tokens[s]) - order.begin();
      if (s == 0 || s == 3) EXPECT_EQ(rank, 0) << "step " << step << " seq " << s;
      if (s == 1) EXPECT_LT(rank, 3) << "step " << step;
    }
    for (int s = 0; s < kSeqs; ++s) steps.add(s, std::span<const int32_t>(&tokens[s], 1), false);
  }
  EXPECT_GT((*sample_be)->graph_stats().replays, 30);
}

// All rows greedy: the greedy LM head (kernels/greedy_head.h) picks, reading the FP32 head only for
// its candidates. Its token is the arg max of the one-row FP32 GEMV's logits; forward() computes
// 4 rows with cuBLAS, whose sums may round differently, so a different token must be a tie within
// f32 rounding of forward()'s best.
TEST(CudaBackendSample, AllGreedyRowsPickTheArgmaxOfForwardLogits) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 1000;
  o.seed = 43;
  const auto m = cpu::testing::make_tiny_model(o);
  ASSERT_EQ(m.weights.lm_head.w.dtype(), DType::kF32);
  const int64_t V = o.vocab_size;
  constexpr int kSeqs = 4;
  auto logits_be = CudaBackend::create(m.weights);
  auto sample_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(logits_be.has_value() && sample_be.has_value());
  cpu::SimpleSteps steps(kSeqs, 128, 16);
  ASSERT_TRUE((*logits_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*sample_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  for (int s = 0; s < kSeqs; ++s) {
    std::vector<int32_t> prompt(4 + 5 * s);
    std::iota(prompt.begin(), prompt.end(), 29 * s + 3);
    steps.add(s, prompt, false);
  }
  int exact = 0, total = 0;
  for (int step = 0; step < 40; ++step) {
    const model::StepInput st = steps.take();
    const int n = static_cast<int>(st.logits_indices.size());
    ASSERT_EQ(n, kSeqs);
    std::vector<float> logits(n * V);
    ASSERT_TRUE((*logits_be)->forward(st, logits));
    std::vector<model::DeviceSampling> params(n);
    for (auto& p : params) p.temperature = 0.0f;
    std::vector<int32_t> tokens(n, -1);
    const Status ss = (*sample_be)->forward_sample(st, params, tokens);
    ASSERT_TRUE(ss) << ss.error().message;
    for (int s = 0; s < n; ++s) {
      const float* row = logits.data() + s * V;
      const int64_t best = std::max_element(row, row + V) - row;
      ASSERT_GE(tokens[s], 0);
      ASSERT_LT(tokens[s], V);
      ++total;
      if (tokens[s] == best) {
        ++exact;
      } else {
        EXPECT_LE(row[best] - row[tokens[s]], 4e-6f * std::fabs(row[best]))
            << "step " << step << " seq " << s << ": " << tokens[s] << " against " << best;
      }
    }
    for (int s = 0; s < n; ++s) steps.add(s, std::span<const int32_t>(&tokens[s], 1), false);
  }
  EXPECT_GE(exact, total - 2);
  EXPECT_EQ((*sample_be)->graph_stats().greedy_head_steps, 40);
}

// Rows that keep at most kTopKHeadMax tokens (top_k 1 .. 128, or greedy rows beside them) sample
// from topk_logits' rows (kernels/greedy_head.h): the token is the one sample() draws from the
// full logits that forward() returns (one row: the same one-row FP32 GEMV, bit for bit), over 36
// steps that vary K, temperature, top_p, min_p and the seed; a top_k of 0 (no cut) or above 128
// takes the full head.
TEST(CudaBackendSample, TopKRowsDrawWhatTheSamplerDrawsFromTheFullLogits) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 40000;  // 128 blocks of the pick: 1024 maxima, so K 128 is a real cut
  o.seed = 53;
  const auto m = cpu::testing::make_tiny_model(o);
  ASSERT_EQ(m.weights.lm_head.w.dtype(), DType::kF32);
  const int64_t V = o.vocab_size;
  auto logits_be = CudaBackend::create(m.weights);
  auto sample_be = CudaBackend::create(m.weights);
  ASSERT_TRUE(logits_be.has_value() && sample_be.has_value());
  cpu::SimpleSteps steps(1, 128, 16);
  ASSERT_TRUE((*logits_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  ASSERT_TRUE((*sample_be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  const std::vector<int32_t> prompt = {5, 900, 31000, 7, 12};
  steps.add(0, prompt, false);
  const int32_t ks[] = {20, 1, 128, 5, 0, 129};
  const float temps[] = {1.0f, 0.6f, 1.7f};
  const float top_ps[] = {0.95f, 1.0f, 0.5f};
  DeviceArray<float> d_logits{size_t(V)};
  DeviceArray<int32_t> d_token{1};
  int cut_steps = 0;
  for (int step = 0; step < 36; ++step) {
    const model::StepInput st = steps.take();
    std::vector<float> logits(V);
    ASSERT_TRUE((*logits_be)->forward(st, logits));
    model::DeviceSampling p;
    p.top_k = ks[step % 6];
    p.temperature = temps[step % 3];
    p.top_p = top_ps[(step / 3) % 3];
    p.min_p = step % 4 == 3 ? 0.02f : 0.0f;
    p.seed = 100 + step;
    p.step = step;
    if (p.top_k >= 1 && p.top_k <= kTopKHeadMax) ++cut_steps;
    std::vector<int32_t> token(1, -1);
    const Status ss = (*sample_be)->forward_sample(st, std::span(&p, 1), token);
    ASSERT_TRUE(ss) << ss.error().message;
    FLINT_CUDA_CHECK(
        cudaMemcpy(d_logits.get(), logits.data(), V * sizeof(float), cudaMemcpyHostToDevice));
    const SampleParams sp{p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.step};
    DeviceArray<SampleParams> d_params(std::vector<SampleParams>{sp});
    sample(d_token.get(), d_logits.get(), d_params.get(), 1, V, nullptr);
    EXPECT_EQ(token[0], d_token.to_host()[0]) << "step " << step << " top_k " << p.top_k << " T "
                                              << p.temperature << " top_p " << p.top_p;
    steps.add(0, std::span<const int32_t>(token.data(), 1), false);
  }
  EXPECT_EQ(cut_steps, 24);
  EXPECT_EQ((*sample_be)->graph_stats().topk_head_steps, cut_steps);
  EXPECT_EQ((*sample_be)->graph_stats().greedy_head_steps, 0);
}

// The int8 copy reads rows in 16-byte chunks: a head whose rows are not a multiple of 16 gets no
// copy and says why (greedy steps then read the whole FP32 head, as greedy_head_serves decides).
// Rows of 64 get the copy.
TEST(CudaBackendSample, HeadRowsNotAMultipleOf16GetNoGreedyCopyAndSayWhy) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 300;
  o.seed = 47;
  for (int64_t hidden : {64, 72}) {
    SCOPED_TRACE(fmt::format("hidden {}", hidden));
    o.hidden_size = hidden;
    const auto m = cpu::testing::make_tiny_model(o);
    auto dw = DeviceWeights::upload(m.weights, nullptr);
    ASSERT_TRUE(dw.has_value()) << dw.error().message;
    if (hidden == 64) {
      EXPECT_NE(dw->greedy_head(), nullptr);
      EXPECT_EQ(dw->greedy_head_missing(), "");
    } else {
      EXPECT_EQ(dw->greedy_head(), nullptr);
      EXPECT_EQ(dw->greedy_head_missing(), "its rows of 72 are not a multiple of 16");
    }
  }
}

// launch_sample / wait_sample (the engine's async scheduling): each decode step is launched with
// `chain` before the previous one's tokens are read, its token ids copied on the device from that
// step's samples. The tokens must be those of forward_sample on steps given the same tokens from
// the host, for the greedy head, the top-k head and the full logits with the sampler.
TEST(CudaBackendSample, ChainedStepsDrawWhatStepsGivenTheirTokensDraw) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 1000;
  o.seed = 47;
  const auto m = cpu::testing::make_tiny_model(o);
  constexpr int kSeqs = 3, kSteps = 24;
  struct Variant {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
  };
  for (const Variant& v : {Variant{"greedy", 0.0f, 0, 1.0f}, Variant{"top-k", 0.9f, 5, 0.95f},
                           Variant{"top-p", 0.7f, 0, 0.9f}}) {
    SCOPED_TRACE(v.name);
    auto fed = CudaBackend::create(m.weights);
    auto chained = CudaBackend::create(m.weights);
    ASSERT_TRUE(fed.has_value() && chained.has_value());
    ASSERT_TRUE((*chained)->can_chain());
    cpu::SimpleSteps fed_steps(kSeqs, 128, 16), chain_steps(kSeqs, 128, 16);
    ASSERT_TRUE((*fed)->init_kv_cache(fed_steps.kv_spec(DType::kBF16)));
    ASSERT_TRUE((*chained)->init_kv_cache(chain_steps.kv_spec(DType::kBF16)));
    for (int s = 0; s < kSeqs; ++s) {
      std::vector<int32_t> prompt(3 + 4 * s);
      std::iota(prompt.begin(), prompt.end(), 31 * s + 7);
      fed_steps.add(s, prompt, false);
      chain_steps.add(s, prompt, false);
    }
    auto params = [&](int step) {
      std::vector<model::DeviceSampling> p(kSeqs);
      for (int s = 0; s < kSeqs; ++s) {
        p[s].temperature = v.temperature;
        p[s].top_k = v.top_k;
        p[s].top_p = v.top_p;
        p[s].seed = 100 + s;
        p[s].step = static_cast<uint64_t>(step);
      }
      return p;
    };
    std::vector<std::vector<int32_t>> want(kSteps, std::vector<int32_t>(kSeqs, -1));
    for (int step = 0; step < kSteps; ++step) {
      const Status st = (*fed)->forward_sample(fed_steps.take(), params(step), want[step]);
      ASSERT_TRUE(st) << st.error().message;
      for (int s = 0; s < kSeqs; ++s)
        fed_steps.add(s, std::span<const int32_t>(&want[step][s], 1), false);
    }
    std::vector<std::vector<int32_t>> got(kSteps, std::vector<int32_t>(kSeqs, -1));
    const int32_t unknown = 0;  // the chained steps' ids on the host: never read
    ASSERT_TRUE((*chained)->launch_sample(chain_steps.take(), params(0), false));
    for (int step = 1; step < kSteps; ++step) {
      for (int s = 0; s < kSeqs; ++s)
        chain_steps.add(s, std::span<const int32_t>(&unknown, 1), false);
      const Status st = (*chained)->launch_sample(chain_steps.take(), params(step), true);
      ASSERT_TRUE(st) << st.error().message;
      ASSERT_TRUE((*chained)->wait_sample(got[step - 1]));
    }
    ASSERT_TRUE((*chained)->wait_sample(got[kSteps - 1]));
    for (int step = 0; step < kSteps; ++step) EXPECT_EQ(got[step], want[step]) << "step " << step;
    EXPECT_GT((*chained)->graph_stats().replays, kSteps / 2);
  }
}

// The queue's contract: a chained step needs a launch before it with as many rows as it has
// tokens, at most kMaxQueued launches are outstanding, wait_sample needs one (and room for its
// tokens, else the launch stays queued), and forward_sample, forward and init_kv_cache refuse to
// run while one is outstanding.
TEST(CudaBackendSample, QueuedLaunchesRefuseWhatTheContractForbids) {
  FLINT_REQUIRE_GPU();
  const auto m = cpu::testing::make_tiny_model(TinyOptions{});
  auto be = CudaBackend::create(m.weights);
  ASSERT_TRUE(be.has_value());
  cpu::SimpleSteps steps(2, 32, 4);
  ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  std::vector<int32_t> tokens(2);
  EXPECT_FALSE((*be)->wait_sample(tokens));
  const std::vector<int32_t> prompt = {5, 6, 7}, next = {0};
  steps.add(0, prompt, false);
  steps.add(1, prompt, false);
  const std::vector<model::DeviceSampling> greedy(2, model::DeviceSampling{0.0f});
  const model::StepInput first = steps.take();
  EXPECT_FALSE((*be)->launch_sample(first, greedy, true)) << "nothing to chain from";
  ASSERT_TRUE((*be)->launch_sample(first, greedy, false));
  cpu::SimpleSteps other(1, 32, 4);
  other.add(0, next, false);
  const model::StepInput one = other.take();  // one token after a two-row launch
  EXPECT_FALSE((*be)->launch_sample(one, std::span(greedy).first(1), true));
  steps.add(0, next, false);
  steps.add(1, next, false);
  const model::StepInput two = steps.take();
  EXPECT_FALSE((*be)->forward_sample(two, greedy, tokens)) << "a launch is outstanding";
  std::vector<float> logits(2 * m.weights.config.vocab_size);
  EXPECT_FALSE((*be)->forward(two, logits)) << "a launch is outstanding";
  EXPECT_FALSE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16))) << "a launch is outstanding";
  ASSERT_TRUE((*be)->launch_sample(two, greedy, true));
  EXPECT_FALSE((*be)->launch_sample(two, greedy, true)) << "a third outstanding launch";
  std::vector<int32_t> one_token(1);
  EXPECT_FALSE((*be)->wait_sample(one_token)) << "room for 1 of the 2 tokens: the launch stays";
  ASSERT_TRUE((*be)->wait_sample(tokens));
  ASSERT_TRUE((*be)->wait_sample(tokens));
  EXPECT_FALSE((*be)->wait_sample(tokens));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaBackendSample, RejectsMismatchedParams) {
  FLINT_REQUIRE_GPU();
  const auto m = cpu::testing::make_tiny_model(TinyOptions{});
  auto be = CudaBackend::create(m.weights);
  ASSERT_TRUE(be.has_value());
  cpu::SimpleSteps steps(1, 16);
  ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
  const std::vector<int32_t> prompt = {1, 2, 3};
  steps.add(0, prompt, false);
  std::vector<int32_t> tokens(4);
  const Status st = (*be)->forward_sample(steps.take(), {}, tokens);
  EXPECT_FALSE(st);
}

// Sixty decode steps with Flint's vocabulary at batch 1, 8 and 64 (the largest graphed batch),
// graphs on and off, with logits to the host and with top-k/top-p sampling on the device, every
// sampled token fed back: each forward must succeed and each token must be a vocabulary id. It also
// prints the median wall time per step of each variant (informative only: speed belongs to `flint
// bench`).
TEST(CudaBackendSample, DecodesAtVocab150KForBatchesUpTo64WithAndWithoutGraphs) {
  FLINT_REQUIRE_GPU();
  TinyOptions o;
  o.linear_dtype = DType::kBF16;
  o.vocab_size = 150144;
  o.num_layers = 8;
  o.sliding = {false, true, true, true, false, true, true, false};
  o.seed = 43;
  const auto m = cpu::testing::make_tiny_model(o);
  const int64_t V = o.vocab_size;
  for (int batch : {1, 8, 64}) {
    for (bool graphs : {false, true}) {
      for (bool device_sampling : {false, true}) {
        auto be = CudaBackend::create(m.weights);
        ASSERT_TRUE(be.has_value());
        (*be)->set_graphs_enabled(graphs);
        cpu::SimpleSteps steps(batch, 256, 16);
        ASSERT_TRUE((*be)->init_kv_cache(steps.kv_spec(DType::kBF16)));
        for (int s = 0; s < batch; ++s) {
          std::vector<int32_t> prompt(20);
          std::iota(prompt.begin(), prompt.end(), 100 * s);
          steps.add(s, prompt, false);
        }
        std::vector<float> logits(size_t(batch) * V);
        std::vector<int32_t> tokens(batch);
        std::vector<model::DeviceSampling> params(batch);
        for (auto& p : params) {
          p.temperature = 0.7f;
          p.top_k = 50;
          p.top_p = 0.95f;
        }
        std::vector<double> us;
        for (int step = 0; step < 60; ++step) {
          const model::StepInput st = steps.take();
          const auto t0 = std::chrono::steady_clock::now();
          if (device_sampling) {
            for (auto& p : params) p.step = step;
            ASSERT_TRUE((*be)->forward_sample(st, params, tokens));
          } else {
            ASSERT_TRUE((*be)->forward(st, logits));
            for (int s = 0; s < batch; ++s) {  // a greedy host pick, cheaper than real sampling
              const float* row = logits.data() + size_t(s) * V;
              tokens[s] = static_cast<int32_t>(std::max_element(row, row + V) - row);
            }
          }
          const auto t1 = std::chrono::steady_clock::now();
          if (step >= 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
          for (int s = 0; s < batch; ++s) {
            ASSERT_TRUE(tokens[s] >= 0 && tokens[s] < V) << "token " << tokens[s];
            steps.add(s, std::span<const int32_t>(&tokens[s], 1), false);
          }
        }
        std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
        std::printf("  batch %2d graphs %-3s %-22s: %8.1f us per step (median of %zu)\n", batch,
                    graphs ? "on" : "off",
                    device_sampling ? "device sampling" : "logits to host+argmax",
                    us[us.size() / 2], us.size());
      }
    }
  }
}

}  // namespace
}  // namespace flint::cuda
