// The prefill attention kernels (mma.sync, and wgmma at head_dim 128) against cpu::attention:
// several sequences mixing long chunks (not multiples of the 64-key tile or of a block's queries),
// single decode tokens and cached prefixes in shuffled pages or wrapped rings; windows 1, 2, 5 and
// 513; GQA groups 1, 2, 4 and 8; sinks that matter.
#include "backends/cuda/kernels/prefill_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/kv_cache.h"
#include "backends/cpu/ops/attention.h"
#include "core/thread_pool.h"
#include "tests/kernels/gpu_test_util.h"

namespace flint::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(::flint::f32_to_bf16(x));
  return v;
}
std::vector<uint16_t> bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = ::flint::f32_to_bf16(v[i]);
  return b;
}

struct AttnCase {
  int num_heads, num_kv_heads, head_dim, window;
  std::vector<std::pair<int, int>> seqs;  // (cached length, new tokens) per sequence
  int64_t page = 16;                      // keys per cache page
};

void check_case(const AttnCase& c, int64_t layer, int rows_per_block, bool wgmma) {
  const bool sliding = layer == 1;
  SCOPED_TRACE(fmt::format("H={} Hkv={} D={} window={} sliding={} rows={} wgmma={}", c.num_heads,
                           c.num_kv_heads, c.head_dim, c.window, sliding, rows_per_block, wgmma));
  model::FlintConfig cfg;
  cfg.num_hidden_layers = 2;
  cfg.num_heads = c.num_heads;
  cfg.num_kv_heads = c.num_kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.sliding_window = c.window;
  cfg.layer_types = {model::LayerType::kFullAttention, model::LayerType::kSlidingAttention};
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim, row = Hkv * D;
  const int S = static_cast<int>(c.seqs.size());
  const int64_t page = c.page;
  int64_t max_len = 0;
  for (auto [old, n] : c.seqs) max_len = std::max<int64_t>(max_len, old + n);
  const int32_t mbps = static_cast<int32_t>((max_len + page - 1) / page);
  model::KvCacheSpec spec{int64_t(S) * mbps, page, S, DType::kF32};
  cpu::KvCache cache;
  ASSERT_TRUE(cache.init(cfg, spec));

  // Step metadata: pages shuffled across sequences, rings reversed.
  std::vector<int32_t> pages(spec.num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(3));
  model::StepInput st;
  st.max_blocks_per_seq = mbps;
  st.query_start_loc.push_back(0);
  std::vector<int32_t> seq_idx;
  for (int s = 0; s < S; ++s) {
    const auto [old, n] = c.seqs[s];
    for (int i = 0; i < n; ++i) {
      st.positions.push_back(old + i);
      st.token_ids.push_back(0);
      seq_idx.push_back(s);
      const int32_t p = old + i;
      st.slot_mapping.push_back(pages[s * mbps + p / page] * int32_t(page) + p % int32_t(page));
    }
    st.query_start_loc.push_back(st.query_start_loc.back() + n);
    st.seq_lens.push_back(old + n);
    st.ring_ids.push_back(S - 1 - s);
    for (int b = 0; b < mbps; ++b) st.block_table.push_back(pages[s * mbps + b]);
  }
  const int T = st.num_tokens();
  // Cache contents (bf16 values), the same on both sides.
  const int64_t cache_rows = cache.num_rows(layer);
  const auto kc = round_bf16(random_floats(cache_rows * row, 11, -1, 1));
  const auto vc = round_bf16(random_floats(cache_rows * row, 12, -1, 1));
  for (int64_t r = 0; r < cache_rows; ++r) {
    cache.write(layer, 0, r, kc.data() + r * row);
    cache.write(layer, 1, r, vc.data() + r * row);
  }
  // Wide q so the softmax is sharp: a wrong or missing key shows at once.
  const auto q = round_bf16(random_floats(int64_t(T) * H * D, 13, -3.0f, 3.0f));
  const auto k = round_bf16(random_floats(int64_t(T) * row, 14, -1.5f, 1.5f));
  const auto v = round_bf16(random_floats(int64_t(T) * row, 15, -1, 1));
  const auto sinks = random_floats(H, 16, -1.0f, 3.0f);
  std::vector<float> want(int64_t(T) * H * D);
  ThreadPool pool(2);
  cpu::attention(want.data(), q.data(), k.data(), v.data(), st, layer, cfg, sinks.data(), cache,
                 pool);

  DeviceArray<uint16_t> dkc(bits(kc)), dvc(bits(vc)), dk(bits(k)), dv(bits(v));
  DeviceArray<float> dq(q), dsinks(sinks), dout(want.size());
  DeviceArray<int32_t> dpos(st.positions), dseq(seq_idx), dslots(st.slot_mapping),
      drings(st.ring_ids), dqsl(st.query_start_loc), dlens(st.seq_lens), dtable(st.block_table);
  const TokenKv kv{dpos.get(),  dseq.get(),   dslots.get(), drings.get(),           dqsl.get(),
                   dlens.get(), dtable.get(), mbps,         static_cast<int>(page), c.window};
  const PrefillAttentionArgs a{
      c.num_heads, c.num_kv_heads, c.head_dim,    1.0f / std::sqrt(static_cast<float>(D)),
      sliding,     wgmma,          rows_per_block};
  auto bf = [](const DeviceArray<uint16_t>& x) {
    return reinterpret_cast<const __nv_bfloat16*>(x.get());
  };
  prefill_attention(dout.get(), dq.get(), bf(dkc), bf(dvc), bf(dk), bf(dv), dsinks.get(), kv, T, S,
                    a, nullptr);
  // P is rounded to bf16 before P V (2^-9 relative), the rest is f32.
  EXPECT_LE(testing::worst_ratio(dout.to_host(), want, 3e-3, 1e-2), 1.0);
}

