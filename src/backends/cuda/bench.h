// `flint bench`: decode-step latency of the full Flint shape on random GPU weights, next to the
// bytes each step must read and a read-stream bandwidth floor measured in the same run; prefill
// throughput of whole prompts in engine-sized chunks; and the time from process start to ready.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/config.h"

namespace flint::cuda {

struct BenchOptions {
  std::vector<std::string> dtypes = {"nvfp4", "bf16"};  // linear-layer formats
  std::vector<int> batches = {1, 8};
  std::vector<int64_t> contexts = {1024, 32768, 102400, 262144};
  std::vector<int64_t> prefill_lengths = {1024, 8192, 102400};  // prompt tokens; empty: none
  int prefill_chunk = 8192;  // tokens per step, as the engine's chunked prefill
  int prefill_runs = 3;      // timed runs per prompt (median), after one warm-up prompt
  // Decode steps of up to 8 sequences: "layered" (a launch per op, what serve runs) or
  // "persistent" (the experimental one-kernel path, when the model allows it).
  std::string decode_path = "layered";
  // LM heads of the decode steps, each a row of the table: "full" (the FP32 head's logits, then
  // argmax: what a sampling step reads), "greedy" (the arg max without the full FP32 read, what
  // serve runs when every row is greedy; kernels/greedy_head.h; the layered path only), "sample"
  // (the full logits, then sample() at temperature 1, top_k 20, top_p 0.95: Flint's recommended
  // sampling) and "topk" (the same draw from topk_logits' rows, what serve runs when every row
  // keeps at most kTopKHeadMax tokens; the layered path only). Empty: full and greedy on the
  // layered path, full on the persistent one.
  std::vector<std::string> heads;
  // Layered decode steps: also time the step's graph with each op kind left out
  // (CudaForward::set_skipped_ops) and report what each costs the step.
  bool ablate = false;
  // Layered decode steps: replay the step's graph with the kernels' timeline stamps on and print
  // where each kernel kind's time goes (needs a -DFLINT_KTRACE=ON build; kernels/ktrace.h).
  bool ktrace = false;
  // --ktrace-block: the linear block index (x fastest) whose thread 0 records each launch's
  // timeline, clamped to the launch's grid.
  int ktrace_block = 0;
  int warmup = 5;
  int steps = 40;
  double gpu_memory_utilization = 0.95;
  uint64_t seed = 1;
};

// The published Flint shape (spec sections 1 and 7.2), for dummy weights.
model::FlintConfig flint_full_config();

// The first n layers of `config` (decode_step_bench --layers: BF16 Flint on a GPU that does not
// hold all 49 layers, an H100); kInvalidArgument naming --layers unless 1 <= n <= the layers it
// has.
Result<model::FlintConfig> first_layers(model::FlintConfig config, int64_t n);

// Rejects options that cannot run (kInvalidArgument naming the flag): empty lists, batch sizes,
// contexts, prompt lengths or chunks out of range, no timed steps or runs, a utilization outside
// (0, 1]. run_decode_bench calls it first; it needs no device.
Status validate_bench_options(const model::FlintConfig& config, const BenchOptions& opt);

// Runs the benchmark and prints a markdown table to stdout; progress goes to the log.
Status run_decode_bench(const model::FlintConfig& config, const BenchOptions& opt);

}  // namespace flint::cuda
