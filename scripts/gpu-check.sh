#!/usr/bin/env bash
# One command on the GPU machine: conformance of the CUDA backend, then the
# benchmark table. Runs from a tree that holds a built lpx (BUILD, default build,
# with the libraries the machine lacks in BUILD/lib: make bundle) and, for the real
# weights, a sliced SmolLM2 with its transformers reference logits (SMOL, SMOL.ref.f32,
# SMOL.ids: made on the development machine by `scripts/gpu-check.sh --prepare DIR`,
# SMOL_LAYERS=4 layers by default, 35 MB, to stay within what a GPU run can carry).
# --prepare's reference needs torch; where the development machine has none, make
# SMOL.ref.f32 on the GPU machine with make-shape-model.py --gguf-ref, carrying the
# `gguf` package's wheel (pure Python; transformers needs it to read GGUF files).
#
#   scripts/gpu-check.sh                 all checks, then the bench table
#   scripts/gpu-check.sh --prepare DIR   (dev machine) slice SmolLM2 and its reference
#   AB='base=;pace0=LPX_CUDA_TUNE=pace=0;old=LPX=old/lpx LPX_CUDA_PACE=0' scripts/gpu-check.sh
#                                        then batch-1 A/B rounds: each variant (name=
#                                        assignments; LPX= another binary) in turn,
#                                        AB_ROUNDS (2) times, graph µs a step each
#                                        (LPX_CUDA_TUNE: docs/dev.md; binaries before
#                                        it read LPX_CUDA_PACE and the like);
#                                        CHECKS=0 skips the checks and the table
#
# Logs go to $OUT (or ./gpu-check-out); the summary table is printed last.
# DEV=cpu runs the same checks with the CPU backend in CUDA's place (to test this
# script without a GPU); MODELS picks the shapes (default all three).
# Tolerances (bf16 weights and activations on the GPU against float32 references):
#   logits: relative L2 error per position <= 3e-2, or twice the error of
#   transformers' own bf16 inference where that is larger (random deep models
#   amplify bf16 rounding), against transformers (float32) and the CPU backend, and
#   between CUDA's decode (one token per step, graphs) and prefill paths; no top-1
#   difference where the reference's top-2 gap exceeds 0.1 (or twice the largest
#   logit difference of transformers' bf16 inference on that row);
#   greedy: 32 tokens equal to the CPU backend's, or the first difference is a
#   near-tie (CPU top-2 logit gap < TOL_TIE = 0.1).
#   long prompts (longer than a prefill chunk, not a multiple of the attention
#   tile): whole, chunked and beside a decoding sequence, against the CPU backend
#   (SmolLM2 slice, 3e-2; Qwen3-0.6B shape, 5e-2, decode and chunked too:
#   600 positions of a random 28-layer model, no transformers bf16 band to widen it);
#   at depth (logits --tail: the last positions decoded one a step after a long
#   prefill): SmolLM2 slice 8,000 ids alone and beside 5,000 (3e-2), Qwen3-0.6B
#   shape 4,096 ids by the fused kernel and by the split attention (5e-2), against
#   the CPU backend.
#   weights kept quantized (tune key wq=1): the SmolLM2 slice's Q4_1/Q8_0 (3e-2) and a
#   Q4_K_M of the Qwen3-0.6B shape (5e-2), prefill and decode, against the CPU
#   backend's exact mode (LPX_CPU_TUNE=act=f32).
#   the fp8 KV cache: prefill, chunked, fused and split decode, two sequences and
#   8,000 ids at depth on the SmolLM2 slice against the CPU backend's fp8 cache
#   (5e-2; fp8's own error there is ~4e-2), and memcheck.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-build}"
ids_smol="1,504,3458,28,253,6512,1373,30,5248,2,3016,282,260,8326,30,2"

if [ "${1:-}" = "--prepare" ]; then
    dir="${2:?usage: gpu-check.sh --prepare DIR}"
    mkdir -p "$dir"
    "$root/$build/lpx" slice -m "$("$root/scripts/fetch-model.sh" --print-path)" \
        --layers "${SMOL_LAYERS:-4}" -o "$dir/smol.gguf" || exit 1
    echo "$ids_smol" >"$dir/smol.ids"
    python3 "$root/scripts/make-shape-model.py" --gguf-ref "$dir/smol.gguf" --ids "$ids_smol" \
        --ref-out "$dir/smol.ref.f32" || exit 1
    exit 0
fi

