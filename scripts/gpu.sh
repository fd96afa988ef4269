#!/usr/bin/env bash
# The GPU machine's one call: configure and build the CUDA targets, run every GPU test
# (`ctest -L gpu`), then `flint bench --load-format dummy`. Logs go to $OUT (or ./gpu-out).
# Usage: scripts/gpu.sh [tests|bench|all] [extra bench args...]
#        scripts/gpu.sh everything [pytest args...]: both of the above and serve-tests in one build
#        (with FLINT_E2E_ARGS set, also tools/decode_e2e.py with those arguments after the bench).
#        scripts/gpu.sh e2e [tools/decode_e2e.py args...]: build flint with the server layer (as
#        serve-tests does) and time one request's decode through `flint serve` on dummy weights.
#        scripts/gpu.sh serve-tests [pytest args...]: `flint serve --device cuda` under the OpenAI API
#        tests (tests/python/server), with the packages scripts/gpu-deps.sh fetched (see there).
#        scripts/gpu.sh ab BASE [decode_step_bench args...]: A/B of decode steps in one call. BASE
#        is another source tree sent with the call (`git worktree add --detach .dev/base main`, carried);
#        both are built, then the bench runs base, this tree, base, this tree... (FLINT_AB_ROUNDS
#        rounds, default 3) and prints each configuration's median graph ms side by side. Prefill
#        timing is skipped (--prefill 0) unless the arguments name --prefill.
#        FLINT_SWEEP_VAR=V FLINT_SWEEP_VALUES=a,b,... scripts/gpu.sh sweep [decode_step_bench args...]:
#        one build, the bench once per value of the environment variable V (an experiment switch
#        the code reads), FLINT_AB_ROUNDS rounds (default 2), one column of median graph ms per value.
#        scripts/gpu.sh prefill [contexts...]: the prefill attention test, prefill_attention_bench
#        (wgmma against mma.sync) at the contexts, and decode_step_bench's 100K-token prefill.
#        decode_step_bench's --layers N times the first N layers of Flint only (BF16 on an H100,
#        which does not hold all 49 layers of BF16 weights).
#        scripts/gpu.sh ktrace [decode_step_bench args...]: a -DFLINT_KTRACE=ON build of the bench
#        run with --ktrace (each kernel kind's timeline: start against the previous launch's last
#        warp end, prologue, PDL wait, marks, hand-off;
#        --ktrace-block N records the block of linear index N of each launch instead of block 0).
#        scripts/gpu.sh ncu REGEX [decode_step_bench args...]: Nsight Compute on FLINT_NCU_COUNT
#        (default 3) launches of the kernels matching REGEX after FLINT_NCU_SKIP (default 100), in
#        the bench's decode steps: details.txt, the SASS page (sass.csv.gz) and its per-warp
#        instruction chain (scripts/ncu-chain.py: instructions per warp between the PDL wait and
#        the barriers, with their stall samples).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
what="${1:-all}"
shift || true
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
if [[ "$what" == serve-tests ]]; then
  exec scripts/gpu-serve-tests.sh "$@"
fi
if [[ "$what" == e2e ]]; then
  FLINT_GPU_E2E=1 exec scripts/gpu-serve-tests.sh "$@"
fi
if [[ "$what" == everything ]]; then  # one build: GPU tests, FLINT_BENCH_ARGS bench, server tests
  FLINT_GPU_ALL=1 exec scripts/gpu-serve-tests.sh "$@"
