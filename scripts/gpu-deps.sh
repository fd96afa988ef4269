#!/usr/bin/env bash
# Fetches, on a machine with Debian bookworm's apt and pip, what the GPU image lacks for building
# and testing `flint serve` there (scripts/gpu-serve-tests.sh): the Debian packages of cpp-httplib,
# PCRE2, their -dev dependencies and pkg-config (into .debs/), the openai client's wheels for the
# image's Python 3.12 (into .whl/), and the GLM-4.7 chat template the tiny test models embed.
# Usage: scripts/gpu-deps.sh [DEBS_DIR [WHL_DIR]]   (defaults .debs and .whl: both git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
debs="${1:-.debs}"
whl="${2:-.whl}"
python="${FLINT_PYTHON:-.venv/bin/python}"
mkdir -p "$debs" "$whl"
# Headers and .pc files for the build, and the runtime libraries in case the image lacks them.
(cd "$debs" && apt-get download libcpp-httplib-dev libcpp-httplib0.11 libpcre2-dev libpcre2-8-0 \
  libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libssl-dev libssl3 zlib1g-dev libbrotli-dev \
  libbrotli1 pkgconf pkgconf-bin libpkgconf3 pkg-config)
# openai and its dependencies, at the versions of the test virtualenv, for CPython 3.12.
pins=()
for p in openai httpx2 httpcore2 truststore jiter pydantic pydantic_core sniffio annotated-types \
  typing-inspection typing_extensions anyio idna h11; do
  v="$("$python" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')"
  [[ -n "$v" ]] && pins+=("$p==$v")
done
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$whl" "${pins[@]}"
template="${FLINT_CHAT_TEMPLATE:-/work/shared/data/chat-templates/GLM-4.7.jinja}"
[[ -f "$template" ]] && cp "$template" "$debs/GLM-4.7.jinja"
ls "$debs" "$whl"
