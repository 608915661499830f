"""scripts/blk-trace.py on a made-up CSV of the CUDA trace blk=LAYER whose answers are known:
the phases, the blocks an SM, and a late gate/up block with the two o blocks that held
its SM (the pattern of docs/lab/notebook.md row 36)."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
T0 = 1_000_000_000  # ns; every mark below is T0 + µs * 1000


def write_trace(path):
    rows = ["layer,kernel,block,sm,start,wait,staged,rows,end"]

    def add(kernel, block, sm, *marks_us):
        ns = [T0 + round(m * 1000) for m in marks_us]
        rows.append(",".join(map(str, [14, kernel, block, sm] + ns)))

    for blk in range(16):  # one cluster, one block an SM, wait at 0 (block 0) .. 0.15
        w = 0.01 * blk
        add("fused", blk, blk, -3.0, w, w, w, 7.0 + 0.01 * blk)
    add("o", 0, 20, 0.4, 8.0, 8.3, 9.1, 9.2)  # two o blocks on SM 20
    add("o", 1, 20, 0.4, 8.0, 8.3, 9.1, 9.3)
    add("o", 2, 21, 0.4, 8.0, 8.3, 9.1, 9.2)
    add("o", 3, 22, 0.4, 8.0, 8.3, 9.1, 9.2)
    add("gu", 0, 21, 7.6, 9.8, 10.7, 12.1, 12.2)
    add("gu", 1, 22, 7.6, 9.8, 10.7, 12.1, 12.2)
    add("gu", 2, 23, 7.6, 9.8, 10.7, 12.1, 12.3)
    add("gu", 3, 20, 9.4, 9.8, 11.9, 13.4, 13.5)  # starts when SM 20's o blocks leave
    add("down", 0, 21, 11.0, 14.0, 14.3, 15.2, 15.3)
    add("down", 1, 22, 11.0, 14.0, 14.3, 15.2, 15.4)
    path.write_text("\n".join(rows) + "\n")


def test_blk_trace_finds_the_late_block_and_its_neighbours(tmp_path):
    csv = tmp_path / "t.csv"
    write_trace(csv)
    r = blk_trace(csv)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = {l.split()[0]: l for l in out.splitlines() if l[:5].strip() in ("fused", "o", "gu", "down")
             and " n=" in l}
    assert "n= 16 sms= 16" in lines["fused"]
    assert "release  0.85" in lines["o"]  # fused's last end 7.15 -> o's wait 8.0
    assert "release  0.50" in lines["gu"]  # o's last end 9.3 -> gate/up's wait 9.8
    assert "sms=  3" in lines["o"]
    assert "o     blocks an SM: 1 on 2 SMs, 2 on 1 SMs; 0 end more than 0.50" in out
    assert "gu    blocks an SM: 1 on 4 SMs; 1 end more than 0.50" in out
    late = [l for l in out.splitlines() if l.strip().startswith("block   3 sm  20")]
    assert len(late) == 1, out
    assert "start   9.40 staged  11.90 end  13.50" in late[0]
    assert "o 0.40..9.20, o 0.40..9.30" in late[0]


def blk_trace(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts/blk-trace.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_blk_trace_late_threshold_and_usage(tmp_path):
    csv = tmp_path / "t.csv"
    write_trace(csv)
    r = blk_trace("--late", "2", csv)
    assert r.returncode == 0, r.stderr
    assert "gu    blocks an SM: 1 on 4 SMs; 0 end more than 2.00" in r.stdout
    r = blk_trace()
    assert r.returncode != 0 and "blk-trace.py" in r.stderr


def test_blk_trace_cluster_size(tmp_path):
    """--cluster N groups the fused blocks N at a time (clusters of 8: two of them)."""
    csv = tmp_path / "t.csv"
    write_trace(csv)
    r = blk_trace("--cluster", "8", csv)
    assert r.returncode == 0, r.stderr
    cl = [l.split() for l in r.stdout.splitlines() if l.strip().startswith("cluster ")]
    assert [c[1] for c in cl] == ["0:", "1:"], r.stdout
    assert all(c[3] == "8" for c in cl), r.stdout  # SMs a cluster
    # cluster 1 holds blocks 8-15: latest wait 0.15, ends 7.08..7.15
    assert "wait max  0.15 end   7.08..  7.15" in r.stdout
    r = blk_trace("--cluster", "x", csv)
    assert r.returncode != 0 and "not a number" in r.stderr
