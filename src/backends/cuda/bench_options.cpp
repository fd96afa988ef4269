// `flint bench`'s options: the full Flint shape it runs, the checks on its flags, and the entry
// point of the standalone decode_step_bench. The measurements are in bench.cpp; the option
// checks' test is tests/unit/cuda/bench_options_test.cpp.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/bench.h"
#include "backends/cuda/bench_main.h"
#include "backends/cuda/kernels/ktrace.h"

namespace flint::cuda {

model::FlintConfig flint_full_config() {
  model::FlintConfig c;
  c.vocab_size = 150144;
  c.hidden_size = 2048;
  c.num_hidden_layers = 49;
  c.num_heads = 32;
  c.num_kv_heads = 4;
  c.head_dim = 128;
  c.intermediate_size = 6144;
  c.moe_intermediate_size = 512;
  c.shared_expert_intermediate_size = 1024;
  c.num_experts = 256;
  c.num_experts_per_tok = 6;
  c.sliding_window = 513;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6f;
  c.attention_scale = 1.0f / std::sqrt(128.0f);
  c.max_position_embeddings = 262144;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool full = l == 0 || l == 1 || l == 48 || (l >= 5 && (l - 1) % 4 == 0);
    c.layer_types.push_back(full ? model::LayerType::kFullAttention
                                 : model::LayerType::kSlidingAttention);
    c.layer_uses_rope.push_back(!full);
    c.layer_is_dense.push_back(l < 2);
  }
  return c;
}

Result<model::FlintConfig> first_layers(model::FlintConfig config, int64_t n) {
  if (n < 1 || n > config.num_hidden_layers) {
    return Error{ErrorCode::kInvalidArgument,
                 fmt::format("--layers must be in [1, {}], got {}", config.num_hidden_layers, n)};
  }
  config.num_hidden_layers = n;
  config.layer_types.resize(n);
  config.layer_uses_rope.resize(n);
  config.layer_is_dense.resize(n);
  return config;
}

Status validate_bench_options(const model::FlintConfig& config, const BenchOptions& opt) {
  auto bad = [](fmt::string_view f, auto&&... a) {
    return Error{ErrorCode::kInvalidArgument, fmt::vformat(f, fmt::make_format_args(a...))};
  };
  constexpr int kMaxBatch = 4096;
  const int64_t max_len = config.max_position_embeddings;
  if (opt.dtypes.empty()) return bad("--dtype needs at least one of nvfp4, bf16");
  for (const std::string& d : opt.dtypes) {
    if (d != "nvfp4" && d != "bf16") return bad("--dtype must be nvfp4 or bf16, got '{}'", d);
  }
  if (opt.batches.empty() && opt.prefill_lengths.empty()) {
    return bad("nothing to measure: give --batch or --prefill");
  }
  if (opt.decode_path != "persistent" && opt.decode_path != "layered") {
    return bad("--decode-path must be persistent or layered, got '{}'", opt.decode_path);
  }
  if (opt.ktrace_block != 0 && !opt.ktrace) return bad("--ktrace-block goes with --ktrace");
  if (opt.ktrace_block < 0 || opt.ktrace_block > 65535) {
    return bad("--ktrace-block must be a block index in 0..65535, got {}", opt.ktrace_block);
  }
  if (opt.ktrace && !ktrace_compiled()) {
    return bad("--ktrace needs a build with -DFLINT_KTRACE=ON (the kernels' timeline stamps)");
  }
  if ((opt.ablate || opt.ktrace) && opt.decode_path != "layered") {
    return bad("--ablate and --ktrace time the layered path; they cannot go with --decode-path {}",
               opt.decode_path);
  }
  for (const std::string& h : opt.heads) {
    if (h != "full" && h != "greedy" && h != "sample" && h != "topk") {
      return bad("--head must be full, greedy, sample or topk, got '{}'", h);
    }
    if ((h == "greedy" || h == "topk") && opt.decode_path != "layered") {
      return bad("--head {} runs on the layered path, not --decode-path {}", h, opt.decode_path);
    }
  }
  for (int b : opt.batches) {
    if (b < 1 || b > kMaxBatch) return bad("--batch must be in [1, {}], got {}", kMaxBatch, b);
  }
  if (!opt.batches.empty() && opt.contexts.empty())
    return bad("--context needs at least one value");
  for (int64_t c : opt.contexts) {
    if (c < 1 || c > max_len) return bad("--context must be in [1, {}], got {}", max_len, c);
  }
  for (int64_t n : opt.prefill_lengths) {
    if (n < 1 || n > max_len) return bad("--prefill must be in [1, {}], got {}", max_len, n);
  }
  if (opt.prefill_chunk < 1 || opt.prefill_chunk > max_len) {
    return bad("--prefill-chunk must be in [1, {}], got {}", max_len, opt.prefill_chunk);
  }
  if (opt.prefill_runs < 1)
    return bad("--prefill-runs must be at least 1, got {}", opt.prefill_runs);
  if (opt.steps < 1) return bad("--steps must be at least 1, got {}", opt.steps);
  if (opt.warmup < 0) return bad("--warmup must be at least 0, got {}", opt.warmup);
  if (!(opt.gpu_memory_utilization > 0.0 && opt.gpu_memory_utilization <= 1.0)) {
    return bad("--gpu-memory-utilization must be in (0, 1], got {}", opt.gpu_memory_utilization);
  }
  return ok();
}

