// The greedy LM head (kernels/greedy_head.h) against the one-row FP32 GEMV and a host arg max: the
// same token, bit for bit, on random heads, on heads with planted near-ties that the int8 copy
// cannot tell apart, and on a head where every row is a candidate; its int8 copy, scales and
// bounds against host arithmetic; the bound against the FP32 GEMV's logits row by row; topk_logits'
// rows against the GEMV's and the sampler's draws from both.
#include "backends/cuda/kernels/greedy_head.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/sampling.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

struct Case {
  int64_t V = 0, d = 0;
  std::vector<float> w;       // [V, d]
  std::vector<float> x;       // [num_x, d]
  std::vector<float> g;       // [d] the norm weight
  std::vector<int32_t> rows;  // logits row t reads x row rows[t]
  float eps = 1e-5f;
};

// The lowest index among the largest values, NaN skipped (argmax's rule).
int32_t host_argmax(const float* v, int64_t n) {
  int64_t best = n;
  float bv = -FLT_MAX;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > bv || (v[i] == bv && i < best)) {
      bv = v[i];
      best = i;
    }
  }
  return best < n ? static_cast<int32_t>(best) : 0;
}

// Each row's token from the one-row FP32 GEMV, as a full greedy step computes it.
std::vector<int32_t> reference_tokens(const Case& c) {
  DeviceArray<float> w(c.w), x(c.x), g(c.g), y(c.V);
  const LinearRef head{DType::kF32, c.V, c.d, 1, w.get()};
  std::vector<int32_t> out;
  for (int32_t r : c.rows) {
    gemv(y.get(), c.V, x.get() + int64_t(r) * c.d, c.d, 1, head, false, nullptr,
         GemvNorm{g.get(), c.eps});
    const std::vector<float> l = y.to_host();
    out.push_back(host_argmax(l.data(), c.V));
  }
  return out;
}

// The greedy head's load-time copy of an FP32 head on the device.
struct Prepared {
  DeviceArray<int8_t> q;
  DeviceArray<float> scales, bounds;
  int32_t bad = 0;
  LinearRef approx;  // the I8 copy with its row scales
};

Prepared prepare(const float* w, int64_t V, int64_t d) {
  Prepared p{DeviceArray<int8_t>{size_t(V * d)}, DeviceArray<float>{size_t(V)},
             DeviceArray<float>{size_t(V)}};
  DeviceArray<int32_t> bad(std::vector<int32_t>{0});
  const LinearRef head{DType::kF32, V, d, 1, w};
  greedy_head_prepare(p.q.get(), p.scales.get(), p.bounds.get(), bad.get(), head, nullptr);
  p.bad = bad.to_host()[0];
  p.approx = head;
  p.approx.dtype = DType::kI8;
  p.approx.w = p.q.get();
  p.approx.row_scale = p.scales.get();
  return p;
}

// The arguments both heads share: c's rows of x (device copies x, g, rows) against its head and
// the prepared copy, approximate logits into approx.
GreedyPickArgs pick_args(const Case& c, const LinearRef& head, const Prepared& p, const float* x,
                         const float* g, const int32_t* rows, float* approx) {
  GreedyPickArgs a;
  a.approx = approx;
  a.x = x;
  a.x_stride = c.d;
  a.x_rows = rows;
  a.norm = g;
  a.eps = c.eps;
  a.head = head;
  a.copy = p.approx;
  a.bounds = p.bounds.get();
  a.num_rows = static_cast<int>(c.rows.size());
  return a;
}

std::vector<int32_t> greedy_tokens(const Case& c) {
  DeviceArray<float> w(c.w), x(c.x), g(c.g);
  const LinearRef head{DType::kF32, c.V, c.d, 1, w.get()};
  Prepared p = prepare(w.get(), c.V, c.d);
  EXPECT_EQ(p.bad, 0);
  const int n = static_cast<int>(c.rows.size());
  DeviceArray<float> approx{size_t(n * c.V)};
  DeviceArray<int32_t> rows(c.rows), tokens{size_t(n)};
  DeviceArray<uint64_t> keys(std::vector<uint64_t>(size_t(n), 0));
  GreedyPickArgs a = pick_args(c, head, p, x.get(), g.get(), rows.get(), approx.get());
  a.keys = keys.get();
  a.tokens = tokens.get();
  greedy_approx(a, nullptr);
  greedy_pick(a, nullptr);
  for (uint64_t k : keys.to_host()) EXPECT_EQ(k, 0u) << "keys are zero again for the next step";
  return tokens.to_host();
}

