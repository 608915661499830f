"""lpx doctor and lpx monitor end to end. CI has no GPU: there doctor must say so in one
verdict (the GPU checks SKIP, exit status 4), and monitor must refuse with a clear message. On a machine
with a GPU the no-GPU assertions are skipped; the JSON ones hold everywhere."""
import ctypes
import json
import re
import subprocess

import pytest


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def have_nvml():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


no_gpu = pytest.mark.skipif(have_nvml(), reason="a GPU driver is present")


@no_gpu
def test_doctor_without_gpu_gives_one_verdict(lpx_bin):
    r = run(lpx_bin, "doctor")
    assert r.returncode == 4, r.stdout + r.stderr
    out = r.stdout
    assert "SKIP  gpu.count" in out and "no NVIDIA GPU found" in out
    assert "SKIP  gpu.topology       no GPU: no links between GPUs or NUMA placement" in out
    assert "libnvidia-ml.so.1" in out
    assert "OK    cpu.backend" in out and "CPU backend available" in out
    assert "FAIL  " not in out and "fix:" not in out  # one cause, no five FAILs
    assert re.search(r"^result: no GPU: CPU backend \(\d+ OK, 0 WARN, 0 FAIL, \d+ SKIP\), "
                     r"exit status 4$", out, re.M), out
    assert "lpx runs on its CPU backend" in out
    # a check that cannot tell is never OK
    for line in out.splitlines():
        if "cannot tell" in line:
            assert not line.lstrip().startswith("OK"), line


