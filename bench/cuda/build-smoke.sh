#!/usr/bin/env bash
# Builds bench/cuda/smoke (the workshop check of the CUDA backend) into $1.
set -euo pipefail
out="${1:-build-smoke}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
flags=(-arch=sm_90 -O3 -lineinfo --expt-relaxed-constexpr -I"$root/include" -I"$root/src" -DLPX_HAVE_CUDA=1 -DLPX_CUDA_ARCHS='"90"')
for f in "$root"/src/backend/cuda/*.cu; do nvcc "${flags[@]}" -c "$f" -o "$out/$(basename "$f").o"; done
gcc -O2 -std=gnu11 -I"$root/include" -I"$root/src" -DLPX_HAVE_CUDA=1 -c "$root/bench/cuda/smoke.c" -o "$out/smoke.o"
gcc -O2 -std=gnu11 -I"$root/include" -I"$root/src" -DLPX_VERSION=\"smoke\" -c "$root/src/base/error.c" -o "$out/error.o"
nvcc -arch=sm_90 "$out"/*.o -o "$out/smoke" -lcublas -lcublasLt -lm