fi
build="build-gpu"
jobs="$(nproc)"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
  nvcc --version | tail -1
} > "$out/device.txt" 2>&1
# Warnings are CI's business (its compiler): the image's g++ 13 warns inside fmt 9
# (-Warray-bounds in basic_memory_buffer, from cuda_backend.cpp), which -Werror made a failed build.
configure() {  # source dir, build dir, log, extra cmake args...
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLINT_CUDA=ON \
    -DFLINT_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a "${@:4}" > "$3" 2>&1 || { tail -40 "$3"; exit 1; }
}
# graph_table OUT FILE...: the median graph ms of each "| dtype | batch | context | path | graph ms
# | ..." row over the FILEs of each side, one column per side; FILE names are PREFIX-SIDE-ROUND.md,
# sides in the order their files come. Two sides get a change column. Printed and written to OUT.
graph_table() {
  local table="$1"
  shift
  awk -F'|' '
    FNR == 1 {
      side = FILENAME; sub(/.*\//, "", side); sub(/^[^-]*-/, "", side); sub(/-[0-9]+\.md$/, "", side)
      if (!(side in has)) { has[side] = 1; sides[++ns] = side }
    }
    $2 ~ /^ (nvfp4|bf16) $/ && $5 ~ /^ (layered|persistent|greedy|sample|topk) $/ {
      key = $2 "/" $3 "/" $4 "/" $5; gsub(/ /, "", key)
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      v[side, key] = v[side, key] " " ($6 + 0)
    }
    function median(s,   a, k, i, j, t) {
      k = split(s, a, " ")
      for (i = 1; i <= k; ++i) for (j = i + 1; j <= k; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
      head = "| weights/batch/context/path |"; rule = "|---|"
      for (s = 1; s <= ns; ++s) { head = head " " sides[s] " ms |"; rule = rule "---:|" }
      if (ns == 2) { head = head " change |"; rule = rule "---:|" }
      print head; print rule
      for (i = 1; i <= n; ++i) {
        line = "| " order[i] " |"
        for (s = 1; s <= ns; ++s) {
          m[s] = (sides[s], order[i]) in v ? median(v[sides[s], order[i]]) : 0
          line = line sprintf(" %.3f |", m[s])
        }
        if (ns == 2) line = line sprintf(" %+.1f%% |", m[1] > 0 ? 100 * (m[2] - m[1]) / m[1] : 0)
        print line
      }
    }' "$@" | tee "$table"
}
if [[ "$what" == sweep ]]; then
  # One build of this tree, then decode_step_bench once per value of an environment variable the
  # code reads (an experiment switch), FLINT_AB_ROUNDS rounds interleaved, one column per value.
  var="${FLINT_SWEEP_VAR:?gpu.sh sweep: set FLINT_SWEEP_VAR (the variable) and FLINT_SWEEP_VALUES}"
  IFS=, read -r -a values <<< "${FLINT_SWEEP_VALUES:?gpu.sh sweep: set FLINT_SWEEP_VALUES (a,b,...)}"
  [[ "$var" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "gpu.sh sweep: bad variable name '$var'"; exit 1; }
  for v in "${values[@]}"; do
    [[ "$v" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "gpu.sh sweep: values are [A-Za-z0-9_.-]+, got '$v'"; exit 1; }
  done
  [[ " $* " == *" --prefill "* ]] || set -- "$@" --prefill 0
  rounds="${FLINT_AB_ROUNDS:-2}"
  [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gpu.sh sweep: FLINT_AB_ROUNDS must be >= 1, got '$rounds'"; exit 1; }
  configure . "$build" "$out/configure.log"
  cmake --build "$build" -j "$jobs" --target decode_step_bench > "$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
  for ((r = 1; r <= rounds; ++r)); do
    for v in "${values[@]}"; do
      env "$var=$v" "$build/bench/decode_step_bench" "$@" > "$out/sweep-$v-$r.md" 2> "$out/sweep-$v-$r.log" ||
        { echo "gpu.sh sweep: $var=$v failed (round $r)"; tail -5 "$out/sweep-$v-$r.log"; exit 1; }
    done
  done
  files=()  # this call's rounds only: an earlier call's files may share the folder
  for v in "${values[@]}"; do
    for ((r = 1; r <= rounds; ++r)); do files+=("$out/sweep-$v-$r.md"); done
  done
  graph_table "$out/sweep.md" "${files[@]}"
  exit 0
fi
if [[ "$what" == prefill ]]; then
  # Prefill attention: its kernel test, prefill_attention_bench at the given contexts (wgmma against
  # mma.sync), then decode_step_bench's 100K-token prefill (FLINT_PREFILL_DTYPES, default nvfp4).
  configure . "$build" "$out/configure.log"
  cmake --build "$build" -j "$jobs" --target gpu_tests prefill_attention_bench decode_step_bench \
    > "$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
  "$build/tests/gpu_tests" --gtest_filter='PrefillAttention.*' > "$out/test.log" 2>&1 || rc_test=1
  grep -E "Failure|Expected|Which is|worst|OK \]|FAILED|PASSED" "$out/test.log" | head -30
  "$build/bench/prefill_attention_bench" "$@" | tee "$out/prefill_attention.md"
  "$build/bench/decode_step_bench" --dtype "${FLINT_PREFILL_DTYPES:-nvfp4}" --batch "" \
    --prefill 102400 --prefill-runs 1 > "$out/prefill.md" 2> "$out/prefill.log" ||
    { echo "gpu.sh prefill: decode_step_bench failed"; tail -5 "$out/prefill.log"; }
  grep -iE "prefill|^\| (nvfp4|bf16)" "$out/prefill.md" | head -20
  exit "${rc_test:-0}"
fi
if [[ "$what" == ktrace ]]; then
  # A -DFLINT_KTRACE=ON build of decode_step_bench (its own build dir) run with --ktrace: where
  # each kernel kind's time goes, from block 0's timeline stamps (kernels/ktrace.h).
  [[ " $* " == *" --prefill "* ]] || set -- "$@" --prefill 0
  configure . "$build-ktrace" "$out/configure-ktrace.log" -DFLINT_KTRACE=ON
  cmake --build "$build-ktrace" -j "$jobs" --target decode_step_bench > "$out/build-ktrace.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build-ktrace.log" | head -40; exit 1; }
  "$build-ktrace/bench/decode_step_bench" --ktrace "$@" > "$out/ktrace.md" 2> "$out/ktrace.log" ||
    { echo "gpu.sh ktrace: the bench failed"; tail -5 "$out/ktrace.log"; exit 1; }
  cat "$out/ktrace.md"
  exit 0
fi
if [[ "$what" == ncu ]]; then
  regex="${1:?usage: scripts/gpu.sh ncu REGEX [decode_step_bench args...]}"
  shift
  [[ " $* " == *" --prefill "* ]] || set -- "$@" --prefill 0
  skip="${FLINT_NCU_SKIP:-100}" count="${FLINT_NCU_COUNT:-3}"
  [[ "$skip" =~ ^[0-9]+$ && "$count" =~ ^[1-9][0-9]*$ ]] ||
    { echo "gpu.sh ncu: FLINT_NCU_SKIP >= 0 and FLINT_NCU_COUNT >= 1, got '$skip' '$count'"; exit 1; }
  configure . "$build" "$out/configure.log"
  cmake --build "$build" -j "$jobs" --target decode_step_bench > "$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
  rep="$(mktemp -d)/ncu"
  ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SourceCounters --import-source yes -o "$rep" \
    "$build/bench/decode_step_bench" "$@" > "$out/ncu.log" 2>&1 ||
    { echo "gpu.sh ncu: ncu failed"; tail -20 "$out/ncu.log"; exit 1; }
  ncu -i "$rep.ncu-rep" --page details > "$out/details.txt" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass 2> /dev/null | gzip > "$out/sass.csv.gz"
  grep -E "^  [^ ].*\(|Duration|Registers Per|Warp Cycles Per Issued|DRAM Throughput" "$out/details.txt"
  python3 scripts/ncu-chain.py "$out/sass.csv.gz" | tee "$out/chain.md"
  exit 0
fi
if [[ "$what" == ab ]]; then
  base="${1:?usage: scripts/gpu.sh ab BASE [decode_step_bench args...]}"
  shift
  [[ -f "$base/CMakeLists.txt" ]] || { echo "gpu.sh ab: $base is not a source tree"; exit 1; }
  # decode_step_bench also times 1K-100K prefills by default (8.5 s per 100K run): an A/B of
  # decode steps skips them unless the arguments name --prefill.
  [[ " $* " == *" --prefill "* ]] || set -- "$@" --prefill 0
  rounds="${FLINT_AB_ROUNDS:-3}"
  [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gpu.sh ab: FLINT_AB_ROUNDS must be >= 1, got '$rounds'"; exit 1; }
  declare -A tree=([base]="$base" [new]=.)
  for side in base new; do
    src="${tree[$side]}"
    configure "$src" "$src/$build" "$out/configure-$side.log"
    cmake --build "$src/$build" -j "$jobs" --target decode_step_bench > "$out/build-$side.log" 2>&1 ||
      { grep -E "error|FAILED" "$out/build-$side.log" | head -40; exit 1; }
  done
  for ((r = 1; r <= rounds; ++r)); do
    for side in base new; do
      "${tree[$side]}/$build/bench/decode_step_bench" "$@" > "$out/ab-$side-$r.md" 2> "$out/ab-$side-$r.log" ||
        { echo "gpu.sh ab: the $side bench failed (round $r)"; tail -5 "$out/ab-$side-$r.log"; exit 1; }
    done
  done
  files=()  # this call's rounds only: an earlier call's files may share the folder
  for side in base new; do
    for ((r = 1; r <= rounds; ++r)); do files+=("$out/ab-$side-$r.md"); done
  done
  graph_table "$out/ab.md" "${files[@]}"
  exit 0
fi
configure . "$build" "$out/configure.log"
targets=(gpu_tests decode_step_bench launch_chain_bench)
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
  # The verdict last, where a caller's tail of the output finds it.
  echo "gpu.sh: ctest -L gpu: $(grep -E "tests passed|tests failed" "$out/ctest.log" 2> /dev/null || echo "no summary")"
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
