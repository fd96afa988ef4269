// The greedy LM head (kernels/greedy_head.h) against the one-row FP32 GEMV and a host arg max: the
// same token, bit for bit, on random heads, on heads with planted near-ties that bf16 cannot tell
// apart, and on a head where every row is a candidate.
#include "backends/cuda/kernels/greedy_head.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/kernels/gemv.h"
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

std::vector<int32_t> greedy_tokens(const Case& c) {
  DeviceArray<float> w(c.w), x(c.x), g(c.g);
  DeviceArray<uint16_t> hi{size_t(c.V * c.d)};
  DeviceArray<float> norms{size_t(c.V)};
  DeviceArray<int32_t> bad(std::vector<int32_t>{0});
  const LinearRef head{DType::kF32, c.V, c.d, 1, w.get()};
  greedy_head_prepare(hi.get(), norms.get(), bad.get(), head, nullptr);
  EXPECT_EQ(bad.to_host()[0], 0);
  LinearRef approx_head = head;
  approx_head.dtype = DType::kBF16;
  approx_head.w = hi.get();
  const int n = static_cast<int>(c.rows.size());
  DeviceArray<float> approx{size_t(n * c.V)};
  DeviceArray<int32_t> rows(c.rows), tokens{size_t(n)};
  DeviceArray<uint64_t> keys(std::vector<uint64_t>(size_t(n), 0));
  gemv(approx.get(), c.V, x.get(), c.d, n, approx_head, false, nullptr, GemvNorm{g.get(), c.eps},
       rows.get());
  GreedyPickArgs a;
  a.approx = approx.get();
  a.x = x.get();
  a.x_stride = c.d;
  a.x_rows = rows.get();
  a.norm = g.get();
  a.eps = c.eps;
  a.head = head;
  a.norms = norms.get();
  a.keys = keys.get();
  a.tokens = tokens.get();
  a.num_rows = n;
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
  c.d = 264;   // a multiple of 8, not of 32: padded staging
  c.w = random_floats(size_t(c.V * c.d), 7, -0.5f, 0.5f);
  c.x = random_floats(size_t(9 * c.d), 8, -2.0f, 2.0f);
  c.g = random_floats(size_t(c.d), 9, 0.9f, 1.1f);
  c.rows = {7, 0, 3, 3, 8};
  // For x rows 0, 3 and 7, a winning row (x * g, scaled) at 1000 + 700 k, a copy of it further on
  // (equal logits: the lower row wins) and, before them, a copy with a few 1-ulp changes: the FP32
  // sums decide, where the bf16 copies are the same row.
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
  // Every row the same bf16 row: row r is a base row with element r % d moved by 1 + r / d ulps,
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

uint16_t host_bf16_rn(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TEST(GreedyHead, PrepareRoundsToNearestBoundsTheNormsAndFlagsValuesPastBf16) {
  FLINT_REQUIRE_GPU();
  const int64_t V = 37, d = 72;
  std::vector<float> w = random_floats(size_t(V * d), 31, -3.0f, 3.0f);
  w[5] = 1.0f + 0x1p-8f;      // a tie: rounds to even (1.0)
  w[6] = 1.0f + 3 * 0x1p-8f;  // a tie: rounds to even (1 + 2^-6)
  DeviceArray<float> dw(w);
  DeviceArray<uint16_t> hi{size_t(V * d)};
  DeviceArray<float> norms{size_t(V)};
  DeviceArray<int32_t> bad(std::vector<int32_t>{0});
  greedy_head_prepare(hi.get(), norms.get(), bad.get(), LinearRef{DType::kF32, V, d, 1, dw.get()},
                      nullptr);
  const std::vector<uint16_t> h = hi.to_host();
  const std::vector<float> n = norms.to_host();
  EXPECT_EQ(bad.to_host()[0], 0);
  for (int64_t i = 0; i < V * d; ++i) ASSERT_EQ(h[i], host_bf16_rn(w[i])) << i;
  EXPECT_EQ(h[5], 0x3f80);
  EXPECT_EQ(h[6], 0x3f82);
  for (int64_t r = 0; r < V; ++r) {
    long double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += (long double)w[r * d + i] * w[r * d + i];
    const double exact = std::sqrt(static_cast<double>(ss));
    EXPECT_GE(n[r], exact) << r;
    EXPECT_LE(n[r], exact * (1 + 1e-6)) << r;
  }
  // FLT_MAX rounds past bf16's largest value: the greedy head must not be used.
  w[3 * d + 4] = FLT_MAX;
  DeviceArray<float> dw2(w);
  DeviceArray<int32_t> bad2(std::vector<int32_t>{0});
  greedy_head_prepare(hi.get(), norms.get(), bad2.get(), LinearRef{DType::kF32, V, d, 1, dw2.get()},
                      nullptr);
  EXPECT_EQ(bad2.to_host()[0], 1);
}

// Calls outside the launchers' contract stop with the reason before any launch (so no device is
// needed): a head that is not one FP32 matrix, 0 or more than 32 logits rows, a missing buffer.
TEST(GreedyHead, CallsOutsideTheContractStop) {
  const int64_t V = 16, d = 8;
  std::vector<float> w(V * d), x(d), approx(V), norms(V);
  std::vector<uint16_t> hi(V * d);
  std::vector<uint64_t> keys(2);
  std::vector<int32_t> tokens(2), bad(1);
  const LinearRef head{DType::kF32, V, d, 1, w.data()};
  LinearRef bf16 = head;
  bf16.dtype = DType::kBF16;
  EXPECT_DEATH(greedy_head_prepare(hi.data(), norms.data(), bad.data(), bf16, nullptr),
               "greedy_head_prepare: an FP32 matrix");
  LinearRef stack = head;
  stack.num_experts = 2;
  EXPECT_DEATH(greedy_head_prepare(hi.data(), norms.data(), bad.data(), stack, nullptr),
               "greedy_head_prepare: an FP32 matrix");
  GreedyPickArgs a;
  a.approx = approx.data();
  a.x = x.data();
  a.x_stride = d;
  a.head = head;
  a.norms = norms.data();
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
  b.norms = nullptr;
  EXPECT_DEATH(greedy_pick(b, nullptr), "greedy_pick: null buffer");
}

}  // namespace
}  // namespace flint::cuda
