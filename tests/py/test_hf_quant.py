"""Quantized Hugging Face checkpoints (config.json quantization_config: fp8, awq, gptq),
converted at load (docs/models.md "Quantized Hugging Face checkpoints").

The checkpoints are written here from a small random float model by reference
quantizers that follow the published formats (AutoAWQ's GEMM packing, AutoGPTQ's v1
packing with its zero - 1 convention, transformers' FineGrainedFP8 block scales), and
read back by a reference dequantizer written from the same documents. Checked:
  (a) every converted weight, as `lpx quantize --type f16|bf16` writes it (kept as
      stored) and the gguf package reads it, equals the reference dequantization bit
      for bit;
  (b) the whole model's logits on the CPU (exact kernels) equal a float64 numpy forward
      of the reference-dequantized weights within the CPU tolerance (docs/backend.md);
      the numpy forward is itself checked against transformers' float64 logits of the
      qwen3 fixture;
  (c) each bad input is refused with an error naming the tensor or field.
transformers cannot load these checkpoints here: it needs torch (not installed in CI)
and its AWQ/GPTQ/FP8 quantizers need GPU kernels packages."""
import json
import pathlib
import struct
import subprocess

import gguf
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/models/qwen3"
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEAR = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
GGUF_ROLE = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


# ---- a float64 reference forward (Qwen3: qk norm, rotate-half rope, GQA) ----------

def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, theta):
    t, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def forward(cfg, w, ids):
    """Logits (len(ids), vocab) of a Qwen3 model with float64 weights w."""
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    x = w["model.embed_tokens.weight"][ids]
    t = len(ids)
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd)
        q = rope(rms(q, w[p + "self_attn.q_norm.weight"], eps), theta)
        k = rope(rms(k, w[p + "self_attn.k_norm.weight"], eps), theta)
        k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("hqk,khd->qhd", s / s.sum(-1, keepdims=True), v).reshape(t, nh * hd)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms(x, w["model.norm.weight"], eps) @ head.T


def test_reference_forward_matches_transformers():
    """The numpy forward gives transformers' float64 logits on the qwen3 fixture."""
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    w = {k: v.astype(np.float64) for k, v in load_file(FIXTURE / "model.safetensors").items()}
    for seq in json.loads((FIXTURE / "manifest.json").read_text())["sequences"]:
        ref = np.fromfile(FIXTURE / seq["logits"], "<f4").reshape(len(seq["ids"]), -1)
        got = forward(cfg, w, seq["ids"])
        assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max()


# ---- checkpoints ---------------------------------------------------------------

def config(hidden=128, ffn=256, layers=2):
    return {"architectures": ["Qwen3ForCausalLM"], "hidden_size": hidden, "head_dim": 32,
            "num_attention_heads": hidden // 32, "num_key_value_heads": 2,
            "intermediate_size": ffn, "num_hidden_layers": layers, "vocab_size": 512,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": True, "hidden_act": "silu", "bos_token_id": 1,
            "eos_token_id": 2}


def float_model(cfg, seed=7):
    """Random float32 weights of a Qwen3 model, scaled so that activations stay O(1)."""
    rng = np.random.default_rng(seed)
    d, f, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    w = {"model.embed_tokens.weight": rng.normal(0, 1, (cfg["vocab_size"], d)),
         "model.norm.weight": rng.uniform(0.5, 1.5, d)}
    shapes = {"self_attn.q_proj": (q, d), "self_attn.k_proj": (kv, d),
              "self_attn.v_proj": (kv, d), "self_attn.o_proj": (d, q),
              "mlp.gate_proj": (f, d), "mlp.up_proj": (f, d), "mlp.down_proj": (d, f)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for n, s in shapes.items():
            w[p + n + ".weight"] = rng.normal(0, 1 / np.sqrt(s[1]), s)
        for n in ("input_layernorm", "post_attention_layernorm"):
            w[p + n + ".weight"] = rng.uniform(0.5, 1.5, d)
        for n in ("self_attn.q_norm", "self_attn.k_norm"):
            w[p + n + ".weight"] = rng.uniform(0.5, 1.5, hd)
    return {k: v.astype(np.float32) for k, v in w.items()}


ST_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
            "int32": "I32"}


