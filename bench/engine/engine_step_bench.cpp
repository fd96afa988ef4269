// Host-side cost of one engine step (scheduling, StepInput fill, sampling, output processing) with
// a backend that does no math, so the number is the engine's overhead per step on top of the
// forward pass. Reported per step and per decode token. Arguments: sequences, sampling (0 greedy,
// 1 temperature 0.8 + top-p 0.95), and where the token is drawn (0: the logits come to the host
// sampler, as with the CPU backend; 1: the backend samples, as the CUDA backend does on the GPU, so
// the host sees one id per row), and the prompt's length (the context each decode step attends).
#include <benchmark/benchmark.h>

#include <cmath>

#include "engine/engine_core.h"

namespace flint::engine {
namespace {

// Flint-shaped config (vocab and layer pattern); forward writes the same logits row every time.
class NullBackend : public model::Backend {
 public:
  explicit NullBackend(bool device_sampling) : device_sampling_(device_sampling) {
    cfg_.vocab_size = 151552;
    cfg_.num_hidden_layers = 49;
    cfg_.num_kv_heads = 4;
    cfg_.head_dim = 128;
    cfg_.sliding_window = 513;
    cfg_.max_position_embeddings = 131072;
    for (int l = 0; l < 49; ++l)
      cfg_.layer_types.push_back(l == 0 || l == 1 || l == 48 || l % 4 == 1
                                     ? model::LayerType::kFullAttention
                                     : model::LayerType::kSlidingAttention);
    row_.resize(cfg_.vocab_size);
    // Zipf-like logits spread over the vocabulary, as a trained model's are: the k-th most likely
    // token (k = 1, 2, ...) at -2 ln k.
    for (size_t i = 0; i < row_.size(); ++i)
      row_[(i * 7919) % row_.size()] = -2.0f * std::log(static_cast<float>(i + 1));
  }
  const model::FlintConfig& config() const override { return cfg_; }
  Status init_kv_cache(const model::KvCacheSpec&) override { return ok(); }
  Status forward(const model::StepInput& s, std::span<float> logits) override {
    for (size_t r = 0; r < s.logits_indices.size(); ++r)
      std::copy(row_.begin(), row_.end(), logits.begin() + r * row_.size());
    return ok();
  }
  void copy_ring(int32_t, int32_t) override {}
  bool can_sample() const override { return device_sampling_; }
  // The most likely token of row_ for every row (a device would draw it; the host cost is the
  // same).
  Status forward_sample(const model::StepInput& s, std::span<const model::DeviceSampling>,
                        std::span<int32_t> tokens) override {
    for (size_t r = 0; r < s.logits_indices.size(); ++r) tokens[r] = 0;
    return ok();
  }

 private:
  bool device_sampling_;
  model::FlintConfig cfg_;
  std::vector<float> row_;
};

void BM_EngineDecodeStep(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const bool greedy = state.range(1) == 0;
  const bool device_sampling = state.range(2) == 1;
  const int prompt_len = static_cast<int>(state.range(3));
  EngineConfig c;
  c.max_num_seqs = num_seqs;
  c.max_num_batched_tokens = 8192;
  c.max_model_len = prompt_len + 4096;
  c.kv_cache_memory = int64_t{64} << 30;
  auto core = EngineCore::create(c, std::make_unique<NullBackend>(device_sampling), nullptr);
  if (!core) {
    state.SkipWithError(core.error().message.c_str());
    return;
  }
  int next_id = 0;
  auto refill = [&] {
    while ((*core)->stats().num_running + (*core)->stats().num_waiting < num_seqs) {
      Request r;
      r.request_id = std::to_string(next_id++);
      r.prompt_token_ids.assign(size_t(prompt_len), 7);
      r.params.max_tokens = 4000;
      r.params.ignore_eos = true;
      r.params.temperature = greedy ? 0.0f : 0.8f;
      r.params.top_p = 0.95f;
      if (!(*core)->add_request(std::move(r), [](RequestOutput) {})) std::abort();
    }
  };
  // Enough steps for every new prompt's chunks (and a few decode steps, untimed).
  auto prefill = [&] {
    refill();
    const int64_t steps = int64_t(prompt_len) * num_seqs / c.max_num_batched_tokens + 2;
    for (int64_t i = 0; i < steps; ++i) (*core)->step();
  };
  prefill();
  for (auto _ : state) {
    if ((*core)->stats().num_running < num_seqs) {  // finished requests replaced, prefill untimed
      state.PauseTiming();
      prefill();
      state.ResumeTiming();
    }
    (*core)->step();
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * num_seqs, benchmark::Counter::kIsRate);
  (*core)->abort_all();
}
BENCHMARK(BM_EngineDecodeStep)
    ->ArgsProduct({{1, 8, 64}, {0, 1}, {0, 1}, {64}})
    ->ArgsProduct({{1, 8}, {1}, {1}, {102400}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace flint::engine

BENCHMARK_MAIN();