float nudge(float v, int ulps) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = static_cast<uint32_t>(static_cast<int64_t>(u) + ulps);
  std::memcpy(&v, &u, 4);
  return v;
}

TEST(GreedyHead, PicksTheFp32ArgmaxOnRandomRowsAndPlantedNearTies) {
  FLINT_REQUIRE_GPU();
  Case c;
  c.V = 5003;  // not a multiple of a block's 256 rows or of the 128 blocks
  c.d = 272;   // a multiple of 16 (the I8 chunk), not of 32: padded staging
  c.w = random_floats(size_t(c.V * c.d), 7, -0.5f, 0.5f);
  c.x = random_floats(size_t(9 * c.d), 8, -2.0f, 2.0f);
  c.g = random_floats(size_t(c.d), 9, 0.9f, 1.1f);
  c.rows = {7, 0, 3, 3, 8};
  // For x rows 0, 3 and 7, a winning row (x * g, scaled) at 1000 + 700 k, a copy of it further on
  // (equal logits: the lower row wins) and, before them, a copy with a few 1-ulp changes: the FP32
  // sums decide, where the int8 copies are the same row.
  const int32_t planted[3] = {0, 3, 7};
  for (int k = 0; k < 3; ++k) {
    const int64_t base = 1000 + 700 * k, copy = 4500 + k, near = 10 + k;
    for (int64_t i = 0; i < c.d; ++i) {
      const float v = 0.2f * c.x[planted[k] * c.d + i] * c.g[i];
      c.w[base * c.d + i] = v;
      c.w[copy * c.d + i] = v;
      c.w[near * c.d + i] = (i % 37 == 5) ? nudge(v, (i % 2) ? 1 : -1) : v;
    }
  }
  const std::vector<int32_t> want = reference_tokens(c);
  const std::vector<int32_t> got = greedy_tokens(c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(got[t], want[t]) << "logits row " << t << " (x row " << c.rows[t] << ")";
  }
  // The planted rows win (or their near copy does): the test exercised the ties.
  for (size_t t = 0; t < want.size(); ++t) {
    if (c.rows[t] == 8) continue;
    const int k = c.rows[t] == 0 ? 0 : c.rows[t] == 3 ? 1 : 2;
    EXPECT_TRUE(want[t] == 1000 + 700 * k || want[t] == 10 + k) << want[t];
  }
}

TEST(GreedyHead, EveryRowACandidateStillPicksTheFp32Argmax) {
  FLINT_REQUIRE_GPU();
  Case c;
  c.V = 3000;
  c.d = 128;
  // Every row the same int8 row: row r is a base row with element r % d moved by 1 + r / d ulps,
  // so only the FP32 sums tell them apart and every row is a candidate.
  const std::vector<float> base = random_floats(size_t(c.d), 11, -0.5f, 0.5f);
  c.w.resize(size_t(c.V * c.d));
  for (int64_t r = 0; r < c.V; ++r) {
    for (int64_t i = 0; i < c.d; ++i) c.w[r * c.d + i] = base[i];
    c.w[r * c.d + r % c.d] = nudge(base[r % c.d], 1 + int(r / c.d));
  }
  c.x = random_floats(size_t(3 * c.d), 12, -1.0f, 1.0f);
  c.g = random_floats(size_t(c.d), 13, 0.9f, 1.1f);
  c.rows = {2, 0};
  const std::vector<int32_t> want = reference_tokens(c);
  const std::vector<int32_t> got = greedy_tokens(c);
  EXPECT_EQ(got, want);
}

TEST(GreedyHead, ZeroRowGivesTokenZeroAsArgmaxDoes) {
  FLINT_REQUIRE_GPU();
  Case c;
  c.V = 700;
  c.d = 64;
  c.w = random_floats(size_t(c.V * c.d), 21, -0.5f, 0.5f);
  c.x.assign(size_t(2 * c.d), 0.0f);
  for (int64_t i = 0; i < c.d; ++i) c.x[c.d + i] = 0.01f * float(i % 7) - 0.03f;
  c.g = random_floats(size_t(c.d), 22, 0.9f, 1.1f);
  c.rows = {0, 1};
  const std::vector<int32_t> want = reference_tokens(c);
  EXPECT_EQ(want[0], 0);
  EXPECT_EQ(greedy_tokens(c), want);
}

