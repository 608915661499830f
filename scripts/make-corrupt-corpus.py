#!/usr/bin/env python3
"""Writes tests/fixtures/model/corrupt/: broken GGUF files and Hugging Face
directories with broken safetensors/JSON, one per way a model file can be
wrong, and cases.json mapping each to a keyword that `lpx inspect`'s one-line
error must contain. Files are written byte by byte (not with gguf-py) so that
every field can be made wrong. Deterministic; rerun and commit the output."""
import json
import pathlib
import shutil
import struct

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests/fixtures/model/corrupt"
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GG_F32, GG_F16, GG_Q5_0, GG_Q8_0 = 0, 1, 6, 8
cases = []


# ---- GGUF -------------------------------------------------------------------

def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    fmt = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
           U64: "Q", I64: "q", F64: "d"}
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack("<" + fmt[t], v)


def gguf(kvs, tensors, version=3, n_kv=None, n_tensors=None, align=32, raw_kv=b""):
    """kvs: [(key, type, value)]; tensors: [(name, shape outermost-first, ggml type,
    data bytes, offset or None)]. Returns the file bytes."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) if n_kv is None else n_kv)
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    out += raw_kv
    data, offsets = b"", []
    for name, shape, ty, blob, off in tensors:
        pos = len(data)
        data += blob + b"\0" * ((-len(blob)) % align)
        offsets.append(pos if off is None else off)
    for (name, shape, ty, blob, off), o in zip(tensors, offsets):
        out += gstr(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", ty, o)
    out += b"\0" * ((-len(out)) % align)
    return out + data


def f32(*shape):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) % 7 / 7).tobytes()


def f16(*shape):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) % 7 / 7).astype(np.float16).tobytes()


ARCH = [("general.architecture", STR, "llama")]
D, H, KV, FF, V = 32, 2, 1, 32, 8
HP = {"llama.block_count": 1, "llama.embedding_length": D, "llama.feed_forward_length": FF,
      "llama.attention.head_count": H, "llama.attention.head_count_kv": KV,
      "llama.context_length": 64}


def model_kvs(**over):
    kv = dict(HP)
    kv.update(over)
    return ARCH + [(k, U32, v) for k, v in kv.items() if v is not None] + \
        [("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)]


def model_tensors(layers=1, skip=(), shapes=None, types=None):
    hd = D // H
    spec = {"token_embd.weight": (V, D), "output_norm.weight": (D,)}
    for i in range(layers):
        spec.update({f"blk.{i}.attn_norm.weight": (D,), f"blk.{i}.attn_q.weight": (H * hd, D),
                     f"blk.{i}.attn_k.weight": (KV * hd, D), f"blk.{i}.attn_v.weight": (KV * hd, D),
                     f"blk.{i}.attn_output.weight": (D, H * hd), f"blk.{i}.ffn_norm.weight": (D,),
                     f"blk.{i}.ffn_gate.weight": (FF, D), f"blk.{i}.ffn_up.weight": (FF, D),
                     f"blk.{i}.ffn_down.weight": (D, FF)})
    spec.update(shapes or {})
    out = []
    for name, shape in spec.items():
        if name in skip:
            continue
        ty = (types or {}).get(name, GG_F16 if len(shape) == 2 else GG_F32)
        if ty == GG_Q5_0:
            blob = b"\0" * (int(np.prod(shape)) // 32 * 22)
        else:
            blob = f16(*shape) if ty == GG_F16 else f32(*shape)
        out.append((name, shape, ty, blob, None))
    return out


def case(name, data, keyword):
    (OUT / name).write_bytes(data)
    cases.append({"path": name, "keyword": keyword})


def gguf_cases():
    small = [("a.weight", (2, 32), GG_F32, f32(2, 32), None)]
    valid_small = gguf(ARCH, small)
    case("truncated-header.gguf", valid_small[:20], "truncated")
    case("empty.gguf", b"", "empty")
    case("bad-magic.gguf", b"GGUX" + valid_small[4:], "magic")
    case("bad-version.gguf", gguf(ARCH, small, version=1), "version")
    case("kv-count-minus1.gguf", gguf(ARCH, small, n_kv=2**64 - 1), "count")
    case("tensor-count-huge.gguf", gguf(ARCH, small, n_tensors=2**62), "count")
    case("key-length-huge.gguf", gguf([], small, n_kv=1, raw_kv=struct.pack("<Q", 2**63)),
         "string length")
    case("string-length-huge.gguf", gguf(ARCH, small, n_kv=2, raw_kv=gstr("x") +
         struct.pack("<IQ", STR, 2**62)), "string length")
    case("array-count-minus1.gguf", gguf(ARCH, small, n_kv=2, raw_kv=gstr("x") +
         struct.pack("<IIQ", ARR, U32, 2**64 - 1)), "array count")
    nested = (ARR, [(ARR, [(U8, [1])])])
    deep = nested
    for _ in range(8):
        deep = (ARR, [deep])
    case("arrays-too-deep.gguf", gguf(ARCH + [("x", ARR, deep)], small), "nested")
    case("unknown-value-type.gguf", gguf(ARCH, small, n_kv=2, raw_kv=gstr("x") +
         struct.pack("<I", 99) + b"\0" * 8), "unknown value type")
    case("bool-not-0-or-1.gguf", gguf(ARCH + [("x", BOOL, 2)], small), "bool")
    case("duplicate-key.gguf", gguf(ARCH + [("x", U32, 1), ("x", U32, 2)], small), "duplicate key")
    case("too-many-dims.gguf", gguf(ARCH, [("a", (1, 1, 1, 2, 32), GG_F32, f32(64), None)]), "dims")
    case("zero-dim.gguf", gguf(ARCH, [("a", (0, 32), GG_F32, b"", None)]), "dimension")
    case("dims-product-overflow.gguf",
         gguf(ARCH, [("a", (2**32, 2**32, 32), GG_F32, f32(64), None)]), "overflows")
    case("byte-size-overflow.gguf", gguf(ARCH, [("a", (2**31, 2**31), GG_F32, f32(64), None)]),
         "overflows")
    case("offset-past-end.gguf", gguf(ARCH, [("a", (2, 32), GG_F32, f32(2, 32), 2**40)]),
         "past the end")
    case("offset-misaligned.gguf", gguf(ARCH, [("a", (2, 32), GG_F32, f32(2, 32), 4)]),
         "misaligned")
    case("data-truncated.gguf", valid_small[:-100], "past the end")
    case("bad-alignment.gguf", gguf(ARCH + [("general.alignment", U32, 3)], small),
         "power of two")
    case("duplicate-tensor.gguf", gguf(ARCH, small + small), "duplicate tensor")
    case("overlapping-tensors.gguf",
         gguf(ARCH, [("a", (2, 32), GG_F32, f32(2, 32), 0), ("b", (2, 32), GG_F32, f32(2, 32), 128)]),
         "overlap")
    case("unknown-tensor-type.gguf", gguf(ARCH, [("a", (2, 32), 99, f32(2, 32), None)]),
         "unknown type")
    case("block-not-whole.gguf", gguf(ARCH, [("a", (2, 16), GG_Q8_0, b"\0" * 64, None)]),
         "multiple")
    # Well-formed files whose model is wrong.
    case("no-architecture.gguf", gguf([], small), "general.architecture")
    case("unsupported-arch.gguf", gguf([("general.architecture", STR, "gpt2")], small),
         "not supported")
    case("missing-hparam.gguf", gguf(model_kvs(**{"llama.embedding_length": None}),
                                     model_tensors()), "embedding_length")
    case("hparam-wrong-type.gguf", gguf(ARCH + [("llama.block_count", STR, "one")] +
                                        model_kvs(**{"llama.block_count": None})[1:],
                                        model_tensors()), "block_count")
    case("missing-tensor.gguf", gguf(model_kvs(), model_tensors(skip={"blk.0.ffn_up.weight"})),
         "missing tensor blk.0.ffn_up.weight")
    case("wrong-shape.gguf", gguf(model_kvs(), model_tensors(
        shapes={"blk.0.attn_k.weight": (32, 32)})), "expected shape [16, 32], found [32, 32]")
    case("kv-heads-not-dividing.gguf",
         gguf(model_kvs(**{"llama.attention.head_count_kv": 3}), model_tensors()),
         "does not divide")
    case("layer-count-mismatch.gguf", gguf(model_kvs(), model_tensors(layers=2)), "layer count")
    case("vocab-mismatch.gguf", gguf(model_kvs(**{"llama.vocab_size": 9}), model_tensors()),
         "vocab_size")
    bogus = model_tensors() + [("rope_freqs.weight", (8,), GG_F32,
                                np.arange(1, 9, dtype=np.float32).tobytes(), None)]
    case("rope-freqs-not-llama3.gguf", gguf(model_kvs(), bogus), "rope_freqs")
    toks = [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "default"),
            ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b", "ab"] + [str(i) for i in range(V - 2)])),
            ("tokenizer.ggml.merges", ARR, (STR, ["a b"]))]
    case("tokenizer-larger-than-vocab.gguf", gguf(model_kvs() + toks, model_tensors()),
         "vocab mismatch")
    case("unsupported-tensor-type.gguf", gguf(model_kvs(), model_tensors(
        types={"blk.0.ffn_up.weight": GG_Q5_0})), "Q5_0")


# ---- safetensors / Hugging Face directories --------------------------------

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": D, "intermediate_size": FF,
          "num_hidden_layers": 1, "num_attention_heads": H, "num_key_value_heads": KV,
          "max_position_embeddings": 64, "vocab_size": V, "rms_norm_eps": 1e-5,
          "tie_word_embeddings": True}


def st_bytes(header, data=b"", hlen=None):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def st_model(skip=(), shapes=None):
    """A valid 1-layer model as safetensors (F16), with tensors left out or reshaped."""
    hd = D // H
    spec = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,),
            "model.layers.0.input_layernorm.weight": (D,),
            "model.layers.0.self_attn.q_proj.weight": (H * hd, D),
            "model.layers.0.self_attn.k_proj.weight": (KV * hd, D),
            "model.layers.0.self_attn.v_proj.weight": (KV * hd, D),
            "model.layers.0.self_attn.o_proj.weight": (D, H * hd),
            "model.layers.0.post_attention_layernorm.weight": (D,),
            "model.layers.0.mlp.gate_proj.weight": (FF, D),
            "model.layers.0.mlp.up_proj.weight": (FF, D),
            "model.layers.0.mlp.down_proj.weight": (D, FF)}
    spec.update(shapes or {})
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, shape in spec.items():
        if name in skip:
            continue
        blob = f16(*shape)
        header[name] = {"dtype": "F16", "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    return st_bytes(header, data)


def hf_case(name, keyword, st=None, config=None, files=None):
    d = OUT / name
    d.mkdir()
    cfg = config if config is not None else CONFIG
    (d / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    if st is not None:
        (d / "model.safetensors").write_bytes(st)
    for fn, content in (files or {}).items():
        (d / fn).write_bytes(content if isinstance(content, bytes) else content.encode())
    cases.append({"path": name, "keyword": keyword})


def one(dtype="F32", shape=(2, 32), offsets=(0, 256)):
    return {"a": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


def st_cases():
    data = f32(2, 32) * 2
    hf_case("st-truncated", "truncated", st=b"\x10\0\0\0")
    hf_case("st-header-larger-than-file", "larger than the file", st=st_bytes(one(), data, 10**6))
    hf_case("st-header-length-huge", "exceeds the limit", st=st_bytes(one(), data, 2**63))
    hf_case("st-invalid-json", "invalid JSON", st=st_bytes(b'{"a": {"dtype": ', data))
    hf_case("st-offsets-past-end", "past the end", st=st_bytes(one(offsets=(512, 768)), data))
    hf_case("st-offsets-inverted", "inverted", st=st_bytes(one(offsets=(256, 0)), data))
    two = dict(one(offsets=(0, 256)))
    two["b"] = {"dtype": "F32", "shape": [2, 32], "data_offsets": [128, 384]}
    hf_case("st-overlapping", "overlap", st=st_bytes(two, data))
    hf_case("st-size-mismatch", "size mismatch", st=st_bytes(one(offsets=(0, 200)), data))
    hf_case("st-too-many-dims", "dims", st=st_bytes(one(shape=(1, 1, 1, 2, 32)), data))
    hf_case("st-dims-overflow", "overflows", st=st_bytes(one(shape=(2**40, 2**40)), data))
    hf_case("st-unknown-dtype", "unknown dtype", st=st_bytes(one(dtype="Q9"), data))
    hf_case("st-unsupported-dtype", "unsupported dtype", st=st_bytes(one(dtype="I64"), data))
    dup = b'{"a": {"dtype": "F32", "shape": [2, 32], "data_offsets": [0, 256]}, ' \
          b'"a": {"dtype": "F32", "shape": [2, 32], "data_offsets": [256, 512]}}'
    hf_case("st-duplicate-name", "duplicate", st=st_bytes(dup, data * 2))
    hf_case("st-negative-offset", "non-negative integer", st=st_bytes(one(offsets=(-256, 0)), data))
    hf_case("st-missing-tensor", "missing tensor model.layers.0.mlp.up_proj.weight",
            st=st_model(skip={"model.layers.0.mlp.up_proj.weight"}))
    hf_case("st-wrong-shape", "expected shape [32, 32], found [32, 16]",
            st=st_model(shapes={"model.layers.0.mlp.down_proj.weight": (D, 16)}))
    hf_case("st-no-weights", "model.safetensors")
    hf_case("config-invalid-json", "invalid JSON", st=st_model(), config='{"hidden_size": ')
    hf_case("config-missing-field", "hidden_size", st=st_model(),
            config={k: v for k, v in CONFIG.items() if k != "hidden_size"})
    hf_case("config-unsupported-arch", "not supported", st=st_model(),
            config=dict(CONFIG, architectures=["GPT2LMHeadModel"]))
    hf_case("config-kv-heads-not-dividing", "does not divide", st=st_model(),
            config=dict(CONFIG, num_key_value_heads=3, head_dim=16))
    hf_case("config-rope-yarn", "rope_scaling", st=st_model(),
            config=dict(CONFIG, rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    hf_case("config-rope-factor-zero", "must be positive", st=st_model(),
            config=dict(CONFIG, rope_scaling={"rope_type": "linear", "factor": 0.0}))
    hf_case("tokenizer-invalid-json", "tokenizer.json", st=st_model(),
            files={"tokenizer.json": '{"model": '})
    hf_case("config-vocab-mismatch", "vocab_size", st=st_model(), config=dict(CONFIG, vocab_size=9))
    index = {"weight_map": {"model.norm.weight": "model-1.safetensors",
                            "lm_head.weight": "model-1.safetensors"}}
    hf_case("index-tensor-not-in-shard", "lacks it",
            files={"model.safetensors.index.json": json.dumps(index),
                   "model-1.safetensors": st_model()})
    hf_case("index-bad-shard-name", "bad shard name",
            files={"model.safetensors.index.json":
                   json.dumps({"weight_map": {"a": "../model.safetensors"}})})


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    gguf_cases()
    st_cases()
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
