// The fused MoE router (RMSNorm + router GEMV + sigmoid top-k in one launch) against cpu::route,
// and the whole small-batch MoE block (router, gated experts incl. the shared slices, down +
// combine + residual) against cpu::moe, at awkward sizes and 1..11 tokens; the top-k done in the
// gate/up kernel (gemv_gated_routed_experts) against the router's.
#include "backends/cpu/ops/moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/rms_norm.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe_experts.h"
#include "backends/cuda/kernels/moe_router.h"
#include "backends/cuda/weights.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/tiny_model.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

std::vector<float> normed(const std::vector<float>& x, const float* w, int rows, int64_t cols,
                          float eps) {
  std::vector<float> y(x.size());
  cpu::rms_norm(y.data(), x.data(), w, rows, cols, eps);
  return y;
}

// One MoE layer and no dense one: 2 query heads over 1 kv head, routed experts of `inter` rows
// and the shared expert as two slices of that size.
cpu::testing::TinyOptions one_moe_layer(int64_t hidden, int64_t head_dim, int64_t inter) {
  cpu::testing::TinyOptions o;
  o.num_layers = 1;
  o.num_dense = 0;
  o.hidden_size = hidden;
  o.num_heads = 2;
  o.num_kv_heads = 1;
  o.head_dim = head_dim;
  o.moe_intermediate_size = inter;
  o.shared_intermediate_size = 2 * inter;
  return o;
}

// one_moe_layer with `dt` weights and 13 experts, top 3, with selection biases: the awkward
// shape of the expert-path tests.
cpu::testing::TinyOptions thirteen_expert_layer(DType dt, int64_t hidden, int64_t head_dim,
                                                uint64_t seed) {
  cpu::testing::TinyOptions o = one_moe_layer(hidden, head_dim, 64);
  o.num_experts = 13;
  o.num_experts_per_tok = 3;
  o.expert_bias = true;
  o.linear_dtype = dt;
  o.seed = seed;
  return o;
}

TEST(MoeRoute, MatchesCpuRouteAfterRmsNorm) {
  FLINT_REQUIRE_GPU();
  // d: one pass of a warp's loads over the row, or (one or two tokens) the doubled loads of a row
  // longer than one pass. E: the top-k keys in registers (<= 256) or in shared memory. k: picks
  // held by their lanes until normalised (<= 32) or, past 32, written and scaled in place.
  // BF16 at 8 and 11 tokens: the logits on tensor cores (moe_route_mma_kernel, 6+ rows).
  struct Shape {
    DType dt;
    int64_t d, E, k;
  };
  for (auto [dt, d, E, k] : {Shape{DType::kF32, 776, 77, 5}, Shape{DType::kBF16, 776, 77, 5},
                             Shape{DType::kBF16, 2056, 256, 8}, Shape{DType::kF32, 136, 300, 40}}) {
    for (bool bias : {false, true}) {
      for (int T : {1, 2, 3, 8, 11}) {
        SCOPED_TRACE(
            fmt::format("dtype={} d={} E={} k={} bias={} tokens={}", dt, d, E, k, bias, T));
        auto wf = random_floats(E * d, 40 + T, -0.5f, 0.5f);
        std::vector<uint8_t> wb(dtype_bytes_for(dt, E * d));
        if (dt == DType::kF32) {
          std::memcpy(wb.data(), wf.data(), wb.size());
        } else {
          for (int64_t i = 0; i < E * d; ++i) {
            const uint16_t h = f32_to_bf16(wf[i]);
            std::memcpy(&wb[2 * i], &h, 2);
          }
        }
        const auto bv = random_floats(E, 9, -0.3f, 0.3f);
        model::LayerWeights lw;
        lw.router = model::Linear{ConstTensorView(wb.data(), dt, {E, d}), 1.0f};
        if (bias) lw.expert_bias = ConstTensorView(bv.data(), DType::kF32, {E});
        model::FlintConfig cfg;
        cfg.num_experts = E;
        cfg.num_experts_per_tok = k;
        cfg.norm_topk_prob = !bias;
        cfg.routed_scaling_factor = bias ? 2.5f : 1.0f;
        const auto x = random_floats(T * d, 3 + T, -2, 2);
        const auto nw = random_floats(d, 4, 0.5f, 1.5f);
        ThreadPool pool(2);
        const cpu::Routing want =
            cpu::route(normed(x, nw.data(), T, d, 1e-5f).data(), T, lw, cfg, pool);

        DeviceWeights owner;
        auto ref = owner.add_linear(lw.router, nullptr);
        ASSERT_TRUE(ref.has_value());
        DeviceArray<float> dx(x), dnw(nw), dbias(bv), logits(T * E), rw(T * (k + 2));
        DeviceArray<int32_t> ids(T * (k + 2)), counter(std::vector<int32_t>{0});
        MoeRouting r{static_cast<int>(E), static_cast<int>(k), 2, cfg.norm_topk_prob,
                     cfg.routed_scaling_factor};
        for (int rep = 0; rep < 2; ++rep) {  // the second launch checks the counter reset
          moe_route(ids.get(), rw.get(), dx.get(), d, T, *ref, GemvNorm{dnw.get(), 1e-5f},
                    bias ? dbias.get() : nullptr, r, MoeRouteScratch{logits.get(), counter.get()},
                    nullptr);
          const auto gi = ids.to_host();
          const auto gw = rw.to_host();
          for (int t = 0; t < T; ++t) {
            for (int j = 0; j < k; ++j) {
              EXPECT_EQ(gi[t * (k + 2) + j], want.expert_ids[t * k + j]) << "token " << t;
              EXPECT_NEAR(gw[t * (k + 2) + j], want.weights[t * k + j], 1e-5);
            }
            EXPECT_EQ(gi[t * (k + 2) + k], E);
            EXPECT_EQ(gi[t * (k + 2) + k + 1], E + 1);
            EXPECT_EQ(gw[t * (k + 2) + k + 1], 1.0f);
          }
          EXPECT_EQ(counter.to_host()[0], 0);
        }
      }
    }
  }
}