// The copy against host float arithmetic (the same IEEE division and rounding): codes and scales
// bit for bit; bounds at least ||W_r - s_r Q_r|| (1 + g) + g ||W_r|| in long double and within
// 1e-6 of it; a zero row and a row too small for a normal scale coded as zeros (bound: the row's
// own norm); a row of one outlier; FLT_MAX coded (its bound is finite), an infinity or a NaN
// flagged.
TEST(GreedyHead, PrepareCodesRowsAsTheHostAndBoundsTheirError) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 37, d = 80;
  std::vector<float> w = random_floats(size_t(V * d), 31, -3.0f, 3.0f);
  for (int64_t i = 0; i < d; ++i) {
    w[4 * d + i] = 0.0f;                             // a zero row
    w[5 * d + i] = 1e-39f * float(i % 5 - 2);        // subnormal: the scale would not be normal
    w[6 * d + i] = i == 7 ? 1000.0f : w[6 * d + i];  // one outlier: coarse codes, a wide bound
  }
  DeviceArray<float> dw(w);
  Prepared p = prepare(dw.get(), V, d);
  EXPECT_EQ(p.bad, 0);
  const std::vector<int8_t> q = p.q.to_host();
  const std::vector<float> sc = p.scales.to_host(), bd = p.bounds.to_host();
  const long double g = (2.0L * d + 256) * 0x1p-24L;
  for (int64_t r = 0; r < V; ++r) {
    float mx = 0.0f;
    for (int64_t i = 0; i < d; ++i) mx = std::max(mx, std::fabs(w[r * d + i]));
    float s = mx / 127.0f;
    if (!(s >= FLT_MIN)) s = 0.0f;
    ASSERT_EQ(sc[r], s) << "row " << r;
    long double se = 0, sw = 0;
    for (int64_t i = 0; i < d; ++i) {
      const float v = w[r * d + i];
      const float t = s > 0 ? std::min(std::max(std::rint(v / s), -127.0f), 127.0f) : 0.0f;
      ASSERT_EQ(q[r * d + i], static_cast<int8_t>(t)) << "row " << r << " col " << i;
      const long double e = (long double)v - (long double)t * s;
      se += e * e;
      sw += (long double)v * v;
    }
    const long double want = std::sqrt(se) * (1 + g) + g * std::sqrt(sw);
    EXPECT_GE((long double)bd[r], want) << "row " << r;
    EXPECT_LE((long double)bd[r], want * (1 + 1e-6L)) << "row " << r;
  }
  EXPECT_EQ(sc[4], 0.0f);
  EXPECT_EQ(bd[4], 0.0f);
  EXPECT_EQ(sc[5], 0.0f);
  EXPECT_GT(bd[5], 0.0f);
  EXPECT_EQ(q[6 * d + 7], 127);
  for (float v : {FLT_MAX, INFINITY, std::nanf("")}) {
    std::vector<float> w2 = w;
    w2[3 * d + 4] = v;
    DeviceArray<float> dw2(w2);
    Prepared p2 = prepare(dw2.get(), V, d);
    EXPECT_EQ(p2.bad, v == FLT_MAX ? 0 : 1) << v;
    if (v == FLT_MAX) {
      EXPECT_EQ(p2.scales.to_host()[3], FLT_MAX / 127.0f);
      EXPECT_EQ(p2.q.to_host()[3 * d + 4], 127);
    }
  }
}

