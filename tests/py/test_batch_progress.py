"""lpx batch progress on stderr: the bar on a terminal (a pty) and the plain
lines otherwise. Checks the states it shows (done/total, failed, the bar's
fill), never how fast they came."""
import json
import os
import re
import subprocess

TOTAL, DONE, FAILED = 5, 4, 1  # four prompts and one line the input check rejects
STATE = r"(\d+)/(\d+) done, (\d+) failed, \d+\.\d tok/s, ETA \d+ s"


def write_job(tmp_path):
    inp = tmp_path / "in.jsonl"
    rows = [json.dumps({"id": f"p{i}", "prompt": f"Item {i}:", "max_tokens": 2}) for i in range(DONE)]
    rows.insert(2, "{not json")
    inp.write_text("\n".join(rows) + "\n")
    return inp


def states(matches):
    return [tuple(int(x) for x in m) for m in matches]


def test_progress_lines_without_a_terminal(tmp_path, lpx_bin, smollm2):
    inp = write_job(tmp_path)
    r = subprocess.run([lpx_bin, "batch", "-i", str(inp), "-o", str(tmp_path / "out"), "-m", smollm2],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr  # the rejected line
    assert "\r" not in r.stderr and "[#" not in r.stderr  # no bar when stderr is not a terminal
    seen = states(re.findall(r"^lpx batch: " + STATE + "$", r.stderr, re.M))
    assert seen, r.stderr
    assert seen[-1] == (DONE, TOTAL, FAILED)
    assert seen[-2:-1] != seen[-1:], r.stderr  # the final state is shown once
    assert r.stderr.rstrip("\n").endswith(f"lpx batch: {DONE} succeeded, {FAILED} failed; "
                                          f"results in {tmp_path / 'out'}")


def test_one_turn_job_shows_its_final_line_once(tmp_path, lpx_bin, smollm2):
    """A one-prompt job usually ends within the loop's first turn, whose progress
    line already shows the final state: the final line must not repeat it."""
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "only", "prompt": "Hi", "max_tokens": 1}) + "\n")
    out = tmp_path / "out"
    r = subprocess.run([lpx_bin, "batch", "-i", str(inp), "-o", str(out), "-m", smollm2],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    seen = states(re.findall(r"^lpx batch: " + STATE + "$", r.stderr, re.M))
    assert seen and seen[-1] == (1, 1, 0), r.stderr
    assert seen.count((1, 1, 0)) == 1, r.stderr
    assert lines[-1] == f"lpx batch: 1 succeeded, 0 failed; results in {out}", r.stderr


def test_progress_bar_on_a_terminal(tmp_path, lpx_bin, smollm2):
    inp = write_job(tmp_path)
    master, slave = os.openpty()
    p = subprocess.Popen([lpx_bin, "batch", "-i", str(inp), "-o", str(tmp_path / "out"), "-m", smollm2],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=300) == 1
    text = out.decode()
    bars = re.findall(r"\r\[([#.]{30})\] " + STATE, text)
    assert bars, text
    prev = 0
    for bar, *nums in bars:
        done, total, failed = (int(x) for x in nums)
        assert total == TOTAL and done <= DONE and failed == FAILED, text
        assert bar == "#" * (30 * (done + failed) // total) + "." * (30 - 30 * (done + failed) // total)
        assert done + failed >= prev  # never goes back
        prev = done + failed
    assert (bars[-1][0], *map(int, bars[-1][1:])) == ("#" * 30, DONE, TOTAL, FAILED)
    # the final state ends the bar's line; the summary line follows on its own
    assert re.search(r"\] " + f"{DONE}/{TOTAL} done, {FAILED} failed" + r", \d+\.\d tok/s, ETA \d+ s \r?\n"
                     + f"lpx batch: {DONE} succeeded, {FAILED} failed; results in", text), text


def test_rate_and_eta_count_tokens_as_they_stream(tmp_path, lpx_bin, smollm2):
    """One long answer: before it ends (0/1 done), the bar already shows a rate from the
    tokens streamed so far and an ETA from the tokens still to come (max_tokens less
    those), which shrinks as they come."""
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "long", "prompt": "Once upon a time", "max_tokens": 160,
                               "ignore_eos": True}) + "\n")
    master, slave = os.openpty()
    p = subprocess.Popen([lpx_bin, "batch", "-i", str(inp), "-o", str(tmp_path / "out"), "-m",
                          smollm2, "-t", "1"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=300) == 0
    rows = re.findall(r"\] 0/1 done, 0 failed, (\d+\.\d) tok/s, ETA (\d+) s", out.decode())
    assert len(rows) >= 2, out  # several redraws before the answer ended
    moving = [(float(r), int(e)) for r, e in rows if float(r) > 0]
    assert moving, rows  # a rate before any request finished
    etas = [e for _, e in moving]
    assert etas[-1] < etas[0], etas  # the rate wobbles; the tokens to come only shrink
