// Grouped MoE experts (count, scatter, grouped gate|up and down GEMMs, combine) against a plain
// CPU loop over each token's slots with cpu::linear, for BF16 and NVFP4 expert stacks.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/ops/linear.h"
#include "backends/cuda/kernels/moe_grouped.h"
#include "backends/cuda/weights.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::random_weight;

TEST(PrefillMoe, GroupedExpertsMatchCpuLoop) {
  FLINT_REQUIRE_GPU();
  for (const bool wgmma : {true, false})
    for (DType dt : {DType::kBF16, DType::kNVFP4}) {
      gemm_use_wgmma(wgmma);  // 128-row tiles on warpgroup MMAs (Hopper) or mma.sync
      SCOPED_TRACE(wgmma ? "wgmma kernel" : "mma.sync kernel");
      // tokens, experts (stack size), slots, inter, hidden; every case with both tile sizes (0: as
      // moe_grouped_tile_rows picks). {100, 16, 2}: expert 0 takes ~67 rows, three 32-row tiles.
      for (auto [T, E, slots, I, d, tile_rows] : {std::tuple{1, 4, 2, 64, 64, 0},
                                                  {37, 9, 3, 64, 128, 0},
                                                  {37, 9, 3, 64, 128, 128},
                                                  {300, 10, 4, 128, 192, 0},
                                                  {300, 10, 4, 128, 192, 32},
                                                  {200, 3, 2, 64, 64, 0},
                                                  {200, 3, 2, 64, 64, 32},
                                                  {100, 16, 2, 64, 128, 32},
                                                  {100, 16, 2, 64, 128, 128}}) {
        SCOPED_TRACE(fmt::format("dtype={} T={} E={} slots={} I={} d={} tile_rows={}", dt, T, E,
                                 slots, I, d, tile_rows));
        const auto gb = random_weight(dt, int64_t(E) * I, d, 21, 0x18, 0x10);
        const auto ub = random_weight(dt, int64_t(E) * I, d, 22, 0x18, 0x10);
        const auto db = random_weight(dt, int64_t(E) * d, I, 23, 0x18, 0x10);
        const model::Linear gl{ConstTensorView(gb.data(), dt, {int64_t(E) * I, d}), 0.9f};
        const model::Linear ul{ConstTensorView(ub.data(), dt, {int64_t(E) * I, d}), 1.1f};
        const model::Linear dl{ConstTensorView(db.data(), dt, {int64_t(E) * d, I}), 0.7f};
        std::vector<float> x = random_floats(int64_t(T) * d, 5);
        std::vector<uint16_t> xb(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          xb[i] = ::flint::f32_to_bf16(x[i]);
          x[i] = bf16_to_f32(xb[i]);
        }
        // Routing: distinct experts per token (most traffic on expert 0, some experts unused).
        std::mt19937_64 g(9);
        std::vector<int32_t> ids(int64_t(T) * slots);
        std::vector<float> wts(ids.size());
        for (int t = 0; t < T; ++t) {
          for (int j = 0; j < slots; ++j) {
            ids[t * slots + j] = (j == 0 && t % 3 != 0) ? 0 : static_cast<int32_t>((t + j * 7) % E);
            if (j > 0 && ids[t * slots + j] == ids[t * slots])
              ids[t * slots + j] = (ids[t * slots] + j) % E;
            wts[t * slots + j] = 0.1f + 0.2f * static_cast<float>(g() % 5);
          }
        }
        const auto h0 = random_floats(int64_t(T) * d, 6);
        // CPU: every expert's gate/up rows for every token, then down for each pair.
        ThreadPool pool(2);
        std::vector<float> ga(int64_t(T) * E * I), ua(ga.size());
        cpu::linear(ga.data(), x.data(), T, gl, pool);
        cpu::linear(ua.data(), x.data(), T, ul, pool);
        std::vector<float> want(h0);
        std::vector<float> act(I), down(int64_t(E) * d);
        for (int t = 0; t < T; ++t) {
          for (int j = 0; j < slots; ++j) {
            const int e = ids[t * slots + j];
            for (int i = 0; i < I; ++i) {
              const float gv = ga[(int64_t(t) * E + e) * I + i];
              // rounded as the GPU stores it (bf16 activations between the two GEMMs)
              act[i] = bf16_to_f32(::flint::f32_to_bf16(gv / (1.0f + std::exp(-gv)) *
                                                        ua[(int64_t(t) * E + e) * I + i]));
            }
            cpu::linear(down.data(), act.data(), 1, dl, pool);
            for (int k = 0; k < d; ++k)
              want[int64_t(t) * d + k] += wts[t * slots + j] * down[int64_t(e) * d + k];
          }
        }
        DeviceWeights owner;
        auto gr = owner.add_linear(gl, nullptr);
        auto ur = owner.add_linear(ul, nullptr);
        auto dr = owner.add_linear(dl, nullptr);
        ASSERT_TRUE(gr.has_value() && ur.has_value() && dr.has_value());
        LinearRef gs = *gr, us = *ur, ds = *dr;  // view the matrices as stacks of E experts
        gs.out = us.out = I;
        ds.out = d;
        gs.num_experts = us.num_experts = ds.num_experts = E;
        DeviceArray<uint16_t> dx(xb);
        DeviceArray<int32_t> did(ids);
        DeviceArray<float> dw(wts), dh(h0);
        DeviceArray<unsigned char> ws(moe_grouped_workspace_bytes(int64_t(T) * slots, E, I, d));
        const MoeGroupedWorkspace w = moe_grouped_workspace(ws.get(), int64_t(T) * slots, E, I, d);
        moe_grouped(dh.get(), d, reinterpret_cast<const __nv_bfloat16*>(dx.get()), d, did.get(),
                    dw.get(), T, slots, gs, us, ds, w, nullptr, tile_rows);
        EXPECT_LE(testing::worst_ratio(dh.to_host(), want, 3e-2, 1e-2), 1.0);
      }
    }
  gemm_use_wgmma(true);  // the default
}

}  // namespace
}  // namespace flint::cuda