// Every row's approximate logit (greedy_approx at 1, 2, 3 and 8 rows a launch, rows of 400: a
// partial pass of its 2048-weight items) is within B_r of the one-row FP32 GEMV's, with X = ||x'||
// from a host double sum: the inequality the pick rests on, on random rows, rows with an outlier
// and rows of very different magnitudes.
TEST(GreedyHead, ApproximateLogitsStayWithinTheirBound) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 1501, d = 400;  // odd: a two-row group past the end
  std::vector<float> w = random_floats(size_t(V * d), 41, -0.5f, 0.5f);
  for (int64_t r = 0; r < V; r += 7) w[r * d + (r % d)] = 40.0f;  // outliers
  for (int64_t r = 3; r < V; r += 11) {
    for (int64_t i = 0; i < d; ++i) w[r * d + i] *= 1e-3f;  // small rows
  }
  const std::vector<float> x = random_floats(size_t(8 * d), 42, -3.0f, 3.0f);
  const std::vector<float> gw = random_floats(size_t(d), 43, 0.5f, 1.5f);
  DeviceArray<float> dw(w), dx(x), dg(gw), y(V);
  Prepared p = prepare(dw.get(), V, d);
  ASSERT_EQ(p.bad, 0);
  const std::vector<float> bd = p.bounds.to_host();
  const float eps = 1e-5f;
  const LinearRef head{DType::kF32, V, d, 1, dw.get()};
  double worst = 0.0;
  for (int n : {1, 2, 3, 8}) {
    DeviceArray<float> approx(std::vector<float>(size_t(n * V), NAN));
    GreedyPickArgs ga;
    ga.approx = approx.get();
    ga.x = dx.get();
    ga.x_stride = d;
    ga.x_rows = nullptr;  // row t
    ga.norm = dg.get();
    ga.eps = eps;
    ga.head = head;
    ga.copy = p.approx;
    ga.num_rows = n;
    greedy_approx(ga, nullptr);
    const std::vector<float> a = approx.to_host();
    for (int t = 0; t < n; ++t) {
      gemv(y.get(), V, dx.get() + t * d, d, 1, head, false, nullptr, GemvNorm{dg.get(), eps});
      const std::vector<float> l = y.to_host();
      double ms = 0, xx = 0;
      for (int64_t i = 0; i < d; ++i) ms += double(x[t * d + i]) * x[t * d + i];
      const double inv = 1.0 / std::sqrt(ms / d + eps);
      for (int64_t i = 0; i < d; ++i) xx += std::pow(double(x[t * d + i]) * gw[i] * inv, 2);
      const double X = std::sqrt(xx);
      for (int64_t r = 0; r < V; ++r) {
        const double err = std::fabs(double(a[t * V + r]) - double(l[r]));
        ASSERT_LE(err, X * bd[r]) << "rows " << n << " row " << t << " head row " << r;
        worst = std::max(worst, err / (X * bd[r]));
      }
    }
  }
  // The bound is not vacuous: some row uses a good part of it.
  EXPECT_GT(worst, 0.01);
}

// Each logits row's FP32 logits from the one-row GEMV ([rows, V], as a full step of one row
// computes them) and from greedy_approx + topk_logits with K = ks[t].
struct TopKRows {
  std::vector<float> full, got;
  // topk_logits' candidate lists (SampleCandidates): count per row, [rows, kSampleCandidates] each.
  std::vector<uint32_t> count;
  std::vector<int32_t> ids;
  std::vector<float> cand_logits;
};
TopKRows topk_rows(const Case& c, const std::vector<int32_t>& ks) {
  TopKRows out;
  DeviceArray<float> w(c.w), x(c.x), g(c.g), y(c.V);
  const LinearRef head{DType::kF32, c.V, c.d, 1, w.get()};
  for (int32_t r : c.rows) {
    gemv(y.get(), c.V, x.get() + int64_t(r) * c.d, c.d, 1, head, false, nullptr,
         GemvNorm{g.get(), c.eps});
    const std::vector<float> l = y.to_host();
    out.full.insert(out.full.end(), l.begin(), l.end());
  }
  Prepared p = prepare(w.get(), c.V, c.d);
  EXPECT_EQ(p.bad, 0);
  const int n = static_cast<int>(c.rows.size());
  DeviceArray<float> approx{size_t(n * c.V)}, maxima{size_t(n) * kTopKMaximaPerRow},
      logits{size_t(n * c.V)};
  DeviceArray<int32_t> rows(c.rows), top_k(ks);
  // The lists start as garbage: the first launch zeroes the counts.
  DeviceArray<uint32_t> count(std::vector<uint32_t>(size_t(n), 12345u));
  DeviceArray<int32_t> ids{size_t(n) * kSampleCandidates};
  DeviceArray<float> cand_logits{size_t(n) * kSampleCandidates};
  GreedyPickArgs a = pick_args(c, head, p, x.get(), g.get(), rows.get(), approx.get());
  a.top_k = top_k.get();
  a.maxima = maxima.get();
  a.logits = logits.get();
  a.cand_count = count.get();
  a.cand_ids = ids.get();
  a.cand_logits = cand_logits.get();
  greedy_approx(a, nullptr);
  topk_logits(a, nullptr);
  out.got = logits.to_host();
  out.count = count.to_host();
  out.ids = ids.to_host();
  out.cand_logits = cand_logits.to_host();
  return out;
}