cd "$root"
out="${OUT:-$root/gpu-check-out}"
mkdir -p "$out"
lpx="$root/$build/lpx"
export LD_LIBRARY_PATH="$root/$build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
shapes="${SHAPES_DIR:-/tmp/lpx-shapes}"
smol="${SMOL:-$root/models/smol.gguf}"
summary="$out/summary.txt"
dev="${DEV:-cuda}"
# the CUDA backend's two-kernel batch-1 path (docs/dev.md); the CPU backend refuses
# a tune string, so DEV=cpu runs the same commands without one
qa_off="LPX_CUDA_TUNE=qa=0"; [ "$dev" = cuda ] || qa_off="LPX_CUDA_TUNE="
# the CPU reference is the CPU backend's exact mode (fp32 activations, docs/backend.md
# "Tolerance policy"): its default int8 activations of quantized products are 3.6e-2
# from it on the SmolLM2 slice's long prompt, beyond these tolerances. The CLI reads
# LPX_CPU_TUNE for CPU runs only.
export LPX_CPU_TUNE=act=f32
: >"$summary"
fails=0
note() { echo "$*" | tee -a "$summary"; }
check() { # name, command...: runs it, logs, counts a failure
    local name="$1"; shift
    if "$@" >>"$out/checks.log" 2>&1; then note "PASS  $name"; else note "FAIL  $name"; fails=$((fails + 1)); fi
}

compare() { # a.f32 b.f32 vocab tol label [bf16.f32: tolerance at least twice its error]
    python3 - "$@" <<'EOF'
import sys, os, numpy as np
a, b, vocab, tol, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
x = np.fromfile(a, "<f4").reshape(-1, vocab).astype(np.float64)
y = np.fromfile(b, "<f4").reshape(-1, vocab).astype(np.float64)
tie = np.full(len(y), 0.1)
if len(sys.argv) > 6 and os.path.exists(sys.argv[6]):
    # transformers' own bf16 inference sets the noise band: error tolerance twice
    # its rel-L2, near-tie band twice its largest logit difference on the row
    z = np.fromfile(sys.argv[6], "<f4").reshape(-1, vocab).astype(np.float64)
    e = (np.linalg.norm(z - y, axis=1) / np.linalg.norm(y, axis=1)).max()
    tie = np.maximum(tie, 2 * np.abs(z - y).max(axis=1))
    print(f"{label}: band ({os.path.basename(sys.argv[6])}) vs float32: max rel-L2 {e:.2e}, "
          f"top-1 agree {(z.argmax(1) == y.argmax(1)).sum()}/{len(y)}")
    tol = max(tol, 2 * e)
if x.shape != y.shape or not np.isfinite(x).all():
    print(f"{label}: shapes {x.shape} vs {y.shape} or non-finite values"); sys.exit(1)
rel = np.linalg.norm(x - y, axis=1) / np.linalg.norm(y, axis=1)
top = (x.argmax(1) == y.argmax(1))
ys = np.sort(y, axis=1)
gap = ys[:, -1] - ys[:, -2]
bad = (~top) & (gap > tie)
print(f"{label}: max rel-L2 {rel.max():.2e} (mean {rel.mean():.2e}), max |diff| "
      f"{np.abs(x - y).max():.3e}, top-1 agree {top.sum()}/{len(top)}, clear top-1 misses {bad.sum()}")
sys.exit(0 if rel.max() <= tol and not bad.any() else 1)
EOF
}

note "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
"$lpx" --version | tee -a "$summary"

# 1. random-weight models of real shapes and their transformers references
models="${MODELS-qwen3-0.6b,qwen2.5-0.5b,llama-3.2-1b}"
if [ "${CHECKS:-1}" = 0 ]; then # only the A/B: its shape, no checks
    models=""
    [ -d "$shapes/qwen3-0.6b" ] || python3 scripts/make-shape-model.py "$shapes" --models qwen3-0.6b \
        >"$out/shapes.log" 2>&1 || { note "FAIL  make-shape-model (see shapes.log)"; fails=$((fails + 1)); }
fi
[ -z "$models" ] || python3 scripts/make-shape-model.py "$shapes" --models "$models" >"$out/shapes.log" 2>&1 || { note "FAIL  make-shape-model (see shapes.log)"; fails=$((fails + 1)); }

