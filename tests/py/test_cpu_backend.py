"""CPU backend conformance: logits of tiny random-weight models of every family
against Hugging Face transformers (float64 references made by
scripts/make-fixtures.py, committed under tests/fixtures/models/).

Tolerance (docs/backend.md): lpx computes in float32, the reference in float64,
so the max abs error over every logit of every position must stay under
REL_TOL * max|reference logit| of that sequence. transformers itself in float32
is at most 2.7e-6 relative off its float64 result on these models; REL_TOL is
about 7x that, while any real defect (a wrong RoPE frequency, a missing bias, a
mask off by one) moves logits by O(1).
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/models"
MODELS = sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists())
REL_TOL = 2e-5


def manifest(name):
    return json.loads((FIXTURES / name / "manifest.json").read_text())


def reference(name, seq):
    ref = np.fromfile(FIXTURES / name / seq["logits"], dtype="<f4").astype(np.float64)
    return ref.reshape(len(seq["ids"]), -1)


def lpx_logits(lpx_bin, tmp_path, name, seqs, *args, greedy=0):
    """Runs `lpx logits` on the given sequences; returns (logits per sequence, greedy ids)."""
    out = tmp_path / "out.f32"
    cmd = [lpx_bin, "logits", "-m", str(FIXTURES / name), "-o", str(out), *args]
    for s in seqs:
        cmd += ["--ids", ",".join(map(str, s["ids"]))]
    if greedy:
        cmd += ["--greedy", str(greedy)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    flat = np.fromfile(out, dtype="<f4")
    vocab = flat.size // sum(len(s["ids"]) for s in seqs)
    flat = flat.reshape(-1, vocab)
    res, at = [], 0
    for s in seqs:
        res.append(flat[at:at + len(s["ids"])])
        at += len(s["ids"])
    ids = [[int(x) for x in line.split(",")] for line in r.stdout.split()] if greedy else None
    return res, ids


def check_close(name, seq, got):
    ref = reference(name, seq)
    assert got.shape == ref.shape
    err = np.abs(got - ref).max()
    tol = REL_TOL * seq["logit_absmax"]
    assert err <= tol, f"{name}: max abs error {err:.3g} > {tol:.3g} (position " \
        f"{int(np.abs(got - ref).max(axis=1).argmax())})"


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_logits_match_transformers(lpx_bin, tmp_path, name, mode, block_size):
    for seq in manifest(name)["sequences"]:
        (got,), _ = lpx_logits(lpx_bin, tmp_path, name, [seq], "--mode", mode,
                               "--block-size", str(block_size))
        check_close(name, seq, got)


@pytest.mark.parametrize("name", MODELS)
def test_mixed_batch_is_bitwise_batch_invariant(lpx_bin, tmp_path, name):
    """Three sequences in the same steps, one in prefill chunks of 7, one decoding
    a token per step, one prefilled whole, give exactly the logits each gives
    alone in one prefill step."""
    seqs = manifest(name)["sequences"]
    together, _ = lpx_logits(lpx_bin, tmp_path, name, seqs, "--chunk", "7,1,64",
                             "--block-size", "4")
    for seq, got in zip(seqs, together):
        (alone,), _ = lpx_logits(lpx_bin, tmp_path, name, [seq], "--block-size", "16")
        assert np.array_equal(got, alone), f"{name}: batched logits differ from alone"
        check_close(name, seq, got)


def first_divergence(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return i
    return None


@pytest.mark.parametrize("name", MODELS)
def test_greedy_matches_transformers(lpx_bin, tmp_path, name):
    """Greedy 32-token continuations, the three sequences decoding as one batch,
    equal transformers'; a first divergence is allowed only at a near-tie (a
    reference top-2 gap within twice the logit tolerance)."""
    seqs = manifest(name)["sequences"]
    _, ids = lpx_logits(lpx_bin, tmp_path, name, seqs, greedy=32)
    for seq, got in zip(seqs, ids):
        i = first_divergence(got, seq["greedy"])
        if i is not None:
            gap = seq["greedy_top2_gap"][i]
            assert gap < 2 * REL_TOL * seq["logit_absmax"], \
                f"{name}: greedy differs at step {i} (gap {gap:.3g}): {got} vs {seq['greedy']}"


def test_bad_arguments(lpx_bin):
    model = str(FIXTURES / MODELS[0])
    for args, code in [([], 2), (["-m", model], 2), (["-m", model, "--ids", "1,x"], 2),
                       (["-m", model, "--ids", "1", "--mode", "sideways"], 2),
                       (["-m", model, "--ids", "1", "--device", "tpu"], 2),
                       (["-m", model, "--ids", "99999"], 1),
                       (["-m", str(ROOT / "no-such-model"), "--ids", "1"], 1)]:
        r = subprocess.run([lpx_bin, "logits", *args], capture_output=True, text=True)
        assert r.returncode == code, (args, r.stderr)
        assert r.stderr.startswith("lpx logits: "), r.stderr
    # an unknown option and an option without its value, told apart
    for args, msg in [(["--bogus", "-m", model], "unknown option '--bogus' (see lpx logits --help)"),
                      (["-m", model, "--ids"], "--ids: needs a value")]:
        r = subprocess.run([lpx_bin, "logits", *args], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == "" and r.stderr == f"lpx logits: {msg}\n"
    # numbers: trailing text, sign, range and list shape, each naming its option
    for opt, value in [("--greedy", "-1"), ("--block-size", "0"), ("--threads", "1.5"),
                       ("--chunk", "1,0"), ("--chunk", "1,2"), ("--ids", "1,,2"),
                       ("--ids", "3,4294967296")]:
        r = subprocess.run([lpx_bin, "logits", "-m", model, "--ids", "1,2", opt, value],
                           capture_output=True, text=True)
        assert r.returncode == 2, (opt, value, r.stderr)
        assert r.stderr.startswith(f"lpx logits: {opt}: expected ") and f"(got '{value}')" in r.stderr


@pytest.mark.parametrize("gguf", ["tiny-llama.gguf", "tiny-qwen3.gguf"])
def test_integer_kernels_agree_with_exact_mode(lpx_bin, tmp_path, gguf):
    """Block-quantized GGUF files (tiny-qwen3: Q8_0 attention, Q4_K/Q5_K/Q6_K
    FFN; tiny-llama: the 32-blocks) through the integer kernels, AVX2 and plain
    C, against the exact mode (fp32 activations over the same blocks, whose
    decoding tests/unit/test_model_dtype.c checks against gguf-py), in prefill
    and in decode: within the integer kernels' tolerance (docs/backend.md),
    and the two implementations within float rounding of each other."""
    model = str(ROOT / "tests/fixtures/model" / gguf)
    ids = "1,2,3,4,5,6,7,8,9,10,11,12"
    got = {}
    for tune in ("act=f32", "isa=avx2", "isa=c"):
        for mode in ("prefill", "decode"):
            out = tmp_path / f"{tune}-{mode}.f32"
            r = subprocess.run([lpx_bin, "logits", "-m", model, "--ids", ids, "--mode", mode,
                                "-o", str(out)], capture_output=True, text=True,
                               env={**os.environ, "LPX_CPU_TUNE": tune})
            if tune == "isa=avx2" and "this CPU lacks it" in r.stderr:
                continue
            assert r.returncode == 0, r.stderr
            got[tune, mode] = np.fromfile(out, dtype="<f4").astype(np.float64)
    exact = got["act=f32", "prefill"]
    top = np.abs(exact).max()
    for (tune, mode), g in got.items():
        assert np.array_equal(g, got[tune, "prefill"]), (tune, mode)  # batch invariance
        if tune == "act=f32":
            continue
        err, rms = np.abs(g - exact).max(), np.sqrt(((g - exact) ** 2).mean())
        assert err <= 0.05 * top and rms <= 0.015 * top, (tune, err, rms, top)
    if ("isa=avx2", "prefill") in got:
        assert np.abs(got["isa=avx2", "prefill"] - got["isa=c", "prefill"]).max() <= 1e-3 * top
