#!/usr/bin/env bash
# Sets up, builds and runs every CPU test: unit (gtest), python (pytest against the real
# libraries), then the fuzz targets for a bounded time under ASan. GPU tests: scripts/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
bash scripts/build.sh
(cd build && ctest -LE gpu --output-on-failure -j "$(nproc)" --timeout 900)
if command -v clang++ >/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFLINT_FUZZ=ON -DFLINT_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLINT_FUZZ_SECONDS="${FLINT_FUZZ_SECONDS:-15}" > /dev/null
  cmake --build build-fuzz -j "$(nproc)" --target flint_fuzz_all
  (cd build-fuzz && ctest -L fuzz --output-on-failure -j "$(nproc)")
fi
echo "test.sh: all tests passed in $(( $(date +%s) - start ))s"