// moe_route_logits' normed rows serve a few tokens only and may neither overlap x nor be
// misaligned; a caller that breaks that is a bug, stopped with the reason before any launch (so
// no device is needed).
TEST(MoeRoute, NormedRowsOutsideTheirContractStop) {
  const int64_t d = 64, E = 16;
  LinearRef router;
  router.dtype = DType::kF32;
  router.out = E;
  router.in = d;
  std::vector<float> w(E * d), x(8 * d), x_out(8 * d + 4), logits(8 * E);
  router.w = w.data();
  const MoeRouting r{static_cast<int>(E), 2, 0, true, 1.0f};
  std::vector<float> x_inv(8);
  EXPECT_DEATH(moe_route_logits(logits.data(), x.data(), d, kRouteNormedMaxRows, router, {}, r,
                                nullptr, x_out.data(), x_inv.data()),
               "normed rows of 4 tokens");
  EXPECT_DEATH(moe_route_logits(logits.data(), x.data(), d, 2, router, {}, r, nullptr, x_out.data(),
                                nullptr),
               "normed rows and their scales go together");
  EXPECT_DEATH(moe_route_logits(logits.data(), x.data(), d, 2, router, {}, r, nullptr, nullptr,
                                x_inv.data()),
               "normed rows and their scales go together");
  EXPECT_DEATH(moe_route_logits(logits.data(), x.data(), d, 2, router, {}, r, nullptr,
                                x.data() + d / 2, x_inv.data()),
               "overlap x or are unaligned");
  EXPECT_DEATH(moe_route_logits(logits.data(), x.data(), d, 2, router, {}, r, nullptr,
                                x_out.data() + 1, x_inv.data()),
               "overlap x or are unaligned");
}

// An F32 stack of E matrices [out, in] over host memory, for the checks that stop before any
// launch (the pointer is never read).
LinearRef host_f32_stack(const std::vector<float>& w, int64_t E, int64_t out, int64_t in) {
  LinearRef r;
  r.dtype = DType::kF32;
  r.out = out;
  r.in = in;
  r.num_experts = E;
  r.w = w.data();
  return r;
}

// The routed gate/up normalises its rows either itself (a norm weight) or with the router's
// 1 / rms (x_inv), never both: a caller passing both is stopped before any launch.
TEST(MoeExperts, RowsNormedTwiceStop) {
  const int64_t d = 64, ff = 32, E = 16;
  std::vector<float> w(E * ff * d), x(2 * d), act(2 * 2 * ff), logits(2 * E), wts(4), g(d);
  std::vector<float> x_inv(2, 1.0f);
  std::vector<int32_t> ids(4);
  const LinearRef gate = host_f32_stack(w, E, ff, d), up = gate;
  const MoeRouting r{static_cast<int>(E), 2, 0, true, 1.0f};
  EXPECT_DEATH(gemv_gated_routed_experts(act.data(), x.data(), d, 2, logits.data(), nullptr, r,
                                         ids.data(), wts.data(), gate, up, nullptr,
                                         GemvNorm{g.data(), 1e-6f}, nullptr, x_inv.data()),
               "rows normed twice");
}

