// The sampling kernel against an exact host reference of the candidate sets (the rules of
// engine::sample_token): membership, greedy and top-k 1, the low-temperature limit, seeds, and the
// empirical distribution over many draws (chi-square).
#include "backends/cuda/kernels/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

// The tokens sample_token may return and their probabilities (normalised over the kept set).
struct Kept {
  std::vector<int32_t> ids;
  std::vector<double> prob;  // [ids.size()]
  bool has(int32_t id) const { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
};

Kept host_reference(const float* l, int64_t V, const SampleParams& s) {
  int32_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (l[i] > l[best]) best = static_cast<int32_t>(i);
  if (s.temperature < 1e-5f || !std::isfinite(l[best])) return {{best}, {1.0}};
  std::vector<double> p(V);
  for (int64_t i = 0; i < V; ++i) p[i] = std::exp((double(l[i]) - l[best]) / s.temperature);
  if (s.min_p > 0)
    for (double& x : p)
      if (x < s.min_p) x = 0;
  std::vector<int32_t> cand;
  for (int64_t i = 0; i < V; ++i)
    if (p[i] > 0) cand.push_back(static_cast<int32_t>(i));
  std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  if (s.top_k > 0 && size_t(s.top_k) < cand.size()) cand.resize(s.top_k);
  if (s.top_p < 1.0f) {
    double mass = 0;
    for (int32_t id : cand) mass += p[id];
    double cum = 0;
    for (size_t n = 0; n < cand.size(); ++n) {
      cum += p[cand[n]] / mass;
      if (cum >= s.top_p) {
        cand.resize(n + 1);
        break;
      }
    }
  }
  Kept k;
  double mass = 0;
  for (int32_t id : cand) mass += p[id];
  for (int32_t id : cand) {
    k.ids.push_back(id);
    k.prob.push_back(p[id] / mass);
  }
  return k;
}

std::vector<int32_t> sample_on_gpu(const std::vector<float>& logits, int64_t V,
                                   const std::vector<SampleParams>& params) {
  const int rows = static_cast<int>(params.size());
  DeviceArray<float> dl(logits);
  DeviceArray<SampleParams> dp(params);
  DeviceArray<int32_t> dt(rows);
  sample(dt.get(), dl.get(), dp.get(), rows, V, nullptr);
  return dt.to_host();
}

SampleParams params(float t, int k, float p, float min_p, uint64_t seed, uint64_t step) {
  return SampleParams{t, k, p, min_p, seed, step};
}

// Logits with structure: a few strong tokens, a flat bulk, some -inf, and optional ties.
std::vector<float> make_logits(int rows, int64_t V, uint64_t seed, bool ties) {
  std::vector<float> l = random_floats(size_t(rows) * V, seed, -4.0f, 4.0f);
  for (int r = 0; r < rows; ++r) {
    float* row = l.data() + int64_t(r) * V;
    for (int64_t i = (seed * 7 + r) % 13; i < V; i += 13) row[i] += 3.0f;
    if (V > 5) row[(r * 31 + 3) % V] = -std::numeric_limits<float>::infinity();
    if (ties)
      for (int64_t i = 0; i < V; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
  }
  return l;
}

const std::vector<SampleParams> kConfigs = {
    params(1.0f, 0, 1.0f, 0.0f, 0, 0),      params(0.7f, 50, 1.0f, 0.0f, 0, 0),
    params(1.3f, 0, 0.9f, 0.0f, 0, 0),      params(0.8f, 20, 0.8f, 0.05f, 0, 0),
    params(1.0f, 0, 1.0f, 0.1f, 0, 0),      params(2.0f, 7, 0.5f, 0.0f, 0, 0),
    params(0.5f, 1000, 0.99f, 0.01f, 0, 0), params(1.0f, 3, 1.0f, 0.0f, 0, 0)};

TEST(Sampling, TokenLiesInHostCandidateSet) {
  FLINT_REQUIRE_GPU();
  // 262147: slices too large for shared memory, read from global memory instead.
  for (int64_t V : {1, 7, 769, 1025, 4099, 150001, 262147}) {
    for (bool ties : {false, true}) {
      SCOPED_TRACE(fmt::format("vocab={} ties={}", V, ties));
      const int rows = V > 200000 ? 8 : V > 10000 ? 16 : 64;
      const auto logits = make_logits(rows, V, uint64_t(V) + ties, ties);
      for (int draw = 0; draw < (V > 10000 ? 2 : 6); ++draw) {
        std::vector<SampleParams> ps;
        for (int r = 0; r < rows; ++r) {
          SampleParams p = kConfigs[(r + draw) % kConfigs.size()];
          p.seed = 1000 + r;
          p.step = draw;
          ps.push_back(p);
        }
        const auto got = sample_on_gpu(logits, V, ps);
        for (int r = 0; r < rows; ++r) {
          const Kept k = host_reference(logits.data() + int64_t(r) * V, V, ps[r]);
          EXPECT_TRUE(k.has(got[r]))
              << "row " << r << " token " << got[r] << " outside the host's " << k.ids.size()
              << " candidates (t=" << ps[r].temperature << " k=" << ps[r].top_k
              << " p=" << ps[r].top_p << " min_p=" << ps[r].min_p << ")";
        }
      }
    }
  }
}

TEST(Sampling, GreedyAndTopK1AreTheArgmax) {
  FLINT_REQUIRE_GPU();
  for (int64_t V : {1, 33, 1025, 150001, 262147}) {
    for (bool ties : {false, true}) {
      SCOPED_TRACE(fmt::format("vocab={} ties={}", V, ties));
      const int rows = 9;
      const auto logits = make_logits(rows, V, 5 + V, ties);
      std::vector<SampleParams> ps;
      for (int r = 0; r < rows; ++r) {
        ps.push_back(r % 3 == 0   ? params(0.0f, 0, 1.0f, 0.0f, r, 0)
                     : r % 3 == 1 ? params(1.0f, 1, 1.0f, 0.0f, r, 0)
                                  : params(0.9f, 1, 0.3f, 0.2f, r, 0));
      }
      const auto got = sample_on_gpu(logits, V, ps);
      for (int r = 0; r < rows; ++r) {
        const float* row = logits.data() + int64_t(r) * V;
        const int32_t want = static_cast<int32_t>(std::max_element(row, row + V) - row);
        EXPECT_EQ(got[r], want) << "row " << r;
      }
    }
  }
}

// Every logit equal: the filters keep the lowest ids, so the cuts fall inside and across the
// blocks that share a row.
TEST(Sampling, EqualLogitsKeepTheLowestIds) {
  FLINT_REQUIRE_GPU();
  for (int64_t V : {1025, 150001, 262147}) {
    SCOPED_TRACE(fmt::format("vocab={}", V));
    const std::vector<SampleParams> cfgs = {params(1.0f, 1, 1.0f, 0.0f, 0, 0),
                                            params(1.0f, 7, 1.0f, 0.0f, 0, 0),
                                            params(1.0f, int(V / 8) + 1, 1.0f, 0.0f, 0, 0),
                                            params(1.0f, int(V / 2), 1.0f, 0.0f, 0, 0),
                                            params(1.0f, 0, 0.3f, 0.0f, 0, 0),
                                            params(0.5f, 0, 0.9f, 0.5f, 0, 0),
                                            params(1.0f, int(V / 3), 0.5f, 0.0f, 0, 0),
                                            params(2.0f, 0, 1e-6f, 0.0f, 0, 0)};
    const int rows = static_cast<int>(cfgs.size()) * 4;
    const std::vector<float> logits(size_t(rows) * V, 0.5f);
    std::vector<SampleParams> ps;
    for (int r = 0; r < rows; ++r) {
      SampleParams p = cfgs[r % cfgs.size()];
      p.seed = 77 + r;
      p.step = r;
      ps.push_back(p);
    }
    const auto got = sample_on_gpu(logits, V, ps);
    for (int r = 0; r < rows; ++r) {
      const Kept k = host_reference(logits.data() + int64_t(r) * V, V, ps[r]);
      EXPECT_TRUE(k.has(got[r])) << "row " << r << " token " << got[r] << " outside the lowest "
                                 << k.ids.size() << " ids (k=" << ps[r].top_k
                                 << " p=" << ps[r].top_p << ")";
    }
  }
}

TEST(Sampling, LowTemperatureLimitIsTheArgmax) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 5003;
  const int rows = 128;
  std::vector<float> logits = random_floats(size_t(rows) * V, 3, -2.0f, 2.0f);
  std::vector<SampleParams> ps;
  for (int r = 0; r < rows; ++r) {
    logits[int64_t(r) * V + (r * 97) % V] = 2.1f;  // a margin of at least 0.1
    ps.push_back(params(1e-3f, r % 2 ? 0 : 40, r % 3 ? 1.0f : 0.95f, 0.0f, r, r));
  }
  const auto got = sample_on_gpu(logits, V, ps);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(got[r], (r * 97) % V) << "row " << r;
}

TEST(Sampling, SeedReproducesAndAnotherSeedOrStepDiffers) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 1000;
  const int rows = 256;
  std::vector<float> one = random_floats(V, 11, -0.5f, 0.5f);  // nearly flat
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) logits.insert(logits.end(), one.begin(), one.end());
  auto run = [&](uint64_t seed_base, uint64_t step) {
    std::vector<SampleParams> ps;
    for (int r = 0; r < rows; ++r) ps.push_back(params(1.0f, 0, 1.0f, 0.0f, seed_base + r, step));
    return sample_on_gpu(logits, V, ps);
  };
  const auto a = run(42, 7), b = run(42, 7), c = run(4242, 7), d = run(42, 8);
  EXPECT_EQ(a, b);
  int diff_seed = 0, diff_step = 0;
  for (int r = 0; r < rows; ++r) {
    diff_seed += a[r] != c[r];
    diff_step += a[r] != d[r];
  }
  EXPECT_GE(diff_seed, rows * 9 / 10);
  EXPECT_GE(diff_step, rows * 9 / 10);
  // Rows with the same logits but different seeds are not all alike either.
  EXPECT_GE(std::set<int32_t>(a.begin(), a.end()).size(), size_t(rows / 2));
}

