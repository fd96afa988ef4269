// Decode attention against the CPU reference op (backends/cpu/ops/attention.cpp) at awkward
// context lengths, batches and split counts, and the fused decode variant against the separate
// kernels.
#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kv_cache.h"
#include "backends/cpu/ops/attention.h"
#include "backends/cuda/kernels/decode_attention.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/qk_norm_rope_kv.h"
#include "backends/cuda/weights.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

struct SeqSpec {
  int len;      // context length after the step
  int num_new;  // rows of this sequence in the step
};

struct AttnCase {
  std::string name;
  int num_heads, num_kv_heads, head_dim, window, page_size;
  std::vector<SeqSpec> seqs;
  int splits = 0;  // 0: decode_attention_splits() as the forward pass picks them
};

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16(x[i]);
  return out;
}

std::vector<float> round_bf16(std::vector<float> x) {
  for (float& v : x) v = __bfloat162float(__float2bfloat16(v));
  return x;
}

int num_sms() {
  int dev = 0, n = 0;
  FLINT_CUDA_CHECK(cudaGetDevice(&dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// A step over the case's sequences with pages handed out in a shuffled order and a block-table
// stride one wider than needed; layer 0 is full attention, layer 1 sliding.
void run_case(const AttnCase& tc) {
  SCOPED_TRACE(tc.name);
  const int H = tc.num_heads, Hkv = tc.num_kv_heads, D = tc.head_dim;
  model::FlintConfig cfg;
  cfg.num_heads = H;
  cfg.num_kv_heads = Hkv;
  cfg.head_dim = D;
  cfg.sliding_window = tc.window;
  cfg.num_hidden_layers = 2;
  cfg.layer_types = {model::LayerType::kFullAttention, model::LayerType::kSlidingAttention};
  cfg.attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int S = static_cast<int>(tc.seqs.size());

  model::StepInput st;
  int max_blocks = 1, total_pages = 3;
  for (const SeqSpec& q : tc.seqs) {
    max_blocks = std::max(max_blocks, (q.len + tc.page_size - 1) / tc.page_size + 1);
    total_pages += (q.len + tc.page_size - 1) / tc.page_size;
  }
  std::vector<int32_t> pages(total_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
  st.max_blocks_per_seq = max_blocks;
  st.query_start_loc.push_back(0);
  int next_page = 0;
  for (int i = 0; i < S; ++i) {
    const SeqSpec& q = tc.seqs[i];
    const int blocks = (q.len + tc.page_size - 1) / tc.page_size;
    for (int b = 0; b < max_blocks; ++b)
      st.block_table.push_back(b < blocks ? pages[next_page++] : 0);
    for (int p = q.len - q.num_new; p < q.len; ++p) {
      st.token_ids.push_back(0);
      st.positions.push_back(p);
      const int32_t page = st.block_table[int64_t(i) * max_blocks + p / tc.page_size];
      st.slot_mapping.push_back(page * tc.page_size + p % tc.page_size);
    }
    st.query_start_loc.push_back(st.num_tokens());
    st.seq_lens.push_back(q.len);
    st.ring_ids.push_back(S - i);  // ring 0 stays unused
  }
  const int T = st.num_tokens();

  model::KvCacheSpec spec;
  spec.num_pages = total_pages;
  spec.page_size = tc.page_size;
  spec.num_rings = S + 1;
  spec.dtype = DType::kBF16;
  cpu::KvCache cache;
  ASSERT_TRUE(cache.init(cfg, spec));
  const int64_t row = int64_t(Hkv) * D;
  std::vector<float> buf(row);
  uint64_t seed = 100;
  for (int l = 0; l < 2; ++l) {
    for (int kvsel = 0; kvsel < 2; ++kvsel) {
      for (int64_t r = 0; r < cache.num_rows(l); ++r) {
        buf = random_floats(row, seed++, -2.0f, 2.0f);
        cache.write(l, kvsel, r, buf.data());
      }
    }
  }
  const auto q = random_floats(int64_t(T) * H * D, 1, -2.0f, 2.0f);
  const auto k = round_bf16(random_floats(int64_t(T) * row, 2, -2.0f, 2.0f));
  const auto v = round_bf16(random_floats(int64_t(T) * row, 3, -2.0f, 2.0f));
  const auto sinks = random_floats(H, 4, -1.0f, 3.0f);

  DeviceArray<int32_t> d_pos(st.positions), d_slots(st.slot_mapping), d_rings(st.ring_ids),
      d_qsl(st.query_start_loc), d_lens(st.seq_lens), d_table(st.block_table);
  std::vector<int32_t> seq_idx;
  for (int i = 0; i < S; ++i) seq_idx.insert(seq_idx.end(), tc.seqs[i].num_new, i);
  DeviceArray<int32_t> d_seq(seq_idx);
  const TokenKv kv{d_pos.get(),  d_seq.get(),   d_slots.get(), d_rings.get(), d_qsl.get(),
                   d_lens.get(), d_table.get(), max_blocks,    tc.page_size,  tc.window};
  DeviceArray<float> d_q(q), d_sinks(sinks), d_out(int64_t(T) * H * D);
  DeviceArray<__nv_bfloat16> d_k(to_bf16(k)), d_v(to_bf16(v));
  ThreadPool pool(2);

  for (int l = 0; l < 2; ++l) {
    const bool sliding = l == 1;
    SCOPED_TRACE(sliding ? "sliding" : "full");
    std::vector<float> kc(cache.num_rows(l) * row), vc(kc.size());
    for (int64_t r = 0; r < cache.num_rows(l); ++r) {
      cache.read(l, 0, r, kc.data() + r * row);
      cache.read(l, 1, r, vc.data() + r * row);
    }
    DeviceArray<__nv_bfloat16> d_kc(to_bf16(kc)), d_vc(to_bf16(vc));
    std::vector<float> want(int64_t(T) * H * D);
    cpu::attention(want.data(), q.data(), k.data(), v.data(), st, l, cfg, sinks.data(), cache,
                   pool);

    int64_t max_keys = 0;
    for (int p : st.positions) {
      max_keys = std::max<int64_t>(max_keys, sliding ? std::min(p + 1, tc.window) : p + 1);
    }
    DecodeAttentionArgs a{H, Hkv, D, cfg.attention_scale, sliding, tc.splits};
    if (a.num_splits == 0) a.num_splits = decode_attention_splits(T, Hkv, max_keys, num_sms());
    SCOPED_TRACE(fmt::format("splits={}", a.num_splits));
    DeviceArray<float> ws(int64_t(T) * H * a.num_splits * (D + 2));
    DeviceArray<int32_t> counters(std::vector<int32_t>(T * Hkv, 0));
    // Splits merged within their cluster need no workspace and no counters.
    const bool global_merge = !decode_attention_uses_cluster(T, Hkv, a.num_splits, num_sms());
    for (int rep = 0; rep < 2; ++rep) {  // the second launch relies on the counters' reset
      FLINT_CUDA_CHECK(cudaMemset(d_out.get(), 0, sizeof(float) * T * H * D));
      decode_attention(d_out.get(), d_q.get(), d_kc.get(), d_vc.get(), d_k.get(), d_v.get(),
                       d_sinks.get(), kv, T, a, global_merge ? ws.get() : nullptr,
                       global_merge ? counters.get() : nullptr, nullptr);
      const auto got = d_out.to_host();
      EXPECT_LE(testing::worst_ratio(got, want, 1e-4, 1e-3), 1.0) << "launch " << rep;
      const auto c = counters.to_host();
      EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](int32_t x) { return x == 0; }));
    }
  }
}

TEST(DecodeAttention, FlintShapeBatch1AtAwkwardLengths) {
  FLINT_REQUIRE_GPU();
  for (int len : {1, 2, 15, 16, 17, 512, 513, 514, 1000, 5003}) {
    run_case({fmt::format("len={}", len), 32, 4, 128, 513, 16, {{len, 1}}});
  }
}

TEST(DecodeAttention, FlintShapeLongContextManySplits) {
  FLINT_REQUIRE_GPU();
  run_case({"len=70001", 32, 4, 128, 513, 16, {{70001, 1}}});
  run_case({"len=70001 splits=64", 32, 4, 128, 513, 16, {{70001, 1}}, 64});
}

TEST(DecodeAttention, BatchOfDifferentLengths) {
  FLINT_REQUIRE_GPU();
  const std::vector<SeqSpec> seqs = {{1, 1},    {513, 1}, {2, 1},  {514, 1},
                                     {1000, 1}, {16, 1},  {17, 1}, {4099, 1}};
  for (int b = 1; b <= 8; b += 3) {
    run_case({fmt::format("batch={}", b), 32, 4, 128, 513, 16,
              std::vector<SeqSpec>(seqs.begin(), seqs.begin() + b)});
  }
  run_case({"batch=8", 32, 4, 128, 513, 16, seqs});
  run_case({"batch=8 splits=3", 32, 4, 128, 513, 16, seqs, 3});
}

TEST(DecodeAttention, EmptySplitsContributeNothing) {
  FLINT_REQUIRE_GPU();
  run_case({"len=100 splits=64", 32, 4, 128, 513, 16, {{100, 1}}, 64});
  run_case({"len=1 splits=5", 32, 4, 128, 513, 16, {{1, 1}, {3, 1}}, 5});
}

// 2 .. kAttentionClusterMaxSplits splits merge through the distributed shared memory of their
// cluster, more through the global workspace: both sides of the boundary, in full and sliding
// layers, with slices of the outputs that do not divide evenly or leave blocks without any.
TEST(DecodeAttention, ClusterAndGlobalMergesAtTheBoundary) {
  FLINT_REQUIRE_GPU();
  static_assert(kAttentionClusterMaxSplits == 8, "the cases below straddle 8 splits");
  for (int splits : {2, 3, 8, 9, 12}) {
    // Every case below has at most 2 kv heads x 3 rows or 4 kv heads x 2 rows: small enough
    // grids that the split count alone picks the path.
    ASSERT_EQ(decode_attention_uses_cluster(2, 4, splits, num_sms()), splits <= 8);
    ASSERT_EQ(decode_attention_uses_cluster(3, 2, splits, num_sms()), splits <= 8);
    const std::string sp = fmt::format(" splits={}", splits);
    run_case({"flint" + sp, 32, 4, 128, 513, 16, {{1000, 1}, {3001, 1}}, splits});
    run_case({"gqa2 hd16 w300 p4" + sp, 4, 2, 16, 300, 4, {{700, 1}, {5, 1}, {299, 3}}, splits});
    run_case({"mha hd16" + sp, 2, 2, 16, 513, 16, {{900, 1}}, splits});
    run_case({"gqa4 hd64" + sp, 8, 2, 64, 513, 16, {{2000, 1}, {1, 1}}, splits});
  }
}

TEST(DecodeAttention, ChunksReadTheirOwnKeysFromTheStep) {
  FLINT_REQUIRE_GPU();
  run_case({"flint chunks", 32, 4, 128, 513, 16, {{40, 11}, {600, 1}, {9, 9}, {1100, 600}}});
  run_case({"flint chunks splits=4", 32, 4, 128, 513, 16, {{40, 11}, {600, 1}, {9, 9}}, 4});
}

TEST(DecodeAttention, SmallHeadsAndWrappedRings) {
  FLINT_REQUIRE_GPU();
  run_case({"gqa2 hd16 w5 p4", 4, 2, 16, 5, 4, {{7, 3}, {1, 1}, {12, 1}, {30, 9}}});
  run_case({"gqa2 hd16 w5 p4 splits=3", 4, 2, 16, 5, 4, {{7, 3}, {1, 1}, {12, 1}, {30, 9}}, 3});
  run_case({"gqa4 hd32 w3 p4", 4, 1, 32, 3, 4, {{13, 1}, {2, 2}, {40, 5}}});
  run_case({"gqa2 hd64 w513 p16", 2, 1, 64, 513, 16, {{1500, 1}, {700, 30}, {514, 1}}});
  run_case({"mha hd64 w1 p16", 8, 8, 64, 1, 16, {{33, 1}, {5, 2}}});
  run_case({"gqa8 hd128 w513 p7", 32, 4, 128, 513, 7, {{1029, 1}, {3001, 1}}});
}

// decode_attention_fused must equal qk_norm_rope_kv + decode_attention + kv_cache_write: the same
// outputs and the same cache afterwards, in full (NoPE) and sliding (RoPE) layers.
struct FusedCase {
  std::string name;
  int num_heads, num_kv_heads, head_dim, window, page_size;
  std::vector<int> lens;  // one decode token per sequence
  int splits = 0;
};

void run_fused_case(const FusedCase& tc) {
  SCOPED_TRACE(tc.name);
  const int H = tc.num_heads, Hkv = tc.num_kv_heads, D = tc.head_dim, T = int(tc.lens.size());
  const int ps = tc.page_size;
  int max_blocks = 1;
  for (int len : tc.lens) max_blocks = std::max(max_blocks, (len + ps - 1) / ps);
  std::vector<int32_t> positions, seq_idx, qsl = {0}, rings, slots;
  std::vector<int32_t> table(size_t(T) * max_blocks);  // a shuffled page per block
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(11));
  for (int i = 0; i < T; ++i) {
    const int p = tc.lens[i] - 1;
    positions.push_back(p);
    seq_idx.push_back(i);
    qsl.push_back(i + 1);
    rings.push_back(T - 1 - i);
    slots.push_back(table[i * max_blocks + p / ps] * ps + p % ps);
  }
  DeviceArray<int32_t> d_pos(positions), d_seq(seq_idx), d_qsl(qsl), d_rings(rings),
      d_lens(tc.lens), d_table(table), d_slots(slots);
  const TokenKv kv{d_pos.get(), d_seq.get(),  d_slots.get(), d_rings.get(),
                   d_qsl.get(), d_lens.get(), d_table.get(), max_blocks,
                   ps,          tc.window};
  const int cols = (H + 2 * Hkv) * D;
  DeviceArray<float> d_qkv(random_floats(int64_t(T) * cols, 21, -2.0f, 2.0f));
  DeviceArray<float> d_qn(random_floats(D, 22, 0.5f, 1.5f)), d_kn(random_floats(D, 23, 0.5f, 1.5f));
  DeviceArray<float> d_sinks(random_floats(H, 24, -1.0f, 3.0f));
  DeviceArray<float> d_q(int64_t(T) * H * D), out1(int64_t(T) * H * D), out2(int64_t(T) * H * D);
  DeviceArray<__nv_bfloat16> ks(int64_t(T) * Hkv * D), vs(int64_t(T) * Hkv * D);
  for (bool sliding : {false, true}) {
    SCOPED_TRACE(sliding ? "sliding" : "full");
    const int64_t rows = sliding ? int64_t(T) * tc.window : int64_t(T) * max_blocks * ps;
    const auto cache = to_bf16(random_floats(rows * Hkv * D, sliding ? 25 : 26, -2.0f, 2.0f));
    DeviceArray<__nv_bfloat16> k1(cache), v1(cache), k2(cache), v2(cache);
    DecodeAttentionArgs a{H, Hkv, D, 1.0f / std::sqrt(float(D)), sliding, tc.splits};
    if (a.num_splits == 0) {
      const int keys = *std::max_element(tc.lens.begin(), tc.lens.end());
      a.num_splits =
          decode_attention_splits(T, Hkv, sliding ? std::min(keys, tc.window) : keys, num_sms());
    }
    SCOPED_TRACE(fmt::format("splits={}", a.num_splits));
    DeviceArray<float> ws(int64_t(T) * H * a.num_splits * (D + 2));
    DeviceArray<int32_t> counters(std::vector<int32_t>(T * Hkv, 0));
    const QkNormRopeArgs qa{H, Hkv, D, 1e-6f, sliding, 10000.0};
    qk_norm_rope_kv(d_q.get(), d_qkv.get(), d_qn.get(), d_kn.get(), ks.get(), vs.get(), d_pos.get(),
                    T, qa, nullptr);
    decode_attention(out1.get(), d_q.get(), k1.get(), v1.get(), ks.get(), vs.get(), d_sinks.get(),
                     kv, T, a, ws.get(), counters.get(), nullptr);
    kv_cache_write(k1.get(), v1.get(), ks.get(), vs.get(), kv, T, Hkv, D, sliding, nullptr);
    const DecodeQkv dq{d_qkv.get(), d_qn.get(), d_kn.get(), 1e-6f, sliding, 10000.0};
    for (int rep = 0; rep < 2; ++rep) {  // twice: the counters must be reset by the first launch
      decode_attention_fused(out2.get(), dq, k2.get(), v2.get(), d_sinks.get(), kv, T, a, ws.get(),
                             counters.get(), nullptr);
      EXPECT_LE(testing::worst_ratio(out2.to_host(), out1.to_host(), 1e-5, 1e-4), 1.0);
    }
    // On a stream, letting the next kernel launch early (early_dependents): an o projection
    // launched right after it with PDL, which may start while attention runs, still reads the
    // whole output (the same products as the same GEMV run after a synchronisation).
    {
      cudaStream_t st = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
      DecodeAttentionArgs early = a;
      early.early_dependents = true;
      const int64_t in = int64_t(H) * D, out = 64;
      const auto wb = testing::random_weight(DType::kBF16, out, in, 77);
      DeviceWeights owner;
      auto w = owner.add_linear(
          model::Linear{ConstTensorView(wb.data(), DType::kBF16, {out, in}), 1.0f}, nullptr);
      ASSERT_TRUE(w.has_value()) << w.error().message;
      DeviceArray<float> out3(std::vector<float>(int64_t(T) * H * D, -5.0f));
      DeviceArray<float> y(int64_t(T) * out), y_ref(int64_t(T) * out);
      DeviceArray<__nv_bfloat16> k3(cache), v3(cache);
      decode_attention_fused(out3.get(), dq, k3.get(), v3.get(), d_sinks.get(), kv, T, early,
                             ws.get(), counters.get(), st);
      gemv(y.get(), out, out3.get(), in, T, *w, false, st);
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
      ASSERT_EQ(cudaStreamDestroy(st), cudaSuccess);
      gemv(y_ref.get(), out, out3.get(), in, T, *w, false, nullptr);
      EXPECT_EQ(y.to_host(), y_ref.to_host());
      EXPECT_LE(testing::worst_ratio(out3.to_host(), out1.to_host(), 1e-5, 1e-4), 1.0);
    }
    for (auto [want, got] : {std::pair{&k1, &k2}, {&v1, &v2}}) {
      const auto w = want->to_host(), g = got->to_host();
      int64_t diff = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        diff += __bfloat16_as_ushort(w[i]) != __bfloat16_as_ushort(g[i]);
      }
      EXPECT_EQ(diff, 0);
    }
    const auto c = counters.to_host();
    EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](int32_t x) { return x == 0; }));
  }
}