def save_safetensors(path, tensors):
    """A safetensors file by its spec (the numpy helper has no F8_E4M3)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.tobytes()
        header[name] = {"dtype": ST_DTYPE[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def pack_cols(x, order):
    """(rows, cols) of 0..15 into int32 (rows, cols / 8): nibble k of word j holds column
    8j + order[k] (AWQ: AWQ_ORDER; GPTQ qzeros: 0..7)."""
    x = x.astype(np.uint32)
    out = np.zeros((x.shape[0], x.shape[1] // 8), np.uint32)
    for k in range(8):
        out |= x[:, order[k]::8] << (4 * k)
    return out.view(np.int32)


def pack_rows(x):
    """GPTQ qweight: (in, out) of 0..15 into int32 (in / 8, out), nibble k = row 8r + k."""
    x = x.astype(np.uint32)
    out = np.zeros((x.shape[0] // 8, x.shape[1]), np.uint32)
    for k in range(8):
        out |= x[k::8, :] << (4 * k)
    return out.view(np.int32)


def int4_quantize(w, group, sym):
    """AutoAWQ / AutoGPTQ min-max (asym) or absmax (sym, zero 8) int4 of W (out, in) in
    groups along in: q, zeros (in/g, out), f16 scales (in/g, out), all (in, out)-major."""
    wt = w.T.astype(np.float64)  # (in, out)
    g = wt.reshape(-1, group, wt.shape[1])
    if sym:
        scale = np.abs(g).max(1) / 7.5
        zero = np.full(scale.shape, 8)
    else:
        mx, mn = g.max(1), g.min(1)
        scale = (mx - mn) / 15
        zero = np.clip(np.round(-mn / scale), 0, 15)
    scale = scale.astype(np.float16)
    s = scale.astype(np.float64)[:, None, :]
    q = np.clip(np.round(g / s) + zero[:, None, :], 0, 15).reshape(wt.shape)
    return q.astype(np.int64), zero.astype(np.int64), scale


def int4_dequant(q, zero, scale, group):
    """(q - z) * s, exact in float32, as the checkpoint's f16: W (out, in)."""
    z = np.repeat(zero, group, 0)
    s = np.repeat(scale.astype(np.float32), group, 0)
    return ((q - z).astype(np.float32) * s).astype(np.float16).T


