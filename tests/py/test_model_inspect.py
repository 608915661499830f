"""`lpx inspect` against what the gguf and safetensors packages read from the
same files: the real SmolLM2 GGUF, tiny GGUF models of each family and tiny
Hugging Face directories (tests/fixtures/model/, scripts/make-model-fixtures.py)."""
import json
import pathlib
import subprocess

import gguf
import numpy as np
import pytest
from safetensors import safe_open

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/model"
KEPT = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"}


def inspect(lpx_bin, path, *extra):
    return subprocess.run([lpx_bin, "inspect", str(path), *extra], capture_output=True, text=True)


def inspect_json(lpx_bin, path):
    r = inspect(lpx_bin, path, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def field(reader, key):
    return reader.fields[key].contents()


def gguf_expected(path):
    """What lpx should report for a GGUF file, computed with gguf-py."""
    r = gguf.GGUFReader(str(path))
    arch = field(r, "general.architecture")
    d, h = field(r, f"{arch}.embedding_length"), field(r, f"{arch}.attention.head_count")
    names = {t.name for t in r.tensors}
    embd = next(t for t in r.tensors if t.name == "token_embd.weight")
    params, dtypes, dbytes, nbytes, converted = 0, {}, {}, 0, 0
    for t in r.tensors:
        n = int(np.prod(t.shape))
        ty = t.tensor_type.name
        if ty not in KEPT:
            ty, converted = "F32", converted + 1
        params += n
        dtypes[ty] = dtypes.get(ty, 0) + n
        b = n * 4 if t.tensor_type.name not in KEPT else int(t.n_bytes)
        nbytes += b
        dbytes[ty] = dbytes.get(ty, 0) + b
    kl = f"{arch}.attention.key_length"
    return {
        "arch": arch, "format": "gguf",
        "n_layers": field(r, f"{arch}.block_count"), "d_model": d, "n_heads": h,
        "n_kv_heads": field(r, f"{arch}.attention.head_count_kv"),
        "head_dim": field(r, kl) if kl in r.fields else d // h,
        "d_ff": field(r, f"{arch}.feed_forward_length"),
        "vocab_size": int(embd.shape[1]),
        "context_length": field(r, f"{arch}.context_length"),
        "tied_embeddings": "output.weight" not in names,
        "n_params": params, "dtype_params": dtypes, "n_dequantized_at_load": converted,
        "weight_bytes": nbytes, "dtype_bytes": dbytes,
        "has_chat_template": "tokenizer.chat_template" in r.fields,
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_ids": [field(r, "tokenizer.ggml.eos_token_id")],
        "rope_theta": field(r, f"{arch}.rope.freq_base"),
        "n_vocab_tokens": len(field(r, "tokenizer.ggml.tokens")),
    }


def check_against(got, want):
    for k, v in want.items():
        if k in ("rope_theta", "n_vocab_tokens"):
            continue
        assert got[k] == v, f"{k}: lpx says {got[k]}, expected {v}"
    assert got["rope"]["theta"] == pytest.approx(want["rope_theta"])


def test_smollm2(lpx_bin, smollm2):
    got = inspect_json(lpx_bin, smollm2)
    want = gguf_expected(smollm2)
    check_against(got, want)
    # The numbers the model card gives, independent of the reader.
    assert (got["n_layers"], got["d_model"], got["n_heads"], got["n_kv_heads"],
            got["head_dim"], got["vocab_size"]) == (30, 576, 9, 3, 64, 49152)
    assert got["vocab_size"] == want["n_vocab_tokens"] == got["tokenizer_vocab"]
    assert got["tied_embeddings"] and got["arch"] == "llama" and got["rope"]["interleaved"]
    assert got["kv_bytes_per_token"] == 30 * 2 * 3 * 64 * 2
    # Tied: the whole embedding is read as lm_head, plus one row for the input token.
    embd_bytes = 49152 * 576 // 32 * 34
    assert got["decode_bytes_per_step"] == got["weight_bytes"] + embd_bytes // 49152
    # What the CUDA backend holds where it fits: every matrix in bf16, norms in f32,
    # counted from the gguf package's tensors; a step reads it plus one embedding row.
    import gguf
    bf16 = sum(int(t.n_elements) * (2 if len([x for x in t.shape if x > 1]) > 1 else 4)
               for t in gguf.GGUFReader(smollm2).tensors)
    assert got["cuda_bf16_weight_bytes"] == bf16
    assert got["cuda_bf16_decode_bytes_per_step"] == bf16 + 576 * 2


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_gguf(lpx_bin, arch):
    path = FIX / f"tiny-{arch}.gguf"
    got = inspect_json(lpx_bin, path)
    check_against(got, gguf_expected(path))
    assert got["rope"]["interleaved"] == (arch == "llama")
    assert got["qkv_bias"] == (arch == "qwen2") and got["qk_norm"] == (arch == "qwen3")
    if arch == "qwen3":  # ffn weights are Q4_K/Q5_K/Q6_K: kept as blocks
        assert got["n_dequantized_at_load"] == 0
        assert {"Q4_K", "Q5_K", "Q6_K"} <= set(got["dtype_params"])
        assert "converted at load   none" in inspect(lpx_bin, path).stdout
    if arch == "llama":
        assert got["rope"]["scaling"] == "linear" and got["rope"]["factor"] == 2.0


def hf_tensors(d):
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "np") as st:
            for k in st.keys():
                out[k] = st.get_slice(k)
    return out


