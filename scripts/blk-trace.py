#!/usr/bin/env python3
"""Summarises the CSV that the CUDA trace blk=LAYER writes (LPX_CUDA_TRACE=blk=LAYER,
blk_file=PATH, docs/dev.md): one layer's batch-1 kernels, a row per block: SM, then
%globaltimer at start, wait, staged, rows, end.

    scripts/blk-trace.py trace.csv [more.csv ...]

For each kernel (fused q/k/v + attention, o, gate/up, down): min / median / max over
its blocks of the start, the wait returning and the end, in µs from the first fused
block's wait; the phases inside (setup = wait - start for the fused kernel, whose
other marks copy the wait; x staging and rows for the matvecs); the release (the
previous kernel's last block end to this kernel's first wait); and for the fused
kernel, per cluster of --cluster blocks (default 16; the line "clusters of N blocks"
that LPX_CUDA_TRACE=timing prints gives it), the SMs used and the latest wait. Then, per kernel,
how many SMs held one, two, ... of its blocks, and its late blocks (ending more than
--late µs, default 0.5, after the kernel's median end) with what else the layer ran
on their SMs (kernel, start and end of each block there): how docs/lab/notebook.md rows
36-37 found gate/up's last blocks waiting on the SMs that held two o blocks.
docs/lab/notebook.md row 32b reads one of these.

    scripts/blk-trace.py [--late US] [--cluster N] trace.csv [more.csv ...]"""
import csv
import statistics
import sys
from collections import Counter, defaultdict

KERNELS = ["fused", "o", "gu", "down"]


def q(v):
    v = sorted(v)
    return f"{v[0]:7.2f} {statistics.median(v):7.2f} {v[-1]:7.2f}"


def summarise(path, cluster=16, late=0.5):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        print(f"{path}: empty")
        return
    of = {k: [r for r in rows if r["kernel"] == k] for k in KERNELS}
    fused = of["fused"]
    t0 = min(int(r["wait"]) for r in (fused or rows))
    us = lambda r, f: (int(r[f]) - t0) / 1000.0
    print(f"== {path} (layer {rows[0]['layer']}; µs from the first fused wait; min median max)")
    prev_end = None
    for k in KERNELS:
        R = of[k]
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
    on_sm = defaultdict(list)
    for r in rows:
        on_sm[int(r["sm"])].append(r)
    for k in KERNELS:
        R = of[k]
        if not R:
            continue
        hist = Counter(Counter(int(r["sm"]) for r in R).values())  # blocks an SM -> SMs
        med = statistics.median(us(r, "end") for r in R)
        slow = sorted((r for r in R if us(r, "end") > med + late), key=lambda r: us(r, "end"))
        print(f"{k:5} blocks an SM: " + ", ".join(f"{n} on {hist[n]} SMs" for n in sorted(hist))
              + f"; {len(slow)} end more than {late:.2f} µs after the median ({med:.2f})")
        for r in slow[-8:]:
            sm = int(r["sm"])
            others = [o for o in on_sm[sm] if o is not r]
            print(f"    block {int(r['block']):3d} sm {sm:3d} start {us(r, 'start'):6.2f}"
                  + (f" staged {us(r, 'staged'):6.2f}" if k != "fused" else "")
                  + f" end {us(r, 'end'):6.2f}; on its SM: "
                  + (", ".join(f"{o['kernel']} {us(o, 'start'):.2f}..{us(o, 'end'):.2f}" for o in others)
                     or "nothing else"))


if __name__ == "__main__":
    args, late, cluster = sys.argv[1:], 0.5, 16
    while len(args) >= 2 and args[0] in ("--late", "--cluster"):
        try:
            if args[0] == "--late":
                late = float(args[1])
            else:
                cluster = int(args[1])
        except ValueError:
            sys.exit(f"blk-trace.py: {args[0]} {args[1]}: not a number")
        if cluster < 1:
            sys.exit(f"blk-trace.py: --cluster {cluster}: must be 1 or more")
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    try:
        for p in args:
            summarise(p, cluster=cluster, late=late)
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
