#!/usr/bin/env bash
# Sets up, builds and serves the bundled model on port 8000 (extra args go to `flint serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/flint serve "$@"
