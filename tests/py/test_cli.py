import subprocess


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def test_version(lpx_bin):
    r = run(lpx_bin, "--version")
    assert r.returncode == 0 and r.stdout.startswith("lpx ")


def test_unknown_command_is_usage_error(lpx_bin):
    r = run(lpx_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_tokenize_decode_out_of_vocabulary_is_an_error(lpx_bin, smollm2):
    r = run(lpx_bin, "tokenize", "-m", smollm2, "--decode", "1 99999")
    assert r.returncode == 1 and r.stdout == ""
    assert "token id 99999 at 1 is out of the vocabulary (size 49152)" in r.stderr
    r = run(lpx_bin, "tokenize", "-m", smollm2, "--decode", "--stream", "49152")
    assert r.returncode == 1 and "out of the vocabulary" in r.stderr
    r = run(lpx_bin, "tokenize", "-m", smollm2, "--decode", "1 2")
    assert r.returncode == 0 and r.stdout == '"<|im_start|><|im_end|>"\n'


def test_chat_help_states_n_default(lpx_bin):
    r = run(lpx_bin, "chat", "--help")
    assert r.returncode == 0 and "chat -1" in r.stdout and "default 256;" not in r.stdout


def test_no_doubled_prefixes(lpx_bin, smollm2, tmp_path):
    # Every error path names each thing once: no "lpx serve: serve: ...", no
    # "/path: /path: ...".
    import re
    import socket
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"garbage")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = str(busy.getsockname()[1])
    cmds = [
        ["run", "-m", "/nonexistent", "-p", "hi"], ["run", "-m", str(bad), "-p", "hi"],
        ["chat", "-m", "/nonexistent"], ["serve", "-m", "/nonexistent", "--port", "0"],
        ["serve", "-m", smollm2, "--port", port],
        ["serve", "-m", smollm2, "--host", "nosuchhost.invalid", "--port", "0"],
        ["bench", "-m", "/nonexistent"], ["tokenize", "-m", "/nonexistent", "hi"],
        ["tokenize", "--tokenizer", "/nonexistent", "hi"], ["tokenize", "--tokenizer", str(bad), "x"],
        ["inspect", "/nonexistent"], ["inspect", str(bad)], ["doctor", "-m", "/nonexistent"],
        ["bench", "serve", "--url", "http://127.0.0.1:1", "--num-prompts", "1"],
        ["logits", "-m", "/nonexistent", "--ids", "1"], ["logits", "-m", str(bad), "--ids", "1"],
        ["plan", "-m", "/nonexistent", "--gpu", "h200"],
        ["slice", "-m", "/nonexistent", "--layers", "1", "-o", str(tmp_path / "x.gguf")],
    ]
    try:
        for c in cmds:
            r = subprocess.run([lpx_bin, *c], capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            assert r.returncode != 0, c
            assert not re.search(r"(\S+): \1[: ]", r.stderr), (c, r.stderr)
            assert r.stderr.startswith("lpx "), (c, r.stderr)
    finally:
        busy.close()
