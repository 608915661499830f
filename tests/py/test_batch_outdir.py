"""lpx batch keeps to its OUTDIR (issue 27, integrity): one job at a time holds it (a
second run, --resume included, and a merge into it are refused naming the holder's PID),
no link planted in it is followed, and `ulimit -f` ends the job with an error like a full
disk instead of killing it with SIGXFSZ."""
import fcntl
import json
import os
import resource
import subprocess
import time

from test_batch import batch, job_rows, whole_lines, write_jsonl


def small_job(tmp_path, n=6):
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(n))
    return inp


def test_second_run_is_refused_naming_the_holder(tmp_path, lpx_bin, smollm2):
    """The issue's case: a second --resume while the first runs redid every id. Now it is
    refused at once (before the model is opened) and the first ends with each id once."""
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(200, chat_every=50))
    out = tmp_path / "out"
    args = ["-i", str(inp), "-m", smollm2, "--concurrency", "4", "-o", str(out)]
    first = subprocess.Popen([lpx_bin, "batch", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        while first.poll() is None and not whole_lines(out / "results.jsonl"):
            time.sleep(0.01)
        assert first.poll() is None, "the first job ended too soon: " + first.stderr.read()
        t0 = time.monotonic()
        r = batch(lpx_bin, *args, "--resume", timeout=60)
        assert time.monotonic() - t0 < 5
        assert r.returncode == 1
        assert r.stderr == (f"lpx batch: {out} is in use by another lpx batch (PID {first.pid} "
                            f"holds {out}/lpx.lock): wait for it to end, or stop it\n")
        r = batch(lpx_bin, *args, timeout=60)  # without --resume: exists
        assert r.returncode == 1 and "exists" in r.stderr
    finally:
        first.wait(timeout=300)
    assert first.returncode == 0
    ids = [json.loads(l)["custom_id"] for l in whole_lines(out / "results.jsonl")]
    assert len(ids) == len(set(ids)) == 200
    # the lock goes with its holder: a resume now runs (nothing left to do)
    r = batch(lpx_bin, *args, "--resume")
    assert r.returncode == 0, r.stderr


def test_merge_output_is_locked(tmp_path, lpx_bin, smollm2):
    """A merge holds its output while it writes: the lock file names it. A job resuming
    into a held directory (here held by this test, as by a running merge) is refused."""
    inp = small_job(tmp_path)
    r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(tmp_path / "a"))
    assert r.returncode == 0, r.stderr
    p = subprocess.run([lpx_bin, "batch", "merge", str(tmp_path / "a"), "-o",
                        str(tmp_path / "m")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert int((tmp_path / "m" / "lpx.lock").read_text()) > 0
    with open(tmp_path / "m" / "lpx.lock", "r+") as f:
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX)
        r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(tmp_path / "m"), "--resume")
        assert r.returncode == 1 and f"(PID {os.getpid()} holds" in r.stderr


def test_links_in_outdir_are_refused(tmp_path, lpx_bin, smollm2):
    """A planted results.jsonl, run.log or summary.json.tmp link was appended to or
    overwritten; now the job refuses the OUTDIR and the link's target is unchanged."""
    inp = small_job(tmp_path)
    victim = tmp_path / "victim"
    for name in ["results.jsonl", "failures.jsonl", "run.log", "summary.json",
                 "summary.json.tmp", "lpx.lock"]:
        out = tmp_path / ("o-" + name)
        out.mkdir()
        victim.write_text("precious\n")
        os.symlink(victim, out / name)
        r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(out), "--resume")
        assert r.returncode == 1, name
        assert r.stderr == (f"lpx batch: {out}/{name}: a symbolic link (refused: lpx follows "
                            "no link in OUTDIR)\n")
        assert victim.read_text() == "precious\n"
    # a FIFO is not followed either, nor waited on
    out = tmp_path / "fifo"
    out.mkdir()
    os.mkfifo(out / "results.jsonl")
    r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(out), "--resume", timeout=60)
    assert r.returncode == 1
    assert r.stderr == f"lpx batch: {out}/results.jsonl: not a regular file (refused)\n"
    # the summary is written through a temporary of its own, none left behind
    out = tmp_path / "ok"
    r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["failures.jsonl", "lpx.lock", "results.jsonl", "run.log",
                                       "summary.json"]


def test_file_size_limit_is_an_error_not_a_signal(tmp_path, lpx_bin, smollm2):
    """Past `ulimit -f` the job was killed by SIGXFSZ; now the write fails (EFBIG), the
    job says so like a full disk, writes its summary and exits 1; --resume continues."""
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(40))
    out = tmp_path / "out"
    limit = 6000  # bytes: a few results, then EFBIG

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([lpx_bin, "batch", "-i", str(inp), "-m", smollm2, "-o", str(out)],
                       capture_output=True, text=True, timeout=300, preexec_fn=cap)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"lpx batch: writing a record in {out} failed: File too large\n" in r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert 0 < s["succeeded"] < 40 and s["remaining"] > 0
    r = batch(lpx_bin, "-i", str(inp), "-m", smollm2, "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    ids = [json.loads(l)["custom_id"] for l in whole_lines(out / "results.jsonl")]
    assert len(ids) == len(set(ids)) == 40
