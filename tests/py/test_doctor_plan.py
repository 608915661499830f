"""lpx plan and lpx doctor -m on the real SmolLM2 GGUF. The reference figures come from
the file itself, read with the gguf package: tensor bytes and the KV shape."""
import ctypes
import json
import math
import shutil
import struct
import subprocess

import gguf
import pytest

from conftest import ROOT

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
        # the CUDA backend's copy where it fits: matrices bf16, vectors (norms) f32
        "bf16_bytes": sum(int(t.n_elements) * (2 if len([x for x in t.shape if x > 1]) > 1 else 4)
                          for t in r.tensors),
        "d": int(meta["llama.embedding_length"]),
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
    # an H200 holds the bf16 copy (the file's Q4_1/Q8_0 blocks are converted where they fit)
    assert p["weights_as"] == "bf16" and p["file_weight_bytes"] == ref["weight_bytes"]
    assert p["weight_bytes"] == ref["bf16_bytes"] > 2 * ref["weight_bytes"]
    assert p["decode_bytes_per_step"] == ref["bf16_bytes"] + 2 * ref["d"]  # tied: + one row
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


def test_plan_keeps_the_file_when_bf16_does_not_fit(lpx_bin, smollm2, ref):
    """The CUDA backend's rule: bf16 where weights, reserve and a full-length sequence fit,
    else the file's blocks. A memory between the two needs holds the file's bytes."""
    seq = ref["ctx"] * ref["kv"]
    need_file = (ref["weight_bytes"] + GIB + seq) / 0.9
    need_bf16 = (ref["bf16_bytes"] + GIB + seq) / 0.9
    assert need_file < need_bf16
    for mem, want in (((need_file + need_bf16) / 2, "stored"), (need_bf16 * 1.01, "bf16")):
        r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200", "--memory", str(mem / GIB), "--json")
        assert r.returncode == 0, r.stderr
        p = json.loads(r.stdout)
        assert p["weights_as"] == want and p["fits"] is True
        assert p["weight_bytes"] == (ref["weight_bytes"] if want == "stored" else ref["bf16_bytes"])
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200")
    assert "(the CUDA backend's bf16 copy; the file's blocks: " in r.stdout


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


def test_plan_auto_without_gpu(lpx_bin, smollm2, ref):
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("a GPU driver is present")
    except OSError:
        pass
    r = run(lpx_bin, "plan", "-m", smollm2, "--json")
    assert r.returncode == 0, r.stderr
    assert "no NVIDIA GPU detected" in r.stderr and "CPU backend" in r.stderr and "--gpu" in r.stderr
    p = json.loads(r.stdout)
    # the CPU backend's plan: its f32 KV cache (twice the bf16 bytes), no CUDA reserve, this
    # host's available RAM and its measured read bandwidth
    assert p["gpu"]["name"].startswith("no GPU: the CPU backend")
    assert p["kv_cache_dtype"] == "f32" and p["kv_bytes_per_token"] == 2 * ref["kv"]
    assert set(p["kv_dtypes"]) == {"f32", "fp8"}
    avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo")
                 if l.startswith("MemAvailable:"))
    assert p["gpu"]["memory_bytes"] == pytest.approx(avail, rel=0.2)
    bw = p["gpu"]["bandwidth_bytes_per_s"]
    assert 1e8 < bw < 1e13
    assert p["floor_ms_per_token"] == pytest.approx(p["decode_bytes_per_step"] / bw * 1e3, rel=1e-9)
    budget = int(p["gpu"]["memory_bytes"] * 0.9) - p["weight_bytes"]  # no reserve
    assert p["max_seqs"] == budget // (ref["ctx"] * 2 * ref["kv"])
    r = run(lpx_bin, "plan", "-m", smollm2, "--kv-cache-dtype", "bf16")
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == (
        "lpx plan: --kv-cache-dtype bf16: the CPU backend's KV cache is f32 (auto) or fp8")
    r = run(lpx_bin, "plan", "-m", smollm2)
    assert r.returncode == 0 and "GB/s" in r.stdout and "KV f32" in r.stdout


