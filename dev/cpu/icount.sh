#!/usr/bin/env bash
# Instructions a token of the CPU backend, counted by valgrind (callgrind: no
# timing noise, so the A/B figure on a shared machine; docs/PERF.md):
#   decode:      (I(decode D + 8 ids) - I(decode D ids)) / 8, one id a step
#   prefill C:   (I(one step of C ids) - I(one step of 1 id)) / (C - 1),
#                logits of the last position only (--tail 1)
# one thread (-t 1), so the pool's synchronisation counts once.
#   dev/cpu/icount.sh [MODEL] [BUILD_DIR]       env: CHUNKS ("16 128"), D (4), TUNE
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$(scripts/fetch-model.sh --print-path)}
lpx=${2:-build-cpu}/lpx
chunks=${CHUNKS:-16 128}
d=${D:-4}
ids() { seq -s, 101 $((100 + $1)); }
count() { # lpx logits args...
    LPX_CPU_TUNE=${TUNE:-} valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$lpx" logits -m "$model" -t 1 -o /dev/null "$@" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
a=$(count --ids "$(ids "$d")" --mode decode)
b=$(count --ids "$(ids $((d + 8)))" --mode decode)
echo "decode: $(((b - a) / 8)) instructions a token"
one=$(count --ids "$(ids 1)" --tail 1)
for c in $chunks; do
    i=$(count --ids "$(ids "$c")" --tail 1)
    echo "prefill $c: $(((i - one) / (c - 1))) instructions a token"
done
