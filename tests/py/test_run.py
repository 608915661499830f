"""lpx run and lpx chat end to end on the real SmolLM2 (CPU): greedy tokens equal
transformers' (tests/fixtures/smollm2/greedy.json) up to a near-tie, stop strings
never leak, seeds reproduce, bad input gives clear errors. Generations are short:
the CPU backend decodes SmolLM2 at a few tokens/s on CI's two cores."""
import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests/fixtures/smollm2/greedy.json").read_text())
# A top-2 logit gap below this is a near-tie: float32 here vs float64 in the
# reference may pick either token.
NEAR_TIE = 0.05
N = 6


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                          **kw)


def run_json(lpx_bin, model, *args):
    r = run(lpx_bin, "run", "-m", model, "--device", "cpu", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_greedy_matches(got, prompt):
    want, gaps = prompt["greedy"], prompt["greedy_top2_gap"]
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            assert gaps[i] < NEAR_TIE, f"token {i}: {g} vs transformers {w}, gap {gaps[i]}"
            return


@pytest.mark.parametrize("idx", [i for i, p in enumerate(FIXTURE["prompts"])
                                 if p["kind"] == "text"])
def test_greedy_text_matches_transformers(lpx_bin, smollm2, idx):
    p = FIXTURE["prompts"][idx]
    out = run_json(lpx_bin, smollm2, "-p", p["text"], "-n", N, "--temp", 0, "--ignore-eos")
    assert out["prompt_tokens"] == len(p["ids"])
    assert out["output_tokens"] == N and len(out["token_ids"]) == N
    assert out["finish_reason"] == "length"
    assert_greedy_matches(out["token_ids"], p)


def test_greedy_chat_matches_transformers(lpx_bin, smollm2):
    p = next(p for p in FIXTURE["prompts"] if p["kind"] == "chat")
    out = run_json(lpx_bin, smollm2, "--chat", "-p", p["text"], "-n", N, "--temp", 0,
                   "--ignore-eos")
    assert out["prompt_tokens"] == len(p["ids"])
    assert_greedy_matches(out["token_ids"], p)


def test_streamed_text_equals_json_text(lpx_bin, smollm2):
    args = ["-p", "The capital of France is", "-n", N, "--temp", 0, "--ignore-eos"]
    out = run_json(lpx_bin, smollm2, *args)
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == out["text"] + "\n"
    for field in ("prompt", "TTFT", "tok/s", "peak RSS", "finish: length"):
        assert field in r.stderr


def test_stop_strings_never_leak(lpx_bin, smollm2):
    # Greedy output begins " Paris.\n\nThe answer is: ..."; "s.\n\nTh" spans tokens.
    base = ["-p", "The capital of France is", "-n", 12, "--temp", 0, "--ignore-eos"]
    for stop, text in (("answer", " Paris.\n\nThe "), ("s.\n\nTh", " Pari")):
        out = run_json(lpx_bin, smollm2, *base, "--stop", stop, "--stop", "never seen")
        assert out["finish_reason"] == "stop"
        assert out["text"] == text
        r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", *base, "--stop", stop)
        assert r.returncode == 0 and stop not in r.stdout and r.stdout == text + "\n"


def test_eos_stops_and_is_not_printed(lpx_bin, smollm2):
    q = "Reply with one word: yes or no. Is water wet?"  # greedy: "No." then <|im_end|>
    out = run_json(lpx_bin, smollm2, "--chat", "-p", q, "-n", 16, "--temp", 0)
    assert out["finish_reason"] == "stop"
    assert out["output_tokens"] < 16
    assert out["text"].strip() and "<|im_end|>" not in out["text"]
    # Without EOS the same run goes on to the limit.
    out2 = run_json(lpx_bin, smollm2, "--chat", "-p", q, "-n", out["output_tokens"] + 1, "--temp",
                    0, "--ignore-eos")
    assert out2["finish_reason"] == "length"
    assert out2["token_ids"][:out["output_tokens"]] == out["token_ids"]


def test_seed_reproduces(lpx_bin, smollm2):
    args = ["-p", "Once upon a time", "-n", N, "--temp", 1.0, "--top-p", 0.95, "--ignore-eos"]
    a = run_json(lpx_bin, smollm2, *args, "--seed", 5)
    b = run_json(lpx_bin, smollm2, *args, "--seed", 5)
    c = run_json(lpx_bin, smollm2, *args, "--seed", 6)
    assert a["token_ids"] == b["token_ids"] and a["text"] == b["text"]
    assert a["token_ids"] != c["token_ids"]


def test_step_ahead_gives_the_same_output(lpx_bin, smollm2):
    """Decode one step ahead (the default; --no-step-ahead turns it off): the same
    sampled tokens and text, a stop string met while the next token is in flight."""
    args = ["-p", "Once upon a time", "-n", 12, "--temp", 0.8, "--top-k", 40, "--seed", 3,
            "--ignore-eos"]
    off = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "--json", "--no-step-ahead", *args)
    assert off.returncode == 0, off.stderr
    off = json.loads(off.stdout)
    on = run_json(lpx_bin, smollm2, *args)
    assert on["token_ids"] == off["token_ids"] and on["text"] == off["text"]
    assert off["steps_ahead"] == 0 and on["steps_ahead"] == on["steps"] - 1
    stop = off["text"][len(off["text"]) // 2:][:4]
    on = run_json(lpx_bin, smollm2, *args, "--stop", stop)
    assert on["finish_reason"] == "stop" and stop not in on["text"]
    assert off["text"].startswith(on["text"]) and on["steps_ahead"] > 0


def test_logprobs(lpx_bin, smollm2):
    out = run_json(lpx_bin, smollm2, "-p", "The capital of France is", "-n", 2, "--temp", 0,
                   "--ignore-eos", "--logprobs", 3)
    assert len(out["logprobs"]) == 2
    for tok, lp in zip(out["token_ids"], out["logprobs"]):
        top = lp["top"]
        assert lp["id"] == tok == top[0]["id"]  # greedy picks the most likely
        assert len(top) == 3 and top[0]["logprob"] >= top[1]["logprob"] >= top[2]["logprob"]
        assert lp["logprob"] <= 0


@pytest.mark.parametrize("args,code,msg", [
    (["-p", ""], 2, "empty prompt"),
    (["-p", "hi", "-n", "0"], 2, "-n"),
    (["-p", "hi", "-n", "-5"], 2, "-n"),
    (["-p", "hi", "--temp", "-1"], 2, "--temp"),
    (["-p", "hi", "--top-p", "0"], 2, "--top-p"),
    (["-p", "hi", "--top-p", "1.5"], 2, "--top-p"),
    (["-p", "hi", "--min-p", "2"], 2, "--min-p"),
    (["-p", "hi", "--device", "tpu"], 2, "unknown device"),
    (["-p", "hi", "-n", "abc"], 2, "-n"),
    # every number is strict: trailing text, overflow and range all name the option
    (["-p", "hi", "-n", "5x"], 2, "-n: expected a positive number of tokens, or -1 (got '5x')"),
    (["-p", "hi", "--top-k", "99999999999"], 2, "--top-k: expected a whole number from 0"),
    (["-p", "hi", "--temp", "1e999"], 2, "--temp: expected a number >= 0 (got '1e999')"),
    (["-p", "hi", "--repeat-penalty", "0"], 2, "--repeat-penalty: expected a number > 0"),
    (["-p", "hi", "--top-p", "1e-50"], 2, "--top-p: expected a number above 0, up to 1"),
    (["-p", "hi", "--seed", "-1"], 2, "--seed: expected a whole number from 0"),
    (["-p", "hi", "-c", "0x10"], 2, "-c: expected"),
    (["-p", "hi", "--logprobs", "21"], 2, "--logprobs: expected a whole number from 0 to 20"),
    (["-p", "hi", "-f", "x.txt"], 2, "exactly one"),
    ([], 2, "exactly one"),
])
def test_bad_arguments(lpx_bin, smollm2, args, code, msg):
    r = run(lpx_bin, "run", "-m", smollm2, *args)
    assert r.returncode == code
    assert r.stderr.startswith("lpx run: ") and msg in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("cmd,args,msg", [
    ("run", ["-p", "hi", "--bogus"], "unknown option '--bogus' (see lpx run --help)"),
    ("run", ["-m", "x.gguf", "-p"], "-p: needs a value"),
    ("run", ["-p", "hi", "--logprobs"], "--logprobs: needs a value"),
    ("run", ["-p", "hi", "-n"], "-n: needs a value"),
    ("chat", ["-m", "x.gguf", "--bogus"], "unknown option '--bogus' (see lpx chat --help)"),
    ("chat", ["-m", "x.gguf", "--system"], "--system: needs a value"),
])
def test_unknown_option_and_missing_value(lpx_bin, cmd, args, msg):
    """An unknown option and a known one without its value are told apart (cli_num.c's
    wording, as every command's), exit 2 before any model is opened."""
    r = run(lpx_bin, cmd, *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"lpx {cmd}: {msg}\n"


def test_missing_model_flag(lpx_bin):
    r = run(lpx_bin, "run", "-p", "hi")
    assert r.returncode == 2 and "-m MODEL" in r.stderr


def test_nonexistent_and_corrupt_models(lpx_bin, tmp_path):
    r = run(lpx_bin, "run", "-m", tmp_path / "nope.gguf", "-p", "hi")
    assert r.returncode == 1 and r.stderr.startswith("lpx run: ")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(200))
    r = run(lpx_bin, "run", "-m", bad, "-p", "hi")
    assert r.returncode == 1 and r.stderr.startswith("lpx run: ")


def test_prompt_over_context_is_refused(lpx_bin, smollm2, tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("one two three four five six seven eight nine ten " * 4)
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-f", f, "-c", 16)
    assert r.returncode == 1
    assert "too long" in r.stderr and "max_model_len is 16" in r.stderr
    assert r.stdout == ""


def test_chat_keeps_history_and_exits_on_eof(lpx_bin, smollm2):
    r = run(lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "-n", 4, "--temp", 0,
            input="My name is Ada.\nWhat is my name?\n")
    assert r.returncode == 0, r.stderr
    assert len([l for l in r.stdout.splitlines() if l.strip()]) >= 2


def test_chat_n_past_the_context_is_said_not_cut(lpx_bin, smollm2):
    # The second turn's history + -n 30 passes 64 tokens: refused in run's words, the
    # turn dropped; the chat goes on, and after /reset the first turn fits again.
    r = run(lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "-n", 30, "-c", 64, "--temp", 0,
            "--ignore-eos", "--verbose", input="Hi\nTell me more\n/reset\nHi\n")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    refused = [l for l in lines if l.startswith("lpx chat: -n 30: ")]
    assert len(refused) == 1, r.stderr
    assert refused[0].startswith("lpx chat: -n 30: This model's maximum context length is 64 "
                                 "tokens. However, you requested more than ")
    assert refused[0].endswith("Please reduce the length of the messages or completion. "
                               "(/reset starts over)")
    stats = [l for l in lines if l.startswith("[prompt ")]
    assert len(stats) == 2 and all("| output 30 tokens |" in l for l in stats), r.stderr
    assert lines.index(refused[0]) == lines.index(stats[0]) + 1


def test_chat_ctrl_c_stops_answer_then_exits(lpx_bin, smollm2):
    p = subprocess.Popen([lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "--temp", "0",
                          "--ignore-eos", "-n", "500"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"Tell me a long story.\n")
        p.stdin.flush()
        assert p.stdout.read(1)  # the answer has started streaming
        p.send_signal(signal.SIGINT)  # stops the answer, not the chat
        assert p.stderr.readline().startswith(b"lpx chat: ")  # the banner
        assert p.stderr.readline() == b"[stopped]\n"
        assert p.poll() is None
        time.sleep(0.2)  # let it reach the prompt
        p.send_signal(signal.SIGINT)  # at the prompt: exits
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0


def test_run_ctrl_c_exits_130_with_stats(lpx_bin, smollm2):
    p = subprocess.Popen([lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-p", "Once upon",
                          "--ignore-eos", "-n", "2000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.read(1)  # streaming
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert b"finish: cancelled" in err
    assert int(re.search(rb"output (\d+) tokens", err).group(1)) < 2000


def test_chat_banner_help_and_verbose_stats(lpx_bin, smollm2):
    r = run(lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "-n", 5, "--temp", 0, "-c", 512,
            "--verbose", "--ignore-eos", input="/help\n/nosuch\nHi\n")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == (f"lpx chat: {smollm2} on cpu, context 512 tokens. /help lists the "
                        "commands; Ctrl-D or /exit quits, Ctrl-C stops an answer.")
    for cmd in ("/help", "/reset", "/exit"):
        assert sum(l.startswith(cmd + " ") for l in lines) == 2  # /help, then /nosuch's list
    assert "unknown command; the commands:" in lines
    stats = [l for l in lines if l.startswith("[prompt ")]
    assert len(stats) == 1 and "| output 5 tokens |" in stats[0] and "finish: length" in stats[0]
    # without --verbose, no stats
    r = run(lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "-n", 2, input="Hi\n")
    assert r.returncode == 0 and "[prompt " not in r.stderr


def test_chat_on_a_terminal(lpx_bin, smollm2):
    """lpx chat on a pseudo-terminal that is its controlling terminal, so ^C is the
    terminal's: the answer stops right at the ^C the terminal echoes (no text after it),
    the up arrow recalls the last line (libedit builds), ^C at the prompt exits 0."""
    import fcntl
    import pty
    import select
    import termios
    libedit = b"libedit" in subprocess.run(["ldd", lpx_bin], capture_output=True).stdout
    master, slave = pty.openpty()

    def ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    p = subprocess.Popen([lpx_bin, "chat", "-m", smollm2, "--device", "cpu", "--ignore-eos",
                          "-n", "1000"], stdin=slave, stdout=slave, stderr=slave,
                         preexec_fn=ctty)
    os.close(slave)
    out = b""

    def read_until(want, timeout=60):
        nonlocal out
        end = time.monotonic() + timeout
        while want not in out and time.monotonic() < end:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    out += os.read(master, 4096)
                except OSError:
                    break
        assert want in out, out
    try:
        read_until(b"> ")
        os.write(master, b"Tell me a long story\r")
        n = len(out)
        end = time.monotonic() + 60
        while len(out) < n + 100 and time.monotonic() < end:  # some of the answer streamed
            if select.select([master], [], [], 0.5)[0]:
                out += os.read(master, 4096)
        os.write(master, b"\x03")
        read_until(b"[stopped]")
        tail = out[out.index(b"^C"):]
        assert tail.startswith(b"^C\r\n[stopped]"), tail
        read_until(b"[stopped]\r\n> ")
        if libedit:
            os.write(master, b"\x1b[A")  # up arrow: the line again
            read_until(b"> Tell me a long story", 10)
            os.write(master, b"\x15")  # ^U: clear it
        os.write(master, b"\x03")  # ^C at the prompt
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def test_max_tokens_past_the_context_is_refused_as_serve_does(lpx_bin, smollm2):
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-p", "Hi", "-n", 600, "-c", 512)
    assert r.returncode == 1 and r.stdout == ""
    n = int(re.search(r"\((\d+) in the prompt", r.stderr).group(1))
    assert r.stderr == (f"lpx run: -n 600: This model's maximum context length is 512 tokens. "
                        f"However, you requested {n + 600} tokens ({n} in the prompt, 600 in the "
                        "completion). Please reduce the length of the prompt or completion.\n")
    # -n -1 (and the default 256) mean up to the context
    for args in (["-n", -1], []):
        r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-p", "Hi", "-c", 16, *args,
                "--ignore-eos")
        assert r.returncode == 0 and f"output {16 - n} tokens" in r.stderr, r.stderr
    # exactly the context still runs
    r = run(lpx_bin, "run", "-m", smollm2, "--device", "cpu", "-p", "Hi", "-c", 16, "-n", 16 - n,
            "--ignore-eos")
    assert r.returncode == 0 and "finish: length" in r.stderr
