#!/usr/bin/env bash
# Builds dev/cuda/flash_check (the workshop check of the flash prefill kernel) into $1.
set -euo pipefail
out="${1:-build-flash-check}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
gcc -O2 -std=gnu11 -I"$root/include" -I"$root/src" -DLPX_VERSION=\"flash-check\" -c "$root/src/base/error.c" -o "$out/error.o"
nvcc -arch=sm_90 -O3 -lineinfo --expt-relaxed-constexpr -Xptxas -v -I"$root/include" -I"$root/src" \
    "$root/dev/cuda/flash_check.cu" "$out/error.o" -o "$out/flash_check" 2>&1 | grep -A2 flash_prefill_kernel || true
test -x "$out/flash_check"
