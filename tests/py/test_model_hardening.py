"""Model files that contradict themselves or would make requests fail (issue 27):
a sampling default the sampler refuses (top_p 7) is ignored with a warning that
`lpx inspect` states, and requests that leave it out succeed; a byte-typed token whose
text is not <0xHH> and a NUL in a chat template are load errors naming what is wrong."""
import json
import pathlib
import shutil
import subprocess

import gguf
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/model"


def rewrite_gguf(src, dst, set_kv=None, tokens=None, types=None):
    """A copy of the GGUF src with metadata set or replaced (set_kv: key -> value, the
    type from Python's: float F32, int I32, str STRING), token texts/types replaced."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    set_kv = dict(set_kv or {})
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in set_kv:
            continue
        v = f.contents()
        if k == "tokenizer.ggml.tokens" and tokens:
            v = [tokens.get(i, t) for i, t in enumerate(v)]
        if k == "tokenizer.ggml.token_type" and types:
            v = [types.get(i, t) for i, t in enumerate(v)]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, v, gguf.GGUFValueType.ARRAY, sub_type=f.types[1])
        else:
            w.add_key_value(k, v, f.types[0])
    for k, v in set_kv.items():
        t = (gguf.GGUFValueType.FLOAT32 if isinstance(v, float) else
             gguf.GGUFValueType.INT32 if isinstance(v, int) else gguf.GGUFValueType.STRING)
        w.add_key_value(k, v, t)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def inspect(lpx_bin, path, *extra):
    return subprocess.run([lpx_bin, "inspect", str(path), *extra], capture_output=True,
                          text=True, timeout=60)


def test_rewrite_is_faithful(lpx_bin, tmp_path):
    """The helper itself: an unchanged copy inspects like the original."""
    src = FIX / "tiny-llama.gguf"
    a = json.loads(inspect(lpx_bin, src, "--json").stdout)
    b = json.loads(inspect(lpx_bin, rewrite_gguf(src, tmp_path / "c.gguf"), "--json").stdout)
    a.pop("path", None), b.pop("path", None)
    assert a == b


def test_bad_gguf_sampling_default_is_ignored(lpx_bin, tmp_path):
    p = rewrite_gguf(FIX / "tiny-llama.gguf", tmp_path / "m.gguf",
                     {"general.sampling.top_p": 7.0, "general.sampling.temp": 0.5,
                      "general.sampling.penalty_repeat": -1.0})
    r = inspect(lpx_bin, p)
    assert r.returncode == 0, r.stderr
    assert "sampling defaults   temperature 0.5\n" in r.stdout
    assert ("warning             general.sampling.top_p is 7: expected a value in (0, 1]; "
            "ignored (requests that leave it out get lpx's default)\n") in r.stdout
    assert "general.sampling.penalty_repeat is -1: expected a finite value > 0" in r.stdout
    j = json.loads(inspect(lpx_bin, p, "--json").stdout)
    assert j["sampling_defaults"] == {"temperature": 0.5, "top_p": None, "top_k": None,
                                      "repetition_penalty": None}
    assert len(j["warnings"]) == 2 and "top_p is 7" in j["warnings"][0]
    # a request that does not set top_p runs (it failed with "top_p 7: expected ...")
    r = subprocess.run([lpx_bin, "run", "-m", str(p), "-p", "a", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_bad_hf_sampling_default_is_ignored(lpx_bin, tmp_path):
    d = tmp_path / "hf"
    shutil.copytree(FIX / "hf-llama", d)
    g = json.loads((d / "generation_config.json").read_text())
    g.update(top_p=7, top_k=2.5, temperature="hot")
    (d / "generation_config.json").write_text(json.dumps(g))
    j = json.loads(inspect(lpx_bin, d, "--json").stdout)
    assert j["sampling_defaults"] == {"temperature": None, "top_p": None, "top_k": None,
                                      "repetition_penalty": 1.05}
    assert j["warnings"] == [
        "generation_config.json: temperature is not a number: expected a finite value >= 0; "
        "ignored (requests that leave it out get lpx's default)",
        "generation_config.json: top_p is 7: expected a value in (0, 1]; ignored (requests "
        "that leave it out get lpx's default)",
        "generation_config.json: top_k is 2.5: expected a whole number >= 0; ignored "
        "(requests that leave it out get lpx's default)"]


def test_byte_token_with_other_text_is_refused(lpx_bin, tmp_path):
    p = rewrite_gguf(FIX / "tiny-llama.gguf", tmp_path / "m.gguf", tokens={7: "abc"},
                     types={7: 6})
    r = inspect(lpx_bin, p)
    assert r.returncode == 1
    assert r.stderr == (f"lpx inspect: {p}: tokenizer: GGUF tokenizer: token 7 has type BYTE (6) "
                        "but its text (3 bytes) is not <0xHH>\n")
    # a byte token whose text is <0xHH> loads
    p = rewrite_gguf(FIX / "tiny-llama.gguf", tmp_path / "ok.gguf", tokens={7: "<0x41>"},
                     types={7: 6})
    assert inspect(lpx_bin, p).returncode == 0


def test_nul_in_chat_template_is_a_load_error(lpx_bin, tmp_path):
    p = rewrite_gguf(FIX / "tiny-llama.gguf", tmp_path / "m.gguf",
                     {"tokenizer.chat_template": "{{ messages[0].content }}\0{{ secret }}"})
    r = inspect(lpx_bin, p)
    assert r.returncode == 1
    assert r.stderr == (f"lpx inspect: {p}: tokenizer.chat_template holds a NUL byte at offset "
                        "25 (of 38): it would cut the template\n")
    # tokenizer_config.json: json.dumps writes the NUL as \u0000, which cJSON cut at
    d = tmp_path / "hf-config"
    shutil.copytree(FIX / "hf-llama", d)
    tc = json.loads((d / "tokenizer_config.json").read_text())
    tc["chat_template"] = "{{ bos_token }}\0{{ x }}"
    tc["other"] = "a \0 elsewhere is not the template's"
    (d / "tokenizer_config.json").write_text(json.dumps(tc))
    r = inspect(lpx_bin, d)
    assert r.returncode == 1
    assert r.stderr == (f"lpx inspect: {d}: tokenizer_config.json: chat_template holds \\u0000 "
                        "(a NUL) at offset 15: it would cut the template\n")
    del tc["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(tc))
    assert inspect(lpx_bin, d).returncode == 0
    d = tmp_path / "hf"
    shutil.copytree(FIX / "hf-llama", d)
    (d / "chat_template.jinja").write_bytes(b"{{ bos_token }}\0{{ x }}")
    r = inspect(lpx_bin, d)
    assert r.returncode == 1
    assert r.stderr == (f"lpx inspect: {d}: chat_template.jinja: a NUL byte at offset 15 (of 23): "
                        "it would cut the template\n")


def test_model_truncated_while_in_use(lpx_bin, smollm2, tmp_path):
    """Weights are read through the file's mapping: a file cut in place (as `cp new.gguf
    model.gguf` does) raises SIGBUS. The CLI says which file and why, and exits 1, where
    the process died with a bare "Bus error" (-7)."""
    m = tmp_path / "m.gguf"
    shutil.copyfile(smollm2, m)
    p = subprocess.Popen([lpx_bin, "run", "-m", str(m), "-p", "Once upon a time", "-n", "-1",
                          "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.read(16)  # generating: the weights are in use
        with open(m, "r+b") as f:
            f.truncate(0)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 1, (p.returncode, err)
    assert err.decode().endswith(
        f"\nlpx: SIGBUS reading the model {m}: the file was truncated or rewritten in place "
        "while in use (replace a model file by writing a new one and renaming it over the "
        "old: docs/models.md); exiting\n")
