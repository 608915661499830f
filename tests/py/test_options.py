"""One option parser for every command (src/cli/opts.h): an unknown flag and a bad number
are usage errors (exit 2, one line "lpx CMD: ...", nothing run), and the shared spellings
(-c/--ctx-size/--max-model-len, -t/--threads, --temp/--temperature, -n/--max-tokens, the
engine policy flags) mean the same in every command that takes them."""
import os
import subprocess

import pytest


def lpx(lpx_bin, *args):
    return subprocess.run([lpx_bin, *map(str, args)], capture_output=True, text=True, timeout=60)


# command words, then a numeric option of it with a bad value
COMMANDS = [
    (["run", "-m", "x", "-p", "hi"], "-n", "0"),
    (["chat", "-m", "x"], "--top-k", "-1"),
    (["serve", "-m", "x"], "--port", "70000"),
    (["batch", "-i", "x", "-o", "y", "-m", "x"], "--retries", "1x"),
    (["bench", "-m", "x"], "-r", "0"),
    (["bench", "serve", "--url", "http://127.0.0.1:1"], "--num-prompts", "0"),
    (["doctor"], "--max-num-seqs", "0"),
    (["plan", "-m", "x"], "--memory", "nan"),
    (["monitor"], "--count", "0"),
    (["logits", "-m", "x", "--ids", "1"], "--greedy", "-1"),
    (["slice", "-m", "x", "-o", "y"], "--layers", "0"),
    (["quantize", "-m", "x", "-o", "y", "--type", "q8_0"], "-t", "0"),
    (["perplexity", "-m", "x", "-f", "y"], "--ctx", "3"),
]


@pytest.mark.parametrize("words,opt,value", COMMANDS, ids=lambda v: v if isinstance(v, str) else v[0])
def test_unknown_flag_and_bad_number(lpx_bin, words, opt, value):
    cmd = " ".join(w for w in words[:2] if not w.startswith("-"))
    r = lpx(lpx_bin, *words, "--bogus")
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr == f"lpx {cmd}: unknown option '--bogus' (see lpx {cmd} --help)\n"
    r = lpx(lpx_bin, *words, opt, value)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.startswith(f"lpx {cmd}: {opt}: expected ") and f"(got '{value}')" in r.stderr
    r = lpx(lpx_bin, *words, opt)
    assert (r.returncode, r.stderr) == (2, f"lpx {cmd}: {opt}: needs a value\n")


@pytest.mark.parametrize("words", [["inspect"], ["tokenize", "-m", "x", "hi"],
                                   ["template", "-m", "x", "--messages", "m"]])
def test_developer_tools_refuse_unknown_flags(lpx_bin, words):
    r = lpx(lpx_bin, *words, "--bogus")
    assert r.returncode == 2 and r.stderr.startswith(f"lpx {words[0]}: ") and "'--bogus'" in r.stderr


@pytest.mark.parametrize("words", [["run", "-m", "x", "-p", "hi"], ["chat", "-m", "x"],
                                   ["serve", "-m", "x"], ["batch", "-i", "x", "-o", "y", "-m", "x"]])
def test_context_size_spellings(lpx_bin, words):
    """-c, --ctx-size and --max-model-len are one option, with one range."""
    cmd = words[0]
    for opt in ("-c", "--ctx-size", "--max-model-len"):
        r = lpx(lpx_bin, *words, opt, "1")
        assert r.returncode == 2
        assert r.stderr == f"lpx {cmd}: {opt}: expected a whole number from 2 to 2147483647 (got '1')\n"
    for opt in ("-t", "--threads"):
        r = lpx(lpx_bin, *words, opt, "0")
        assert r.stderr == f"lpx {cmd}: {opt}: expected a whole number from 1 to 4096 (got '0')\n"


def test_plan_and_doctor_take_the_context_spellings(lpx_bin):
    for cmd in ("plan", "doctor"):
        for opt in ("-c", "--ctx-size", "--max-model-len"):
            r = lpx(lpx_bin, cmd, opt, "4k")
            assert r.returncode == 2 and r.stderr.startswith(f"lpx {cmd}: {opt}: expected "), r.stderr


@pytest.mark.parametrize("words", [["run", "-m", "x", "-p", "hi"], ["chat", "-m", "x"],
                                   ["batch", "-i", "x", "-o", "y", "-m", "x"]])
