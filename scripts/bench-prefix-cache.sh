#!/usr/bin/env bash
# The prefix cache's benchmark (docs/engine.md, "Prefix caching"): with the cache
# on and off,
#   1. TTFT of requests that share a long prefix: `lpx serve` driven by
#      `lpx bench serve --dataset`, one request at a time (the first computes the
#      prefix, the others find it cached);
#   2. wall time of a batch job whose lines share one system prompt
#      (`lpx batch`, in-process engine).
# A benchmark, not a test: it prints figures and asserts nothing.
#
#   scripts/bench-prefix-cache.sh [BUILD_DIR]     (default: build)
#   env: PREFIX_TOKENS (1500), N_REQUESTS (6), SYSTEM_TOKENS (1000), LINES (40),
#        MODEL (default: scripts/fetch-model.sh --print-path), DEVICE (cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
lpx=$build/lpx
model=${MODEL:-$(scripts/fetch-model.sh --print-path)}
device=${DEVICE:-cpu}
prefix_tokens=${PREFIX_TOKENS:-1500}
n_requests=${N_REQUESTS:-6}
system_tokens=${SYSTEM_TOKENS:-1000}
lines=${LINES:-40}
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# Text of about N tokens: numbered rules, each a different sentence.
text_of() {
    local want=$1 i=1 t=""
    while :; do
        t+="Rule $i: when item $i is asked about, answer with its number, its colour and its size. "
        if [ $((i % 8)) -eq 0 ] &&
            [ "$("$lpx" tokenize -m "$model" --ids "$t" | wc -w)" -ge "$want" ]; then
            break
        fi
        i=$((i + 1))
    done
    printf '%s' "$t"
}

start_server() { # extra flags...
    local log=$work/serve.log
    "$lpx" serve -m "$model" --device "$device" --port 0 --max-num-seqs 4 "$@" 2>"$log" &
    pid=$!
    for _ in $(seq 600); do
        url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)
        [ -n "$url" ] && curl -sf "$url/health" >/dev/null && return
        sleep 0.1
    done
    echo "lpx serve did not start:" >&2
    cat "$log" >&2
    exit 1
}

stop_server() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}

# mean TTFT (ms) of the requests of a bench serve trace, and the first one's
ttft() { jq -r '.runs[0] | "\(.mean_ttft_ms | floor) \(.requests[0].ttft * 1000 | floor)"' "$1"; }

prefix=$(text_of "$prefix_tokens")
n_prefix=$("$lpx" tokenize -m "$model" --ids "$prefix" | wc -w)
for i in $(seq "$n_requests"); do
    jq -cn --arg p "$prefix Question $i: what is item $((i * 7))?" '{prompt: $p, output_len: 8}'
done >"$work/shared.jsonl"
head -1 "$work/shared.jsonl" >"$work/first.jsonl"
tail -n +2 "$work/shared.jsonl" >"$work/rest.jsonl"

echo "== TTFT: $n_requests requests sharing a $n_prefix-token prefix, one at a time ($device)"
printf '%-8s %18s %22s %14s\n' cache "first TTFT ms" "later TTFT ms (mean)" "hits/queries"
for mode in on off; do
    flags=()
    [ "$mode" = off ] && flags=(--no-prefix-caching)
    start_server "${flags[@]}"
    b=(bench serve --url "$url" --max-concurrency 1 --metrics-interval 0)
    "$lpx" "${b[@]}" --dataset "$work/first.jsonl" --json "$work/first.json" >/dev/null
    "$lpx" "${b[@]}" --dataset "$work/rest.jsonl" --json "$work/rest.json" >/dev/null
    m=$(curl -s "$url/metrics")
    hits=$(awk '/^lpx:prefix_cache_hits_total/ {print $2}' <<<"$m")
    queries=$(awk '/^lpx:prefix_cache_queries_total/ {print $2}' <<<"$m")
    stop_server
    read -r first _ <<<"$(ttft "$work/first.json")"
    read -r later _ <<<"$(ttft "$work/rest.json")"
    printf '%-8s %18s %22s %14s\n' "$mode" "$first" "$later" "$hits/$queries"
done

system=$(text_of "$system_tokens")
n_system=$("$lpx" tokenize -m "$model" --ids "$system" | wc -w)
for i in $(seq "$lines"); do
    jq -cn --arg s "$system" --arg q "What is item $i?" --arg id "l$i" \
        '{id: $id, messages: [{role: "system", content: $s}, {role: "user", content: $q}],
          max_tokens: 4}'
done >"$work/batch.jsonl"

echo "== lpx batch: $lines lines with one $n_system-token system prompt, max_tokens 4 ($device)"
printf '%-8s %10s %10s\n' cache "wall s" "hit rate"
for mode in on off; do
    flags=()
    [ "$mode" = off ] && flags=(--no-prefix-caching)
    "$lpx" batch -i "$work/batch.jsonl" -o "$work/out-$mode" -m "$model" --device "$device" \
        "${flags[@]}" 2>/dev/null
    jq -r --arg m "$mode" '"\($m) \(.wall_s) \(.prefix_cache.hit_rate)"' \
        "$work/out-$mode/summary.json" | xargs printf '%-8s %10s %10s\n'
done
cmp -s <(jq -c '.response.body.choices' "$work/out-on/results.jsonl" | sort) \
    <(jq -c '.response.body.choices' "$work/out-off/results.jsonl" | sort) &&
    echo "batch outputs: identical with and without the cache" ||
    echo "batch outputs: DIFFER with and without the cache"
