#!/usr/bin/env bash
# CPU time an idle `lpx serve --device cpu` uses (the thread pool must sleep,
# not spin, between requests): starts the server, sends one request (so the
# pool has run), then reads its user + system CPU time over SECS seconds of no
# requests from /proc (docs/PERF.md).
#   dev/cpu/idle-cpu.sh [MODEL] [BUILD_DIR]     env: SECS (10), THREADS (2), PORT (18431)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$(scripts/fetch-model.sh --print-path)}
lpx=${2:-build}/lpx
secs=${SECS:-10}
port=${PORT:-18431}
"$lpx" serve -m "$model" --device cpu -t "${THREADS:-2}" --port "$port" >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The capital of France is", "max_tokens": 16}' >/dev/null
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # utime + stime, clock ticks
a=$(ticks)
sleep "$secs"
b=$(ticks)
hz=$(getconf CLK_TCK)
echo "idle lpx serve, $secs s: $(((b - a) * 1000 / hz)) ms of CPU time ($(awk -v t=$((b - a)) -v h="$hz" -v s="$secs" 'BEGIN{printf "%.2f", 100 * t / h / s}') %)"
echo "threads: $(ls /proc/$pid/task | wc -l)"