def test_sampling_spellings(lpx_bin, words):
    cmd = words[0]
    for opt in ("--temp", "--temperature"):
        r = lpx(lpx_bin, *words, opt, "-1")
        assert r.returncode == 2 and r.stderr.startswith(f"lpx {cmd}: {opt}: expected "), r.stderr
    for opt in ("-n", "--max-tokens"):
        r = lpx(lpx_bin, *words, opt, "0")
        assert r.returncode == 2 and r.stderr.startswith(f"lpx {cmd}: {opt}: expected "), r.stderr


@pytest.mark.parametrize("words", [["run", "-p", "hi"], ["chat"], ["serve"], ["batch", "-i", "x", "-o", "y"],
                                   ["bench"]])
def test_engine_policy_flags_are_taken(lpx_bin, words):
    """--no-step-ahead and --no-device-sampling are flags of every command that runs a
    model: taken, the command goes on to ask for the model."""
    r = lpx(lpx_bin, *words, "--no-step-ahead", "--no-device-sampling")
    assert r.returncode == 2 and "-m MODEL" in r.stderr and "unknown" not in r.stderr, r.stderr


def test_bench_depth_and_threads(lpx_bin):
    for opt in ("-d", "--depth"):
        r = lpx(lpx_bin, "bench", "-m", "x", opt, "0")
        assert r.stderr.startswith(f"lpx bench: {opt}: expected a comma-separated list of at "
                                   "most 8 whole numbers from 1 to 65536"), r.stderr
    r = lpx(lpx_bin, "bench", "-m", "x", "-c", "8")
    assert r.returncode == 2 and "unknown option '-c'" in r.stderr  # bench takes no context size
    for words in (["bench", "-m", "x"], ["logits", "-m", "x", "--ids", "1"]):
        r = lpx(lpx_bin, *words, "-t", "0")
        assert r.returncode == 2 and r.stderr.startswith(f"lpx {words[0]}: -t: expected "), r.stderr


def test_bench_serve_vllm_spellings(lpx_bin):
    for opt in ("--random-input-len", "--random-output-len"):
        r = lpx(lpx_bin, "bench", "serve", "--base-url", "http://127.0.0.1:1", opt, "0")
        assert r.returncode == 2 and r.stderr.startswith(f"lpx bench serve: {opt}: expected ")
    # --base-url is the URL: the run happens (and fails: nothing listens there)
    r = lpx(lpx_bin, "bench", "serve", "--base-url", "http://127.0.0.1:1", "--model", "m",
            "--num-prompts", "1", "--random-input-len", "4", "--random-output-len", "2",
            "--metrics-interval", "0")
    assert r.returncode == 1 and "no request succeeded" in r.stderr, r.stderr


def test_help_lists_user_commands_before_developer_tools(lpx_bin):
    out = lpx(lpx_bin, "--help").stdout
    names = [l.split()[0] for l in out.splitlines() if l.startswith("  ")]
    assert names == ["run", "chat", "serve", "batch", "bench", "doctor", "plan", "monitor",
                     "quantize", "perplexity", "inspect", "tokenize", "template", "logits", "slice"]
    assert out.index("developer tools:") > out.index("  monitor")


def test_developer_strings_reach_the_backend_only_when_set(lpx_bin, smollm2):
    """The developer strings are read by the CLI (src/cli/cli_dev_env.c) and passed when
    non-empty, for the device they belong to: LPX_CPU_TUNE to the CPU backend, which
    refuses an unknown key; LPX_CUDA_TUNE / LPX_CUDA_TRACE only to the CUDA backend."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("LPX_CUDA_T") and k != "LPX_CPU_TUNE"}
    cmds = [["run", "-m", smollm2, "-p", "hi", "-n", "1", "--device", "cpu"],
            ["bench", "-m", smollm2, "-p", "0", "-n", "1", "-b", "1", "-r", "1", "--device", "cpu"],
            ["logits", "-m", smollm2, "--ids", "1,2", "--device", "cpu"]]
    for words in cmds:
        r = subprocess.run([lpx_bin, *words], capture_output=True, text=True, timeout=300,
                           env={**base, "LPX_CPU_TUNE": "x"})
        assert r.returncode != 0 and "cpu tune: 'x'" in r.stderr, (words, r.stderr)
        r = subprocess.run([lpx_bin, *words], capture_output=True, text=True, timeout=300,
                           env={**base, "LPX_CPU_TUNE": "isa=c,act=f32", "LPX_CUDA_TUNE": "x",
                                "LPX_CUDA_TRACE": "x"})
        assert r.returncode == 0, (words, r.stderr)
