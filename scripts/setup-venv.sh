#!/usr/bin/env bash
# Creates .venv with the pinned PyPI packages used by tests and tools (scripts/requirements-test.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.requirements-installed
if [ -f "$stamp" ] && cmp -s scripts/requirements-test.txt "$stamp"; then
  echo "setup-venv: .venv up to date"; exit 0
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r scripts/requirements-test.txt
cp scripts/requirements-test.txt "$stamp"
echo "setup-venv: installed $(wc -l < scripts/requirements-test.txt) pinned packages"
