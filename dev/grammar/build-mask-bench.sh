#!/bin/sh
# Builds dev/grammar/mask_bench.c against the CPU build's liblpx.a (BUILD, default
# build-cpu) into OUT/mask_bench.
set -eu
out=${1:?usage: build-mask-bench.sh OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build-cpu}
mkdir -p "$out"
cc -O2 -std=gnu11 -I"$root/include" -I"$root/src" "$root/dev/grammar/mask_bench.c" \
    "$build/liblpx.a" $(pkg-config --libs libpcre2-8 libutf8proc libcjson libmicrohttpd libcurl) \
    -lpthread -lm -ldl -o "$out/mask_bench"
