// `flint bench --load-format dummy`: decode latency of the full Flint shape on random GPU weights
// (backends/cuda/bench.cpp), printed as a markdown table on stdout.
#ifdef FLINT_HAVE_CUDA
#include <spdlog/spdlog.h>

#include <algorithm>

#include "backends/cuda/bench.h"
#include "cli/commands.h"

namespace flint::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("bench", "Benchmark CUDA decode steps and prefill on dummy weights");
  struct Opts {
    std::string load_format = "dummy";
    cuda::BenchOptions bench;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("--load-format", opts->load_format, "Weights to benchmark: dummy")
      ->check(CLI::IsMember({"dummy"}));
  cmd->add_option("--dtype", opts->bench.dtypes, "Linear-layer formats: nvfp4, bf16")
      ->check(CLI::IsMember({"nvfp4", "bf16"}))
      ->delimiter(',');
  cmd->add_option("--batch", opts->bench.batches, "Batch sizes")->delimiter(',');
  cmd->add_option("--context", opts->bench.contexts, "Context lengths (tokens)")->delimiter(',');
  cmd->add_option("--steps", opts->bench.steps, "Timed steps per configuration");
  cmd->add_option("--prefill", opts->bench.prefill_lengths,
                  "Prompt lengths for the prefill benchmark (0: none)")
      ->delimiter(',');
  cmd->add_option("--prefill-chunk", opts->bench.prefill_chunk, "Tokens per prefill step");
  cmd->add_option("--prefill-runs", opts->bench.prefill_runs, "Timed runs per prompt length");
  cmd->add_option("--warmup", opts->bench.warmup, "Untimed steps per configuration");
  cmd->add_option("--decode-path", opts->bench.decode_path,
                  "Decode steps of up to 8 sequences: layered (a launch per op, as serve runs "
                  "them) or persistent (the experimental one-kernel path)")
      ->check(CLI::IsMember({"persistent", "layered"}));
  cmd->add_option("--head", opts->bench.heads,
                  "LM heads of the layered decode steps: full (the FP32 logits, then argmax), "
                  "greedy (the arg max from the int8 copy and the candidates' FP32 rows), sample "
                  "(the FP32 logits, then sampling at temperature 1, top_k 20, top_p 0.95) and "
                  "topk (the same sampling from the int8 copy's candidate rows); default: full "
                  "and greedy on the layered path")
      ->check(CLI::IsMember({"full", "greedy", "sample", "topk"}))
      ->delimiter(',');
  cmd->add_flag("--ablate", opts->bench.ablate,
                "Also time each layered decode step with one op kind left out: what each op "
                "costs the step");
  cmd->add_option("--gpu-memory-utilization", opts->bench.gpu_memory_utilization,
                  "Fraction of GPU memory the benchmark may use");
  cmd->callback([opts, &exit_code] {
    auto& lens = opts->bench.prefill_lengths;
    lens.erase(std::remove(lens.begin(), lens.end(), 0), lens.end());
    const Status st = cuda::run_decode_bench(cuda::flint_full_config(), opts->bench);
    if (!st) {
      spdlog::error("bench: {}", st.error().message);
      exit_code = 1;
    }
  });
}

}  // namespace flint::cli
#endif  // FLINT_HAVE_CUDA