int decode_bench_main(int argc, char** argv) {
  BenchOptions opt;
  std::optional<int64_t> layers;  // --layers (first_layers)
  auto strings = [](const char* v) {
    std::vector<std::string> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    return out;
  };
  // Whole decimal integers only: "abc", "3x" or "" must not read as 0 or 3.
  auto whole = [](const std::string& v, int64_t& out) {
    const char* end = v.data() + v.size();
    const auto [p, ec] = std::from_chars(v.data(), end, out);
    return !v.empty() && ec == std::errc() && p == end;
  };
  auto ints = [&](const char* v, std::vector<int64_t>& out) {
    out.clear();
    for (const std::string& item : strings(v)) {
      int64_t x = 0;
      if (!whole(item, x)) return false;
      out.push_back(x);
    }
    return !out.empty();
  };
  auto one = [&](const char* v, int& out) {
    int64_t x = 0;
    if (!whole(v, x) || x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      return false;
    out = static_cast<int>(x);
    return true;
  };
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--ablate" || k == "--ktrace") {  // flags
      (k == "--ablate" ? opt.ablate : opt.ktrace) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      fmt::print(stderr, "decode_step_bench: {} needs a value\n", k);
      return 2;
    }
    const char* v = argv[i + 1];
    bool is_int = true;  // false: an integer flag whose value is not one (or a list of them)
    std::vector<int64_t> list;
    if (k == "--dtype") {
      opt.dtypes = strings(v);
    } else if (k == "--batch") {
      opt.batches.clear();
      is_int = ints(v, list);
      for (int64_t b : list) {
        is_int = is_int && b >= 0 && b <= std::numeric_limits<int>::max();
        opt.batches.push_back(static_cast<int>(b));
      }
    } else if (k == "--context") {
      is_int = ints(v, opt.contexts);
    } else if (k == "--steps") {
      is_int = one(v, opt.steps);
    } else if (k == "--prefill") {
      is_int = ints(v, opt.prefill_lengths);
      if (opt.prefill_lengths.size() == 1 && opt.prefill_lengths[0] == 0)
        opt.prefill_lengths.clear();
    } else if (k == "--prefill-chunk") {
      is_int = one(v, opt.prefill_chunk);
    } else if (k == "--prefill-runs") {
      is_int = one(v, opt.prefill_runs);
    } else if (k == "--decode-path") {
      opt.decode_path = v;
    } else if (k == "--head") {
      opt.heads = strings(v);
    } else if (k == "--ktrace-block") {
      is_int = one(v, opt.ktrace_block);
    } else if (k == "--layers") {
      int64_t n = 0;
      is_int = whole(v, n);
      layers = n;
    } else {
      fmt::print(stderr, "decode_step_bench: unknown option {}\n", k);
      return 2;
    }
    if (!is_int) {
      fmt::print(stderr, "decode_step_bench: {} needs {}, got '{}'\n", k,
                 k == "--batch"                         ? "a comma-separated list of integers >= 0"
                 : k == "--context" || k == "--prefill" ? "a comma-separated list of integers"
                                                        : "an integer",
                 v);
      return 2;
    }
  }
  Result<model::FlintConfig> config = flint_full_config();
  if (layers) config = first_layers(*config, *layers);
  if (!config) {
    fmt::print(stderr, "decode_step_bench: {}\n", config.error().message);
    return 2;
  }
  const Status st = run_decode_bench(*config, opt);
  if (!st) {
    fmt::print(stderr, "error: {}\n", st.error().message);
    return 1;
  }
  return 0;
}

}  // namespace flint::cuda