// Row t of topk_logits against the GEMV's: each logit the same bits or -inf, and every row at or
// above the K-th largest logit kept. Returns how many rows it kept.
int64_t expect_top_k_kept(const TopKRows& r, int t, int64_t V, int32_t k) {
  const float* full = r.full.data() + int64_t(t) * V;
  const float* got = r.got.data() + int64_t(t) * V;
  std::vector<float> sorted(full, full + V);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(std::min<int64_t>(k, V) - 1)];
  int64_t kept = 0, wrong = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (got[i] == -INFINITY && full[i] < kth) continue;
    ++kept;
    if (std::memcmp(&got[i], &full[i], 4) != 0 && ++wrong <= 5) {
      ADD_FAILURE() << "logits row " << t << " K " << k << ": row " << i << " got " << got[i]
                    << ", the GEMV " << full[i] << " (K-th largest " << kth << ")";
    }
  }
  return kept;
}

// Row t's candidate list against its logits: the count is the number of logits above -inf and,
// when it fits, the list holds exactly those (id, logit) pairs, bit for bit.
void expect_candidate_list(const TopKRows& r, int t, int64_t V) {
  const float* got = r.got.data() + int64_t(t) * V;
  std::vector<std::pair<int32_t, uint32_t>> want, listed;
  for (int64_t i = 0; i < V; ++i) {
    if (got[i] != -INFINITY) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      want.emplace_back(static_cast<int32_t>(i), bits);
    }
  }
  ASSERT_EQ(r.count[t], want.size()) << "logits row " << t;
  if (want.size() > size_t(kSampleCandidates)) return;
  for (size_t j = 0; j < want.size(); ++j) {
    uint32_t bits;
    std::memcpy(&bits, &r.cand_logits[size_t(t) * kSampleCandidates + j], 4);
    listed.emplace_back(r.ids[size_t(t) * kSampleCandidates + j], bits);
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, want) << "logits row " << t;
}