// Pearson chi-square of `counts` against `prob` (cells with expected < 5 pooled); returns
// (statistic, degrees of freedom).
std::pair<double, int> chi_square(const std::vector<int64_t>& counts,
                                  const std::vector<double>& prob, int64_t n) {
  double stat = 0, pool_obs = 0, pool_exp = 0;
  int cells = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double e = prob[i] * n;
    if (e < 5) {
      pool_obs += counts[i];
      pool_exp += e;
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (pool_exp > 0) {
    stat += (pool_obs - pool_exp) * (pool_obs - pool_exp) / std::max(pool_exp, 1.0);
    ++cells;
  }
  return {stat, std::max(cells - 1, 1)};
}

TEST(Sampling, EmpiricalDistributionMatchesHostProbabilities) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 257;
  const int64_t draws = 40000;
  const std::vector<float> one = random_floats(V, 21, -3.0f, 3.0f);
  std::vector<float> logits;
  logits.reserve(draws * V);
  for (int64_t r = 0; r < draws; ++r) logits.insert(logits.end(), one.begin(), one.end());
  for (const SampleParams& cfg :
       {params(1.0f, 0, 1.0f, 0.0f, 0, 0), params(0.8f, 30, 1.0f, 0.0f, 0, 0),
        params(1.3f, 0, 0.85f, 0.0f, 0, 0), params(0.9f, 40, 0.9f, 0.03f, 0, 0),
        params(2.0f, 0, 1.0f, 0.2f, 0, 0)}) {
    SCOPED_TRACE(
        fmt::format("t={} k={} p={} min_p={}", cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p));
    std::vector<SampleParams> ps(draws, cfg);
    for (int64_t r = 0; r < draws; ++r) {
      ps[r].seed = 99;
      ps[r].step = r;  // one seed, successive steps
    }
    const auto got = sample_on_gpu(logits, V, ps);
    const Kept k = host_reference(one.data(), V, cfg);
    std::vector<int64_t> counts(k.ids.size(), 0);
    int64_t outside = 0;
    for (int32_t t : got) {
      const auto it = std::find(k.ids.begin(), k.ids.end(), t);
      if (it == k.ids.end()) {
        ++outside;
      } else {
        ++counts[it - k.ids.begin()];
      }
    }
    EXPECT_EQ(outside, 0);
    const auto [stat, df] = chi_square(counts, k.prob, draws);
    // Mean df, sd sqrt(2 df): six sd is p < 1e-6 even with the heavier tail of small df.
    const double bound = df + 6.0 * std::sqrt(2.0 * df) + 10.0;
    std::printf("  chi-square %.1f over %d df (bound %.1f), %zu kept tokens\n", stat, df, bound,
                k.ids.size());
    EXPECT_LT(stat, bound) << df << " degrees of freedom";
  }
}

