// `flint bench` option checks, on the CPU: every option that cannot run is refused up front with
// the flag named, before any device work. Partner: src/backends/cuda/bench.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/bench.h"
#include "backends/cuda/bench_main.h"
#include "backends/cuda/kernels/ktrace.h"

namespace flint::cuda {
namespace {

TEST(BenchOptions, DefaultsAndTheDocumentedRunAreValid) {
  const model::FlintConfig c = flint_full_config();
  EXPECT_TRUE(validate_bench_options(c, BenchOptions{}));
  BenchOptions o;
  o.batches = {1, 8, 64};
  o.contexts = {1024, 32768, 102400, 262144};
  o.prefill_lengths = {1024, 8192, 102400};
  o.prefill_chunk = 32768;
  o.prefill_runs = 1;
  o.warmup = 0;
  o.gpu_memory_utilization = 1.0;
  EXPECT_TRUE(validate_bench_options(c, o));
  o.ablate = true;  // with the layered path (the default)
  EXPECT_TRUE(validate_bench_options(c, o));
  o.heads = {"greedy", "full"};
  EXPECT_TRUE(validate_bench_options(c, o));
  o.ablate = false;
  o.heads.clear();  // the default on the persistent path: the full head only
  o.decode_path = "persistent";
  EXPECT_TRUE(validate_bench_options(c, o));
  o.decode_path = "layered";
  o.batches.clear();  // prefill only
  EXPECT_TRUE(validate_bench_options(c, o));
}

TEST(BenchOptions, OutOfRangeValuesNameTheirFlag) {
  const model::FlintConfig c = flint_full_config();
  struct Case {
    std::string flag;
    std::function<void(BenchOptions&)> edit;
  };
  const std::vector<Case> cases = {
      {"--dtype", [](BenchOptions& o) { o.dtypes.clear(); }},
      {"--dtype",
       [](BenchOptions& o) {
         o.dtypes = {"nvfp4", "fp8"};
       }},
      {"--batch",
       [](BenchOptions& o) {
         o.batches = {1, 0};
       }},
      {"--batch", [](BenchOptions& o) { o.batches = {-3}; }},
      {"--batch", [](BenchOptions& o) { o.batches = {100000}; }},
      {"--context", [](BenchOptions& o) { o.contexts.clear(); }},
      {"--context",
       [](BenchOptions& o) {
         o.contexts = {1024, 0};
       }},
      {"--context", [](BenchOptions& o) { o.contexts = {262145}; }},
      {"--prefill", [](BenchOptions& o) { o.prefill_lengths = {-1}; }},
      {"--prefill", [](BenchOptions& o) { o.prefill_lengths = {int64_t{1} << 40}; }},
      {"--prefill-chunk", [](BenchOptions& o) { o.prefill_chunk = 0; }},
      {"--prefill-chunk", [](BenchOptions& o) { o.prefill_chunk = -8192; }},
      {"--prefill-runs", [](BenchOptions& o) { o.prefill_runs = 0; }},
      {"--steps", [](BenchOptions& o) { o.steps = 0; }},
      {"--decode-path", [](BenchOptions& o) { o.decode_path = "fused"; }},
      {"--ablate",
       [](BenchOptions& o) {
         o.ablate = true;
         o.decode_path = "persistent";
       }},
      {"--head",
       [](BenchOptions& o) {
         o.heads = {"full", "fast"};
       }},
      {"--head",
       [](BenchOptions& o) {
         o.heads = {"greedy"};
         o.decode_path = "persistent";
       }},
      {"--ktrace-block", [](BenchOptions& o) { o.ktrace_block = 3; }},
      {"--ktrace-block",
       [](BenchOptions& o) {
         o.ktrace = true;
         o.ktrace_block = -1;
       }},
      {"--warmup", [](BenchOptions& o) { o.warmup = -1; }},
      {"--gpu-memory-utilization", [](BenchOptions& o) { o.gpu_memory_utilization = 0.0; }},
      {"--gpu-memory-utilization", [](BenchOptions& o) { o.gpu_memory_utilization = 1.5; }},
      {"--batch or --prefill",
       [](BenchOptions& o) {
         o.batches.clear();
         o.prefill_lengths.clear();
       }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    BenchOptions o;
    cases[i].edit(o);
    const Status st = validate_bench_options(c, o);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(st.error().message.find(cases[i].flag), std::string::npos) << st.error().message;
  }
}

TEST(BenchOptions, KtraceNeedsATraceBuildAndTheLayeredPath) {
  const model::FlintConfig c = flint_full_config();
  BenchOptions o;
  o.ktrace = true;
  const Status st = validate_bench_options(c, o);
  if (ktrace_compiled()) {
    EXPECT_TRUE(st);
  } else {  // the normal build: the kernels carry no stamps
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(st.error().message.find("--ktrace needs a build with -DFLINT_KTRACE=ON"),
              std::string::npos)
        << st.error().message;
  }
  o.decode_path = "persistent";
  const Status persistent = validate_bench_options(c, o);
  ASSERT_FALSE(persistent);
  EXPECT_NE(persistent.error().message.find("--ktrace"), std::string::npos)
      << persistent.error().message;
}

// decode_step_bench --layers N keeps Flint's first N layers as they are (types, RoPE, dense) and
// refuses a count outside [1, 49], naming the flag.
TEST(BenchOptions, FirstLayersKeepsThePrefixAndRefusesOtherCounts) {
  const model::FlintConfig full = flint_full_config();
  const auto c = first_layers(full, 40);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->num_hidden_layers, 40);
  EXPECT_EQ(c->layer_types,
            std::vector<model::LayerType>(full.layer_types.begin(), full.layer_types.begin() + 40));
  EXPECT_EQ(c->layer_uses_rope,
            std::vector<bool>(full.layer_uses_rope.begin(), full.layer_uses_rope.begin() + 40));
  EXPECT_EQ(c->layer_is_dense,
            std::vector<bool>(full.layer_is_dense.begin(), full.layer_is_dense.begin() + 40));
  EXPECT_EQ(c->hidden_size, full.hidden_size);
  EXPECT_EQ(first_layers(full, 49)->num_hidden_layers, 49);
  for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{50}}) {
    SCOPED_TRACE(n);
    const auto bad = first_layers(full, n);
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(bad.error().message, fmt::format("--layers must be in [1, 49], got {}", n));
  }
}

