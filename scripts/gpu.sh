#!/usr/bin/env bash
# The GPU machine's one call: configure and build the CUDA targets, run every GPU test
# (`ctest -L gpu`), then `flint bench --load-format dummy`. Logs go to $OUT (or ./gpu-out).
# Usage: scripts/gpu.sh [tests|bench|all] [extra bench args...]
#        scripts/gpu.sh everything [pytest args...]: both of the above and serve-tests in one build.
#        scripts/gpu.sh serve-tests [pytest args...]: `flint serve --device cuda` under the OpenAI API
#        tests (tests/python/server), with the packages scripts/gpu-deps.sh fetched (see there).
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
shift || true
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
if [[ "$what" == serve-tests ]]; then
  exec scripts/gpu-serve-tests.sh "$@"
fi
if [[ "$what" == everything ]]; then  # one build: GPU tests, FLINT_BENCH_ARGS bench, server tests
  FLINT_GPU_ALL=1 exec scripts/gpu-serve-tests.sh "$@"
fi
build=build-gpu
jobs="$(nproc)"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
  nvcc --version | tail -1
} > "$out/device.txt" 2>&1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLINT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
targets=(gpu_tests decode_step_bench)
cmake --build "$build" -j "$jobs" --target "${targets[@]}" > "$out/build.log" 2>&1 || {
  grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
# The flint binary needs every host layer; build it but do not let it block the GPU work.
cmake --build "$build" -j "$jobs" --target flint >> "$out/build.log" 2>&1 || echo "gpu.sh: flint did not build (see build.log)"
rc=0
if [[ "$what" == tests || "$what" == all ]]; then
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 150 -j 4) > "$out/ctest.log" 2>&1 || rc=1
  tail -25 "$out/ctest.log"
  timeout 200 "$build/tests/gpu_tests" --gtest_filter='CudaForward.*' > "$out/forward_detail.log" 2>&1 || true
  grep -E "worst|greedy|window|bf16|nvfp4|f32_|all_sliding|chunk|Failure|Expected|actual|fatal" "$out/forward_detail.log" | head -40
fi
if [[ "$what" == bench || "$what" == all ]]; then
  if [[ -x "$build/src/cli/flint" ]]; then
    "$build/src/cli/flint" bench --load-format dummy "$@" > "$out/bench.md" 2> "$out/bench.log" || rc=1
  else
    "$build/bench/decode_step_bench" "$@" > "$out/bench.md" 2> "$out/bench.log" || rc=1
  fi
  cat "$out/bench.md"
  tail -5 "$out/bench.log"
fi
exit $rc
