#!/usr/bin/env python3
"""Random-weight models of real shapes, made with transformers (no hub access: the
configs are written out here), saved as bf16 safetensors Hugging Face directories,
plus float32 reference logits of a fixed id sequence.

    make-shape-model.py OUT_DIR [--models qwen3-0.6b,qwen2.5-0.5b,llama-3.2-1b]
                                [--ids 1,2,3] [--device cuda]

For each model NAME writes OUT_DIR/NAME/ (config.json, model.safetensors) and
OUT_DIR/NAME.ref.f32: logits [n_ids][vocab] of the bf16 weights computed in float32
(the model upcast), OUT_DIR/NAME.ref-bf16.f32: the same computed by transformers in
bf16 (how far plain bf16 inference lands from float32), and OUT_DIR/NAME.ids.
Also: make-shape-model.py --gguf-ref FILE.gguf --ids ... --ref-out REF.f32 writes the
reference logits of a GGUF model (dequantized by transformers) on the CPU.
"""
import argparse
import os
import sys

import numpy as np
import torch
import transformers

SHAPES = {
    # Qwen/Qwen3-0.6B config.json
    "qwen3-0.6b": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=1024,
        intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
        bos_token_id=151643, eos_token_id=151645),
    # Qwen/Qwen2.5-0.5B config.json
    "qwen2.5-0.5b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896,
        intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        hidden_act="silu", use_sliding_window=False,
        bos_token_id=151643, eos_token_id=151643),
    # meta-llama/Llama-3.2-1B config.json
    "llama-3.2-1b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=8192),
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, hidden_act="silu",
        bos_token_id=128000, eos_token_id=128001),
}

DEFAULT_IDS = "9,151,2048,77,31337,5,1000,64,4242,12,888,17,30000,3,250,99"


def make(name, out, ids, device):
    spec = dict(SHAPES[name])
    model_type = spec.pop("model_type")
    # Wider than the default 0.02 so that logits spread and comparisons bite.
    cfg = transformers.AutoConfig.for_model(model_type, initializer_range=0.05, **spec)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    path = os.path.join(out, name)
    model.save_pretrained(path, safe_serialization=True)
    model = model.to(device=device).eval()
    with torch.no_grad():  # transformers' own bf16 inference: the bf16 noise floor
        bf = model(torch.tensor([ids], device=device)).logits[0].float().cpu().numpy()
        model = model.float()
        logits = model(torch.tensor([ids], device=device)).logits[0].float().cpu().numpy()
    logits.astype("<f4").tofile(os.path.join(out, name + ".ref.f32"))
    bf.astype("<f4").tofile(os.path.join(out, name + ".ref-bf16.f32"))
    with open(os.path.join(out, name + ".ids"), "w") as f:
        f.write(",".join(map(str, ids)))
    print(f"{name}: {path} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params), "
          f"reference logits {logits.shape}", flush=True)


def gguf_ref(path, ids, out):
    d, f = os.path.split(os.path.abspath(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f,
                                                              dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    logits.astype("<f4").tofile(out)
    print(f"{path}: reference logits {logits.shape} -> {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--ids", default=DEFAULT_IDS)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--gguf-ref")
    ap.add_argument("--ref-out")
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",")]
    if a.gguf_ref:
        gguf_ref(a.gguf_ref, ids, a.ref_out)
        return 0
    if not a.out:
        ap.error("OUT_DIR missing")
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        if name not in SHAPES:
            sys.exit(f"make-shape-model: unknown model {name} (known: {', '.join(SHAPES)})")
        make(name, a.out, ids, a.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