// decode_step_bench's own parsing: an explicit --layers of -1 or 0 is refused (exit 2) before any
// device is looked for, not read as "not given".
TEST(BenchOptions, DecodeBenchMainRefusesLayerCountsOutsideTheModel) {
  for (const char* n : {"-1", "0", "50"}) {
    SCOPED_TRACE(n);
    char prog[] = "decode_step_bench", flag[] = "--layers";
    std::string value = n;
    char* argv[] = {prog, flag, value.data(), nullptr};
    EXPECT_EQ(decode_bench_main(3, argv), 2);
  }
}

// Integer flags take whole integers: a word, a trailing unit or an empty list item is refused
// (exit 2) before any device is looked for, not read as 0 or as its leading digits.
TEST(BenchOptions, DecodeBenchMainRefusesValuesThatAreNotIntegers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--ktrace-block", "abc"}, {"--ktrace-block", "3x"}, {"--steps", ""},
      {"--steps", "1e9"},        {"--batch", "1,,8"},      {"--context", "1K"},
      {"--prefill", "0.5"},      {"--layers", "forty"},    {"--batch", "-1"},
      {"--steps", "99999999999"}};
  for (auto [flag, value] : cases) {
    SCOPED_TRACE(flag + " " + value);
    char prog[] = "decode_step_bench";
    char* argv[] = {prog, flag.data(), value.data(), nullptr};
    EXPECT_EQ(decode_bench_main(3, argv), 2);
  }
}

TEST(BenchOptions, RunRefusesBadOptionsBeforeLookingForADevice) {
  BenchOptions o;
  o.prefill_chunk = 0;  // would loop forever if it ran
  const Status st = run_decode_bench(flint_full_config(), o);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace flint::cuda