// The routed gate/up reads the router's logits or gemv_route_partials' sums, exactly one; the sums
// only with pre-normed rows and the block top-k; gemv_route_partials stops on a missing buffer. A
// caller breaking that is stopped with the reason before any launch (so no device is needed).
TEST(MoeExperts, RouteSumsOutsideTheirContractStop) {
  const int64_t d = 64, ff = 32, E = 16;
  std::vector<float> w(E * ff * d), x(d), act(2 * ff), logits(E), wts(2), g(d), o(d * d), y(d);
  std::vector<double> acc(route_acc_doubles(E));
  std::vector<int32_t> ids(2);
  const LinearRef gate = host_f32_stack(w, E, ff, d), up = gate;
  const MoeRouting r{static_cast<int>(E), 2, 0, true, 1.0f};
  EXPECT_DEATH(gemv_gated_routed_experts(act.data(), x.data(), d, 1, logits.data(), nullptr, r,
                                         ids.data(), wts.data(), gate, up, nullptr, {}, nullptr,
                                         nullptr, acc.data(), 1e-6f),
               "logits or gemv_route_partials' sums, exactly one");
  EXPECT_DEATH(gemv_gated_routed_experts(act.data(), x.data(), d, 1, nullptr, nullptr, r,
                                         ids.data(), wts.data(), gate, up, nullptr),
               "logits or gemv_route_partials' sums, exactly one");
  EXPECT_DEATH(gemv_gated_routed_experts(
                   act.data(), x.data(), d, 1, nullptr, nullptr, r, ids.data(), wts.data(), gate,
                   up, nullptr, GemvNorm{g.data(), 1e-6f}, nullptr, nullptr, acc.data(), 1e-6f),
               "the route sums need pre-normed rows and the block top-k");
  const MoeRouting nine{static_cast<int>(E), 9, 0, true, 1.0f};  // past kBlockTopKMax
  EXPECT_DEATH(gemv_gated_routed_experts(act.data(), x.data(), d, 1, nullptr, nullptr, nine,
                                         ids.data(), wts.data(), gate, up, nullptr, {}, nullptr,
                                         nullptr, acc.data(), 1e-6f),
               "the route sums need pre-normed rows and the block top-k");
  LinearRef wo = gate, router = gate;
  wo.out = d;
  wo.num_experts = 1;
  wo.w = o.data();
  router.out = E;
  router.num_experts = 1;
  EXPECT_DEATH(
      gemv_route_partials(y.data(), x.data(), wo, router, g.data(), nullptr, acc.data(), nullptr),
      "gemv_route_partials: null buffer");
}

