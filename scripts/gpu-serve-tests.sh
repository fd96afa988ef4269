#!/usr/bin/env bash
# The GPU machine's serve call (scripts/gpu.sh serve-tests): unpack the Debian packages that
# scripts/gpu-deps.sh fetched into a prefix under /tmp (never into /), build flint with the server
# layer against them, run the GPU memory-plan unit tests, compare `flint generate` on the GPU with
# the CPU, then run the OpenAI API tests (tests/python/server) against `flint serve --device cuda`.
# Usage: FLINT_GPU_DEBS=.debs FLINT_GPU_WHL=.whl scripts/gpu-serve-tests.sh [pytest args...]
# With FLINT_GPU_ALL=1 (scripts/gpu.sh everything) the same build also runs `ctest -L gpu` and
# `flint bench` (arguments in FLINT_BENCH_ARGS, and FLINT_BENCH_ARGS2 for a second table) before the
# server tests, so one device call checks and measures the whole tree. With FLINT_GPU_E2E=1
# (scripts/gpu.sh e2e) it builds flint only and runs tools/decode_e2e.py with the arguments instead;
# with FLINT_GPU_ALL=1 and FLINT_E2E_ARGS set, decode_e2e.py also runs (with those) after the bench.
# FLINT_EXP_SWEEP=a,b (with FLINT_GPU_ALL=1): the bench again with FLINT_EXP set to each value,
# FLINT_AB_ROUNDS rounds (default 2), its rows printed (an experiment switch the code reads).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$PWD"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
debs="$(realpath "${FLINT_GPU_DEBS:-.debs}")"
whl="$(realpath "${FLINT_GPU_WHL:-.whl}")"
prefix=/tmp/flint-deps
build="build-gpu-serve"
say() { echo "gpu-serve-tests: $*"; }
{
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  nvcc --version | tail -1
  g++ --version | head -1
  python3 --version
  echo "pkg-config: $(command -v pkg-config)"
  ldconfig -p | grep -E "libssl.so.3|libcrypto.so.3|libz.so.1 |libbrotli|libpcre2|httplib|libcurl"
} > "$out/device.txt" 2>&1

