"""lpx slice (GGUF writer) and lpx bench on the CPU backend with the real SmolLM2."""
import json
import pathlib
import subprocess

import gguf
import numpy as np


def run(*args, timeout=600):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def test_slice_keeps_first_layers_byte_for_byte(lpx_bin, smollm2, tmp_path):
    out = tmp_path / "s2.gguf"
    r = run(lpx_bin, "slice", "-m", smollm2, "--layers", "2", "-o", out)
    assert r.returncode == 0, r.stderr
    src, dst = gguf.GGUFReader(smollm2), gguf.GGUFReader(str(out))
    assert int(dst.fields["llama.block_count"].parts[-1][0]) == 2
    want = {t.name: t for t in src.tensors
            if not (t.name.startswith("blk.") and int(t.name.split(".")[1]) >= 2)}
    got = {t.name: t for t in dst.tensors}
    assert set(got) == set(want) and len(got) == 2 + 2 * 9  # embeddings (tied), output norm
    for name, t in got.items():
        assert t.tensor_type == want[name].tensor_type
        assert list(t.shape) == list(want[name].shape)
        assert np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(want[name].data).view(np.uint8)), name
    # every other key is copied unchanged
    for k, f in src.fields.items():
        if k in ("llama.block_count", "GGUF.tensor_count", "GGUF.kv_count"):
            continue
        g = dst.fields[k]
        assert f.types == g.types, k
        assert [bytes(f.parts[i]) for i in f.data] == [bytes(g.parts[i]) for i in g.data], k
    info = json.loads(run(lpx_bin, "inspect", out, "--json").stdout)
    assert info["n_layers"] == 2


def test_slice_usage_errors(lpx_bin, smollm2, tmp_path):
    assert run(lpx_bin, "slice", "-m", smollm2, "-o", tmp_path / "x.gguf").returncode == 2
    r = run(lpx_bin, "slice", "-m", smollm2, "--layers", "2x", "-o", tmp_path / "x.gguf")
    assert r.returncode == 2
    assert r.stderr == "lpx slice: --layers: expected a whole number from 1 to 100000 (got '2x')\n"
    r = run(lpx_bin, "slice", "-m", smollm2, "--bogus", "-o", tmp_path / "x.gguf")
    assert r.returncode == 2 and r.stderr == "lpx slice: unknown option '--bogus' (see lpx slice --help)\n"
    r = run(lpx_bin, "slice", "-m", smollm2, "-o", tmp_path / "x.gguf", "--layers")
    assert r.returncode == 2 and r.stderr == "lpx slice: --layers: needs a value\n"
    r = run(lpx_bin, "slice", "-m", smollm2, "--layers", "99", "-o", tmp_path / "x.gguf")
    assert r.returncode == 1 and "1..30" in r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_bench_cpu_json(lpx_bin, smollm2):
    r = run(lpx_bin, "bench", "-m", smollm2, "-p", "16", "-n", "4", "-d", "8", "-b", "1,2",
            "-r", "1", "--device", "cpu", "-o", "json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["device"] == "cpu" and res["read_bandwidth_GBps"] > 0
    assert res["decode"] == "ahead"  # the CPU backend has step_begin/step_end
    tests = {t["test"]: t for t in res["tests"]}
    assert set(tests) == {"pp16", "tg4", "decode B=2"}
    for t in tests.values():
        assert t["tok_s"] > 0 and t["ms_per_step"] > 0 and 0 < t["pct_of_floor"]
        assert t["floor_ms_per_step"] > 0
    for flag, mode in [("--no-step-ahead", "waited"), ("--no-device-sampling", "host_logits")]:
        r = subprocess.run([lpx_bin, "bench", "-m", smollm2, "-p", "0", "-n", "2", "-d", "8", "-b",
                            "1", "-r", "1", "--device", "cpu", "-o", "json", flag],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["decode"] == mode


def test_bench_usage(lpx_bin):
    assert run(lpx_bin, "bench", "--help").returncode == 0
    assert run(lpx_bin, "bench", "-m", "x", "-b", "0").returncode == 2
    assert run(lpx_bin, "bench").returncode == 2
    r = run(lpx_bin, "bench", "-m", "x", "--bogus", "1")
    assert r.returncode == 2 and r.stderr == "lpx bench: unknown option '--bogus' (see lpx bench --help)\n"
    r = run(lpx_bin, "bench", "-m", "x", "-b")
    assert r.returncode == 2 and r.stderr == "lpx bench: -b: needs a value\n"
    for opt, value in [("-p", "12abc"), ("-n", "99999999999999999999"), ("-d", "0"),
                       ("-r", "65"), ("-b", "1,2,x"), ("-b", "1,"), ("-b", ",".join(["1"] * 17))]:
        r = run(lpx_bin, "bench", "-m", "x", opt, value)
        assert r.returncode == 2, (opt, value)
        assert r.stderr.startswith(f"lpx bench: {opt}: expected ") and f"(got '{value}')" in r.stderr


def test_sliced_model_logits_match_transformers(lpx_bin, smollm2, tmp_path):
    """The 2-layer slice runs on the CPU backend: finite, deterministic, and equal to
    transformers' logits of the same file (tests/fixtures/cuda, made by
    scripts/make-shape-model.py --gguf-ref on this slice, ids below)."""
    out = tmp_path / "s2.gguf"
    assert run(lpx_bin, "slice", "-m", smollm2, "--layers", "2", "-o", out).returncode == 0
    runs = []
    for k in range(2):
        f = tmp_path / f"l{k}.f32"
        r = run(lpx_bin, "logits", "-m", out, "--ids", "1,504,3458,28,253", "--device", "cpu",
                "-o", f)
        assert r.returncode == 0, r.stderr
        runs.append(np.fromfile(f, "<f4").reshape(5, 49152))
    assert np.isfinite(runs[0]).all()
    assert np.array_equal(runs[0], runs[1])
    ref = np.fromfile(pathlib.Path(__file__).parents[1] / "fixtures/cuda/smollm2-2layers.last.f32", "<f4")
    rel = np.linalg.norm(runs[0][-1] - ref) / np.linalg.norm(ref)
    assert rel < 1e-4, rel
