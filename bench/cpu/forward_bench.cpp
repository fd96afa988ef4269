// CPU forward pass speed: prefill (tokens/s of one 128-token chunk) and decode (one token after a
// 128-token prompt), on the checkpoint named by FLINT_BENCH_MODEL (HF directory or .gguf). Reports
// tokens/s and the weight bytes read per second. Results: docs/PERFORMANCE.md ("CPU").
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "backends/cpu/forward.h"
#include "model/weights.h"

namespace flint::cpu {
namespace {

const model::FlintWeights* bench_weights() {
  static std::optional<model::FlintWeights> w = []() -> std::optional<model::FlintWeights> {
    const char* path = std::getenv("FLINT_BENCH_MODEL");
    if (path == nullptr) return std::nullopt;
    auto r = model::FlintWeights::load(path);
    if (!r) {
      fmt::print(stderr, "forward_bench: {}\n", r.error().message);
      return std::nullopt;
    }
    return std::move(*r);
  }();
  return w ? &*w : nullptr;
}

// Bytes of weights one token touches: everything but the embedding table and unselected experts.
double active_weight_bytes(const model::FlintWeights& w) {
  auto bytes = [](const model::Linear& l) {
    return l.w.empty() ? 0.0 : static_cast<double>(dtype_bytes_for(l.w.dtype(), l.w.numel()));
  };
  double total = bytes(w.lm_head);
  for (const auto& lw : w.layers) {
    total += bytes(lw.q) + bytes(lw.k) + bytes(lw.v) + bytes(lw.o) + bytes(lw.gate) + bytes(lw.up) +
             bytes(lw.down) + bytes(lw.router) + bytes(lw.sh_gate) + bytes(lw.sh_up) +
             bytes(lw.sh_down);
    if (!lw.exp_gate.empty())
      total += w.config.num_experts_per_tok *
               (bytes(lw.exp_gate[0]) + bytes(lw.exp_up[0]) + bytes(lw.exp_down[0]));
  }
  return total;
}

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return v;
}

void BM_CpuPrefill(benchmark::State& state) {
  const model::FlintWeights* w = bench_weights();
  if (w == nullptr) return state.SkipWithError("set FLINT_BENCH_MODEL to a checkpoint");
  const int64_t n = state.range(0);
  CpuBackend be(*w);
  const auto toks = prompt(n, w->config.vocab_size);
  std::vector<float> logits(static_cast<size_t>(w->config.vocab_size));
  for (auto _ : state) {
    SimpleSteps steps(1, n);
    if (!be.init_kv_cache(steps.kv_spec(DType::kF32))) return state.SkipWithError("kv cache");
    steps.add(0, toks, false);
    if (!be.forward(steps.take(), logits)) return state.SkipWithError("forward failed");
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = be.num_threads();
}

void BM_CpuDecode(benchmark::State& state) {
  const model::FlintWeights* w = bench_weights();
  if (w == nullptr) return state.SkipWithError("set FLINT_BENCH_MODEL to a checkpoint");
  const int64_t context = state.range(0);
  CpuBackend be(*w);
  const auto toks = prompt(context, w->config.vocab_size);
  const int64_t max_steps = 4096;
  SimpleSteps steps(1, context + max_steps);
  if (!be.init_kv_cache(steps.kv_spec(DType::kF32))) return state.SkipWithError("kv cache");
  std::vector<float> logits(static_cast<size_t>(w->config.vocab_size));
  steps.add(0, toks, false);
  if (!be.forward(steps.take(), logits)) return state.SkipWithError("prefill failed");
  int64_t done = 0;
  for (auto _ : state) {
    if (done++ == max_steps) return state.SkipWithError("ran past the cache");
    const int32_t next = toks[done % context];
    steps.add(0, std::span(&next, 1), false);
    if (!be.forward(steps.take(), logits)) return state.SkipWithError("decode failed");
  }
  state.counters["tokens/s"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] = benchmark::Counter(active_weight_bytes(*w) / 1e9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = be.num_threads();
}

BENCHMARK(BM_CpuPrefill)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_CpuDecode)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace
}  // namespace flint::cpu

BENCHMARK_MAIN();