def fp8_quantize(w, block):
    """transformers' FineGrainedFP8 per-block amax / 448 scales (weight_scale_inv); blocks
    at the edges may be partial (ceil-shaped scales, as Qwen3-FP8 and DeepSeek-V3)."""
    o, i = w.shape
    bm, bn = block
    ro, ri = -(-o // bm), -(-i // bn)
    t = np.zeros((ro * bm, ri * bn), np.float32)
    t[:o, :i] = w
    t = t.reshape(ro, bm, ri, bn)
    inv = (np.abs(t).max((1, 3)) / 448).astype(np.float32)
    q = (t / inv[:, None, :, None]).reshape(ro * bm, ri * bn)[:o, :i]
    return q.astype(ml_dtypes.float8_e4m3fn), inv


def fp8_dequant(q, inv, block):
    s = np.repeat(np.repeat(inv, block[0], 0), block[1], 1)[:q.shape[0], :q.shape[1]]
    return (q.astype(np.float32) * s).astype(ml_dtypes.bfloat16)


def write_checkpoint(d, method, cfg=None, group=128, sym=False, block=(128, 128), qc=None,
                     edit=None):
    """A quantized checkpoint of the float model in d; returns (config, dequantized
    weights as stored by lpx (f16/bf16 arrays), float64 weights for the reference)."""
    cfg = dict(cfg or config())
    w = float_model(cfg)
    plain = np.float16 if method in ("awq", "gptq") else ml_dtypes.bfloat16
    out, deq = {}, {}
    for name, v in w.items():
        base = name[:-len(".weight")]
        if not any(base.endswith(r) for r in LINEAR):
            out[name] = v.astype(plain)
            deq[name] = out[name]
            continue
        if method == "fp8":
            q, inv = fp8_quantize(v, block)
            out[name], out[base + ".weight_scale_inv"] = q, inv
            deq[name] = fp8_dequant(q, inv, block)
            continue
        qv, z, s = int4_quantize(v, group, sym)
        if method == "awq":
            out[base + ".qweight"] = pack_cols(qv, AWQ_ORDER)
            out[base + ".qzeros"] = pack_cols(z, AWQ_ORDER)
        else:
            out[base + ".qweight"] = pack_rows(qv)
            out[base + ".qzeros"] = pack_cols((z - 1) & 15, list(range(8)))  # v1: zero - 1
            out[base + ".g_idx"] = (np.arange(qv.shape[0]) // group).astype(np.int32)
        out[base + ".scales"] = s
        deq[name] = int4_dequant(qv, z, s, group)
    cfg["torch_dtype"] = "float16" if plain is np.float16 else "bfloat16"
    cfg["quantization_config"] = qc or {
        "fp8": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": list(block)},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemm",
                "zero_point": True},
        "gptq": {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False,
                 "sym": sym, "checkpoint_format": "gptq"}}[method]
    if edit:
        edit(cfg, out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    save_safetensors(d / "model.safetensors", out)
    return cfg, deq


def lpx(lpx_bin, *args):
    return subprocess.run([lpx_bin, *args], capture_output=True, text=True, timeout=300)


CASES = {"fp8": dict(method="fp8"), "awq": dict(method="awq"),
         "gptq": dict(method="gptq"), "gptq-sym": dict(method="gptq", sym=True),
         "awq-g64": dict(method="awq", group=64), "gptq-g32": dict(method="gptq", group=32)}


@pytest.mark.parametrize("case", list(CASES))
def test_dequantized_weights_and_logits(lpx_bin, tmp_path, case):
    kw = CASES[case]
    d = tmp_path / case
    cfg, deq = write_checkpoint(d, **kw)
    n_lin = 7 * cfg["num_hidden_layers"]

    info = lpx(lpx_bin, "inspect", str(d), "--json")
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["n_dequantized_at_load"] == n_lin
    target = "BF16" if kw["method"] == "fp8" else "F16"
    assert got["quantization"].startswith(kw["method"]) and got["quantization"].endswith(target)
    text = lpx(lpx_bin, "inspect", str(d)).stdout
    assert f"converted at load   {n_lin} tensors: {kw['method']}" in text

    # (a) the converted weights as lpx holds them, written unchanged into a GGUF.
    g = tmp_path / "dump.gguf"
    r = lpx(lpx_bin, "quantize", "-m", str(d), "-o", str(g), "--type", target.lower())
    assert r.returncode == 0, r.stderr
    tensors = {t.name: t for t in gguf.GGUFReader(g).tensors}
    for l in range(cfg["num_hidden_layers"]):
        for role in LINEAR:
            t = tensors[f"blk.{l}.{GGUF_ROLE[role]}.weight"]
            want = deq[f"model.layers.{l}.{role}.weight"]
            have = np.asarray(t.data).view(np.uint16).reshape(want.shape)
            np.testing.assert_array_equal(have, want.view(np.uint16), err_msg=t.name)

    # (b) logits of the whole model against the float64 forward of those weights.
    ids = [3, 17, 250, 99, 4, 511, 42, 8, 130, 77, 1, 300]
    out = tmp_path / "l.f32"
    r = lpx(lpx_bin, "logits", "-m", str(d), "--ids", ",".join(map(str, ids)), "-o", str(out))
    assert r.returncode == 0, r.stderr
    have = np.fromfile(out, "<f4").reshape(len(ids), -1)
    ref = forward(cfg, {k: v.astype(np.float64) for k, v in deq.items()}, ids)
    err = np.abs(have - ref).max() / np.abs(ref).max()
    print(f"{case}: max abs logit error {err:.3g} of the largest")
    assert err <= 2e-5


def set_qc(**kv):
    def edit(cfg, out):
        cfg["quantization_config"].update(kv)
    return edit


def tensor_edit(fn):
    def edit(cfg, out):
        fn(out)
    return edit


def nan_scale(out):
    out["model.layers.1.mlp.up_proj.scales"][0, 53] = np.float16("nan")


def inf_fp8_scale(out):
    out["model.layers.0.self_attn.k_proj.weight_scale_inv"][0, 0] = np.inf


def narrow_qweight(out):
    k = "model.layers.0.self_attn.q_proj.qweight"
    out[k] = out[k][:, :-1]


def narrow_q_proj(out):
    """Packed parts that agree with each other but not with config.json."""
    b = "model.layers.0.self_attn.q_proj."
    out[b + "qweight"] = out[b + "qweight"][:, :-1]
    out[b + "qzeros"] = out[b + "qzeros"][:, :-1]
    out[b + "scales"] = out[b + "scales"][:, :-8]


def short_scales(out):
    k = "model.layers.0.mlp.down_proj.scales"
    out[k] = out[k][:-1]


def bad_gidx(out):
    out["model.layers.0.mlp.gate_proj.g_idx"][5] = 1


def drop_qzeros(out):
    del out["model.layers.1.self_attn.v_proj.qzeros"]


def fp8_scale_shape(out):
    k = "model.layers.0.mlp.gate_proj.weight_scale_inv"
    out[k] = out[k][:1]


BAD = {
    "bitsandbytes": (dict(method="awq", qc={"quant_method": "bitsandbytes", "load_in_4bit": True}),
                     "quant_method bitsandbytes is not supported (fp8"),
    "unknown-method": (dict(method="awq", qc={"quant_method": "hqq"}),
                       "quant_method hqq is not supported"),
    "gptq-8bit": (dict(method="gptq", edit=set_qc(bits=8)), "gptq with 8 bits is not supported"),
    "gptq-desc-act": (dict(method="gptq", edit=set_qc(desc_act=True)),
                      "desc_act true is not supported"),
    "gptq-marlin": (dict(method="gptq", edit=set_qc(checkpoint_format="marlin")),
                    "checkpoint_format marlin is not supported"),
    "awq-gemv": (dict(method="awq", edit=set_qc(version="gemv")),
                 "version gemv is not supported"),
    "awq-group-256": (dict(method="awq", edit=set_qc(group_size=256)),
                      "group_size 256 is not supported"),
    "gptq-group-per-row": (dict(method="gptq", edit=set_qc(group_size=-1)),
                           "group_size -1 is not supported"),
    "group-not-dividing": (dict(method="awq", cfg=config(hidden=192, ffn=384), group=64,
                                edit=set_qc(group_size=128)),
                           "group size 128 does not divide in_features 192"),
    "awq-scales-nan": (dict(method="awq", edit=tensor_edit(nan_scale)),
                       "model.layers.1.mlp.up_proj.scales: scale 53 is NaN"),
    "fp8-scale-inf": (dict(method="fp8", edit=tensor_edit(inf_fp8_scale)),
                      "model.layers.0.self_attn.k_proj.weight_scale_inv: scale 0 is infinite"),
    "awq-qweight-vs-qzeros": (dict(method="awq", edit=tensor_edit(narrow_qweight)),
                              "model.layers.0.self_attn.q_proj.qzeros: expected I32 [1, 15]"),
    "awq-shapes-vs-config": (dict(method="awq", edit=tensor_edit(narrow_q_proj)),
                             "model.layers.0.self_attn.q_proj.weight: expected shape [128, 128], "
                             "found [120, 128] (dequantized at load: awq"),
    "gptq-scales-groups": (dict(method="gptq", edit=tensor_edit(short_scales)),
                           "model.layers.0.mlp.down_proj.scales: expected F16 [2, 128]"),
    "gptq-act-order-gidx": (dict(method="gptq", edit=tensor_edit(bad_gidx)),
                            "model.layers.0.mlp.gate_proj.g_idx: g_idx[5] is 1, not 0"),
    "gptq-sym-zeros": (dict(method="gptq", edit=set_qc(sym=True)),
                       "in a sym checkpoint (expected 8: is checkpoint_format right?)"),
    "gptq-missing-qzeros": (dict(method="gptq", edit=tensor_edit(drop_qzeros)),
                            "model.layers.1.self_attn.v_proj.qweight: missing "
                            "model.layers.1.self_attn.v_proj.qzeros"),
    "fp8-scale-shape": (dict(method="fp8", cfg=config(hidden=256), edit=tensor_edit(fp8_scale_shape)),
                        "model.layers.0.mlp.gate_proj.weight_scale_inv: expected 2 x 2 scales"),
    "fp8-block-size": (dict(method="fp8", edit=set_qc(weight_block_size=[128])),
                       "weight_block_size must be [rows, cols]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_checkpoints(lpx_bin, tmp_path, case):
    kw, message = BAD[case]
    d = tmp_path / case
    write_checkpoint(d, **kw)
    r = lpx(lpx_bin, "inspect", str(d))
    assert r.returncode != 0 and r.returncode < 128, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr


def test_fp8_without_config_is_refused(lpx_bin, tmp_path):
    """fp8 tensors in a checkpoint that does not say it is quantized."""
    d = tmp_path / "plain"
    write_checkpoint(d, "fp8", edit=lambda cfg, out: cfg.pop("quantization_config"))
    r = lpx(lpx_bin, "inspect", str(d))
    assert r.returncode == 1
    assert "dtype F8_E4M3 is read only as part of a quantized weight" in r.stderr, r.stderr


@pytest.mark.parametrize("strategy", ["tensor", "channel"])
def test_fp8_weight_scale_exports(lpx_bin, tmp_path, strategy):
    """Per-tensor and per-channel weight_scale (compressed-tensors, fbgemm_fp8 and older
    fp8 exports): W = q * scale."""
    def requant(cfg, out):
        for k in [k for k in out if k.endswith(".weight_scale_inv")]:
            base = k[:-len(".weight_scale_inv")]
            wq = out[base + ".weight"]
            full = fp8_dequant(wq, out.pop(k), (128, 128)).astype(np.float32)
            s = (np.abs(full).max(1, keepdims=True) if strategy == "channel"
                 else np.abs(full).max().reshape(())) / 448
            s = s.astype(np.float32)
            out[base + ".weight"] = (full / s).astype(ml_dtypes.float8_e4m3fn)
            out[base + ".weight_scale"] = s
            out[base + ".input_scale"] = np.float32(1.0).reshape(())
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True}}},
          "ignore": ["lm_head"]}
    d = tmp_path / strategy
    cfg, _ = write_checkpoint(d, "fp8", qc=qc, edit=requant)
    st = load_file_raw(d / "model.safetensors")
    ref = {}
    for k, (dt, shape, b) in st.items():
        if k.endswith((".weight_scale", ".input_scale")):
            continue
        if dt == "F8_E4M3":
            q = np.frombuffer(b, ml_dtypes.float8_e4m3fn).reshape(shape).astype(np.float32)
            sdt, sshape, sb = st[k[:-len(".weight")] + ".weight_scale"]
            s = np.frombuffer(sb, np.float32).reshape(sshape)
            ref[k] = (q * s).astype(ml_dtypes.bfloat16).astype(np.float64)
        else:
            ref[k] = np.frombuffer(b, ml_dtypes.bfloat16).reshape(shape).astype(np.float64)
    ids = [5, 6, 7, 400, 12, 90]
    out = tmp_path / "l.f32"
    r = lpx(lpx_bin, "logits", "-m", str(d), "--ids", ",".join(map(str, ids)), "-o", str(out))
    assert r.returncode == 0, r.stderr
    have = np.fromfile(out, "<f4").reshape(len(ids), -1)
    want = forward(cfg, ref, ids)
    assert np.abs(have - want).max() <= 2e-5 * np.abs(want).max()


def load_file_raw(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
