#!/usr/bin/env bash
# Sets up, builds and runs every CPU test: unit (gtest) and python (pytest against the real
# libraries), then, in a clang AddressSanitizer build, the fuzz targets for a bounded time and the
# server's API tests. GPU tests: scripts/gpu.sh on a machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
if command -v clang-format >/dev/null; then  # the one formatter (.clang-format), as STYLE.md says
  git ls-files -z '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run -Werror
fi
bash scripts/build.sh
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT

(cd build && ctest -LE gpu --output-on-failure -j "$(nproc)" --timeout 900) | tee -a "$summary"

if command -v clang++ >/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFLINT_FUZZ=ON -DFLINT_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLINT_FUZZ_SECONDS="${FLINT_FUZZ_SECONDS:-15}" > /dev/null
  cmake --build build-fuzz -j "$(nproc)" --target flint_fuzz_all flint
  (cd build-fuzz && ctest -L fuzz --output-on-failure -j "$(nproc)") | tee -a "$summary"
  # The server's API and robustness tests once more, against the ASan build: any report fails.
  asan_logs=build-fuzz/asan-logs
  rm -rf "$asan_logs" && mkdir -p "$asan_logs"
  FLINT_BIN=build-fuzz/src/cli/flint FLINT_SOURCE_DIR="$PWD" PYTHONPATH=tests \
    ASAN_OPTIONS="log_path=$PWD/$asan_logs/asan:detect_leaks=1" \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/server | tee -a "$summary"
  if compgen -G "$asan_logs/asan*" > /dev/null; then
    cat "$asan_logs"/asan*
    echo "test.sh: AddressSanitizer reported errors in flint serve (above)"
    exit 1
  fi
fi

passed=$(awk '/tests passed, 0 tests failed out of/ {n += $NF} /^[0-9]+ passed/ && !/failed/ {n += $1} END {print n + 0}' "$summary")
echo "test.sh: finished in $(( $(date +%s) - start ))s"
echo "${passed} passed, 0 failed"
