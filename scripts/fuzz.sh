#!/usr/bin/env bash
# Builds every fuzz/fuzz_*.c as a libFuzzer target (clang, ASan+UBSan) and runs
# each for SECONDS seconds on its seed corpus (fuzz/corpus/NAME/ when present).
set -euo pipefail
out="${1:-build-fuzz}"; secs="${2:-20}"
mkdir -p "$out"
targets=(fuzz/fuzz_*.c)
[ -e "${targets[0]}" ] || { echo "fuzz: no targets"; exit 0; }
srcs=$(git ls-files 'src/*.c' | grep -v '^src/cli/')
for t in "${targets[@]}"; do
    name=$(basename "$t" .c)
    clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -DLPX_VERSION='"fuzz"' -DLPX_FUZZ=1 -Iinclude -Isrc "$t" $srcs -o "$out/$name" \
        $(pkg-config --cflags --libs libpcre2-8 libutf8proc libcjson libmicrohttpd libcurl) -lpthread -lm -ldl
    corpus="$out/corpus-$name"; mkdir -p "$corpus"
    seeds=(); [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
    echo "fuzz: $name for ${secs}s"
    "$out/$name" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 \
        "$corpus" "${seeds[@]}" 2>"$out/$name.log" || { tail -50 "$out/$name.log"; exit 1; }
done
echo "fuzz: all targets clean"
