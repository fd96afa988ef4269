// The GPU memory plan's arithmetic and its profiling step, on the CPU (no device needed).
// Partner: src/backends/cuda/memory_plan.cpp.
#include "backends/cuda/memory_plan.h"

#include <gtest/gtest.h>

#include <climits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"

namespace flint::cuda {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// 4 layers (full, full, sliding, full), 2 KV heads of 16, window 5.
model::FlintConfig small_config() {
  auto c = model::FlintConfig::from_hf_json(nlohmann::json::parse(R"({
    "architectures": ["FlintForCausalLM"], "model_type": "flint",
    "vocab_size": 384, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "hidden_act": "silu", "intermediate_size": 192, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
    "norm_topk_prob": true, "routed_scaling_factor": 1.0, "mlp_only_layers": [0],
    "layer_types": ["full_attention", "full_attention", "sliding_attention", "full_attention"],
    "no_rope_layer_indices": [0, 1, 3], "sliding_window": 5, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": false,
    "eos_token_id": 367, "pad_token_id": 367
  })"));
  EXPECT_TRUE(c.has_value()) << c.error().message;
  return *c;
}

GpuMemoryFacts facts_100g() {
  GpuMemoryFacts f;
  f.total = 100 * kGiB;
  f.used_at_start = 1 * kGiB;
  f.weights = 10 * kGiB;
  f.activations = 2 * kGiB;
  return f;
}

KvLayout layout_1m() {  // 1 MiB pages of 16 tokens, 4 rings of 1 MiB
  KvLayout k;
  k.page_size = 16;
  k.page_bytes = 1 << 20;
  k.ring_bytes = 1 << 20;
  k.num_rings = 4;
  return k;
}

void expect_error(const Result<GpuMemoryPlan>& p, std::initializer_list<std::string> needles) {
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, ErrorCode::kOutOfMemory);
  for (const auto& n : needles) {
    EXPECT_NE(p.error().message.find(n), std::string::npos) << p.error().message << " lacks " << n;
  }
}

TEST(KvLayout, MatchesTheEngineSizing) {
  const model::FlintConfig c = small_config();
  const KvLayout k = kv_layout(c, 16, 7, DType::kBF16);
  const int64_t row = 2 * 2 * 16 * 2;  // K and V, 2 heads of 16, bf16
  EXPECT_EQ(k.page_bytes, 3 * row * 16);
  EXPECT_EQ(k.ring_bytes, 1 * row * 5);
  EXPECT_EQ(k.num_rings, 7);
  EXPECT_EQ(kv_layout(c, 16, 7, DType::kF32).page_bytes, 2 * k.page_bytes);
}

TEST(GpuMemoryPlan, KvCacheGetsTheBudgetMinusWeightsActivationsAndMargin) {
  GpuMemoryRequest r;
  r.gpu_memory_utilization = 0.9;
  r.max_model_len = 4096;
  auto p = plan_gpu_memory(facts_100g(), layout_1m(), r);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->budget, 90 * kGiB);
  EXPECT_EQ(p->margin, kGpuMemoryMarginBytes + 2 * kGiB);
  EXPECT_EQ(p->kv_cache_bytes, 90 * kGiB - 1 * kGiB - 10 * kGiB - 2 * kGiB - p->margin);
  EXPECT_FALSE(p->kv_from_flag);
  EXPECT_EQ(p->num_pages, (p->kv_cache_bytes - 4 * (1 << 20)) / (1 << 20));
  EXPECT_EQ(p->num_tokens, p->num_pages * 16);
  EXPECT_DOUBLE_EQ(p->max_concurrency, p->num_pages / 256.0);
  const std::string text = describe(facts_100g(), *p, r);
  EXPECT_NE(text.find("weights 10.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("maximum concurrency for 4096 tokens per request"), std::string::npos);
}

TEST(GpuMemoryPlan, UtilizationOfOneIsCappedByWhatIsPhysicallyFree) {
  GpuMemoryRequest r;
  r.gpu_memory_utilization = 1.0;
  r.max_model_len = 16;
  auto p = plan_gpu_memory(facts_100g(), layout_1m(), r);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->kv_cache_bytes, 100 * kGiB - 13 * kGiB - p->margin);
}

TEST(GpuMemoryPlan, KvCacheMemoryFlagOverrides) {
  GpuMemoryRequest r;
  r.gpu_memory_utilization = 0.1;  // would leave nothing: the flag wins
  r.kv_cache_memory = 64 << 20;
  r.max_model_len = 512;
  auto p = plan_gpu_memory(facts_100g(), layout_1m(), r);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_TRUE(p->kv_from_flag);
  EXPECT_EQ(p->kv_cache_bytes, 64 << 20);
  EXPECT_EQ(p->num_pages, 60);
}