TEST(MoeExperts, BlockMatchesCpuMoe) {
  FLINT_REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kNVFP4}) {
    const auto m = cpu::testing::make_tiny_model(thirteen_expert_layer(dt, 192, 64, 17));
    const model::FlintConfig& c = m.weights.config;
    const model::LayerWeights& lw = m.weights.layers[0];
    auto dw = DeviceWeights::upload(m.weights, nullptr);
    ASSERT_TRUE(dw.has_value()) << dw.error().message;
    const DeviceLayer& L = dw->layers()[0];
    ASSERT_FALSE(L.has_separate_shared);
    const int slots = static_cast<int>(c.num_experts_per_tok) + dw->num_shared_slots();
    ASSERT_EQ(slots, 5);
    const int64_t d = c.hidden_size, I = c.moe_intermediate_size;
    for (int T : {1, 2, 7, 8, 11}) {
      SCOPED_TRACE(fmt::format("dtype={} tokens={}", dt, T));
      const auto h = random_floats(T * d, 100 + T, -1.5f, 1.5f);
      ThreadPool pool(2);
      const auto xn = normed(h, lw.ffn_norm.data<float>(), T, d, c.rms_norm_eps);
      std::vector<float> want(T * d);
      cpu::moe(want.data(), xn.data(), T, lw, c, pool);
      for (size_t i = 0; i < want.size(); ++i) want[i] += h[i];

      DeviceArray<float> dh(h), logits(T * c.num_experts), rw(T * slots), act(T * slots * I);
      DeviceArray<int32_t> ids(T * slots), counter(std::vector<int32_t>{0});
      const GemvNorm norm{L.ffn_norm, c.rms_norm_eps};
      MoeRouting r{static_cast<int>(c.num_experts), static_cast<int>(c.num_experts_per_tok),
                   dw->num_shared_slots(), c.norm_topk_prob, c.routed_scaling_factor};
      moe_route(ids.get(), rw.get(), dh.get(), d, T, L.router, norm, L.expert_bias, r,
                MoeRouteScratch{logits.get(), counter.get()}, nullptr);
      gemv_gated_experts(act.get(), dh.get(), d, T * slots, slots, ids.get(), L.exp_gate, L.exp_up,
                         nullptr, norm);
      // The shared slices' fixed ids (the forward pass's hint) load the same weights earlier: the
      // products must be bit-identical.
      DeviceArray<float> act_hinted(T * slots * I);
      gemv_gated_experts(act_hinted.get(), dh.get(), d, T * slots, slots, ids.get(), L.exp_gate,
                         L.exp_up, nullptr, norm, ExpertHints{r.top_k, r.num_experts});
      EXPECT_EQ(act_hinted.to_host(), act.to_host());
      // The one-token decode path: the router GEMV alone (the same logits), then the top-k in
      // every gate/up block, which records the same ids and weights for moe_down.
      DeviceArray<float> logits2(T * c.num_experts), rw2(T * slots), act2(T * slots * I);
      DeviceArray<int32_t> ids2(std::vector<int32_t>(T * slots, -1));
      moe_route_logits(logits2.get(), dh.get(), d, T, L.router, norm, r, nullptr);
      EXPECT_EQ(logits2.to_host(), logits.to_host());
      // Each pair's pick is counted (pick_ready) once it is recorded.
      DeviceArray<int32_t> ready(std::vector<int32_t>{0});
      gemv_gated_routed_experts(act2.get(), dh.get(), d, T, logits2.get(), L.expert_bias, r,
                                ids2.get(), rw2.get(), L.exp_gate, L.exp_up, nullptr, norm,
                                ready.get());
      EXPECT_EQ(ready.to_host()[0], T * slots);
      EXPECT_EQ(ids2.to_host(), ids.to_host());
      EXPECT_EQ(rw2.to_host(), rw.to_host());
      EXPECT_EQ(act2.to_host(), act.to_host());
      // The decode path's router also writes the rows times the norm weight and their 1 / rms
      // (a few tokens; their product is the normed row), and the gate/up on them without a norm
      // stages the same rows and scales as late: the same act bit for bit.
      if (T < kRouteNormedMaxRows) {
        DeviceArray<float> lg_n(T * c.num_experts), dxn(T * d), dxinv(T), act_n(T * slots * I);
        DeviceArray<float> rw_n(T * slots);
        DeviceArray<int32_t> ids_n(T * slots);
        moe_route_logits(lg_n.get(), dh.get(), d, T, L.router, norm, r, nullptr, dxn.get(),
                         dxinv.get());
        EXPECT_EQ(lg_n.to_host(), logits.to_host());
        std::vector<float> rows = dxn.to_host();
        const std::vector<float> inv = dxinv.to_host();
        for (int t = 0; t < T; ++t) {
          for (int64_t j = 0; j < d; ++j) rows[t * d + j] *= inv[t];
        }
        EXPECT_LE(testing::worst_ratio(rows, xn, 1e-5, 1e-5), 1.0);
        gemv_gated_routed_experts(act_n.get(), dxn.get(), d, T, lg_n.get(), L.expert_bias, r,
                                  ids_n.get(), rw_n.get(), L.exp_gate, L.exp_up, nullptr, {},
                                  nullptr, dxinv.get());
        EXPECT_EQ(ids_n.to_host(), ids.to_host());
        EXPECT_EQ(act_n.to_host(), act.to_host());
      }
      // The shared slices computed in the router's launch (moe_route_shared), which needs BF16
      // router and expert weights and 4+ tokens (otherwise it is moe_route): the same ids and
      // weights, the same routed act rows bit for bit (the gate/up skips the shared slots), the
      // shared rows as sums in another order.
      {
        const float* rf = lw.router.w.data<float>();
        std::vector<uint8_t> rb(2 * c.num_experts * d);
        for (int64_t i = 0; i < c.num_experts * d; ++i) {
          const uint16_t h = f32_to_bf16(rf[i]);
          std::memcpy(&rb[2 * i], &h, 2);
        }
        DeviceWeights owner;
        auto router16 = owner.add_linear(
            model::Linear{ConstTensorView(rb.data(), DType::kBF16, {c.num_experts, d}), 1.0f},
            nullptr);
        ASSERT_TRUE(router16.has_value());
        DeviceArray<float> lg(T * c.num_experts), rw_a(T * slots), rw_b(T * slots);
        DeviceArray<float> act_a(T * slots * I), act_b(std::vector<float>(T * slots * I, -7.0f));
        DeviceArray<int32_t> ids_a(T * slots), ids_b(T * slots);
        const MoeRouteScratch sc{lg.get(), counter.get()};
        const ExpertHints plain{r.top_k, r.num_experts};
        moe_route(ids_a.get(), rw_a.get(), dh.get(), d, T, *router16, norm, L.expert_bias, r, sc,
                  nullptr);
        gemv_gated_experts(act_a.get(), dh.get(), d, T * slots, slots, ids_a.get(), L.exp_gate,
                           L.exp_up, nullptr, norm, plain);
        const bool fused = moe_route_shared(
            ids_b.get(), rw_b.get(), dh.get(), d, T, *router16, norm, L.expert_bias, r, sc,
            MoeSharedGateUp{L.exp_gate, L.exp_up, act_b.get()}, nullptr);
        EXPECT_EQ(fused, T >= 4 && dt == DType::kBF16);  // BF16 experts only
        ExpertHints skip = plain;
        skip.skip_fixed = fused;
        gemv_gated_experts(act_b.get(), dh.get(), d, T * slots, slots, ids_b.get(), L.exp_gate,
                           L.exp_up, nullptr, norm, skip);
        EXPECT_EQ(ids_b.to_host(), ids_a.to_host());
        EXPECT_EQ(rw_b.to_host(), rw_a.to_host());
        const auto ha = act_a.to_host(), hb = act_b.to_host();
        std::vector<float> sh_a, sh_b;
        for (int p = 0; p < T * slots; ++p) {
          const bool shared_slot = p % slots >= r.top_k;
          for (int64_t i = 0; i < I; ++i) {
            const float va = ha[p * I + i], vb = hb[p * I + i];
            if (shared_slot) {
              sh_a.push_back(va);
              sh_b.push_back(vb);
            } else {
              ASSERT_EQ(vb, va) << "routed pair " << p << " row " << i;
            }
          }
        }
        EXPECT_LE(testing::worst_ratio(sh_b, sh_a, 1e-4, 1e-4), 1.0);
      }
      DeviceArray<float> dh_early(h), dh_late(h);
      moe_down(dh.get(), d, act.get(), ids.get(), rw.get(), T, slots, L.exp_down, nullptr);
      EXPECT_LE(testing::worst_ratio(dh.to_host(), want, 1e-4, 1e-4), 1.0);
      // The routed path's moe_down, which reads the counted picks before its PDL wait: the same
      // sums. A count that never arrives (one short) makes every block read them after the wait.
      moe_down(dh_early.get(), d, act2.get(), ids2.get(), rw2.get(), T, slots, L.exp_down, nullptr,
               ready.get());
      EXPECT_EQ(dh_early.to_host(), dh.to_host());
      DeviceArray<int32_t> short_count(std::vector<int32_t>{T * slots - 1});
      moe_down(dh_late.get(), d, act2.get(), ids2.get(), rw2.get(), T, slots, L.exp_down, nullptr,
               short_count.get());
      EXPECT_EQ(dh_late.to_host(), dh.to_host());
    }
  }
}