TEST(DecodeAttention, FusedMatchesSeparateKernels) {
  FLINT_REQUIRE_GPU();
  run_fused_case({"flint", 32, 4, 128, 513, 16, {1, 514, 5000, 70, 513, 2}});
  run_fused_case({"flint splits=7", 32, 4, 128, 513, 16, {1, 514, 5000, 70}, 7});
  run_fused_case({"flint b1 long", 32, 4, 128, 513, 16, {40001}});
  run_fused_case({"gqa2 hd16 w5 p4", 4, 2, 16, 5, 4, {7, 1, 12, 30}});
  run_fused_case({"gqa4 hd32 w3 p4 splits=3", 4, 1, 32, 3, 4, {13, 2, 40}, 3});
  run_fused_case({"mha hd64 w1", 8, 8, 64, 1, 16, {33, 5}});
}

// Both merges of the fused variant, in full and sliding layers: 2 .. 8 splits in a cluster, more
// through the global workspace.
TEST(DecodeAttention, FusedMatchesSeparateKernelsOnBothSidesOfTheClusterLimit) {
  FLINT_REQUIRE_GPU();
  for (int splits : {2, 8, 9, 16}) {
    const std::string sp = fmt::format(" splits={}", splits);
    run_fused_case({"flint" + sp, 32, 4, 128, 513, 16, {3001, 1, 700}, splits});
    run_fused_case({"mha hd16 w40" + sp, 2, 2, 16, 40, 4, {90, 41}, splits});
  }
}

}  // namespace
}  // namespace flint::cuda
