#!/usr/bin/env bash
# Builds dev/cuda/matvec_check (the workshop check of the batch-1..8 matvec kernels,
# old and TMA-prefetching) into $1. Run: $1/matvec_check [--quick] [--no-pdl].
set -euo pipefail
out="${1:-build-matvec-check}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
gcc -O2 -std=gnu11 -I"$root/include" -I"$root/src" -DLPX_VERSION=\"matvec-check\" -c "$root/src/base/error.c" -o "$out/error.o"
nvcc -arch=sm_90 -O3 -lineinfo --expt-relaxed-constexpr -Xptxas -v -I"$root/include" -I"$root/src" \
    "$root/dev/cuda/matvec_check.cu" "$out/error.o" -o "$out/matvec_check" 2>&1 |
    grep -A2 "matvec.*kernel" | grep -E "entry|registers|spill" || true
test -x "$out/matvec_check"