TEST(PrefillAttention, MatchesCpuAttention) {
  FLINT_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> mix = {{0, 70}, {30, 1}, {600, 130}, {5, 17}, {0, 1}};
  const std::vector<AttnCase> cases = {
      {2, 2, 16, 1, mix},
      {4, 2, 64, 2, mix},
      {8, 1, 128, 5, mix},
      {32, 4, 128, 513, mix},
      {4, 1, 32, 513, {{0, 700}}},
      {8, 2, 128, 513, {{520, 200}, {0, 3}}},
      {4, 4, 128, 2, mix},
      {8, 4, 128, 513, {{0, 385}, {64, 64}, {1000, 2}}},
      {32, 4, 128, 513, {{300, 90}, {77, 1}}, 12}};  // pages of 12 keys: not a power of two
  for (const AttnCase& c : cases) {
    for (int64_t layer : {0, 1}) {
      check_case(c, layer, 64, false);
      check_case(c, layer, 128, false);
      if (c.head_dim == 128) check_case(c, layer, 128, true);  // the wgmma kernel
    }
  }
}

// Shapes the kernels do not serve are refused before anything is launched (no GPU needed).
TEST(PrefillAttention, RefusesUnsupportedShapes) {
  TokenKv kv;
  kv.page_size = 16;
  kv.window = 513;
  auto call = [&](PrefillAttentionArgs a, const TokenKv& k) {
    prefill_attention(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, k, 1, 1, a,
                      nullptr);
  };
  const PrefillAttentionArgs ok{32, 4, 128, 0.088f, false};
  PrefillAttentionArgs a = ok;
  a.num_heads = 30;
  EXPECT_DEATH(call(a, kv), "30 heads over 4 kv heads");
  a = ok;
  a.num_heads = 12;  // 3 query heads per kv head
  EXPECT_DEATH(call(a, kv), "3 query heads per kv head is not supported");
  a = ok;
  a.head_dim = 96;
  EXPECT_DEATH(call(a, kv), "head_dim 96 is not supported");
  a = ok;
  a.rows_per_block = 32;  // refused even where the wgmma kernel, which ignores it, would run
  EXPECT_DEATH(call(a, kv), "32 rows per block");
  TokenKv bad = kv;
  bad.page_size = 0;
  EXPECT_DEATH(call(ok, bad), "full layer with 0-key pages");
  bad = kv;
  bad.window = 0;
  a = ok;
  a.sliding = true;
  EXPECT_DEATH(call(a, bad), "sliding layer without a window");
}

}  // namespace
}  // namespace flint::cuda