@no_gpu
def test_doctor_model_fits_in_ram_without_gpu(lpx_bin, smollm2, tmp_path):
    import gguf
    r = run(lpx_bin, "doctor", "-m", smollm2, "-c", "4096", "--max-num-seqs", "2", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == doc["exit_status"] == 4 and doc["no_gpu"] is True
    ram = next(c for c in doc["checks"] if c["id"] == "model.ram")
    # fp32 KV: 2 (K, V) x layers x kv heads x head dim x 4 bytes a token, as the gguf file says
    f = gguf.GGUFReader(smollm2)
    val = lambda k: int(f.fields[k].parts[f.fields[k].data[0]][0])
    heads, kv_heads = val("llama.attention.head_count"), val("llama.attention.head_count_kv")
    head_dim = val("llama.embedding_length") // heads
    kv = 2 * val("llama.block_count") * kv_heads * head_dim * 4 * 4096 * 2
    assert ram["level"] == "OK" and f"fp32 KV {kv / 2**30:.2f} GiB for 2 x 4096 tokens" in ram["found"]
    # a context too large for this machine's RAM: FAIL, exit 1
    r = run(lpx_bin, "doctor", "-m", smollm2, "-c", str(2**31 - 1), "--max-num-seqs", "64")
    assert r.returncode == 1 and re.search(r"FAIL  model.ram .*does not fit", r.stdout), r.stdout


def test_doctor_json_is_valid_and_matches_exit_status(lpx_bin):
    r = run(lpx_bin, "doctor", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == doc["exit_status"]
    assert doc["result"] in ("OK", "WARN", "FAIL")
    levels = [c["level"] for c in doc["checks"]]
    assert set(levels) <= {"OK", "WARN", "FAIL", "SKIP"}
    worst = "FAIL" if "FAIL" in levels else "WARN" if "WARN" in levels else "OK"
    assert doc["result"] == worst
    want = {"OK": 4 if doc["no_gpu"] else 0, "FAIL": 1, "WARN": 3}[worst]
    assert want == r.returncode
    assert doc["no_gpu"] == ("SKIP" in levels)
    ids = [c["id"] for c in doc["checks"]]
    assert len(ids) == len(set(ids))
    for c in doc["checks"]:
        assert c["found"]
        if c["level"] not in ("OK", "SKIP"):
            assert c["fix"], c
    assert doc["host"]["cpu_cores"] >= 1


@no_gpu
def test_doctor_json_without_gpu(lpx_bin):
    doc = json.loads(run(lpx_bin, "doctor", "--json").stdout)
    assert doc["gpus"] == [] and doc["driver"]["nvml"] is False
    assert doc["exit_status"] == 4 and doc["no_gpu"] is True
    count = next(c for c in doc["checks"] if c["id"] == "gpu.count")
    assert count["level"] == "SKIP" and "no NVIDIA GPU found" in count["found"]


def test_doctor_usage(lpx_bin):
    r = run(lpx_bin, "doctor", "--help")
    assert r.returncode == 0 and "exit status" in r.stdout
    r = run(lpx_bin, "doctor", "--bogus")
    assert r.returncode == 2 and r.stderr.startswith("lpx doctor: ")
    r = run(lpx_bin, "doctor", "--max-num-seqs", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


@no_gpu
def test_monitor_without_gpu(lpx_bin):
    r = run(lpx_bin, "monitor", "--count", "1")
    assert r.returncode == 1
    assert r.stderr.startswith("lpx monitor: no NVIDIA GPU to monitor")
    assert r.stderr.count("\n") == 1 and r.stdout == ""


def test_monitor_usage(lpx_bin):
    assert run(lpx_bin, "monitor", "--help").returncode == 0
    r = run(lpx_bin, "monitor", "--interval", "0")
    assert r.returncode == 2 and r.stderr.startswith("lpx monitor: ")


@pytest.mark.parametrize("args,msg", [
    (("doctor", "--bogus"), "unknown option '--bogus' (see lpx doctor --help)"),
    (("doctor", "-m"), "-m: needs a value"),
    (("doctor", "--max-num-seqs", "0"),
     "--max-num-seqs: expected a whole number from 1 to 2147483647 (got '0')"),
    (("doctor", "--max-model-len", "4k"),
     "--max-model-len: expected a whole number from 1 to 2147483647 (got '4k')"),
    (("doctor", "--max-num-seqs", "99999999999"),
     "--max-num-seqs: expected a whole number from 1 to 2147483647 (got '99999999999')"),
    (("doctor", "--max-model-len", "many"),
     "--max-model-len: expected a whole number from 1 to 2147483647 (got 'many')"),
    (("monitor", "--interval", "0"), "--interval: expected a number from 0.05 to 86400 (got '0')"),
    (("monitor", "--interval", "1s"), "--interval: expected a number from 0.05 to 86400 (got '1s')"),
    (("monitor", "--interval", "1e999"),
     "--interval: expected a number from 0.05 to 86400 (got '1e999')"),
    (("monitor", "--count", "1.5"),
     "--count: expected a whole number from 1 to 1000000000 (got '1.5')"),
    (("monitor", "--count", "x"), "--count: expected a whole number from 1 to 1000000000 (got 'x')"),
    (("monitor", "--util-high", "99999999999999999999"),
     "--util-high: expected a whole number from 0 to 100 (got '99999999999999999999')"),
    (("monitor", "--mem-high", "101"), "--mem-high: expected a whole number from 0 to 100 (got '101')"),
    (("monitor", "--json", "--log"), "--log: needs a value"),
    (("plan", "--bandwidth", "x"), "--bandwidth: expected a number from 0.001 to 1000 (got 'x')"),
    (("plan", "--bandwidth", "4.8TB"),
     "--bandwidth: expected a number from 0.001 to 1000 (got '4.8TB')"),
    (("plan", "--memory", "1e400"), "--memory: expected a number from 0.001 to 1e+06 (got '1e400')"),
    (("plan", "--gpu-memory-utilization", "0"),
     "--gpu-memory-utilization: expected a number from 0.01 to 1 (got '0')"),
    (("plan", "-m", "x.gguf", "--context", "-1"),
     "--context: expected a whole number from 0 to 2147483647 (got '-1')"),
])
def test_usage_errors(lpx_bin, args, msg):
    """doctor, monitor and plan share one option parser (src/cli/opts.c) and word a bad
    number as every other command does (src/cli/cli_num.c): garbage, trailing text,
    overflow and out-of-range values are one line and exit 2."""
    r = run(lpx_bin, *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "lpx %s: %s\n" % (args[0], msg)
    r = run(lpx_bin, args[0], "-h", *args[1:])
    assert r.returncode == 0 and r.stdout.startswith("usage: lpx " + args[0])


def help_entry(text, opt):
    """The lines of --help that describe `opt` (its line and the indented lines after it)."""
    lines, entry = text.splitlines(), None
    for line in lines:
        if entry is not None and line.startswith("    ") and not line.lstrip().startswith("-"):
            entry.append(line.strip())
        elif entry is not None:
            break
        elif line.startswith("  " + opt + " "):
            entry = [line.strip()]
    assert entry, opt
    return " ".join(entry)


@pytest.mark.parametrize("cmd,opts", [
    ("doctor", ["--max-model-len", "--max-num-seqs"]),
    ("monitor", ["--interval", "--count", "--util-high", "--mem-high", "--temp-limit",
                 "--growth-mib", "--growth-window"]),
    ("plan", ["--bandwidth", "--memory", "--max-model-len", "--context",
              "--gpu-memory-utilization"]),
])
def test_help_states_the_ranges(lpx_bin, cmd, opts):
    """--help gives each numeric option the range its parser enforces: the range in the
    error message for a bad value is the one the help line states."""
    text = run(lpx_bin, cmd, "--help").stdout
    for opt in opts:
        r = run(lpx_bin, cmd, opt, "x")
        assert r.returncode == 2, opt
        lo_hi = r.stderr.split(" from ", 1)[1].split(" (got ")[0]
        assert ", " + lo_hi + " " in help_entry(text, opt) + " ", (opt, lo_hi)
    if cmd == "plan":
        assert "up to 16 sizes of 1 to 1000000" in help_entry(text, "--batch")