// topk_logits keeps each row's top K with the GEMV's exact logits and -inf elsewhere (K 1, 20, 128
// and more rows than the 24 maxima of a 700-row head, where every logit is exact), on random rows
// with a tie of 30 equal rows across the 20th place and near copies of them that only the FP32
// sums tell apart; and sample() draws the same token from these rows as from the GEMV's whole
// rows, over temperatures, top_p, min_p and seeds.
TEST(GreedyHead, TopKLogitsKeepTheTopKExactlyAndSampleAsTheFullRows) {
  FLINT_REQUIRE_GPU();
  Case c;
  c.V = 40009;  // 128 blocks of 313 rows, the last one short
  c.d = 272;
  c.w = random_floats(size_t(c.V * c.d), 31, -0.5f, 0.5f);
  c.x = random_floats(size_t(4 * c.d), 32, -2.0f, 2.0f);
  c.g = random_floats(size_t(c.d), 33, 0.9f, 1.1f);
  c.rows = {1, 0, 3};
  // x row 0: 30 equal rows (0.1 x * g: above every random row) spread over the head, and 6 near
  // copies of them with 1-ulp changes.
  for (int k = 0; k < 36; ++k) {
    const int64_t r = 17 + 1111 * k;
    for (int64_t i = 0; i < c.d; ++i) {
      const float v = 0.1f * c.x[i] * c.g[i];
      c.w[r * c.d + i] = k < 30 || i % 41 != 3 ? v : nudge(v, k % 2 ? 1 : -1);
    }
  }
  const std::vector<std::vector<int32_t>> ks = {{20, 20, 128}, {1, 128, 5}};
  const std::vector<float> temps = {0.5f, 1.0f, 2.0f};
  const std::vector<float> top_ps = {1.0f, 0.9f, 0.3f};
  const std::vector<float> min_ps = {0.0f, 0.05f};
  for (const std::vector<int32_t>& k : ks) {
    const TopKRows r = topk_rows(c, k);
    int listed = 0;
    for (int t = 0; t < 3; ++t) {
      const int64_t kept = expect_top_k_kept(r, t, c.V, k[t]);
      EXPECT_GE(kept, k[t]);
      EXPECT_LT(kept, c.V / 8) << "the bound should leave few candidates (row " << t << ")";
      expect_candidate_list(r, t, c.V);
      listed += r.count[t] <= uint32_t(kSampleCandidates);
    }
    EXPECT_GT(listed, 0) << "no row's candidates fit a list: the list path went untested";
    DeviceArray<float> full(r.full), got(r.got);
    DeviceArray<uint32_t> count(r.count);
    DeviceArray<int32_t> ids(r.ids);
    DeviceArray<float> cand_logits(r.cand_logits);
    const SampleCandidates cand{count.get(), ids.get(), cand_logits.get()};
    DeviceArray<int32_t> tok_full{3}, tok_got{3}, tok_list{3};
    int draws = 0;
    for (float temp : temps) {
      for (float top_p : top_ps) {
        for (float min_p : min_ps) {
          for (uint64_t seed = 0; seed < 6; ++seed) {
            std::vector<SampleParams> p(3);
            for (int t = 0; t < 3; ++t) p[t] = SampleParams{temp, k[t], top_p, min_p, seed, seed};
            DeviceArray<SampleParams> params(p);
            sample(tok_full.get(), full.get(), params.get(), 3, c.V, nullptr);
            sample(tok_got.get(), got.get(), params.get(), 3, c.V, nullptr);
            sample(tok_list.get(), got.get(), params.get(), 3, c.V, nullptr, cand);
            EXPECT_EQ(tok_got.to_host(), tok_full.to_host())
                << "T " << temp << " top_p " << top_p << " min_p " << min_p << " seed " << seed;
            EXPECT_EQ(tok_list.to_host(), tok_full.to_host())
                << "from the lists: T " << temp << " top_p " << top_p << " min_p " << min_p
                << " seed " << seed;
            ++draws;
          }
        }
      }
    }
    EXPECT_EQ(draws, 108);
  }
  // A 700-row head has 3 blocks, 24 maxima: K 30 keeps every row exact; K 5 cuts.
  Case s;
  s.V = 700;
  s.d = 64;
  s.w = random_floats(size_t(s.V * s.d), 34, -0.5f, 0.5f);
  s.x = random_floats(size_t(2 * s.d), 35, -1.0f, 1.0f);
  s.g = random_floats(size_t(s.d), 36, 0.9f, 1.1f);
  s.rows = {0, 1};
  const TopKRows r = topk_rows(s, {30, 5});
  EXPECT_EQ(expect_top_k_kept(r, 0, s.V, 30), s.V);
  EXPECT_LT(expect_top_k_kept(r, 1, s.V, 5), s.V);
  expect_candidate_list(r, 0, s.V);  // 700 candidates: counted, too many to list
  expect_candidate_list(r, 1, s.V);
}

