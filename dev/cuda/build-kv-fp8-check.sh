#!/usr/bin/env bash
# Builds dev/cuda/kv_fp8_check (the fp8 KV format of src/format/kv_fp8.h against CUDA's
# conversions, and device against host) into $1.
set -euo pipefail
out="${1:-build-kv-fp8-check}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
nvcc -arch=sm_90 -O3 -I"$root/include" -I"$root/src" "$root/dev/cuda/kv_fp8_check.cu" \
    -o "$out/kv_fp8_check"
test -x "$out/kv_fp8_check"