TEST(GpuMemoryPlan, PagesStopWhereInt32SlotsEnd) {
  GpuMemoryRequest r;
  r.max_model_len = 512;
  KvLayout k = layout_1m();
  k.page_bytes = 256;  // a tiny model: ~75 GiB would be ~313M pages, ~5G int32 slots
  auto p = plan_gpu_memory(facts_100g(), k, r);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->num_pages, INT32_MAX / 16);
  EXPECT_LE(p->num_tokens, int64_t{INT32_MAX});
  EXPECT_EQ(p->kv_cache_bytes, 4 * (1 << 20) + p->num_pages * 256);
}

TEST(GpuMemoryPlan, KvCacheMemoryLargerThanTheGpuIsAnError) {
  GpuMemoryRequest r;
  r.kv_cache_memory = 90 * kGiB;
  r.max_model_len = 512;
  expect_error(plan_gpu_memory(facts_100g(), layout_1m(), r),
               {"--kv-cache-memory", "does not fit"});
}

TEST(GpuMemoryPlan, WeightsOverTheBudgetNameTheUtilizationFlag) {
  GpuMemoryRequest r;
  r.gpu_memory_utilization = 0.1;
  r.max_model_len = 512;
  expect_error(plan_gpu_memory(facts_100g(), layout_1m(), r),
               {"weights take 10.00 GiB", "raise --gpu-memory-utilization"});
}

TEST(GpuMemoryPlan, NoRoomForTheKvCacheNamesTheFlags) {
  GpuMemoryRequest r;
  r.gpu_memory_utilization = 0.12;  // 12 GiB: weights fit, activations and margin do not
  r.max_model_len = 512;
  expect_error(plan_gpu_memory(facts_100g(), layout_1m(), r),
               {"nothing is left for the KV cache", "--max-num-batched-tokens"});
}

TEST(GpuMemoryPlan, OneSequenceThatDoesNotFitNamesMaxModelLen) {
  GpuMemoryRequest r;
  r.kv_cache_memory = (4 + 10) << 20;  // rings + 10 pages = 160 tokens
  r.max_model_len = 512;
  expect_error(plan_gpu_memory(facts_100g(), layout_1m(), r),
               {"raise --kv-cache-memory", "lower --max-model-len to at most 160"});
  r.kv_cache_memory.reset();
  GpuMemoryFacts f = facts_100g();
  f.activations = 0;
  r.gpu_memory_utilization = (11.0 * kGiB + kGpuMemoryMarginBytes + (4 + 10) * (1 << 20)) /
                             static_cast<double>(100 * kGiB);
  auto p = plan_gpu_memory(f, layout_1m(), r);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("raise --gpu-memory-utilization"), std::string::npos)
      << p.error().message;
}

TEST(GpuMemoryPlan, RingsThatDoNotFitNameMaxNumSeqs) {
  GpuMemoryRequest r;
  r.kv_cache_memory = 3 << 20;  // 4 rings of 1 MiB
  r.max_model_len = 16;
  expect_error(plan_gpu_memory(facts_100g(), layout_1m(), r), {"lower --max-num-seqs"});
}

// The profiling step is a valid step for its own minimal KV cache: the CPU reference runs it.
TEST(ProfileStep, IsAValidStepOnItsMinimalKvCache) {
  const model::FlintConfig c = small_config();
  auto w = model::FlintWeights::dummy(c, DType::kBF16, 1);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  for (auto [tokens, seqs] : {std::pair{1, 1}, {7, 3}, {129, 256}, {50, 1}, {700, 2}}) {
    SCOPED_TRACE(fmt::format("tokens={} seqs={}", tokens, seqs));
    ProfileShape shape;
    shape.num_tokens = tokens;
    shape.num_seqs = seqs;
    shape.max_model_len = 300;
    const model::StepInput st = profile_step(c, shape);
    const int S = std::min(tokens, seqs);
    const int T = std::min(tokens, S * 300);  // no sequence longer than max_model_len
    EXPECT_EQ(st.num_tokens(), T);
    EXPECT_EQ(st.num_seqs(), S);
    EXPECT_EQ(st.max_blocks_per_seq, 19);  // ceil(300 / 16)
    EXPECT_EQ(st.logits_indices.size(), size_t(T + S));
    model::KvCacheSpec kv = profile_kv_spec(c, shape);
    EXPECT_EQ(kv.num_rings, 1);
    cpu::CpuBackend cpu(*w, 1);
    ASSERT_TRUE(cpu.init_kv_cache(kv).has_value());
    std::vector<float> logits(st.logits_indices.size() * c.vocab_size);
    auto r = cpu.forward(st, logits);
    EXPECT_TRUE(r.has_value()) << r.error().message;
  }
}

}  // namespace
}  // namespace flint::cuda