// Calls outside the launchers' contract stop with the reason before any launch (so no device is
// needed): a head that is not one FP32 matrix, 0 or more than 32 logits rows, a missing buffer.
TEST(GreedyHead, CallsOutsideTheContractStop) {
  const int64_t V = 16, d = 8;
  std::vector<float> w(V * d), x(d), approx(V), scales(V), bounds(V);
  std::vector<int8_t> q(V * d);
  std::vector<uint64_t> keys(2);
  std::vector<int32_t> tokens(2), bad(1);
  const LinearRef head{DType::kF32, V, d, 1, w.data()};
  LinearRef bf16 = head;
  bf16.dtype = DType::kBF16;
  EXPECT_DEATH(
      greedy_head_prepare(q.data(), scales.data(), bounds.data(), bad.data(), bf16, nullptr),
      "greedy_head_prepare: an FP32 matrix");
  LinearRef stack = head;
  stack.num_experts = 2;
  EXPECT_DEATH(
      greedy_head_prepare(q.data(), scales.data(), bounds.data(), bad.data(), stack, nullptr),
      "greedy_head_prepare: an FP32 matrix");
  LinearRef odd = head;  // rows of 8: not a multiple of the I8 GEMV's 16
  EXPECT_DEATH(
      greedy_head_prepare(q.data(), scales.data(), bounds.data(), bad.data(), odd, nullptr),
      "in % 16 == 0");
  EXPECT_DEATH(greedy_head_prepare(q.data(), scales.data(), nullptr, bad.data(),
                                   LinearRef{DType::kF32, V, 16, 1, w.data()}, nullptr),
               "greedy_head_prepare: null buffer");
  GreedyPickArgs a;
  a.approx = approx.data();
  a.x = x.data();
  a.x_stride = d;
  a.head = head;
  a.bounds = bounds.data();
  a.keys = keys.data();
  a.tokens = tokens.data();
  a.num_rows = 1;
  GreedyPickArgs b = a;
  b.head = bf16;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: FP32 head \\[16, 8\\], 1 rows");
  b = a;
  b.num_rows = 0;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: FP32 head \\[16, 8\\], 0 rows");
  b.num_rows = 33;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: FP32 head \\[16, 8\\], 33 rows");
  b = a;
  b.keys = nullptr;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: null buffer");
  b = a;
  b.bounds = nullptr;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: null buffer");
  // greedy_approx: an I8 copy with row scales, of the head's shape.
  std::vector<int8_t> q16(V * 16);
  std::vector<float> x16(16);
  const LinearRef head16{DType::kF32, V, 16, 1, w.data()};
  LinearRef copy{DType::kI8, V, 16, 1, q16.data()};
  copy.row_scale = scales.data();
  b = a;
  b.head = head16;
  b.x = x16.data();
  b.copy = copy;
  b.copy.row_scale = nullptr;
  EXPECT_DEATH(greedy_approx(b, nullptr), "greedy_approx: an I8 copy \\[16, 16\\] with row scales");
  b.copy = copy;
  b.copy.dtype = DType::kBF16;
  EXPECT_DEATH(greedy_approx(b, nullptr), "greedy_approx: an I8 copy");
  b.copy = copy;
  b.copy.in = 32;
  EXPECT_DEATH(greedy_approx(b, nullptr), "greedy_approx: an I8 copy");
  b.copy = copy;
  b.num_rows = 33;
  EXPECT_DEATH(greedy_approx(b, nullptr), "greedy_approx: an I8 copy .* 33 rows");
  b.num_rows = 1;
  b.approx = nullptr;
  EXPECT_DEATH(greedy_approx(b, nullptr), "greedy_approx: null buffer");
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: null buffer");
  // topk_logits: greedy_pick's head and rows, and its own buffers.
  std::vector<int32_t> ks(2, 20);
  std::vector<float> maxima(2 * kTopKMaximaPerRow), logits(2 * V);
  a.top_k = ks.data();
  a.maxima = maxima.data();
  a.logits = logits.data();
  b = a;
  b.head = bf16;
  EXPECT_DEATH(topk_logits(b, nullptr), "topk_logits: FP32 head \\[16, 8\\], 1 rows");
  b = a;
  b.num_rows = 33;
  EXPECT_DEATH(topk_logits(b, nullptr), "topk_logits: FP32 head \\[16, 8\\], 33 rows");
  for (int which = 0; which < 3; ++which) {
    b = a;
    if (which == 0) b.top_k = nullptr;
    if (which == 1) b.maxima = nullptr;
    if (which == 2) b.logits = nullptr;
    EXPECT_DEATH(topk_logits(b, nullptr), "topk_logits: null buffer");
  }
  // A candidate list is all three buffers or none.
  std::vector<uint32_t> count(2);
  std::vector<int32_t> ids(2 * kSampleCandidates);
  b = a;
  b.cand_count = count.data();
  EXPECT_DEATH(topk_logits(b, nullptr), "topk_logits: a candidate list needs");
  b.cand_ids = ids.data();
  EXPECT_DEATH(topk_logits(b, nullptr), "topk_logits: a candidate list needs");
}

}  // namespace
}  // namespace flint::cuda
