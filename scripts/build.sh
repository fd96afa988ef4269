#!/usr/bin/env bash
# Configures and builds flint into build/ (Ninja, RelWithDebInfo). Extra args go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > build.log 2>&1 || { cat build.log; exit 1; }
rm -f build.log
cmake --build build -j "$(nproc)"
