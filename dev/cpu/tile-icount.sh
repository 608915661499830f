#!/usr/bin/env bash
# Instructions a (row, activation block) of each integer tile kernel alone, 1
# and 4 tokens, counted by valgrind (callgrind): the kernel-level A/B figure
# behind dev/cpu/icount.sh's whole-model one (docs/PERF.md). Zero weights and
# activations: the kernels' instruction count does not depend on the values.
#   dev/cpu/tile-icount.sh [BUILD_DIR] [TYPE...]   (default: Q4_1 Q8_0 Q4_K Q5_K Q6_K)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
types=${*:-Q4_1 Q8_0 Q4_K Q5_K Q6_K}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
${CC:-cc} -O2 -Iinclude -Isrc dev/cpu/tile_icount.c "$build/liblpx.a" -lm -lpthread -o "$bin"
for t in $types; do
    for n in 1 4; do
        work=$("$bin" "$t" "$n" | cut -d' ' -f2)
        i=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$t" "$n" 2>&1 |
            sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
        echo "$t T=$n: $(awk -v i="$i" -v w="$work" 'BEGIN{printf "%.2f", i / w}') instructions a (row, block)"
    done
done
