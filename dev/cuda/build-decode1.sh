#!/usr/bin/env bash
# Builds dev/cuda/decode1.cu (the persistent batch-1 decode kernel, an experiment that
# left the product; docs/dev.md) into $1/decode1.o, printing its registers and spills.
# It has no main of its own yet: it keeps compiling against the product's headers.
set -euo pipefail
out="${1:-build-decode1}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
nvcc -arch=sm_90 -O3 -lineinfo --expt-relaxed-constexpr -Xptxas -v -I"$root/include" -I"$root/src" \
    -c "$root/dev/cuda/decode1.cu" -o "$out/decode1.o" 2>&1 |
    grep -A2 "decode1_kernel" | grep -E "registers|spill" || true
test -f "$out/decode1.o"