// The routed gate/up kernel loads a row the router already multiplied by the norm weight before
// its top-k (rows of up to 2048 floats, two float4 a thread) and stages it after; wider rows
// (2112: NVFP4 rows are whole 64-element blocks), or rows it normalises itself, it stages after
// the pick. Either way the 1 / rms (the router's x_inv_out, or its own) scales the dot products
// at the end. Every width gives the act rows of the kernel that normalises itself (the path
// BlockMatchesCpuMoe checks against cpu::moe), bit for bit, and the same picks.
TEST(MoeExperts, RoutedGateUpStagesNormedRowsOfEveryWidth) {
  FLINT_REQUIRE_GPU();
  for (DType dt : {DType::kBF16, DType::kNVFP4}) {
    for (int64_t d : {192, 2048, 2112}) {
      const auto m = cpu::testing::make_tiny_model(thirteen_expert_layer(dt, d, 32, 23));
      const model::FlintConfig& c = m.weights.config;
      auto dw = DeviceWeights::upload(m.weights, nullptr);
      ASSERT_TRUE(dw.has_value()) << dw.error().message;
      const DeviceLayer& L = dw->layers()[0];
      const int slots = static_cast<int>(c.num_experts_per_tok) + dw->num_shared_slots();
      const int64_t I = c.moe_intermediate_size;
      const GemvNorm norm{L.ffn_norm, c.rms_norm_eps};
      const MoeRouting r{static_cast<int>(c.num_experts), static_cast<int>(c.num_experts_per_tok),
                         dw->num_shared_slots(), c.norm_topk_prob, c.routed_scaling_factor};
      for (int T : {1, 2}) {
        SCOPED_TRACE(fmt::format("dtype={} d={} tokens={}", dt, d, T));
        DeviceArray<float> dh(random_floats(T * d, 300 + T, -2.0f, 2.0f));
        DeviceArray<float> logits(T * c.num_experts), xn(T * d), xinv(T);
        moe_route_logits(logits.get(), dh.get(), d, T, L.router, norm, r, nullptr, xn.get(),
                         xinv.get());
        DeviceArray<float> act_self(T * slots * I), w_self(T * slots);
        DeviceArray<float> act_pre(T * slots * I), w_pre(T * slots);
        DeviceArray<int32_t> ids_self(T * slots), ids_pre(T * slots);
        // The same launch on other rows first leaves their values in the blocks' shared memory,
        // so a row the kernel failed to stage cannot match by chance.
        DeviceArray<float> other(random_floats(T * d, 900 + T, -2.0f, 2.0f));
        DeviceArray<float> act_other(T * slots * I), w_other(T * slots);
        DeviceArray<int32_t> ids_other(T * slots);
        gemv_gated_routed_experts(act_other.get(), other.get(), d, T, logits.get(), L.expert_bias,
                                  r, ids_other.get(), w_other.get(), L.exp_gate, L.exp_up, nullptr,
                                  norm);
        gemv_gated_routed_experts(act_pre.get(), xn.get(), d, T, logits.get(), L.expert_bias, r,
                                  ids_pre.get(), w_pre.get(), L.exp_gate, L.exp_up, nullptr, {},
                                  nullptr, xinv.get());
        gemv_gated_routed_experts(act_self.get(), dh.get(), d, T, logits.get(), L.expert_bias, r,
                                  ids_self.get(), w_self.get(), L.exp_gate, L.exp_up, nullptr,
                                  norm);
        const auto want = act_self.to_host();
        EXPECT_EQ(ids_pre.to_host(), ids_self.to_host());
        EXPECT_EQ(w_pre.to_host(), w_self.to_host());
        EXPECT_EQ(act_pre.to_host(), want);
        // The gate/up on the recorded ids (no top-k, every pass loaded into registers) gives the
        // same act rows bit for bit: at d 2048 and 2112 a BF16 row takes 4 and 5 passes, which
        // the routed kernel reads through its shared-memory ring.
        DeviceArray<float> act_ids(T * slots * I);
        gemv_gated_experts(act_ids.get(), dh.get(), d, T * slots, slots, ids_self.get(), L.exp_gate,
                           L.exp_up, nullptr, norm);
        EXPECT_EQ(act_ids.to_host(), want);
        // Not a vacuous match: the act rows are not all zero.
        EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float v) { return v != 0.0f; }));
      }
    }
  }
}