# Tiny models of each family made with transformers by the CPU backend's
# scripts/make-fixtures.py; the family is in their manifest.json (or config.json).
BACKEND_MODELS = sorted(p.parent for p in (ROOT / "tests/fixtures/models").glob("*/config.json"))


@pytest.mark.parametrize("d", BACKEND_MODELS, ids=[d.name for d in BACKEND_MODELS])
def test_backend_fixture_models(lpx_bin, d):
    manifest = d / "manifest.json"
    arch = json.loads((manifest if manifest.exists() else d / "config.json").read_text())
    arch = arch.get("arch") or arch["model_type"]
    check_hf_dir(lpx_bin, d, arch)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_tiny_hf(lpx_bin, arch):
    got = check_hf_dir(lpx_bin, FIX / f"hf-{arch}", arch)
    assert got["has_chat_template"]  # qwen2: the "default" entry of a template list
    cfg = json.loads((FIX / f"hf-{arch}" / "config.json").read_text())
    if arch == "llama":
        rs = cfg["rope_scaling"]
        assert got["rope"]["scaling"] == "llama3" and got["rope"]["factor"] == rs["factor"]
        assert got["rope"]["original_max_position_embeddings"] == \
            rs["original_max_position_embeddings"]
    if arch == "mistral":
        assert got["sliding_window"] == cfg["sliding_window"]


def check_hf_dir(lpx_bin, d, arch):
    cfg = json.loads((d / "config.json").read_text())
    gen = json.loads((d / "generation_config.json").read_text())
    got = inspect_json(lpx_bin, d)
    h = cfg["num_attention_heads"]
    assert got["arch"] == arch and got["format"] == "safetensors"
    assert got["n_layers"] == cfg["num_hidden_layers"] and got["d_model"] == cfg["hidden_size"]
    assert got["n_heads"] == h and got["n_kv_heads"] == cfg["num_key_value_heads"]
    assert got["head_dim"] == cfg.get("head_dim", cfg["hidden_size"] // h)
    assert got["d_ff"] == cfg["intermediate_size"] and got["vocab_size"] == cfg["vocab_size"]
    assert got["context_length"] == cfg["max_position_embeddings"]
    assert got["tied_embeddings"] == cfg["tie_word_embeddings"]
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    assert got["rope"]["theta"] == pytest.approx(theta)
    assert not got["rope"]["interleaved"]
    eos = gen["eos_token_id"]
    assert got["eos_token_ids"] == (eos if isinstance(eos, list) else [eos])
    assert got["bos_token_id"] == gen["bos_token_id"]
    ts = hf_tensors(d)
    params = sum(int(np.prod(s.get_shape())) for s in ts.values())
    assert got["n_params"] == params
    dt = {"F16": "F16", "F32": "F32", "BF16": "BF16"}
    want = {}
    for s in ts.values():
        k = dt[s.get_dtype()]
        want[k] = want.get(k, 0) + int(np.prod(s.get_shape()))
    assert got["dtype_params"] == want
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    assert got["rope"]["scaling"] == {"default": "none"}.get(kind, kind)
    if kind != "default":
        assert got["rope"]["factor"] == rs["factor"]
    return got


def test_text_output(lpx_bin, smollm2):
    r = inspect(lpx_bin, smollm2)
    assert r.returncode == 0, r.stderr
    for line in ("architecture        llama", "layers              30",
                 "heads               9 (kv heads 3, head dim 64)", "vocab               49152",
                 "tied embeddings     yes", "chat template       yes"):
        assert line in r.stdout


def test_usage_and_errors(lpx_bin, tmp_path):
    assert inspect(lpx_bin, "--help").returncode == 0
    r = subprocess.run([lpx_bin, "inspect"], capture_output=True, text=True)
    assert r.returncode == 2
    missing = tmp_path / "nope.gguf"
    r = inspect(lpx_bin, missing)
    assert r.returncode == 1 and str(missing) in r.stderr and r.stderr.count("\n") == 1
    assert r.stderr.startswith("lpx inspect: ")
    r = inspect(lpx_bin, FIX / "hf-llama" / "model.safetensors")
    assert r.returncode == 1 and "give the model directory" in r.stderr
