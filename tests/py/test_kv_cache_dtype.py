"""--kv-cache-dtype on the CPU backend: what each dtype costs and how far it moves
the model.

- Long contexts: a tiny random Llama (tests/fixtures/models/llama, its positions
  raised to 4096) over 3,000 tokens in chunks of 512 against a float64 forward pass
  written here (itself checked against the fixture's transformers logits first): the
  f32 cache (auto) within the fixtures' tolerance, bf16 and fp8 within theirs.
- fp8 against bf16 on the real SmolLM2-135M at a 321-token prompt, exact kernels
  (act=f32), measured on 2026-12-02: each position's max |logit error| over max
  |logit| has median 0.0275 and maximum 0.084; RMS error / RMS logit 0.038; the top
  token agrees at 95.6% of positions; greedy 64-token continuations agree for the
  first 38 tokens. (bf16 against the f32 cache: max 0.005, RMS 0.0026, every top
  token the same, greedy agreement for the first 33: continuations part at near-ties,
  which even bf16 rounding tips.) The asserted bounds leave about 2-3x margin.
- fp8 stays batch invariant (chunks, batching and block size give the same bits).
- The pool's bytes per token follow the dtype, so one KV budget holds ~1.9x the
  tokens in fp8 as in bf16; a request too long for the pool names what it needs.
- plan and inspect report both dtypes; bad values are usage errors everywhere."""
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/models/llama"
TEXT = ROOT / "tests/fixtures/kv/lighthouse.txt"
REL_TOL = 2e-5  # test_cpu_backend.py's: f32 against float64