// The one-token o projection with the router's sums in its tail (gemv_route_partials), then the
// routed gate/up reading those sums (route_acc), against gemv + moe_route_logits + the gate/up on
// the router's logits: the updated residual row bit for bit (the same GEMV code), x_out its product
// with the norm weight bit for bit, the sums within 1e-5 of double-precision host sums, the same
// picks, weights and act rows within 1e-5 (the 1 / rms comes from differently ordered sums), and a
// second launch's sums bit for bit equal to the first's. o weights F32, BF16 (one warp a row, and
// the two-warp split kernel at 2048-wide rows: 8 rows a block at d 264, 16 at d 256) and NVFP4
// (rows of one pass, and of two and three passes of 2048, which this kernel pipelines: the bits
// must still be the plain GEMV's); routers F32 and BF16; E 13 and 256 (one thread an expert in a
// 256- or 512-thread block).
TEST(MoeExperts, RouterSumsInTheOProjectionPickWhatTheRouterPicks) {
  FLINT_REQUIRE_GPU();
  struct Shape {
    DType dt;
    int64_t heads, head_dim, d, E, k;
  };
  for (auto [dt, heads, hd, d, E, k] :
       {Shape{DType::kF32, 2, 64, 192, 13, 3}, Shape{DType::kBF16, 2, 64, 192, 13, 3},
        Shape{DType::kBF16, 16, 128, 264, 256, 8}, Shape{DType::kBF16, 16, 128, 256, 256, 8},
        Shape{DType::kNVFP4, 2, 64, 192, 13, 3}, Shape{DType::kNVFP4, 4, 64, 320, 256, 6},
        Shape{DType::kNVFP4, 40, 64, 320, 256, 6}, Shape{DType::kNVFP4, 72, 64, 256, 256, 6}}) {
    cpu::testing::TinyOptions o = thirteen_expert_layer(dt, d, hd, 41 + E);
    o.num_heads = heads;
    o.num_kv_heads = heads > 8 ? heads / 8 : 1;  // at most 8 query heads per KV head
    o.num_experts = E;
    o.num_experts_per_tok = k;
    const auto m = cpu::testing::make_tiny_model(o);
    const model::FlintConfig& c = m.weights.config;
    const model::LayerWeights& lw = m.weights.layers[0];
    auto dw = DeviceWeights::upload(m.weights, nullptr);
    ASSERT_TRUE(dw.has_value()) << dw.error().message;
    const DeviceLayer& L = dw->layers()[0];
    const int slots = static_cast<int>(k) + dw->num_shared_slots();
    const int64_t I = c.moe_intermediate_size, in = heads * hd;
    const float eps = c.rms_norm_eps;
    const MoeRouting r{static_cast<int>(E), static_cast<int>(k), dw->num_shared_slots(),
                       c.norm_topk_prob, c.routed_scaling_factor};
    // The router as the model has it (F32) and rounded to BF16; the host sums use its values.
    const float* rf = lw.router.w.data<float>();
    std::vector<uint8_t> rb(2 * E * d);
    std::vector<float> rf16(E * d);
    for (int64_t i = 0; i < E * d; ++i) {
      const uint16_t h = f32_to_bf16(rf[i]);
      std::memcpy(&rb[2 * i], &h, 2);
      rf16[i] = bf16_to_f32(h);
    }
    DeviceWeights owner;
    auto router16 = owner.add_linear(
        model::Linear{ConstTensorView(rb.data(), DType::kBF16, {E, d}), 1.0f}, nullptr);
    ASSERT_TRUE(router16.has_value());
    const std::vector<float> norm_w(lw.ffn_norm.data<float>(), lw.ffn_norm.data<float>() + d);
    for (bool bf16_router : {false, true}) {
      SCOPED_TRACE(fmt::format("o={} heads={} d={} E={} router={}", dt, heads, d, E,
                               bf16_router ? "bf16" : "f32"));
      const LinearRef& router = bf16_router ? *router16 : L.router;
      const float* rw_host = bf16_router ? rf16.data() : rf;
      const auto h0 = random_floats(d, 61 + d, -2.0f, 2.0f);
      DeviceArray<float> attn(random_floats(in, 62 + in, -1.0f, 1.0f));
      // The reference: the o projection, then the router (its normed rows and 1 / rms) and the
      // gate/up on its logits.
      DeviceArray<float> h_ref(h0), logits(E), xn(d), xinv(1), act_ref(slots * I), w_ref(slots);
      DeviceArray<int32_t> ids_ref(slots);
      gemv(h_ref.get(), d, attn.get(), in, 1, L.o, true, nullptr);
      moe_route_logits(logits.get(), h_ref.get(), d, 1, router, GemvNorm{L.ffn_norm, eps}, r,
                       nullptr, xn.get(), xinv.get());
      gemv_gated_routed_experts(act_ref.get(), xn.get(), d, 1, logits.get(), L.expert_bias, r,
                                ids_ref.get(), w_ref.get(), L.exp_gate, L.exp_up, nullptr, {},
                                nullptr, xinv.get());
      // The fused path, twice from the same start.
      std::vector<double> sums[2];
      for (int rep = 0; rep < 2; ++rep) {
        DeviceArray<float> h(h0), xo(d), act(slots * I), wts(slots);
        DeviceArray<double> acc(std::vector<double>(route_acc_doubles(E), 0.0));
        DeviceArray<int32_t> ids(std::vector<int32_t>(slots, -1));
        ASSERT_TRUE(gemv_route_partials(h.get(), attn.get(), L.o, router, L.ffn_norm, xo.get(),
                                        acc.get(), nullptr));
        const auto y = h.to_host();
        ASSERT_EQ(y, h_ref.to_host());
        const auto xo_h = xo.to_host();
        for (int64_t j = 0; j < d; ++j) ASSERT_EQ(xo_h[j], y[j] * norm_w[j]) << "row " << j;
        sums[rep].clear();
        const auto all = acc.to_host();
        for (int64_t e = 0; e < E + kRouteSsCopies; ++e)
          sums[rep].push_back(all[e * kRouteAccStride]);
        double ss = 0.0;
        for (int64_t j = 0; j < d; ++j) ss += double(y[j]) * y[j];
        EXPECT_NEAR(sums[rep][E], ss, 1e-5 * ss);
        for (int c = 1; c < kRouteSsCopies; ++c)  // the same addends in another order
          EXPECT_EQ(sums[rep][E + c], sums[rep][E]) << "copy " << c << " of the sum of squares";
        for (int64_t e = 0; e < E; ++e) {
          double want = 0.0, mag = 0.0;
          for (int64_t j = 0; j < d; ++j) {
            want += double(rw_host[e * d + j]) * xo_h[j];
            mag += std::abs(double(rw_host[e * d + j]) * xo_h[j]);
          }
          EXPECT_NEAR(sums[rep][e], want, 1e-5 * mag) << "expert " << e;
        }
        gemv_gated_routed_experts(act.get(), xo.get(), d, 1, nullptr, L.expert_bias, r, ids.get(),
                                  wts.get(), L.exp_gate, L.exp_up, nullptr, {}, nullptr, nullptr,
                                  acc.get(), eps);
        EXPECT_EQ(ids.to_host(), ids_ref.to_host());
        EXPECT_LE(testing::worst_ratio(wts.to_host(), w_ref.to_host(), 1e-6, 1e-5), 1.0);
        const auto want_act = act_ref.to_host();
        EXPECT_LE(testing::worst_ratio(act.to_host(), want_act, 1e-6, 1e-5), 1.0);
        EXPECT_TRUE(std::any_of(want_act.begin(), want_act.end(), [](float v) { return v != 0; }));
      }
      EXPECT_EQ(sums[1], sums[0]);
    }
    // What it does not serve it declines, launching nothing: the caller runs gemv and the router.
    DeviceArray<float> h(d), xo(d), attn(in);
    DeviceArray<double> acc(route_acc_doubles(E));
    EXPECT_FALSE(gemv_route_partials(h.get(), attn.get(), L.o, L.router, nullptr, xo.get(),
                                     acc.get(), nullptr));
    EXPECT_FALSE(gemv_route_partials(h.get(), attn.get(), L.o, L.exp_gate, L.ffn_norm, xo.get(),
                                     acc.get(), nullptr));  // a stack, not a router
  }
}

