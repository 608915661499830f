#!/usr/bin/env python3
"""Summarises the CSV that LPX_CUDA_BLK_TRACE=LAYER writes (one layer's batch-1
kernels, a row per block: SM, then %globaltimer at start, wait, staged, rows, end).

    scripts/blk-trace.py trace.csv [more.csv ...]

For each kernel (fused q/k/v + attention, o, gate/up, down): min / median / max over
its blocks of the start, the wait returning and the end, in µs from the first fused
block's wait; the phases inside (setup = wait - start for the fused kernel, whose
other marks copy the wait; x staging and rows for the matvecs); the release (the
previous kernel's last block end to this kernel's first wait); and for the fused
kernel, per cluster of 16 blocks, the SMs used and the latest wait. docs/PERF.md
row 32b reads one of these."""
import csv
import statistics
import sys
from collections import defaultdict

KERNELS = ["fused", "o", "gu", "down"]


def q(v):
    v = sorted(v)
    return f"{v[0]:7.2f} {statistics.median(v):7.2f} {v[-1]:7.2f}"


def summarise(path, cluster=16):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        print(f"{path}: empty")
        return
    fused = [r for r in rows if r["kernel"] == "fused"]
    t0 = min(int(r["wait"]) for r in (fused or rows))
    us = lambda r, f: (int(r[f]) - t0) / 1000.0
    print(f"== {path} (layer {rows[0]['layer']}; µs from the first fused wait; min median max)")
    prev_end = None
    for k in KERNELS:
        R = [r for r in rows if r["kernel"] == k]
        if not R:
            continue
        line = (f"{k:5} n={len(R):3d} sms={len({r['sm'] for r in R}):3d} start {q([us(r, 'start') for r in R])}"
                f" | wait {q([us(r, 'wait') for r in R])} | end {q([us(r, 'end') for r in R])}")
        if k == "fused":
            line += f" | setup {q([us(r, 'wait') - us(r, 'start') for r in R])}"
        else:
            line += (f" | x {q([us(r, 'staged') - us(r, 'wait') for r in R])}"
                     f" | rows {q([us(r, 'rows') - us(r, 'staged') for r in R])}")
        if prev_end is not None:
            line += f" | release {min(us(r, 'wait') for r in R) - prev_end:5.2f}"
        prev_end = max(us(r, "end") for r in R)
        print(line)
    by = defaultdict(list)
    for r in fused:
        by[int(r["block"]) // cluster].append(r)
    for c in sorted(by):
        R = by[c]
        print(f"  cluster {c}: sms {len({r['sm'] for r in R}):2d} start {min(us(r, 'start') for r in R):6.2f}"
              f" wait max {max(us(r, 'wait') for r in R):5.2f}"
              f" end {min(us(r, 'end') for r in R):6.2f}..{max(us(r, 'end') for r in R):6.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarise(p)