def test_doctor_model_need(lpx_bin, smollm2, ref):
    r = run(lpx_bin, "doctor", "-m", smollm2, "--max-model-len", "4096", "--max-num-seqs", "3",
            "--json")
    need = json.loads(r.stdout)["model_need"]
    assert need["weight_bytes"] == ref["weight_bytes"]
    assert need["kv_bytes"] == 4096 * 3 * ref["kv"]
    assert need["total_bytes"] == need["weight_bytes"] + need["kv_bytes"] + need["reserve_bytes"]
    r = run(lpx_bin, "doctor", "-m", "/nonexistent.gguf")
    assert r.returncode == 1 and r.stderr.startswith("lpx doctor: ")


# Qwen3-0.6B (its config.json): the hand-computed anchor.
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
             "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
             "rms_norm_eps": 1e-6, "vocab_size": 151936, "rope_theta": 1000000.0,
             "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 258,
             "eos_token_id": 259}


@pytest.fixture(scope="module")
def qwen3_06b(tmp_path_factory):
    """A Qwen3-0.6B-shaped bf16 checkpoint: its real tensor names and shapes in a
    safetensors header, the 1.19 GB of data a sparse hole (plan reads no weight). The
    tokenizer files are the tiny Qwen3 fixture's."""
    d = tmp_path_factory.mktemp("qwen3-0.6b")
    src = ROOT / "tests/fixtures/model/hf-qwen3"
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / f, d / f)
    (d / "config.json").write_text(json.dumps(QWEN3_06B))
    dm, ff, heads, kv, hd, vocab = 1024, 3072, 16, 8, 128, 151936
    shapes = {"model.embed_tokens.weight": [vocab, dm], "model.norm.weight": [dm]}
    for i in range(28):
        p = "model.layers.%d." % i
        shapes.update({
            p + "input_layernorm.weight": [dm], p + "post_attention_layernorm.weight": [dm],
            p + "self_attn.q_proj.weight": [heads * hd, dm],
            p + "self_attn.k_proj.weight": [kv * hd, dm],
            p + "self_attn.v_proj.weight": [kv * hd, dm],
            p + "self_attn.o_proj.weight": [dm, heads * hd],
            p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [ff, dm], p + "mlp.up_proj.weight": [ff, dm],
            p + "mlp.down_proj.weight": [dm, ff]})
    header, off = {}, 0
    for name, shape in shapes.items():
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
    return str(d)


def test_plan_qwen3_06b_hand_computed(lpx_bin, qwen3_06b):
    """Per layer: wq 2048x1024 + wk, wv 1024x1024 + wo 1024x2048 + gate/up/down 3x3072x1024
    + norms 2x1024 + 2x128 = 15,730,944 params; x28 + final norm 1024 + the tied embedding
    151936x1024 = 596,049,920 params = 1,192,099,840 B in the file, and on the GPU the
    norms in f32 (65,536 values, 131,072 B more): 1,192,230,912 B held, read once per step
    (the embedding as lm_head), plus the one embedding row of the step's token (1024 x
    2 B): 1,192,232,960 B = 1.192 GB. KV: 28 x 2 x 8 x 128 x 2 B = 114,688 B. At 4.08
    TB/s: 0.292 ms/token."""
    r = run(lpx_bin, "plan", "-m", qwen3_06b, "--gpu", "h200", "--bandwidth", "4.08",
            "--memory", str(H200_MEM / GIB), "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["file_weight_bytes"] == 1192099840 and p["weights_as"] == "bf16"
    assert p["weight_bytes"] == 1192230912
    assert p["decode_bytes_per_step"] == 1192230912 + 1024 * 2
    assert p["kv_bytes_per_token"] == 114688
    assert p["floor_ms_per_token"] == pytest.approx(1192232960 / 4.08e12 * 1e3, rel=1e-9)
    assert round(p["floor_ms_per_token"], 3) == 0.292
    assert p["floor_tok_s"] == pytest.approx(4.08e12 / 1192232960, rel=1e-9)
    assert p["max_model_len"] == 40960 and p["max_seqs"] == 28 and p["fits"]
    r = run(lpx_bin, "plan", "-m", qwen3_06b, "--gpu", "h200")  # the table's measured 4.08
    assert "1.192 GB held, 1.192 GB read per decode step" in r.stdout
    assert "114688 bytes per token" in r.stdout
    assert "floor        batch 1, empty context: 0.292 ms/token = 3422 tok/s" in r.stdout