# 1. The Debian packages into $prefix, their .pc files pointed there.
rm -rf "$prefix" && mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix" || { say "cannot unpack $f"; exit 1; }; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|" "$lib"/pkgconfig/*.pc
export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
if ! command -v pkg-config > /dev/null; then  # the carried pkgconf, its library beside it
  mkdir -p "$prefix/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib" "$prefix/usr/bin/pkgconf" \
    > "$prefix/bin/pkg-config"
  chmod +x "$prefix/bin/pkg-config"
  export PATH="$prefix/bin:$PATH"
fi
# Debian keeps OpenSSL's configuration headers under the multiarch include folder.
export CPATH="$prefix/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
# At run time only the libraries the image lacks come from the prefix (never shadow its own).
fallback="$prefix/fallback-lib"
mkdir -p "$fallback"
for so in libpcre2-8.so.0 libcpp-httplib.so.0.11 libssl.so.3 libcrypto.so.3 libbrotlicommon.so.1 \
  libbrotlidec.so.1 libbrotlienc.so.1; do
  ldconfig -p | grep -q "^[[:space:]]*$so " || ln -sf "$lib/$so" "$fallback/$so"
done
say "from the prefix at run time: $(ls "$fallback" | tr '\n' ' ')"
export LD_LIBRARY_PATH="$fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# 2. Build flint (server layer on) and the host unit tests of the CUDA layer.
# Release: no debug info, so the one call spends less of its time compiling. Warnings are CI's
# business (its compiler); the image's newer g++ must not stop this run over a new one.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLINT_CUDA=ON -DFLINT_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DFLINT_PYTHON="$(command -v python3)" > "$out/build.log" 2>&1 || {
  tail -40 "$out/build.log"; exit 1; }
grep "flint:" "$out/build.log"
grep -q "server ON" "$out/build.log" || { say "the server layer is off"; exit 1; }
targets=(flint cuda_tests)
[[ "${FLINT_GPU_E2E:-0}" == 1 ]] && targets=(flint)
[[ "${FLINT_GPU_ALL:-0}" == 1 ]] && targets+=(gpu_tests decode_step_bench)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >> "$out/build.log" 2>&1 || {
  grep -E "error|FAILED|undefined" "$out/build.log" | head -40; exit 1; }
say "built in ${SECONDS}s"
flint="$root/$build/src/cli/flint"
if [[ "${FLINT_GPU_E2E:-0}" == 1 ]]; then
  python3 tools/decode_e2e.py --flint "$flint" "$@" | tee "$out/e2e.md"
  exit "${PIPESTATUS[0]}"
fi
if [[ "${FLINT_GPU_ALL:-0}" == 1 ]]; then
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 150 -j 4) > "$out/ctest.log" 2>&1
  say "ctest -L gpu: $(grep -E "tests passed|tests failed" "$out/ctest.log")"
  grep -E "^\s+[0-9]+ - " "$out/ctest.log" | head -20
  timeout 120 "$build/tests/gpu_tests" --gtest_filter='CudaForward.*' > "$out/forward_detail.log" 2>&1
  grep -E "worst|greedy|FAILED" "$out/forward_detail.log" | head -20
  # shellcheck disable=SC2086
  timeout 200 "$flint" bench --load-format dummy ${FLINT_BENCH_ARGS:-} > "$out/bench.md" 2> "$out/bench.log"
  say "bench rc $? at ${SECONDS}s"
  if [[ -n "${FLINT_BENCH_ARGS2:-}" ]]; then
    # shellcheck disable=SC2086
    timeout 60 "$flint" bench --load-format dummy $FLINT_BENCH_ARGS2 > "$out/bench2.md" 2>> "$out/bench.log"
  fi
  say "bench done at ${SECONDS}s"
  if [[ -n "${FLINT_EXP_SWEEP:-}" ]]; then  # the bench again under each FLINT_EXP value, in rounds
    IFS=, read -r -a exp_values <<< "$FLINT_EXP_SWEEP"
    for ((round = 1; round <= ${FLINT_AB_ROUNDS:-2}; ++round)); do
      for v in "${exp_values[@]}"; do
        # shellcheck disable=SC2086
        FLINT_EXP="$v" timeout 120 "$flint" bench --load-format dummy ${FLINT_BENCH_ARGS:-} \
          > "/tmp/sweep-$v-$round.md" 2>> "$out/bench.log"
        grep -E "^\| (nvfp4|bf16) " "/tmp/sweep-$v-$round.md" | cut -d'|' -f2-7 | sed "s/^/$v r$round |/"
      done
    done | tee "$out/sweep.md"
    say "sweep done at ${SECONDS}s"
  fi
  if [[ -n "${FLINT_E2E_ARGS:-}" ]]; then  # decode through `flint serve` (tools/decode_e2e.py)
    # shellcheck disable=SC2086
    timeout 240 python3 tools/decode_e2e.py --flint "$flint" $FLINT_E2E_ARGS > "$out/e2e.md" 2>&1
    say "e2e rc $? at ${SECONDS}s"
    cat "$out/e2e.md"
  fi
fi
"$build/tests/cuda_tests" > "$out/cuda_tests.log" 2>&1
say "cuda_tests: $(grep -E "PASSED|FAILED" "$out/cuda_tests.log" | tr '\n' ' ')"

# 3. The test models and Python packages.
[[ -e models ]] || ln -s "$(realpath ../../models)" models
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$whl"/*.whl || { say "wheels did not install"; exit 1; }
export PYTHONPATH="/tmp/site:$root/tests"
# The tiny test models embed the GLM-4.7 chat template (tests/support/tiny_flint.py).
for t in "$debs/GLM-4.7.jinja" "$debs/../GLM-4.7.jinja"; do
  if [[ -f "$t" ]]; then
    FLINT_CHAT_TEMPLATE="$(realpath "$t")"
    export FLINT_CHAT_TEMPLATE
  fi
done
[[ -n "${FLINT_CHAT_TEMPLATE:-}" ]] || say "no GLM-4.7.jinja beside the packages: tiny models fail"

# 4. flint generate, greedy, on the GPU and on the CPU (both with a bf16 KV cache).
for d in cuda cpu; do
  echo "== --device $d"
  timeout 30 "$flint" generate models/flint-nano --prompt "Once upon a time" --max-tokens 48 \
    --temperature 0 --ignore-eos --kv-dtype bf16 --device "$d" 2>&1
done > "$out/generate.txt"
grep -h -E "==|device:|generated ids|tokens/s|error" "$out/generate.txt"

# 5. The OpenAI API tests against `flint serve --device cuda`.
export FLINT_BIN="$flint" FLINT_SOURCE_DIR="$root" FLINT_BUILD_DIR="$root/$build"
export FLINT_TEST_DEVICE=cuda PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
rm -rf /tmp/pyt
# The tests get what is left of the call (FLINT_CALL_S, default 290 s), so the logs come back.
left=$(( ${FLINT_CALL_S:-290} - SECONDS ))
(( left < 30 )) && left=30
say "pytest gets ${left}s"
timeout "$left" python3 -m pytest -q -p no:cacheprovider -rfE \
  --basetemp=/tmp/pyt tests/python/server "$@" > "$out/pytest.log" 2>&1
rc=$?
find /tmp/pyt -name 'serve-*.log' | tar czf "$out/serve-logs.tgz" -T - 2> /dev/null
grep -h -E "device: cuda|gpu memory|gpu: weights|KV pages" /tmp/pyt/*/serve-*.log | cut -c25- |
  sort | uniq | head -12
grep -E "passed|failed|error" "$out/pytest.log" | tail -3
grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20
exit $rc
