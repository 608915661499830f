"""lpx batch --data-parallel-size: N CPU engines of one model in one process (real
SmolLM2). Each line gets exactly the result it gets from one engine (greedy and
seeded), every engine takes lines, summary.json and run.log count per engine and in
total, a job killed mid-way and resumed on two engines still matches one engine's, and
the flags are checked as lpx serve checks them."""
import json
import signal
import subprocess
import time

import pytest
from test_batch import batch, job_rows, outputs, read_jsonl, whole_lines, write_jsonl

N = 24


def seeded_rows(n):
    """Sampled lines: the seed derived from the id, or given, and chat lines among them."""
    rows = job_rows(n, chat_every=4)
    for i, r in enumerate(rows):
        body = r.get("body", r)
        body["temperature"] = 0.9
        body["max_tokens"] = 5
        if i % 3 == 0:
            body["seed"] = 1000 + i
    return rows


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch_dp")
    write_jsonl(d / "greedy.jsonl", job_rows(N, chat_every=3))
    write_jsonl(d / "seeded.jsonl", seeded_rows(N))
    return d


def run(lpx_bin, smollm2, inp, out, *extra):
    r = batch(lpx_bin, "-i", str(inp), "-o", str(out), "-m", smollm2, "--device", "cpu",
              "-t", "2", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("kind", ["greedy", "seeded"])
def test_two_engines_same_results_as_one(inputs, lpx_bin, smollm2, kind):
    inp = inputs / f"{kind}.jsonl"
    one = run(lpx_bin, smollm2, inp, inputs / f"{kind}-1")
    two = run(lpx_bin, smollm2, inp, inputs / f"{kind}-2", "-dp", "2")
    ref, got = outputs(inputs / f"{kind}-1"), outputs(inputs / f"{kind}-2")
    assert len(ref) == N and sorted(got) == sorted(ref)
    diff = [i for i in ref if got[i] != ref[i]]
    assert not diff, f"{len(diff)} results differ, e.g. {diff[0]}: {got[diff[0]]} != {ref[diff[0]]}"
    # one engine: one entry; two: both took lines, and they add up to the totals
    assert [e["engine"] for e in one["engines"]] == [0]
    assert one["engines"][0]["run_results"] == N
    eng = two["engines"]
    assert [(e["engine"], e["device"]) for e in eng] == [(0, "cpu"), (1, "cpu")]
    assert all(e["run_results"] > 0 for e in eng), eng
    assert sum(e["run_results"] for e in eng) == two["succeeded"] == N
    assert sum(e["run_completion_tokens"] for e in eng) == two["run_completion_tokens"]
    assert two["completion_tokens"] == one["completion_tokens"]
    assert two["prefix_cache"]["queries"] == one["prefix_cache"]["queries"]
    log = (inputs / f"{kind}-2" / "run.log").read_text()
    assert "engine 0: cpu" in log and "engine 1: cpu" in log
    for i, e in enumerate(eng):
        assert (f"engine {i}: {e['run_results']} results, {e['run_completion_tokens']} "
                "completion tokens") in log


def test_device_list_sets_the_engines(inputs, lpx_bin, smollm2):
    out = inputs / "list"
    s = run(lpx_bin, smollm2, inputs / "greedy.jsonl", out)
    assert len(s["engines"]) == 1
    out2 = inputs / "list2"
    r = batch(lpx_bin, "-i", str(inputs / "greedy.jsonl"), "-o", str(out2), "-m", smollm2,
              "--device", "cpu,cpu", "-t", "2")
    assert r.returncode == 0, r.stderr
    s2 = json.loads((out2 / "summary.json").read_text())
    assert len(s2["engines"]) == 2
    assert outputs(out2) == outputs(out)


def test_kill_and_resume_on_two_engines(tmp_path, lpx_bin, smollm2):
    """SIGKILL a two-engine job mid-way, resume it on two engines: every id once, the
    results written before the kill untouched, and each one's output exactly a
    one-engine run's."""
    n = 160
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(n, chat_every=20))
    args = ["-i", str(inp), "-m", smollm2, "--device", "cpu", "-t", "2", "--concurrency", "16"]
    r = batch(lpx_bin, *args, "-o", str(tmp_path / "ref"))
    assert r.returncode == 0, r.stderr
    ref = outputs(tmp_path / "ref")
    out = tmp_path / "killed"
    res = out / "results.jsonl"
    p = subprocess.Popen([lpx_bin, "batch", *args, "-dp", "2", "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None and len(whole_lines(res)) < 50:
        time.sleep(0.01)
    assert p.poll() is None, "the job ended before the kill"
    p.send_signal(signal.SIGKILL)
    p.wait()
    before = whole_lines(res)
    assert 50 <= len(before) < n
    r = batch(lpx_bin, *args, "-dp", "2", "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    assert whole_lines(res)[:len(before)] == before
    got = outputs(out)  # fails on a duplicate id
    assert sorted(got) == sorted(ref)
    diff = [i for i in ref if got[i] != ref[i]]
    assert not diff, f"{len(diff)} differ, e.g. {diff[0]}: {got[diff[0]]} != {ref[diff[0]]}"
    s = json.loads((out / "summary.json").read_text())
    assert (s["succeeded"], s["failed"], s["remaining"]) == (n, 0, 0)
    left = n - len(before)
    assert sum(e["run_results"] for e in s["engines"]) == left
    assert all(e["run_results"] > 0 for e in s["engines"]), s["engines"]


def test_timeout_cancels_on_the_engine_that_runs_it(tmp_path, lpx_bin, smollm2):
    """--timeout cancels each attempt on its own engine: both slow lines (one on each engine)
    time out, are retried and recorded as failures; the quick line succeeds."""
    inp = tmp_path / "in.jsonl"
    slow = {"prompt": "Tell me a story.", "max_tokens": 2000, "ignore_eos": True}
    write_jsonl(inp, [{"id": "slow0", **slow}, {"id": "slow1", **slow},
                      {"id": "quick", "prompt": "Hi", "max_tokens": 1}])
    out = tmp_path / "out"
    r = batch(lpx_bin, "-i", str(inp), "-o", str(out), "-m", smollm2, "--device", "cpu", "-t",
              "2", "-dp", "2", "--timeout", "0.3", "--retries", "1")
    assert r.returncode == 1, r.stderr
    fails = sorted((f["custom_id"], f["attempts"], f["error"])
                   for f in read_jsonl(out / "failures.jsonl"))
    assert fails == [("slow0", 2, "timeout"), ("slow1", 2, "timeout")]
    assert list(outputs(out)) == ["quick"]
    s = json.loads((out / "summary.json").read_text())
    assert (s["succeeded"], s["failed"], s["remaining"]) == (1, 2, 0)


@pytest.mark.parametrize("args,msg", [
    (["-dp", "0"], "lpx batch: -dp: expected a whole number from 1 to 64"),
    (["--data-parallel-size", "65"], "lpx batch: --data-parallel-size: expected a whole"),
    (["-dp", "3", "--device", "cpu,cpu"],
     "lpx batch: --data-parallel-size 3 contradicts --device cpu,cpu (2 devices)"),
    (["-dp", "2", "--device", "cuda:1"], "lpx batch: --device cuda:1 with --data-parallel-size 2"),
    (["-dp", "4", "--device", "cpu", "-t", "2"], "lpx batch: --threads 2 is below"),
])
def test_bad_flags_are_usage_errors(tmp_path, lpx_bin, smollm2, args, msg):
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(2))
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2, *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(msg), r.stderr
    assert not (tmp_path / "o").exists()


def test_data_parallel_with_server_is_a_usage_error(tmp_path, lpx_bin):
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(2))
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "--server",
              "http://127.0.0.1:9", "-dp", "2")
    assert r.returncode == 2
    assert r.stderr == ("lpx batch: --data-parallel-size is for the in-process engine, not "
                        "--server\n")
