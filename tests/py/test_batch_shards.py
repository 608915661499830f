"""lpx batch --shard K/N as a job array runs it: four shard processes at once, each into
its own OUTDIR, merged, equal one unsharded run (docs/batch.md "Shards", docs/deploy.md)."""
import json
import subprocess

from test_batch import batch, job_rows, outputs, write_jsonl

N_SHARDS = 4
N_LINES = 16


def test_four_concurrent_shards_merge_to_one_run(tmp_path, lpx_bin, smollm2):
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, job_rows(N_LINES))
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "whole"), "-m", smollm2, "-t", "1")
    assert r.returncode == 0, r.stderr
    whole = outputs(tmp_path / "whole")
    assert len(whole) == N_LINES
    # the array's tasks start together, as Slurm and an Indexed Job start them
    procs = [subprocess.Popen([lpx_bin, "batch", "-i", str(inp), "-o", str(tmp_path / f"s{k}"),
                               "-m", smollm2, "-t", "1", "--shard", f"{k}/{N_SHARDS}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(N_SHARDS)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    parts = [outputs(tmp_path / f"s{k}") for k in range(N_SHARDS)]
    assert sum(len(p) for p in parts) == N_LINES
    for k, p in enumerate(parts):
        s = json.loads((tmp_path / f"s{k}" / "summary.json").read_text())
        assert s["total"] == len(p) and s["remaining"] == 0
    r = subprocess.run([lpx_bin, "batch", "merge", *(str(tmp_path / f"s{k}")
                                                     for k in range(N_SHARDS)),
                        "-o", str(tmp_path / "merged")], capture_output=True, text=True)
    assert r.returncode == 0 and "more than one result" not in r.stderr, r.stderr
    assert outputs(tmp_path / "merged") == whole
    s = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert (s["total"], s["succeeded"], s["failed"]) == (N_LINES, N_LINES, 0)
    # the partition is the id's hash, not the line's place: a resume, or the same ids in
    # another order, keeps every id in its shard
    write_jsonl(tmp_path / "rev.jsonl", list(reversed(job_rows(N_LINES))))
    for k in range(N_SHARDS):
        r = batch(lpx_bin, "-i", str(tmp_path / "rev.jsonl"), "-o", str(tmp_path / f"s{k}"),
                  "-m", smollm2, "-t", "1", "--shard", f"{k}/{N_SHARDS}", "--resume")
        assert r.returncode == 0, r.stderr
        assert outputs(tmp_path / f"s{k}") == parts[k]
