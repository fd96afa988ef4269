#!/usr/bin/env bash
# The instruction mix of a kernel's hottest loop, read from its SASS (no GPU needed): compiles one
# .cu file for sm_90a, disassembles the kernels whose mangled names match REGEX, and for each
# prints the opcode histogram of its longest loop (the span of its longest backward branch) and the
# loop's instruction count. Divide by the weights one iteration covers to get instructions per
# weight, the figure that bounds a kernel that Nsight Compute shows as issue-bound.
# Usage: scripts/sass-mix.sh FILE.cu REGEX
#   e.g. scripts/sass-mix.sh src/backends/cuda/kernels/moe_experts.cu 'moe_down_kernelILNS_5DTypeE10ELi2ELi2E'
# cuobjdump and nvdisasm are not part of the CUDA packages installed here: the first run fetches
# NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into .cache/cuobjdump.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
src="${1:?usage: scripts/sass-mix.sh FILE.cu REGEX}"
regex="${2:?usage: scripts/sass-mix.sh FILE.cu REGEX}"
[[ -f "$src" ]] || { echo "sass-mix: no file $src" >&2; exit 1; }
bin=.cache/cuobjdump/nvidia/cu13/bin
if [[ ! -x "$bin/cuobjdump" || ! -x "$bin/nvdisasm" ]]; then
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$tmp" >&2 ||
    { echo "sass-mix: could not fetch the nvidia-cuda-cuobjdump/nvdisasm wheels" >&2; exit 1; }
  mkdir -p .cache/cuobjdump
  for whl in "$tmp"/*.whl; do python3 -m zipfile -e "$whl" .cache/cuobjdump; done
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
  rm -rf "$tmp"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
nvcc -std=c++20 -arch=sm_90a -O3 -Isrc --expt-relaxed-constexpr -DFMT_USE_CONSTEXPR=1 -cubin \
  -o "$work/k.cubin" "$src"
NVDISASM_PATH="$PWD/$bin" PATH="$PWD/$bin:$PATH" "$bin/cuobjdump" -sass "$work/k.cubin" > "$work/k.sass"
awk -v re="$regex" '
  function hex(h,   i, v) {  # mawk has no strtonum
    v = 0
    h = tolower(h)
    sub(/^0x/, "", h)
    for (i = 1; i <= length(h); ++i) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
    return v
  }
  function report(   i, best, lo, hi, n, op, k, line) {
    if (name == "") return
    best = -1
    for (i = 1; i <= nb; ++i) if (bto[i] <= bat[i] && bat[i] - bto[i] > best) { best = bat[i] - bto[i]; lo = bto[i]; hi = bat[i] }
    printf "%s\n", name
    if (best < 0) { print "  no loop"; name = ""; return }
    delete count
    n = 0
    for (i = 1; i <= ni; ++i) {
      if (addr[i] < lo || addr[i] > hi) continue
      ++n; ++count[opc[i]]
    }
    printf "  loop 0x%x-0x%x: %d instructions\n", lo, hi, n
    k = 0
    for (op in count) line[++k] = sprintf("%6d %s", count[op], op)
    # sort by count, descending (insertion sort; few opcodes)
    for (i = 2; i <= k; ++i) { t = line[i]; j = i - 1; while (j > 0 && line[j] + 0 < t + 0) { line[j + 1] = line[j]; --j } line[j + 1] = t }
    for (i = 1; i <= k; ++i) print "  " line[i]
    name = ""
  }
  /Function : / { report(); ni = 0; nb = 0; name = ($3 ~ re) ? $3 : ""; next }
  name != "" && match($0, /\/\*[0-9a-f]+\*\//) {
    a = hex(substr($0, RSTART + 2, RLENGTH - 4))
    rest = substr($0, RSTART + RLENGTH)
    sub(/^ +/, "", rest)
    sub(/^@!?U?P[0-9T] +/, "", rest)
    split(rest, w, /[ ;]/)
    op = w[1]
    if (op == "" || op ~ /^\/\*/) next
    ++ni; addr[ni] = a; opc[ni] = op
    if (op == "BRA" && match(rest, /0x[0-9a-f]+/)) { ++nb; bat[nb] = a; bto[nb] = hex(substr(rest, RSTART, RLENGTH)) }
  }
  END { report() }
' "$work/k.sass"
