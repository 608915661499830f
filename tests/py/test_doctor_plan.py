"""lpx plan and lpx doctor -m on the real SmolLM2 GGUF. The reference figures come from
the file itself, read with the gguf package: tensor bytes and the KV shape."""
import ctypes
import json
import subprocess

import gguf
import pytest

H200_MEM = 143771 * 1024 * 1024
GIB = 1024 ** 3


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ref(smollm2):
    r = gguf.GGUFReader(smollm2)
    meta = {k: r.fields[k].parts[r.fields[k].data[0]][0] for k in
            ("llama.block_count", "llama.attention.head_count_kv", "llama.attention.head_count",
             "llama.embedding_length", "llama.context_length")}
    head_dim = meta["llama.embedding_length"] // meta["llama.attention.head_count"]
    return {
        "weight_bytes": sum(int(t.n_bytes) for t in r.tensors),
        # K and V, every layer, bf16 cache
        "kv": int(meta["llama.block_count"]) * 2 * int(meta["llama.attention.head_count_kv"])
        * int(head_dim) * 2,
        "ctx": int(meta["llama.context_length"]),
    }


def test_plan_json_against_the_file(lpx_bin, smollm2, ref):
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200", "--context", "1000",
            "--batch", "1,32", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["weight_bytes"] == ref["weight_bytes"]
    assert p["kv_bytes_per_token"] == ref["kv"] == 23040
    assert p["max_model_len"] == ref["ctx"] and p["context"] == 1000
    # tied embeddings: the whole table is read as lm_head, plus one row looked up
    assert p["decode_bytes_per_step"] >= p["weight_bytes"]
    bw = 4.08e12
    assert p["gpu"]["bandwidth_bytes_per_s"] == bw and p["gpu"]["memory_bytes"] == H200_MEM
    assert p["floor_ms_per_token"] == pytest.approx(p["decode_bytes_per_step"] / bw * 1e3, rel=1e-9)
    rows = p["batches"]
    assert [w["batch"] for w in rows] == [1, 32]
    step32 = p["decode_bytes_per_step"] + 32 * 1000 * ref["kv"]
    assert rows[1]["bytes_per_step"] == step32
    assert rows[1]["tok_s"] == pytest.approx(32 / (step32 / bw), rel=1e-9)
    budget = int(H200_MEM * 0.9) - p["weight_bytes"] - GIB
    assert p["max_seqs"] == budget // (ref["ctx"] * ref["kv"])
    assert p["fits"] is True


def test_plan_text_and_errors(lpx_bin, smollm2):
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "l4", "--max-model-len", "2048")
    assert r.returncode == 0, r.stderr
    assert "0.30 TB/s" in r.stdout and "datasheet" in r.stdout
    assert "23040 bytes per token" in r.stdout and "fits         yes" in r.stdout
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200", "--memory", "1")
    assert r.returncode == 0 and "fits         NO" in r.stdout
    assert run(lpx_bin, "plan", "--gpu", "list").stdout.count("TB/s") >= 15
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "nosuchgpu")
    assert r.returncode == 2 and r.stderr.startswith("lpx plan: unknown GPU")
    assert run(lpx_bin, "plan", "--gpu", "h200").returncode == 2
    r = run(lpx_bin, "plan", "-m", "/nonexistent.gguf", "--gpu", "h200")
    assert r.returncode == 1 and r.stderr.startswith("lpx plan: ") and r.stderr.count("\n") == 1


def test_plan_auto_without_gpu(lpx_bin, smollm2):
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("a GPU driver is present")
    except OSError:
        pass
    r = run(lpx_bin, "plan", "-m", smollm2)
    assert r.returncode == 1 and "no NVIDIA GPU detected" in r.stderr and "--gpu" in r.stderr


def test_doctor_model_need(lpx_bin, smollm2, ref):
    r = run(lpx_bin, "doctor", "-m", smollm2, "--max-model-len", "4096", "--max-num-seqs", "3",
            "--json")
    need = json.loads(r.stdout)["model_need"]
    assert need["weight_bytes"] == ref["weight_bytes"]
    assert need["kv_bytes"] == 4096 * 3 * ref["kv"]
    assert need["total_bytes"] == need["weight_bytes"] + need["kv_bytes"] + need["reserve_bytes"]
    r = run(lpx_bin, "doctor", "-m", "/nonexistent.gguf")
    assert r.returncode == 1 and r.stderr.startswith("lpx doctor: ")
