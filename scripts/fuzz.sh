#!/usr/bin/env bash
# Builds every fuzz/fuzz_*.c as a libFuzzer target (clang, ASan+UBSan) and runs
# each for SECONDS seconds on its seed corpus (fuzz/corpus/NAME/ when present).
# The library sources are compiled once, FUZZ_JOBS (2) at a time, and linked
# into every target: compiling them per target took most of the time.
set -euo pipefail
out="${1:-build-fuzz}"; secs="${2:-20}"
targets=(fuzz/fuzz_*.c)
[ -e "${targets[0]}" ] || { echo "fuzz: no targets"; exit 0; }
mkdir -p "$out/obj"
rm -f "$out"/obj/*.o
pkgs=(libpcre2-8 libutf8proc libcjson libmicrohttpd libcurl)
cflags=(-g -O1 -std=gnu11 -fsanitize=address,undefined -fno-sanitize-recover=undefined
        -DLPX_VERSION='"fuzz"' -DLPX_FUZZ=1 -Iinclude -Isrc $(pkg-config --cflags "${pkgs[@]}"))
objs=()
for s in $(git ls-files 'src/*.c' | grep -v '^src/cli/'); do
    o="$out/obj/$(echo "${s%.c}" | tr / _).o"
    objs+=("$o")
    clang "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge "${FUZZ_JOBS:-2}" ]; do wait -n; done
done
wait
for o in "${objs[@]}"; do [ -f "$o" ] || { echo "fuzz: compiling $o failed"; exit 1; }; done
for t in "${targets[@]}"; do
    name=$(basename "$t" .c)
    clang "${cflags[@]}" -fsanitize=fuzzer "$t" "${objs[@]}" -o "$out/$name" \
        $(pkg-config --libs "${pkgs[@]}") -lpthread -lm -ldl
    corpus="$out/corpus-$name"; mkdir -p "$corpus"
    seeds=(); [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
    echo "fuzz: $name for ${secs}s"
    "$out/$name" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 \
        "$corpus" "${seeds[@]}" 2>"$out/$name.log" || { tail -50 "$out/$name.log"; exit 1; }
done
echo "fuzz: all targets clean"
