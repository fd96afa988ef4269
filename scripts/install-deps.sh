#!/usr/bin/env bash
# Installs the Debian packages flint-serve builds against (docs/DEPENDENCIES.md says why each).
# Idempotent and quick when everything is already there. Needs root (or sudo).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git python3 python3-venv
      libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcurl4-openssl-dev clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#pkgs[@]} packages present"
fi