TEST(Sampling, Vocab150KRowsTimed) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 150144;
  for (int rows : {1, 8, 64}) {
    const auto logits = make_logits(rows, V, 77 + rows, false);
    for (const SampleParams& cfg :
         {params(0.7f, 50, 0.95f, 0.0f, 1, 0), params(1.0f, 0, 0.95f, 0.0f, 1, 0),
          params(0.7f, 20, 0.8f, 0.05f, 1, 0), params(0.6f, 0, 1.0f, 0.05f, 1, 0),
          params(0.0f, 0, 1.0f, 0.0f, 1, 0)}) {
      std::vector<SampleParams> ps(rows, cfg);
      DeviceArray<float> dl(logits);
      DeviceArray<SampleParams> dp(ps);
      DeviceArray<int32_t> dt(rows);
      cudaEvent_t e0, e1;
      FLINT_CUDA_CHECK(cudaEventCreate(&e0));
      FLINT_CUDA_CHECK(cudaEventCreate(&e1));
      std::vector<float> ms;
      for (int it = 0; it < 23; ++it) {
        FLINT_CUDA_CHECK(cudaEventRecord(e0));
        sample(dt.get(), dl.get(), dp.get(), rows, V, nullptr);
        FLINT_CUDA_CHECK(cudaEventRecord(e1));
        FLINT_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        FLINT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= 3) ms.push_back(t);  // warm-up
      }
      std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
      std::printf("  sample vocab %lld rows %d t=%.1f k=%d p=%.2f min_p=%.2f: %.1f us (median)\n",
                  static_cast<long long>(V), rows, cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p,
                  ms[ms.size() / 2] * 1000.0);
      const auto got = dt.to_host();
      for (int r = 0; r < rows; ++r) {
        EXPECT_TRUE(host_reference(logits.data() + int64_t(r) * V, V, cfg).has(got[r]));
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
}

// Calls outside the contract stop with the reason before any launch (no device needed).
TEST(Sampling, CallsOutsideTheContractStop) {
  int32_t token = 0;
  float logit = 0.0f;
  uint32_t count = 1;
  const SampleParams p{};
  EXPECT_DEATH(sample(&token, &logit, &p, 1, 0, nullptr), "sample: vocab 0");
  EXPECT_DEATH(sample(&token, &logit, &p, 65536, 1, nullptr), "sample: 65536 rows");
  EXPECT_DEATH(
      sample(&token, &logit, &p, 1, 1, nullptr, SampleCandidates{&count, nullptr, nullptr}),
      "sample: a candidate list needs its count, ids and logits");
}

// Rows that are -inf but at a few tokens, each with its candidate list in shuffled order: the
// list's draw is the full row's, for every rule and seed. Lists of 0, 1, 20, 64, 300 and 512
// tokens, one of 513 (counted, too long to hold: drawn from its row), ties (every value taken
// twice, one group across the top-k cut), masses that round to zero, a NaN and a +inf. The lists
// alone serve: passed with a row of zeros instead of the logits, every listed row draws the same.
TEST(Sampling, CandidateListsDrawWhatTheirRowsDraw) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 151552;
  const std::vector<int> sizes = {0, 1, 20, 64, 300, 512, 513, 40};
  const int rows = static_cast<int>(sizes.size());
  std::vector<float> logits(size_t(rows) * V, -std::numeric_limits<float>::infinity());
  std::vector<uint32_t> count(static_cast<size_t>(rows));
  std::vector<int32_t> ids(size_t(rows) * kSampleCandidates, -1);
  std::vector<float> cand(size_t(rows) * kSampleCandidates, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const int n = sizes[r];
    // Distinct random ids, listed in an order unrelated to id or value.
    std::mt19937 gen(700 + r);
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(V - 1));
    std::vector<int32_t> pick(size_t(n) * 4);
    for (int32_t& id : pick) id = any_id(gen);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    ASSERT_GE(pick.size(), size_t(n));
    pick.resize(size_t(n));
    const std::vector<float> v = random_floats(size_t(n), 800 + r, -6.0f, 6.0f);
    std::vector<size_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), size_t(0));
    std::shuffle(order.begin(), order.end(), std::mt19937(900 + r));
    for (int j = 0; j < n; ++j) {
      float x = r == 2 ? std::round(v[j]) : r == 3 ? std::round(v[j] * 0.5f) : v[j];  // ties
      if (j % 17 == 5) x = v[j] - 200.0f;  // exp() of it is no mass in 2^-40 units
      if (r == 4 && j == 7) x = std::numeric_limits<float>::quiet_NaN();
      if (r == 7 && j == 3) x = std::numeric_limits<float>::infinity();
      logits[size_t(r) * V + size_t(pick[j])] = x;
      if (j < kSampleCandidates) {
        ids[size_t(r) * kSampleCandidates + order[j] % kSampleCandidates] = pick[j];
        cand[size_t(r) * kSampleCandidates + order[j] % kSampleCandidates] = x;
      }
    }
    count[r] = static_cast<uint32_t>(n);
    if (n > kSampleCandidates) continue;
    for (int j = 0; j < n; ++j) ASSERT_GE(ids[size_t(r) * kSampleCandidates + j], 0);
  }
  DeviceArray<float> dl(logits), zeros(std::vector<float>(logits.size(), 0.0f));
  DeviceArray<uint32_t> dc(count);
  DeviceArray<int32_t> di(ids), t_row(rows), t_list(rows), t_zero(rows);
  DeviceArray<float> dv(cand);
  const SampleCandidates list{dc.get(), di.get(), dv.get()};
  int draws = 0;
  for (float temp : {0.0f, 0.6f, 1.0f, 1.7f}) {
    for (int k : {0, 1, 20, 100}) {
      for (float top_p : {1.0f, 0.95f, 0.3f}) {
        for (float min_p : {0.0f, 0.1f}) {
          for (uint64_t step = 0; step < 3; ++step) {
            std::vector<SampleParams> ps(size_t(rows), params(temp, k, top_p, min_p, 0, step));
            for (int r = 0; r < rows; ++r) ps[r].seed = 31 * uint64_t(r) + 5;
            DeviceArray<SampleParams> dp(ps);
            sample(t_row.get(), dl.get(), dp.get(), rows, V, nullptr);
            sample(t_list.get(), dl.get(), dp.get(), rows, V, nullptr, list);
            sample(t_zero.get(), zeros.get(), dp.get(), rows, V, nullptr, list);
            const auto want = t_row.to_host(), got = t_list.to_host(), zero = t_zero.to_host();
            for (int r = 0; r < rows; ++r) {
              SCOPED_TRACE(fmt::format("row {} ({} candidates) t={} k={} p={} min_p={} step {}", r,
                                       sizes[r], temp, k, top_p, min_p, step));
              EXPECT_EQ(got[r], want[r]);
              if (sizes[r] <= kSampleCandidates) EXPECT_EQ(zero[r], want[r]);
            }
            ++draws;
          }
        }
      }
    }
  }
  EXPECT_EQ(draws, 288);
}

}  // namespace
}  // namespace flint::cuda
