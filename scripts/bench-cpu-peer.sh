#!/usr/bin/env bash
# lpx's CPU backend side by side with llama.cpp (issue 22): a benchmark, not a
# test; it prints figures and asserts nothing.
#
#   scripts/bench-cpu-peer.sh [-m MODEL.gguf] [-b BUILD_DIR] [-t THREADS] [-k ROUNDS]
#                             [-p 128] [-n 64] [-r 5]
#   defaults: the real SmolLM2-135M Q4_1 (scripts/fetch-model.sh), build-cpu,
#   2 threads, 3 rounds.
#
# Each round runs lpx, then llama.cpp, one after the other (interleaved, so slow
# phases of a shared machine hit both), on the same file with the same threads:
#   lpx:  `lpx bench -m MODEL --device cpu -p P -n N -b 1 -t T -r R -o csv`
#   peer: scripts/bench-cpu-peer.py, llama-cpp-python's low-level API doing what
#         lpx bench does (its docstring says exactly what is timed): ppP = one
#         decode call of P random tokens, last logits only; tgN = N one-token
#         decode calls after P prefilled tokens; median of R after a warm-up.
# and prints both, their ratio, and the load average before and after each run.
# The last table is the median over rounds. On a machine other processes use,
# one run's figures move a lot: compare within a round, and read the load
# average (instruction counts are the noise-free A/B, docs/PERF.md).
#
# llama-cpp-python (pinned below) compiles llama.cpp from source with a native
# CPU build (GGML_NATIVE: the instruction sets of this CPU, OpenMP threads);
# it is installed once into a venv under $LPX_PEER_CACHE (default
# ~/.cache/lpx-peer), outside the repo; the first run takes minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
model="" build=build-cpu threads=2 rounds=3 p=128 n=64 reps=5
while getopts "m:b:t:k:p:n:r:h" o; do
    case $o in
    m) model=$OPTARG ;;
    b) build=$OPTARG ;;
    t) threads=$OPTARG ;;
    k) rounds=$OPTARG ;;
    p) p=$OPTARG ;;
    n) n=$OPTARG ;;
    r) reps=$OPTARG ;;
    *) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
[ -n "$model" ] || { scripts/fetch-model.sh; model=$(scripts/fetch-model.sh --print-path); }
lpx=$build/lpx
[ -x "$lpx" ] || { echo "bench-cpu-peer: no $lpx (build first)" >&2; exit 1; }

peer_version=0.3.36
cache=${LPX_PEER_CACHE:-$HOME/.cache/lpx-peer}
py=$cache/venv/bin/python
if ! "$py" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$peer_version')" 2>/dev/null; then
    echo "bench-cpu-peer: building llama-cpp-python $peer_version into $cache (minutes)" >&2
    mkdir -p "$cache"
    [ -x "$py" ] || python3 -m venv "$cache/venv"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DLLAMA_CURL=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        nice -n 10 "$py" -m pip install -q --disable-pip-version-check \
        "llama-cpp-python==$peer_version" >"$cache/build.log" 2>&1 ||
        { tail -30 "$cache/build.log" >&2; exit 1; }
fi

load() { cut -d' ' -f1 /proc/loadavg; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(grep -o -w 'avx2\|fma\|f16c\|avx512f\|avx512_vnni\|avx_vnni\|avx512_bf16' /proc/cpuinfo |
    sort -u | tr '\n' ' ')
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:     $cpu, $(nproc) cores, flags: $flags"
echo "lpx:     $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo '+dirty'), $lpx"
echo "peer:    llama-cpp-python $peer_version (llama.cpp built from its sdist, GGML_NATIVE)"
echo "model:   $model"
echo "command: -p $p -n $n -t $threads -r $reps (median of $reps), $rounds rounds"
echo

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '| round | who | pp%s tok/s | tg%s tok/s | load before | load after |\n' "$p" "$n"
printf '| ---: | --- | ---: | ---: | ---: | ---: |\n'
for k in $(seq "$rounds"); do
    l0=$(load)
    "$lpx" bench -m "$model" --device cpu -p "$p" -n "$n" -b 1 -t "$threads" -r "$reps" \
        -o csv >"$work/lpx" 2>"$work/lpx.err" || { cat "$work/lpx.err" >&2; exit 1; }
    l1=$(load)
    lpp=$(awk -F, -v t="pp$p" '$1 == t { print $3 }' "$work/lpx")
    ltg=$(awk -F, -v t="tg$n" '$1 == t { print $3 }' "$work/lpx")
    printf '| %d | lpx | %s | %s | %s | %s |\n' "$k" "$lpp" "$ltg" "$l0" "$l1"
    l0=$(load)
    "$py" scripts/bench-cpu-peer.py -m "$model" -p "$p" -n "$n" -t "$threads" -r "$reps" \
        >"$work/peer" 2>"$work/peer.err" || { cat "$work/peer.err" >&2; exit 1; }
    l1=$(load)
    read -r _ _ ppp _ ptg fa <"$work/peer"
    printf '| %d | llama.cpp | %s | %s | %s | %s |\n' "$k" "$ppp" "$ptg" "$l0" "$l1"
    echo "$lpp $ltg $ppp $ptg" >>"$work/all"
done
echo
echo "llama.cpp: $fa; $(grep -m1 -o 'CPU : .*' "$work/peer.err" || true)"
echo
awk -v p="$p" -v n="$n" '
function med(a, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
    if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
{ m++; lp[m] = $1; lt[m] = $2; pp[m] = $3; pt[m] = $4; rp[m] = $1 / $3; rt[m] = $2 / $4 }
END {
    printf "| median of %d rounds | llama.cpp | lpx | lpx / llama.cpp (median of the rounds'"'"' ratios) |\n", m
    print "| --- | ---: | ---: | ---: |"
    printf "| pp%d tok/s | %.1f | %.1f | %.2fx |\n", p, med(pp, m), med(lp, m), med(rp, m)
    printf "| tg%d tok/s | %.1f | %.1f | %.2fx |\n", n, med(pt, m), med(lt, m), med(rt, m)
}' "$work/all"
