#!/usr/bin/env python3
"""Writes the valid model-file fixtures of tests/fixtures/model/ with the `gguf`
and `safetensors` packages (the references lpx's readers are tested against):

  dtype/<TYPE>.bin, dtype/<TYPE>.f32   raw blocks and gguf-py's dequantization
  meta.gguf                            every GGUF metadata type, nested arrays
  tiny-<arch>.gguf                     small random models (llama, qwen2, qwen3)
  hf-<arch>/                           small Hugging Face directories

Deterministic (fixed seeds); rerun after changing it and commit the output."""
import json
import math
import pathlib
import shutil

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests/fixtures/model"
rng = np.random.default_rng(1234)


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8)


def kquant_blocks(qtype, n_blocks):
    """Random K-quant super-blocks with finite, moderate f16 scales."""
    bsz = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(n_blocks, bsz), dtype=np.uint8)
    scales = f16_bytes(rng.uniform(-0.05, 0.05, size=(n_blocks, 2))).reshape(n_blocks, 4)
    if qtype == Q.Q6_K:
        raw[:, 208:210] = scales[:, :2]
    else:
        raw[:, 0:4] = scales
    return raw


def write_dtype_vectors():
    d = OUT / "dtype"
    d.mkdir(parents=True, exist_ok=True)
    x = rng.normal(0, 1, size=(4, 256)).astype(np.float32)
    x[0, :8] = [0.0, -0.0, 1e-7, -65504.0, 65504.0, 6e-5, 3.0e-8, 1.0]  # f16 edges, subnormals
    for qt in (Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
        raw = quantize(x, qt)
        ref = dequantize(raw, qt).astype(np.float32)
        raw.tofile(d / f"{qt.name}.bin")
        ref.tofile(d / f"{qt.name}.f32")
    for qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        raw = kquant_blocks(qt, 4)
        ref = dequantize(raw, qt).astype(np.float32)
        raw.tofile(d / f"{qt.name}.bin")
        ref.tofile(d / f"{qt.name}.f32")


def write_meta_gguf():
    w = gguf.GGUFWriter(str(OUT / "meta.gguf"), "test")
    V = gguf.GGUFValueType
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 2.25)
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_key_value("t.arr_i16", [-1, 2, -3], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("t.arr_f32", [0.5, -0.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("t.nested", [[1, 2], [3]], V.ARRAY)
    w.add_tensor("a", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("b", np.arange(6, dtype=np.float16).reshape(1, 2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Byte-level BPE vocabulary shared by the tiny models: the 256 GPT-2 byte symbols,
# two merges and two control tokens.
def byte_symbols():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


TOKENS = byte_symbols() + ["Ġt", "he", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e"]
BOS, EOS = 258, 259
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Per family: hidden, heads, kv heads, head_dim, d_ff, layers.
FAMILIES = {
    "llama": dict(d=64, h=4, kv=2, hd=16, ff=128, L=2),
    "qwen2": dict(d=64, h=4, kv=2, hd=16, ff=128, L=2),
    "qwen3": dict(d=64, h=4, kv=2, hd=32, ff=128, L=2),
    "mistral": dict(d=64, h=4, kv=1, hd=16, ff=128, L=2),
}
# K-quant blocks span 256 columns, so the GGUF qwen3 model is wider.
GGUF_FAMILIES = dict(FAMILIES, qwen3=dict(d=256, h=4, kv=2, hd=32, ff=512, L=2))


def layer_weights(arch, c):
    """HF-named weights of one layer as float32, [out, in]."""
    d, h, kv, hd, ff = c["d"], c["h"], c["kv"], c["hd"], c["ff"]
    r = lambda *s: rng.normal(0, 0.05, size=s).astype(np.float32)
    w = {
        "input_layernorm.weight": 1 + r(d),
        "self_attn.q_proj.weight": r(h * hd, d),
        "self_attn.k_proj.weight": r(kv * hd, d),
        "self_attn.v_proj.weight": r(kv * hd, d),
        "self_attn.o_proj.weight": r(d, h * hd),
        "post_attention_layernorm.weight": 1 + r(d),
        "mlp.gate_proj.weight": r(ff, d),
        "mlp.up_proj.weight": r(ff, d),
        "mlp.down_proj.weight": r(d, ff),
    }
    if arch == "qwen2":
        for p in "qkv":
            w[f"self_attn.{p}_proj.bias"] = r(w[f"self_attn.{p}_proj.weight"].shape[0])
    if arch == "qwen3":
        w["self_attn.q_norm.weight"] = 1 + r(hd)
        w["self_attn.k_norm.weight"] = 1 + r(hd)
    return w


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}

# GGUF storage type per weight and family: every kept and converted type appears.
GGUF_TYPES = {
    "llama": {"attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.Q8_0, "attn_output": Q.F16,
              "ffn_gate": Q.Q4_1, "ffn_up": Q.Q4_0, "ffn_down": Q.Q8_0, "token_embd": Q.Q8_0},
    "qwen2": {"attn_q": Q.BF16, "attn_k": Q.BF16, "attn_v": Q.BF16, "attn_output": Q.BF16,
              "ffn_gate": Q.F16, "ffn_up": Q.F16, "ffn_down": Q.F16, "token_embd": Q.F16,
              "output": Q.Q8_0},
    "qwen3": {"attn_q": Q.Q8_0, "attn_k": Q.Q8_0, "attn_v": Q.Q8_0, "attn_output": Q.Q8_0,
              "ffn_gate": Q.Q4_K, "ffn_up": Q.Q5_K, "ffn_down": Q.Q6_K, "token_embd": Q.Q8_0},
}


def add_gguf_tensor(w, name, x, qt):
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        rows, cols = x.shape
        raw = kquant_blocks(qt, rows * cols // 256).reshape(rows, -1)
        w.add_tensor(name, raw, raw_dtype=qt)
    elif qt == Q.F32:
        w.add_tensor(name, x)
    else:
        w.add_tensor(name, quantize(x, qt), raw_dtype=qt)


def llama3_rope_factors(theta, dim, factor, low, high, orig):
    """rope_freqs as llama.cpp's convert_hf_to_gguf.py writes it for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            out.append(1)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_tiny_gguf(arch, llama3=False):
    c = GGUF_FAMILIES[arch]
    w = gguf.GGUFWriter(str(OUT / f"tiny-{'llama3' if llama3 else arch}.gguf"), arch)
    w.add_block_count(c["L"])
    w.add_context_length(512)
    w.add_embedding_length(c["d"])
    w.add_feed_forward_length(c["ff"])
    w.add_head_count(c["h"])
    w.add_head_count_kv(c["kv"])
    if arch == "qwen3":
        w.add_key_length(c["hd"])
        w.add_value_length(c["hd"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1000000.0)
    if arch == "llama" and not llama3:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(2.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(TOKENS)
    w.add_token_types([1] * 258 + [3, 3])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_chat_template(TEMPLATE)
    types = GGUF_TYPES[arch]
    vocab = len(TOKENS)
    r = lambda *s: rng.normal(0, 0.05, size=s).astype(np.float32)
    add_gguf_tensor(w, "token_embd.weight", r(vocab, c["d"]), types["token_embd"])
    for i in range(c["L"]):
        for hf, x in layer_weights(arch, c).items():
            name = GGUF_NAMES[hf]
            qt = types.get(name.split(".")[0], Q.F32) if x.ndim == 2 else Q.F32
            add_gguf_tensor(w, f"blk.{i}.{name}", x, qt)
    add_gguf_tensor(w, "output_norm.weight", 1 + r(c["d"]), Q.F32)
    if llama3:  # Llama 3.x: factor 32, low 1, high 4, original context 8192
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(10000.0, c["hd"], 32.0, 1.0, 4.0, 8192))
    if "output" in types:
        add_gguf_tensor(w, "output.weight", r(vocab, c["d"]), types["output"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tokenizer_json(d):
    vocab = {t: i for i, t in enumerate(TOKENS)}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": TOKENS[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i in (BOS, EOS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [m.split(" ") for m in MERGES]},
    }
    (d / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))


HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}


def write_hf(arch, sharded=False):
    c = FAMILIES[arch]
    d = OUT / f"hf-{arch}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    vocab = len(TOKENS)
    tied = arch in ("llama", "qwen3")
    cfg = {
        "architectures": [HF_CLASSES[arch]], "model_type": arch,
        "hidden_size": c["d"], "intermediate_size": c["ff"], "num_hidden_layers": c["L"],
        "num_attention_heads": c["h"], "num_key_value_heads": c["kv"],
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "vocab_size": vocab,
        "rope_theta": 500000.0 if arch == "llama" else 1000000.0,
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
        "bos_token_id": BOS, "eos_token_id": EOS,
    }
    if arch == "llama":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
    if arch == "qwen3":
        cfg["head_dim"] = c["hd"]
    if arch == "mistral":
        cfg["sliding_window"] = 256
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    gen = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05,
           "bos_token_id": BOS, "eos_token_id": [EOS, BOS] if arch == "qwen2" else EOS}
    (d / "generation_config.json").write_text(json.dumps(gen, indent=2))
    tc = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "add_bos_token": False}
    tc["chat_template"] = ([{"name": "tool_use", "template": "tools"},
                            {"name": "default", "template": TEMPLATE}]
                           if arch == "qwen2" else TEMPLATE)
    (d / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    write_tokenizer_json(d)

    r = lambda *s: rng.normal(0, 0.05, size=s).astype(np.float32)
    dt = {"llama": np.float16, "qwen2": np.float32, "qwen3": np.float16,
          "mistral": np.float32}[arch]
    tensors = {"model.embed_tokens.weight": r(vocab, c["d"]),
               "model.norm.weight": 1 + r(c["d"])}
    if not tied:
        tensors["lm_head.weight"] = r(vocab, c["d"])
    for i in range(c["L"]):
        for k, x in layer_weights(arch, c).items():
            tensors[f"model.layers.{i}.{k}"] = x
    tensors = {k: np.ascontiguousarray(v.astype(dt)) for k, v in tensors.items()}
    if not sharded:
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for j, part in enumerate(shards):
        fn = f"model-{j + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(d / fn), metadata={"format": "pt"})
        weight_map.update({k: fn for k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(v.nbytes for v in tensors.values())},
         "weight_map": weight_map}, indent=2))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write_dtype_vectors()
    write_meta_gguf()
    for arch in ("llama", "qwen2", "qwen3"):
        write_tiny_gguf(arch)
    for arch in ("llama", "qwen2", "qwen3", "mistral"):
        write_hf(arch, sharded=arch == "qwen3")
    write_tiny_gguf("llama", llama3=True)


if __name__ == "__main__":
    main()