long_ids() { # n vocab: a fixed prompt of n ids
    python3 -c "print(','.join(str((i * 7919 + 13) % $2) for i in range($1)))"
}
logits() { # model ids device extra... -> file
    local m="$1" ids="$2" dev="$3" f="$4"; shift 4
    "$lpx" logits -m "$m" --ids "$ids" --device "$dev" -o "$f" "$@"
}
conform() { # label model ids vocab ref
    local label="$1" m="$2" ids="$3" vocab="$4" ref="$5" d="$out/tmp"
    mkdir -p "$d"
    check "$label: cuda prefill runs" logits "$m" "$ids" "$dev" "$d/$label.cuda.f32"
    check "$label: cuda decode runs" logits "$m" "$ids" "$dev" "$d/$label.cudadec.f32" --mode decode
    check "$label: cpu runs" logits "$m" "$ids" cpu "$d/$label.cpu.f32"
    local bf="${ref%.ref.f32}.ref-bf16.f32"
    check "$label: cuda vs transformers" compare "$d/$label.cuda.f32" "$ref" "$vocab" 3e-2 "$label cuda~hf" "$bf"
    check "$label: cuda decode vs transformers" compare "$d/$label.cudadec.f32" "$ref" "$vocab" 3e-2 "$label cuda-decode~hf" "$bf"
    check "$label: cuda vs cpu" compare "$d/$label.cuda.f32" "$d/$label.cpu.f32" "$vocab" 3e-2 "$label cuda~cpu" "$bf"
    check "$label: cpu vs transformers" compare "$d/$label.cpu.f32" "$ref" "$vocab" 1e-3 "$label cpu~hf"
    check "$label: cuda decode vs cuda prefill" compare "$d/$label.cudadec.f32" "$d/$label.cuda.f32" "$vocab" 3e-2 "$label decode~prefill" "$bf"
    grep -E "^$label " "$out/checks.log" | tail -9 >>"$summary"
}
for m in ${models//,/ }; do
    [ -d "$shapes/$m" ] || continue
    vocab=$(python3 -c "import json;print(json.load(open('$shapes/$m/config.json'))['vocab_size'])")
    conform "$m" "$shapes/$m" "$(cat "$shapes/$m.ids")" "$vocab" "$shapes/$m.ref.f32"
    if [ "$m" = qwen3-0.6b ]; then # head_dim 128: flash prefill (whole, chunked) vs decode
        # batch-1 decode on the two-kernel path (LPX_CUDA_TUNE=qa=0) instead of the fused
        # cluster kernel (qkv_attn.cuh) that the decode check above ran
        d="$out/tmp"
        check "$m: cuda decode, two-kernel path, runs" env "$qa_off" "$lpx" logits -m "$shapes/$m" \
            --ids "$(cat "$shapes/$m.ids")" --device "$dev" --mode decode -o "$d/$m.cudadec2.f32"
        check "$m: cuda decode, two-kernel path, vs transformers" compare "$d/$m.cudadec2.f32" \
            "$shapes/$m.ref.f32" "$vocab" 3e-2 "$m cuda-decode-2k~hf" "$shapes/$m.ref-bf16.f32"
        grep -E "^$m cuda-decode-2k" "$out/checks.log" | tail -1 >>"$summary"
        # 600 positions: the decode attention splits past 256 keys (two-kernel path)
        # and walks two key tiles a block (fused path: 16 blocks of 32 keys)
        lids=$(long_ids 600 "$vocab")
        check "$m long (600): cuda prefill runs" logits "$shapes/$m" "$lids" "$dev" "$d/qlong.f32"
        check "$m long: cuda chunked (64) runs" logits "$shapes/$m" "$lids" "$dev" "$d/qlong.chunk.f32" --chunk 64
        check "$m long: cuda decode runs" logits "$shapes/$m" "$lids" "$dev" "$d/qlong.dec.f32" --mode decode
        # each against the CPU backend (float32), whose top-2 gaps decide the
        # near-ties: prefill with the fixed 0.1 band; chunked and decode with the
        # prefill path's own difference from the CPU as the noise band (as
        # transformers' bf16 run sets it above): bf16 through 28 random layers and
        # 600 positions differs from float32 by up to ~0.3 a logit, and the two
        # other paths flipped 1-3 of 600 rows with gaps of 0.1-0.3 (2026-11-30)
        check "$m long: cpu runs" logits "$shapes/$m" "$lids" cpu "$d/qlong.cpu.f32"
        check "$m long: prefill vs cpu" compare "$d/qlong.f32" "$d/qlong.cpu.f32" "$vocab" 5e-2 "$m long prefill~cpu"
        check "$m long: chunked vs cpu" compare "$d/qlong.chunk.f32" "$d/qlong.cpu.f32" "$vocab" 5e-2 "$m long chunked~cpu" "$d/qlong.f32"
        check "$m long: decode vs cpu" compare "$d/qlong.dec.f32" "$d/qlong.cpu.f32" "$vocab" 5e-2 "$m long decode~cpu" "$d/qlong.f32"
        grep -E "^$m long [a-z]+~cpu: max" "$out/checks.log" | tail -3 >>"$summary"
        # 4,096 ids, the last 8 decoded one a step: the fused batch-1 kernel (up to
        # qa_ctx = 4,096 keys), and the split attention (qa=0: the two-kernel path)
        l4=$(long_ids 4096 "$vocab")
        # (noise band: CUDA's prefill path on the same rows; a random 28-layer model
        # flips top-1 rows with CPU gaps up to ~0.2 there, 2026-12-02)
        check "$m 4k: cuda decode at depth runs" logits "$shapes/$m" "$l4" "$dev" "$d/q4k.f32" --chunk 2048 --tail 8 --mode decode
        check "$m 4k: cuda decode at depth, split attention, runs" env "$qa_off" "$lpx" logits -m "$shapes/$m" \
            --ids "$l4" --device "$dev" -o "$d/q4k.split.f32" --chunk 2048 --tail 8 --mode decode
        check "$m 4k: cuda prefill rows run" logits "$shapes/$m" "$l4" "$dev" "$d/q4k.pf.f32" --chunk 2048 --tail 8
        check "$m 4k: cpu runs" logits "$shapes/$m" "$l4" cpu "$d/q4k.cpu.f32" --chunk 512 --tail 8
        check "$m 4k: decode at depth vs cpu" compare "$d/q4k.f32" "$d/q4k.cpu.f32" "$vocab" 5e-2 "$m 4k decode~cpu" "$d/q4k.pf.f32"
        check "$m 4k: split decode at depth vs cpu" compare "$d/q4k.split.f32" "$d/q4k.cpu.f32" "$vocab" 5e-2 "$m 4k split-decode~cpu" "$d/q4k.pf.f32"
        grep -E "^$m 4k (split-)?decode~cpu: max" "$out/checks.log" | tail -2 >>"$summary"
        rm -f "$d"/qlong*.f32
    fi
done
if [ -f "$smol" ] && [ "${CHECKS:-1}" != 0 ]; then
    conform smollm2-sliced "$smol" "$(cat "${smol%.gguf}.ids")" 49152 "${smol%.gguf}.ref.f32"

    # greedy continuations: CUDA vs CPU, 32 tokens, three prompts
    ties=0; same=0; n=0
    for p in "1,504,3458,28,253" "$ids_smol" "1,9690,314,253,4"; do
        n=$((n + 1))
        g_cuda=$("$lpx" logits -m "$smol" --ids "$p" --device "$dev" --greedy 32 2>>"$out/checks.log" | tail -1)
        g_cpu=$("$lpx" logits -m "$smol" --ids "$p" --device cpu --greedy 32 2>>"$out/checks.log" | tail -1)
        echo "greedy $p: cuda $g_cuda" >>"$out/greedy.log"; echo "greedy $p: cpu  $g_cpu" >>"$out/greedy.log"
        if [ -n "$g_cuda" ] && [ "$g_cuda" = "$g_cpu" ]; then same=$((same + 1)); continue; fi
        # first divergence: near-tie when the CPU's top-2 gap there is < 0.1
        prefix=$(python3 -c "
a='$g_cuda'.split(','); b='$g_cpu'.split(','); i=0
while i < min(len(a),len(b)) and a[i]==b[i]: i+=1
print(','.join(['$p'] + b[:i]) if a[0] else '')")
        [ -n "$prefix" ] || { note "FAIL  greedy $p: no output"; fails=$((fails + 1)); continue; }
        logits "$smol" "$prefix" cpu "$out/tmp/tie.f32" >>"$out/checks.log" 2>&1
        if python3 -c "
import numpy as np; x=np.fromfile('$out/tmp/tie.f32','<f4').reshape(-1,49152)[-1]; s=np.sort(x)
print('top-2 gap at divergence', s[-1]-s[-2]); raise SystemExit(0 if s[-1]-s[-2] < 0.1 else 1)" >>"$out/greedy.log" 2>&1
        then ties=$((ties + 1)); else note "FAIL  greedy $p: CUDA and CPU differ at a clear choice"; fails=$((fails + 1)); fi
    done
    note "greedy 32 tokens CUDA vs CPU: $same/$n identical, $ties/$n differ first at a near-tie (gap < 0.1)"

    # batch invariance: two sequences batched vs each alone (decode through graphs).
    # Alone on the kernels batched decode uses (LPX_CUDA_TUNE=qa=0): equal within 1e-3.
    # Alone on the default batch-1 path (the fused cluster kernel, another summation
    # order): within the decode tolerance, 3e-2.
    a="1,504,3458,28,253,6512"; b="1,9690,314,253,4,2,17,9"
    check "batch invariance: A alone" env "$qa_off" "$lpx" logits -m "$smol" --ids "$a" --device "$dev" --mode decode -o "$out/tmp/a.f32"
    check "batch invariance: B alone" env "$qa_off" "$lpx" logits -m "$smol" --ids "$b" --device "$dev" --mode decode -o "$out/tmp/b.f32"
    check "batch invariance: A alone, fused path" "$lpx" logits -m "$smol" --ids "$a" --device "$dev" --mode decode -o "$out/tmp/af.f32"
    check "batch invariance: B alone, fused path" "$lpx" logits -m "$smol" --ids "$b" --device "$dev" --mode decode -o "$out/tmp/bf.f32"
    check "batch invariance: A+B batched" "$lpx" logits -m "$smol" --ids "$a" --ids "$b" --device "$dev" --mode decode -o "$out/tmp/ab.f32"
    check "batch invariance: logits equal within 1e-3 (3e-2 alone on the fused path)" python3 -c "
import numpy as np; V=49152
ld=lambda n: np.fromfile('$out/tmp/'+n+'.f32','<f4').reshape(-1,V)
ab=ld('ab'); err=lambda ref: (np.linalg.norm(ab-ref,axis=1)/np.linalg.norm(ref,axis=1)).max()
e=err(np.concatenate([ld('a'),ld('b')])); f=err(np.concatenate([ld('af'),ld('bf')]))
print('batched vs alone max rel-L2', e, '; vs alone on the fused path', f)
raise SystemExit(0 if e < 1e-3 and f < 3e-2 else 1)"
    grep -E "^batched vs alone" "$out/checks.log" | tail -1 >>"$summary"

    # decode attention walking several key tiles in one block: 33 sequences of 260
    # ids (a 64-token decode graph, one split per sequence) then 16 greedy tokens
    # batched, against the first and last sequence generated alone (two splits)
    many=(); for i in $(seq 0 32); do many+=(--ids "$(python3 -c "print(','.join(str((j * 7919 + 31 * $i + 13) % 49152) for j in range(260)))")"); done
    g_many=$("$lpx" logits -m "$smol" "${many[@]}" --device "$dev" --greedy 16 2>>"$out/checks.log")
    g_first=$("$lpx" logits -m "$smol" "${many[@]:0:2}" --device "$dev" --greedy 16 2>>"$out/checks.log" | tail -1)
    g_last=$("$lpx" logits -m "$smol" "${many[@]:64:2}" --device "$dev" --greedy 16 2>>"$out/checks.log" | tail -1)
    echo "many: $(echo "$g_many" | head -1) / $(echo "$g_many" | tail -1); alone: $g_first / $g_last" >>"$out/greedy.log"
    check "decode over several key tiles a block (33 batched = alone, greedy 16)" \
        test -n "$g_first" -a "$(echo "$g_many" | head -1)" = "$g_first" -a "$(echo "$g_many" | tail -1)" = "$g_last"

    # long prompt (300 ids): whole, chunked (128 a step), and in steps that mix a
    # 97-token chunk with a sequence decoding one token a step, against the CPU
    lids=$(long_ids 300 49152) d="$out/tmp"
    check "long (300): cuda prefill runs" logits "$smol" "$lids" "$dev" "$d/long.f32"
    check "long: cuda chunked (128) runs" logits "$smol" "$lids" "$dev" "$d/long.chunk.f32" --chunk 128
    check "long: cuda mixed with a decode runs" logits "$smol" "$lids" "$dev" "$d/long.mixed.f32" \
        --ids "$ids_smol" --chunk 97,1
    check "long: cuda decode runs" logits "$smol" "$lids" "$dev" "$d/long.dec.f32" --mode decode
    check "long: cpu runs" logits "$smol" "$lids" cpu "$d/long.cpu.f32"
    cat "$d/long.cpu.f32" "$d/smollm2-sliced.cpu.f32" >"$d/long.mixed.cpu.f32"
    check "long: cuda vs cpu" compare "$d/long.f32" "$d/long.cpu.f32" 49152 3e-2 "long cuda~cpu"
    check "long: cuda chunked vs cpu" compare "$d/long.chunk.f32" "$d/long.cpu.f32" 49152 3e-2 "long chunked~cpu"
    check "long: cuda mixed vs cpu" compare "$d/long.mixed.f32" "$d/long.mixed.cpu.f32" 49152 3e-2 "long mixed~cpu"
    check "long: cuda decode (split attention past 256 keys) vs cpu" compare "$d/long.dec.f32" "$d/long.cpu.f32" 49152 3e-2 "long decode~cpu"
    grep -E "^long " "$out/checks.log" | tail -4 >>"$summary"

    # long contexts: 8,000 ids whose last 32 are decoded one a step (the split decode
    # attention at depth), alone and batched beside a 5,000-id sequence, against the
    # CPU; the noise band is CUDA's prefill path on the same rows (as for the long
    # checks above)
    l8=$(long_ids 8000 49152) l5=$(long_ids 5000 49152)
    check "8k: cuda decode at depth runs" logits "$smol" "$l8" "$dev" "$d/l8.f32" --chunk 2048 --tail 32 --mode decode
    check "8k: cuda prefill rows run" logits "$smol" "$l8" "$dev" "$d/l8.pf.f32" --chunk 2048 --tail 32
    check "8k: cpu runs" logits "$smol" "$l8" cpu "$d/l8.cpu.f32" --chunk 1024 --tail 32
    check "8k: cuda decode at depth vs cpu" compare "$d/l8.f32" "$d/l8.cpu.f32" 49152 3e-2 "8k decode~cpu" "$d/l8.pf.f32"
    check "8k+5k batched: cuda runs" logits "$smol" "$l8" "$dev" "$d/l85.f32" --ids "$l5" --chunk 2048 --tail 16 --mode decode
    check "8k+5k batched: cpu runs" logits "$smol" "$l8" cpu "$d/l85.cpu.f32" --ids "$l5" --chunk 1024 --tail 16
    check "8k+5k batched: cuda vs cpu" compare "$d/l85.f32" "$d/l85.cpu.f32" 49152 3e-2 "8k+5k decode~cpu"
    grep -E "^8k" "$out/checks.log" | tail -2 >>"$summary"

    # weights kept quantized on the GPU (tune key wq=1; the default converts to bf16
    # where it fits): the SmolLM2 slice's Q4_1/Q8_0 blocks exactly, prefill (dequantized
    # tiles for cuBLAS), decode of one sequence (fused kernel) and of two (matvec),
    # against transformers and against the CPU backend's exact mode
    wq="LPX_CUDA_TUNE=wq=1"; cpu_exact="LPX_CPU_TUNE=act=f32"; [ "$dev" = cuda ] || wq="LPX_CUDA_TUNE="
    check "quantized (wq=1): cuda prefill runs" env "$wq" "$lpx" logits -m "$smol" --ids "$lids" --device "$dev" -o "$d/wq.f32"
    check "quantized (wq=1): cuda decode runs" env "$wq" "$lpx" logits -m "$smol" --ids "$lids" --device "$dev" -o "$d/wq.dec.f32" --mode decode
    check "quantized (wq=1): cuda decode of two runs" env "$wq" "$lpx" logits -m "$smol" --ids "$lids" --ids "$ids_smol" --device "$dev" -o "$d/wq.dec2.f32" --mode decode
    check "quantized: cpu exact runs" env "$cpu_exact" "$lpx" logits -m "$smol" --ids "$lids" --ids "$ids_smol" --device cpu -o "$d/wq.cpu2.f32"
    check "quantized: cpu exact (one) runs" env "$cpu_exact" "$lpx" logits -m "$smol" --ids "$lids" --device cpu -o "$d/wq.cpu.f32"
    check "quantized (wq=1): prefill vs cpu exact" compare "$d/wq.f32" "$d/wq.cpu.f32" 49152 3e-2 "wq prefill~cpu"
    check "quantized (wq=1): decode (fused) vs cpu exact" compare "$d/wq.dec.f32" "$d/wq.cpu.f32" 49152 3e-2 "wq decode~cpu"
    check "quantized (wq=1): decode of two vs cpu exact" compare "$d/wq.dec2.f32" "$d/wq.cpu2.f32" 49152 3e-2 "wq decode2~cpu"
    if [ -d "$shapes/qwen3-0.6b" ]; then
        # a Q4_K_M file (Q4_K and Q6_K: q4/32 and q8/16 with offsets) of the Qwen3 shape
        qk="$out/tmp/qwen3-q4_k_m.gguf"; lq=$(long_ids 200 151936)
        check "quantized: lpx quantize q4_k_m" "$lpx" quantize -m "$shapes/qwen3-0.6b" -o "$qk" --type q4_k_m --force
        check "quantized Q4_K_M (wq=1): cuda decode runs" env "$wq" "$lpx" logits -m "$qk" --ids "$lq" --device "$dev" -o "$d/qk.dec.f32" --chunk 64 --tail 8 --mode decode
        check "quantized Q4_K_M (wq=1): cuda prefill runs" env "$wq" "$lpx" logits -m "$qk" --ids "$lq" --device "$dev" -o "$d/qk.f32" --chunk 64 --tail 8
        check "quantized Q4_K_M: cpu exact runs" env "$cpu_exact" "$lpx" logits -m "$qk" --ids "$lq" --device cpu -o "$d/qk.cpu.f32" --chunk 64 --tail 8
        check "quantized Q4_K_M (wq=1): decode vs cpu exact" compare "$d/qk.dec.f32" "$d/qk.cpu.f32" 151936 5e-2 "wq q4_k_m decode~cpu"
        check "quantized Q4_K_M (wq=1): prefill vs cpu exact" compare "$d/qk.f32" "$d/qk.cpu.f32" 151936 5e-2 "wq q4_k_m prefill~cpu"
    fi
    grep -E "^wq " "$out/checks.log" | tail -5 >>"$summary"

    # the fp8 KV cache (--kv-cache-dtype fp8, kv_cache.cuh): CUDA's codes and scales
    # against the CPU backend's fp8 cache (exact mode), on every path that writes or
    # reads the cache: prefill (flash prefill over fp8 tiles), chunked prefill, the
    # fused batch-1 decode, the split decode (qa=0, and two sequences), decode at
    # depth (8,000 ids). Tolerance 5e-2: fp8's own error on this prompt (CPU fp8 vs
    # CPU bf16) is 4.0e-2, and CUDA's bf16 activations round some values across an
    # fp8 step; a wrong byte order or scale gives errors of order 1.
    f8="--kv-cache-dtype fp8"
    check "fp8 KV: cuda prefill runs" logits "$smol" "$lids" "$dev" "$d/f8.f32" $f8
    check "fp8 KV: cuda chunked (61) runs" logits "$smol" "$lids" "$dev" "$d/f8.chunk.f32" $f8 --chunk 61
    check "fp8 KV: cuda decode (fused) runs" logits "$smol" "$lids" "$dev" "$d/f8.dec.f32" $f8 --mode decode
    check "fp8 KV: cuda decode (two-kernel) runs" env "$qa_off" "$lpx" logits -m "$smol" --ids "$lids" --device "$dev" -o "$d/f8.dec2.f32" $f8 --mode decode
    check "fp8 KV: cuda decode of two runs" logits "$smol" "$lids" "$dev" "$d/f8.two.f32" --ids "$ids_smol" $f8 --mode decode
    check "fp8 KV: cpu runs" logits "$smol" "$lids" cpu "$d/f8.cpu.f32" $f8
    check "fp8 KV: cpu (two) runs" logits "$smol" "$lids" cpu "$d/f8.cpu2.f32" --ids "$ids_smol" $f8
    check "fp8 KV: cpu bf16 runs" logits "$smol" "$lids" cpu "$d/f8.cpubf.f32" --kv-cache-dtype bf16
    check "fp8 KV: cpu fp8 vs cpu bf16 (fp8's own error, < 6e-2)" compare "$d/f8.cpu.f32" "$d/f8.cpubf.f32" 49152 6e-2 "f8 cpu-fp8~cpu-bf16"
    check "fp8 KV: cuda prefill vs cpu fp8" compare "$d/f8.f32" "$d/f8.cpu.f32" 49152 5e-2 "f8 prefill~cpu"
    check "fp8 KV: cuda chunked vs cpu fp8" compare "$d/f8.chunk.f32" "$d/f8.cpu.f32" 49152 5e-2 "f8 chunked~cpu"
    check "fp8 KV: cuda decode (fused) vs cpu fp8" compare "$d/f8.dec.f32" "$d/f8.cpu.f32" 49152 5e-2 "f8 decode~cpu"
    check "fp8 KV: cuda decode (two-kernel) vs cpu fp8" compare "$d/f8.dec2.f32" "$d/f8.cpu.f32" 49152 5e-2 "f8 decode2~cpu"
    check "fp8 KV: cuda decode of two vs cpu fp8" compare "$d/f8.two.f32" "$d/f8.cpu2.f32" 49152 5e-2 "f8 two~cpu"
    check "fp8 KV: 8k cuda decode at depth runs" logits "$smol" "$l8" "$dev" "$d/f8.l8.f32" $f8 --chunk 2048 --tail 32 --mode decode
    check "fp8 KV: 8k cpu runs" logits "$smol" "$l8" cpu "$d/f8.l8.cpu.f32" $f8 --chunk 1024 --tail 32
    check "fp8 KV: 8k decode at depth vs cpu fp8" compare "$d/f8.l8.f32" "$d/f8.l8.cpu.f32" 49152 5e-2 "f8 8k decode~cpu"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (fp8 KV: chunked prefill to 2,000, decode at depth)" \
        compute-sanitizer --tool memcheck --error-exitcode 9 "$lpx" logits -m "$smol" \
        --ids "$(long_ids 2000 49152)" --ids "$(long_ids 700 49152)" --device cuda --chunk 512 --tail 4 --mode decode \
        $f8 -o "$out/tmp/ms8.f32"
    grep -E "^f8 " "$out/checks.log" | tail -9 >>"$summary"

    # device sampling (sampling.cuh): the CUDA sampler's token equals the host
    # sampler's on the same logits, for greedy, penalties, temperature, min_p,
    # top_k, top_p; then lpx run with device sampling vs host sampling on the same
    # GPU (must be identical) and vs the CPU backend (greedy)
    check "device sampling = host sampler on the same logits (test_sample_op)" \
        env LPX_TEST_DEVICE="$dev" LPX_MODEL="$smol" "$root/$build/test_sample_op"
    grep -E "with sample|logits to host" "$out/checks.log" | tail -3 >>"$summary"
    # one step ahead (step_begin/step_end): tokens fed on the device equal those of
    # the same steps waited for, every refusal of the contract; the engine's output with
    # --no-step-ahead and without (a seeded setting without penalties: penalised
    # rows never run ahead)
    check "step_begin/step_end: fed tokens and refusals (test_step_ahead)" \
        env LPX_TEST_DEVICE="$dev" LPX_MODEL="$smol" "$root/$build/test_step_ahead"
    # two engines in one process on two shapes whose backend tuning differs (mv_small):
    # each model's greedy tokens with both alive equal its tokens alone
    if [ -d "$shapes/qwen3-0.6b" ] && [ -d "$shapes/qwen2.5-0.5b" ]; then
        check "two engines in one process = each alone (test_two_engines)" \
            env LPX_TEST_DEVICE="$dev" LPX_MODEL="$shapes/qwen3-0.6b" \
            LPX_MODEL2="$shapes/qwen2.5-0.5b" "$root/$build/test_two_engines"
        grep -E "order [01]:" "$out/checks.log" | tail -2 >>"$summary"
    fi
    # automatic prefix caching on this backend: shuffled requests sharing prefixes give
    # the same tokens with the cache on and off (test_engine_prefix)
    check "prefix caching: the same tokens on and off (test_engine_prefix)" \
        env LPX_TEST_DEVICE="$dev" LPX_MODEL="$smol" "$root/$build/test_engine_prefix"
    run_text() { "$lpx" run -m "$smol" -p "The capital of France is" -n 32 --ignore-eos "$@" 2>>"$out/checks.log"; }
    seeded="--temp 0.8 --top-k 50 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.2 -s 7"
    for mode in greedy seeded; do
        args=""; [ "$mode" = seeded ] && args="$seeded"
        # shellcheck disable=SC2086
        t_dev=$(run_text --device "$dev" $args); t_host=$(run_text --device "$dev" --no-device-sampling $args)
        printf '%s device: %q\n%s host:   %q\n' "$mode" "$t_dev" "$mode" "$t_host" >>"$out/run.log"
        check "lpx run $mode: device sampling = host sampling" test -n "$t_dev" -a "$t_dev" = "$t_host"
        [ "$mode" = greedy ] && g_dev="$t_dev"
    done
    t_cpu=$(run_text --device cpu); printf 'greedy cpu:    %q\n' "$t_cpu" >>"$out/run.log"
    check "lpx run greedy: $dev = cpu" test -n "$t_cpu" -a "$g_dev" = "$t_cpu"
    # the 56-register projection kernel (matvec_tma_small_kernel) is the same code as
    # the 72-register one: forced on and off, the same greedy text
    if [ "$dev" = cuda ]; then
        t_small=$(LPX_CUDA_TUNE=mv_small=1 run_text --device "$dev"); t_big=$(LPX_CUDA_TUNE=mv_small=0 run_text --device "$dev")
        printf 'greedy small: %q\ngreedy big:   %q\n' "$t_small" "$t_big" >>"$out/run.log"
        check "lpx run greedy: LPX_CUDA_TUNE=mv_small=1 = mv_small=0" test -n "$t_small" -a "$t_small" = "$t_big"
    fi
    ahead="--temp 0.8 --top-k 50 --top-p 0.9 -s 7"
    # shellcheck disable=SC2086
    t_on=$(run_text --device "$dev" $ahead); t_off=$(run_text --device "$dev" --no-step-ahead $ahead)
    printf 'seeded ahead:  %q\nseeded waited: %q\n' "$t_on" "$t_off" >>"$out/run.log"
    check "lpx run seeded: one step ahead = --no-step-ahead" test -n "$t_on" -a "$t_on" = "$t_off"
    # shellcheck disable=SC2086
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (engine, one step ahead)" compute-sanitizer --tool memcheck \
        --error-exitcode 9 "$lpx" run -m "$smol" -p "The capital of France is" -n 16 --ignore-eos --device cuda $ahead

    # memory checker on a short run (prefill and decode paths) and on chunked steps
    # that mix prefill with decode
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (prefill)" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$lpx" logits -m "$smol" --ids "$ids_smol" --device cuda -o "$out/tmp/ms.f32"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (decode)" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$lpx" logits -m "$smol" --ids "1,504,3458,28" --ids "1,9690" --device cuda --mode decode -o "$out/tmp/ms2.f32"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (decode past 256 keys)" compute-sanitizer --tool memcheck \
        --error-exitcode 9 "$lpx" logits -m "$smol" --ids "$(long_ids 270 49152)" --device cuda --mode decode \
        -o "$out/tmp/ms4.f32"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (chunked, mixed)" compute-sanitizer --tool memcheck \
        --error-exitcode 9 "$lpx" logits -m "$smol" --ids "$(long_ids 150 49152)" --ids "$ids_smol" \
        --device cuda --chunk 61,1 -o "$out/tmp/ms3.f32"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (chunked prefill to 2,000, decode at depth)" \
        compute-sanitizer --tool memcheck --error-exitcode 9 "$lpx" logits -m "$smol" \
        --ids "$(long_ids 2000 49152)" --ids "$(long_ids 700 49152)" --device cuda --chunk 512 --tail 4 --mode decode \
        -o "$out/tmp/ms5.f32"
    [ "$dev" = cuda ] && check "compute-sanitizer memcheck (device sampling)" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$lpx" run -m "$smol" -p "The capital of France is" -n 4 $seeded --device cuda
    rm -f "$d"/long*.f32
fi

# 2. benchmark, Qwen3-0.6B shape
if [ "$dev" = cuda ] && [ -d "$shapes/qwen3-0.6b" ] && [ "${CHECKS:-1}" != 0 ]; then
    "$lpx" bench -m "$shapes/qwen3-0.6b" -p 512 -n 128 -b "${BENCH_B:-1,16,64,256}" -r 5 \
        >"$out/bench.md" 2>>"$out/checks.log" || { note "FAIL  bench"; fails=$((fails + 1)); }
fi
echo
cat "$out/bench.md" 2>/dev/null
echo
cat "$summary"

# 3. batch-1 A/B rounds (AB): the same call, variants interleaved, because one build
# varies by up to 15% between GPU machines (docs/PERF.md)
if [ "$dev" = cuda ] && [ -n "${AB:-}" ] && [ -d "$shapes/qwen3-0.6b" ]; then
    IFS=';' read -r -a variants <<<"$AB"
    for ((round = 1; round <= ${AB_ROUNDS:-2}; round++)); do
        for v in "${variants[@]}"; do
            name="${v%%=*}" sets="${v#*=}" bin="$lpx" envs=()
            for a in $sets; do
                case "$a" in LPX=*) bin="$root/${a#LPX=}" ;; *=*) envs+=("$a") ;; esac
            done
            # LPX_CUDA_TIMING=1: the same for a binary from before LPX_CUDA_TRACE
            us="$(env LPX_CUDA_TRACE=timing LPX_CUDA_TIMING=1 "${envs[@]}" timeout 120 "$bin" bench \
                -m "$shapes/qwen3-0.6b" -p 0 -n 128 -b 1 -r 3 2>&1 |
                sed -n 's/.*steps, \([0-9.]*\) us per step on the GPU.*/\1/p' | head -1)"
            echo "ab round $round: $name: ${us:-FAILED} us a step ($sets)" | tee -a "$out/ab.log"
        done
    done
fi
echo "gpu-check: $fails failure(s); logs in $out"
[ "$fails" = 0 ]