def run(*args, env=None, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def q8_env():
    """The default integer kernels (faster) instead of conftest's exact ones."""
    return {k: v for k, v in os.environ.items() if k != "LPX_CPU_TUNE"}


def logits(lpx_bin, model, ids, tmp_path, *args, greedy=0):
    out = tmp_path / "logits.f32"
    cmd = [lpx_bin, "logits", "-m", model, "--ids", ",".join(map(str, ids)), "-o", out, *args]
    if greedy:
        cmd += ["--greedy", greedy]
    r = run(*cmd)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    return got, [int(x) for x in r.stdout.split(",")] if greedy else None


def llama_forward(w, cfg, ids):
    """transformers' LlamaForCausalLM in float64; RoPE angles in float32 as it computes
    them (position * inv_freq), then cos/sin in float64."""
    W = {k: v.astype(np.float64) for k, v in w.items()}
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, T = cfg["rms_norm_eps"], len(ids)
    inv = (np.float32(1) / np.float32(cfg["rope_parameters"]["rope_theta"]) **
           (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd))).astype(np.float32)
    ang = (np.arange(T, dtype=np.float32)[:, None] * inv[None]).astype(np.float64)
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def rope(t):  # (T, heads, hd), rotate-half pairs
        rot = np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1)
        return t * cos[:, None] + rot * sin[:, None]

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = rope((h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd))
        k = rope((h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd))
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd)
        out = np.empty((T, H, hd))
        for i in range(H):
            j = i // (H // KV)
            s = q[:, i] @ k[:, j].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(1, keepdims=True))
            out[:, i] = (s / s.sum(1, keepdims=True)) @ v[:, j]
        x = x + out.reshape(T, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    """The fixture Llama with 4096 positions: (directory, weights, config)."""
    cfg = json.loads((FIX / "config.json").read_text())
    w = load_file(FIX / "model.safetensors")
    man = json.loads((FIX / "manifest.json").read_text())
    for s in man["sequences"]:  # the reference is transformers' first
        ref = np.fromfile(FIX / s["logits"], dtype="<f4").reshape(len(s["ids"]), -1)
        assert np.abs(llama_forward(w, cfg, s["ids"]) - ref).max() <= 2e-6 * s["logit_absmax"]
    d = tmp_path_factory.mktemp("long-llama")
    cfg["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(cfg))
    shutil.copy(FIX / "generation_config.json", d)
    shutil.copy(FIX / "model.safetensors", d)
    return str(d), w, cfg


def test_long_context_matches_a_float64_reference(lpx_bin, long_llama, tmp_path):
    """3,000 tokens in prefill chunks of 512 over a paged cache of 188 blocks: f32 within
    REL_TOL of max |logit| at every position (measured 1.0e-5 at the end, 1.3e-6 in the
    first 40: the error grows with the context but stays inside); bf16 and fp8 below
    (measured max 0.022 and 0.23 of max |logit|: the random model amplifies every
    perturbation; SmolLM2 below is the accuracy figure), fp8 further than bf16."""
    model, w, cfg = long_llama
    ids = np.random.default_rng(3).integers(3, 512, 3000).tolist()
    ref = llama_forward(w, cfg, ids)
    top = np.abs(ref).max()
    err = {}
    for dt in ("auto", "bf16", "fp8"):
        got, _ = logits(lpx_bin, model, ids, tmp_path, "--chunk", "512", "--kv-cache-dtype", dt)
        err[dt] = np.abs(got - ref).max() / top
    assert err["auto"] <= REL_TOL, err
    assert 1e-4 < err["bf16"] <= 0.06 and err["bf16"] < err["fp8"] <= 0.5, err


def test_fp8_is_batch_invariant(lpx_bin, tmp_path):
    """The fp8 cache holds the same codes and scales however a token arrived: three
    sequences in one batch (chunks of 7, one token a step, whole) in blocks of 4 give
    exactly the logits each gives alone in one step in blocks of 16; and they are not
    the f32 cache's."""
    model = str(ROOT / "tests/fixtures/models/qwen3")
    seqs = [s["ids"] for s in json.loads((pathlib.Path(model) / "manifest.json")
                                         .read_text())["sequences"]]
    out = tmp_path / "together.f32"
    cmd = [lpx_bin, "logits", "-m", model, "-o", out, "--kv-cache-dtype", "fp8", "--chunk",
           "7,1,64", "--block-size", "4"]
    for s in seqs:
        cmd += ["--ids", ",".join(map(str, s))]
    r = run(*cmd)
    assert r.returncode == 0, r.stderr
    together = np.fromfile(out, dtype="<f4").reshape(-1, 512)
    at = 0
    for s in seqs:
        alone, _ = logits(lpx_bin, model, s, tmp_path, "--kv-cache-dtype", "fp8")
        f32, _ = logits(lpx_bin, model, s, tmp_path)
        assert np.array_equal(together[at:at + len(s)], alone)
        assert np.abs(alone - f32).max() > 1e-4  # fp8 really was used
        at += len(s)


@pytest.mark.slow
def test_fp8_against_bf16_on_smollm2(lpx_bin, smollm2, tmp_path):
    r = run(lpx_bin, "tokenize", "-m", smollm2, "--ids", TEXT.read_text())
    ids = [int(x) for x in r.stdout.split()]
    assert r.returncode == 0 and len(ids) == 321, (len(ids), r.stderr)
    bf, bf_greedy = logits(lpx_bin, smollm2, ids, tmp_path, "--kv-cache-dtype", "bf16",
                           greedy=64)
    f8, f8_greedy = logits(lpx_bin, smollm2, ids, tmp_path, "--kv-cache-dtype", "fp8",
                           greedy=64)
    rel = np.abs(f8 - bf).max(axis=1) / np.abs(bf).max(axis=1)
    rms = np.sqrt(((f8 - bf) ** 2).mean()) / np.sqrt((bf ** 2).mean())
    agree = (f8.argmax(1) == bf.argmax(1)).mean()
    first = next((i for i, (a, b) in enumerate(zip(f8_greedy, bf_greedy)) if a != b), 64)
    print(f"fp8 vs bf16: rel median {np.median(rel):.4f} max {rel.max():.4f}, rms {rms:.4f}, "
          f"top-1 agreement {agree:.3f}, greedy agrees for {first} of 64")
    assert np.median(rel) <= 0.08 and rel.max() <= 0.25, (np.median(rel), rel.max())
    assert 0.005 < rms <= 0.10, rms
    assert agree >= 0.85, agree
    assert first >= 8, (first, f8_greedy, bf_greedy)


def test_the_pool_follows_the_dtype_and_too_long_names_the_memory(lpx_bin, smollm2):
    """--kv-bytes of 64 bf16 tokens (SmolLM2: 23,040 B a token in bf16, 12,240 in fp8,
    46,080 in the CPU's f32): a 321-token prompt + 4 fails in f32 and bf16 with what it
    needs, and runs in fp8 when the budget is 7 times larger (7 x 64 x 23040 B hold 448
    bf16 tokens, 843 fp8 ones)."""
    budget = 64 * 23040
    for dt, bpt, pool in (("auto", 46080, 32), ("bf16", 23040, 64), ("fp8", 12240, 112)):
        r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-f", TEXT, "-n", 4,
                "--kv-bytes", budget, "--kv-cache-dtype", dt)
        name = "f32" if dt == "auto" else dt
        assert r.returncode == 1 and r.stdout == "", r.stderr
        assert (f"prompt of 321 tokens + max_tokens 4 is too long for the KV cache: it needs "
                f"{325 * bpt / 2**20:.1f} MiB ({name}, {bpt} B/token) and the KV pool holds "
                f"{pool * bpt / 2**20:.1f} MiB ({pool} tokens)") in r.stderr, r.stderr
        assert ("--kv-cache-dtype fp8" in r.stderr) == (dt != "fp8") and "--kv-bytes" in r.stderr
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-f", TEXT, "-n", 4, "--json",
            "--kv-bytes", 7 * budget, "--kv-cache-dtype", "fp8", "--temp", 0, env=q8_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kv_cache_dtype"] == "fp8" and out["output_tokens"] == 4
    assert out["kv_cache_bytes"] == 7 * budget // (16 * 12240) * 16 * 12240
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-f", TEXT, "-c", 100)
    assert r.returncode == 1 and "max_model_len is 100" in r.stderr and \
        "the model's own limit is 8192 positions" in r.stderr


def test_serve_refuses_what_the_pool_cannot_hold(lpx_bin, smollm2):
    from serve_helpers import Server
    srv = Server(lpx_bin, smollm2, "--device", "cpu", "--kv-bytes", str(64 * 23040),
                 "--kv-cache-dtype", "bf16")
    try:
        r = srv.post("/v1/completions", {"model": "smollm2", "prompt": TEXT.read_text(),
                                          "max_tokens": 8})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded"
        assert "too long for the KV cache" in err["message"] and "(64 tokens)" in err["message"]
    finally:
        srv.stop()


def test_plan_and_inspect_give_both_dtypes(lpx_bin, smollm2):
    r = run(lpx_bin, "inspect", smollm2, "--json")
    info = json.loads(r.stdout)
    assert info["kv_bytes_per_token"] == 30 * 2 * 3 * 64 * 2
    assert info["kv_bytes_per_token_fp8"] == 30 * 2 * 3 * (64 + 4)
    r = run(lpx_bin, "inspect", smollm2)
    assert "KV bytes per token  23040 bf16, 12240 fp8" in r.stdout
    for dt, key in (("bf16", "bf16"), ("fp8", "fp8"), ("auto", "bf16")):
        r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200", "--json",
                "--kv-cache-dtype", dt)
        assert r.returncode == 0, r.stderr
        p = json.loads(r.stdout)
        assert p["kv_cache_dtype"] == key
        budget = p["kv_budget_bytes"]
        for name, bpt in (("bf16", 23040), ("fp8", 12240)):
            k = p["kv_dtypes"][name]
            assert k["kv_bytes_per_token"] == bpt and k["kv_bytes_per_seq"] == 8192 * bpt
            assert k["max_seqs"] == budget // (8192 * bpt) and k["max_kv_tokens"] == budget // bpt
        assert p["kv_bytes_per_token"] == p["kv_dtypes"][key]["kv_bytes_per_token"]
        assert p["max_seqs"] == p["kv_dtypes"][key]["max_seqs"]
        step = p["decode_bytes_per_step"] + p["batches"][0]["batch"] * 4096 * \
            p["kv_bytes_per_token"]
        assert p["batches"][0]["bytes_per_step"] == step
    r = run(lpx_bin, "plan", "-m", smollm2, "--gpu", "h200")
    assert "KV bf16      23040 bytes per token" in r.stdout and "<- planned" in r.stdout
    assert "KV fp8       12240 bytes per token" in r.stdout


@pytest.mark.parametrize("words", [["run", "-p", "x"], ["chat"], ["serve"],
                                   ["batch", "-i", "x.jsonl", "-o", "out"], ["bench"],
                                   ["logits", "--ids", "1"], ["plan"]])
def test_bad_kv_cache_dtype_is_a_usage_error(lpx_bin, words):
    r = run(lpx_bin, *words, "-m", "no-such-model", "--kv-cache-dtype", "fp16", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"lpx {words[0]}: --kv-cache-dtype: expected auto, bf16 or fp8 "
                               "(also bfloat16, fp8_e4m3) (got 'fp16')"), r.stderr
    for ok in ("fp8_e4m3", "bfloat16"):  # vLLM's spellings are taken: the model is what fails
        r = run(lpx_bin, *words, "-m", "no-such-model", "--kv-cache-dtype", ok, timeout=60)
        assert "--kv-cache-dtype" not in r.stderr, r.stderr