// The gate/up kernel's whole-block top-k (top_k_token_block: every thread its expert's key, then
// warp 0 with eight keys a lane, sorted in registers, one redux a pick, the picks made again when
// two lanes held a pick's key) against cpu::route on the same logits (through an identity
// router): the same ids, weights within 2e-6; against the router's one-warp top-k (moe_router):
// ids and weights bit for bit; and the act rows of every block (block x == 0 of a slot records the
// whole pick, the others pick their slot's expert only, by rank: top_k_token_block_rank) equal to
// the given-ids gate/up's on the router's picks. The logits take 17 values and the biases 3, so
// keys tie within a lane's eight and across lanes and at the k-th pick, and the rank form's
// candidates tie (ties go to the lower id; distinct keys differ by >= 6e-4, far beyond the CPU's
// and GPU's exp differences); E covers all 32 lanes, a partial last lane and fewer experts than
// lanes (fewer warps than picks: every expert is a rank candidate); k up to kBlockTopKMax. Past
// 256 experts or 8 picks the gate/up kernel's warp-0 top-k (the same code as the router's) runs
// instead. F32 and BF16 experts: BF16's one token runs blocks of 16 warps, the pick in the first 8.
TEST(MoeExperts, RoutedTopKPicksWhatTheRouterPicksWithTies) {
  FLINT_REQUIRE_GPU();
  struct Shape {
    int64_t E, k;
  };
  for (auto [E, k] : {Shape{256, 8}, Shape{256, 6}, Shape{200, 1}, Shape{77, 5}, Shape{13, 3},
                      Shape{256, 9}, Shape{300, 10}})
    for (DType dt : {DType::kF32, DType::kBF16}) {
      cpu::testing::TinyOptions o = one_moe_layer(64, 32, 16);
      o.linear_dtype = dt;
      o.num_experts = E;
      o.num_experts_per_tok = k;
      o.seed = 5;
      const auto m = cpu::testing::make_tiny_model(o);
      auto dw = DeviceWeights::upload(m.weights, nullptr);
      ASSERT_TRUE(dw.has_value()) << dw.error().message;
      const DeviceLayer& L = dw->layers()[0];
      const int slots = static_cast<int>(k) + dw->num_shared_slots();
      const int64_t d = o.hidden_size, I = o.moe_intermediate_size;
      std::vector<float> eye(E * E, 0.0f);  // cpu::route's router: its scores are the logits
      for (int64_t e = 0; e < E; ++e) eye[e * E + e] = 1.0f;
      ThreadPool pool(2);
      for (bool bias : {false, true}) {
        for (bool norm_topk : {true, false}) {
          for (int T : {1, 2, 3}) {
            SCOPED_TRACE(fmt::format("E={} k={} {} bias={} norm_topk={} tokens={}", E, k, dt, bias,
                                     norm_topk, T));
            auto lg = random_floats(T * E, 7 + T + E, -8.0f, 8.0f);
            for (float& v : lg) v = std::round(v) / 4.0f;  // 17 values: ties
            auto bv = random_floats(E, 11 + E, -1.5f, 1.5f);
            for (float& v : bv) v = std::round(v) / 8.0f;  // -1/8, 0, 1/8
            const MoeRouting r{static_cast<int>(E), static_cast<int>(k), dw->num_shared_slots(),
                               norm_topk, norm_topk ? 1.0f : 2.5f};
            DeviceArray<float> logits(lg), dbias(bv), x(random_floats(T * d, 3, -1.0f, 1.0f));
            DeviceArray<float> rw_warp(T * slots), rw_block(T * slots), act(T * slots * I);
            DeviceArray<int32_t> ids_warp(T * slots),
                ids_block(std::vector<int32_t>(T * slots, -1));
            const float* b = bias ? dbias.get() : nullptr;
            moe_router(ids_warp.get(), rw_warp.get(), logits.get(), b, T, r, nullptr);
            gemv_gated_routed_experts(act.get(), x.get(), d, T, logits.get(), b, r, ids_block.get(),
                                      rw_block.get(), L.exp_gate, L.exp_up, nullptr);
            const auto ib = ids_block.to_host();
            const auto wb = rw_block.to_host();
            EXPECT_EQ(ib, ids_warp.to_host());
            EXPECT_EQ(wb, rw_warp.to_host());
            // Only block x == 0 of a slot records its pick; the others pick just their own slot's
            // expert: their act rows must be those of the router's picks.
            DeviceArray<float> act_given(T * slots * I);
            gemv_gated_experts(act_given.get(), x.get(), d, T * slots, slots, ids_warp.get(),
                               L.exp_gate, L.exp_up, nullptr);
            EXPECT_LE(testing::worst_ratio(act.to_host(), act_given.to_host(), 1e-6, 1e-6), 1.0);
            model::LayerWeights lw;
            lw.router = model::Linear{ConstTensorView(eye.data(), DType::kF32, {E, E}), 1.0f};
            if (bias) lw.expert_bias = ConstTensorView(bv.data(), DType::kF32, {E});
            model::FlintConfig cfg;
            cfg.num_experts = E;
            cfg.num_experts_per_tok = k;
            cfg.norm_topk_prob = r.norm_topk_prob;
            cfg.routed_scaling_factor = r.routed_scaling_factor;
            const cpu::Routing want = cpu::route(lg.data(), T, lw, cfg, pool);
            for (int t = 0; t < T; ++t) {
              for (int j = 0; j < k; ++j) {
                EXPECT_EQ(ib[t * slots + j], want.expert_ids[t * k + j]) << "token " << t;
                EXPECT_NEAR(wb[t * slots + j], want.weights[t * k + j], 2e-6) << "token " << t;
              }
              for (int j = k; j < slots; ++j) {  // then the shared slices
                EXPECT_EQ(ib[t * slots + j], E + (j - k));
                EXPECT_EQ(wb[t * slots + j], 1.0f);
              }
            }
          }
        }
      }
    }
}

}  // namespace
}  // namespace flint::cuda
