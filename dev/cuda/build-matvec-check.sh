#!/usr/bin/env bash
# Builds dev/cuda/matvec_check (the workshop check of the batch-1..8 matvec kernels,
# old and TMA-prefetching) into $1. Run: $1/matvec_check [--quick] [--no-pdl].
set -euo pipefail
out="${1:-build-matvec-check}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
objs=()
for c in base/error.c format/dtype.c format/quantize.c backend/cuda/wpack.c; do
    o="$out/$(basename "$c" .c).o"
    gcc -O2 -std=gnu11 -I"$root/include" -I"$root/src" -DLPX_VERSION=\"matvec-check\" -c "$root/src/$c" -o "$o"
    objs+=("$o")
done
nvcc -arch=sm_90 -O3 -lineinfo --expt-relaxed-constexpr -Xptxas -v -I"$root/include" -I"$root/src" \
    "$root/dev/cuda/matvec_check.cu" "${objs[@]}" -o "$out/matvec_check" 2>&1 |
    grep -A2 "matvec.*kernel" | grep -E "entry|registers|spill" || true
test -x "$out/matvec_check"
