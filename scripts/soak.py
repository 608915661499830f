#!/usr/bin/env python3
"""Soak benchmark for `lpx serve` (issue 27): a mixed load for a given time, then the
figures that say whether the server held up.

The load, from --clients threads, each request drawn at random (weights in KINDS):
streams and non-streams (completions and chat), n > 1, logprobs, streams the client
drops after a few chunks, bodies the server must refuse (400), and a /metrics scrape.

Printed at the end (and written as JSON with --json):
  - requests by kind and status, 5xx count (must be 0);
  - the server's RSS every second: the slope of a least-squares line over the run
    after the first 10 % (warm-up) and over its second half, in MB per minute, and
    first/last/peak (the KV pool's pages are touched as blocks are first used: give
    --kv-bytes a small pool after -- to see the slope of anything else);
  - /metrics against the client's counts, once the server is idle: HTTP responses by
    class (2xx, 4xx, 5xx), finished choices, generated tokens of the answers read in
    full (at most the server's count: dropped streams generated more than was read);
  - sanitizer reports in the server's stderr (an ASan/UBSan build: --lpx build-asan/lpx);
  - the machine's 1-minute load average during the load (mean, max) and its CPU count:
    on a shared machine the other work shows here.
Exit status 1 on a 5xx, a counter mismatch, a sanitizer report or a server that died.

    scripts/soak.py --duration 600                      # build/lpx, SmolLM2 (fetch-model.sh)
    scripts/soak.py --lpx build-asan/lpx --duration 120 # CI: the ASan/UBSan build

This is a benchmark, not a test: its figures go to docs/server.md ("Soak")."""
import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "Water boils at", "List three colors:", "The quick brown fox"]
# kind: weight
KINDS = {"stream": 4, "plain": 3, "chat": 3, "chat_stream": 2, "n3": 1, "logprobs": 1,
         "chat_logprobs": 1, "drop": 2, "invalid": 2, "metrics": 1}
SANITIZER = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|"
                       r"SUMMARY: (Address|Undefined)")


class Load:
    def __init__(self, url, seed):
        self.url = url
        self.rng = random.Random(seed)
        self.mu = threading.Lock()
        self.status = {}   # (kind, status) -> count
        self.http = {2: 0, 4: 0, 5: 0}
        self.choices = 0   # choices the client saw finish (finish_reason set)
        self.tokens = 0    # completion tokens of answers read in full (usage)
        self.errors = []   # client-side failures (connection errors, bad bodies)

    def count(self, kind, status, choices=0, tokens=0):
        with self.mu:
            self.status[(kind, status)] = self.status.get((kind, status), 0) + 1
            if status // 100 in self.http:
                self.http[status // 100] += 1
            self.choices += choices
            self.tokens += tokens

    def body(self, kind):
        r = self.rng
        mt = r.randint(4, 24)
        p = r.choice(PROMPTS)
        chat = kind.startswith("chat")
        b = ({"messages": [{"role": "user", "content": p}]} if chat else {"prompt": p})
        b |= {"max_tokens": mt, "temperature": r.choice([0, 0.7, 1.0]), "seed": r.randint(0, 99)}
        if kind in ("stream", "chat_stream", "drop"):
            b |= {"stream": True, "stream_options": {"include_usage": True}}
        if kind == "n3":
            b["n"] = 3
        if kind == "logprobs":
            b["logprobs"] = 5
        if kind == "chat_logprobs":
            b |= {"logprobs": True, "top_logprobs": 5}
        if kind == "drop":
            b["max_tokens"] = 200
            b["ignore_eos"] = True
        return ("/v1/chat/completions" if chat else "/v1/completions"), b

    def one(self, client, kind):
        if kind == "metrics":
            r = client.get(self.url + "/metrics")
            self.count(kind, r.status_code)
            return
        if kind == "invalid":
            bad = self.rng.choice([{"prompt": "x", "temperature": 5}, {"prompt": "x", "n": 0},
                                   {"messages": [{"role": "bogus", "content": "x"}]},
                                   {"prompt": "x", "max_tokens": 100000}, b"{not json",
                                   {"prompt": "x", "top_p": 0}])
            path = "/v1/chat/completions" if isinstance(bad, dict) and "messages" in bad \
                else "/v1/completions"
            if isinstance(bad, bytes):
                r = client.post(self.url + path, content=bad,
                                headers={"Content-Type": "application/json"})
            else:
                r = client.post(self.url + path, json=bad)
            self.count(kind, r.status_code)
            return
        path, b = self.body(kind)
        if not b.get("stream"):
            r = client.post(self.url + path, json=b)
            if r.status_code != 200:
                self.count(kind, r.status_code)
                return
            j = r.json()
            self.count(kind, 200, choices=len(j["choices"]),
                       tokens=j["usage"]["completion_tokens"])
            return
        with client.stream("POST", self.url + path, json=b) as r:
            if r.status_code != 200:
                r.read()
                self.count(kind, r.status_code)
                return
            done = tokens = 0
            for i, line in enumerate(r.iter_lines()):
                if kind == "drop" and i >= 4:
                    break  # the client leaves mid-stream: its request must be cancelled
                if not line.startswith("data: {"):
                    continue
                j = json.loads(line[6:])
                done += sum(1 for c in j["choices"] if c.get("finish_reason"))
                if j.get("usage"):
                    tokens = j["usage"]["completion_tokens"]
            self.count(kind, 200, choices=0 if kind == "drop" else done,
                       tokens=0 if kind == "drop" else tokens)

    def run(self, end, seed):
        rng = random.Random(seed)
        kinds, weights = zip(*KINDS.items())
        with httpx.Client(timeout=120) as client:
            while time.monotonic() < end:
                kind = rng.choices(kinds, weights)[0]
                try:
                    self.one(client, kind)
                except (httpx.HTTPError, ValueError, KeyError) as e:
                    with self.mu:
                        self.errors.append(f"{kind}: {type(e).__name__}: {e}")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def slope_per_min(samples):
    """Least-squares slope of (t s, MB) in MB per minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return 60 * sum((t - mt) * (v - mv) for t, v in samples) / var if var else 0.0


def metrics(url):
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        m = re.match(r"(lpx:[a-z_]+)(\{[^}]*\})? ([-+0-9.e]+|NaN)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def labelled(ms, name, key, value):
    return sum(v for (n, lab), v in ms.items() if n == name and f'{key}="{value}"' in lab)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lpx", default=os.path.join(ROOT, "build", "lpx"))
    ap.add_argument("--model", default=None, help="default: scripts/fetch-model.sh's SmolLM2")
    ap.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("serve_args", nargs="*", help="more `lpx serve` options (after --)")
    a = ap.parse_args()
    model = a.model or subprocess.run([os.path.join(ROOT, "scripts", "fetch-model.sh"),
                                       "--print-path"], capture_output=True, text=True,
                                      check=True).stdout.strip()
    cmd = [a.lpx, "serve", "-m", model, "--port", "0", "--max-model-len", "512",
           "--max-num-seqs", "8", *a.serve_args]
    env = dict(os.environ)
    # an ASan build: leaks are reported at exit, the rest at once; every report fails
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    log, ready = [], threading.Event()
    url = [None]

    def reader():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on (http://[^:]+:\d+)", line)
            if m:
                url[0] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=reader, daemon=True).start()
    if not ready.wait(300) or not url[0]:
        proc.kill()
        sys.exit("lpx serve did not start:\n" + "".join(log))
    print(f"soak: {' '.join(cmd)}\nsoak: {a.clients} clients for {a.duration:g} s", flush=True)
    load = Load(url[0], a.seed)
    t0 = time.monotonic()
    end = t0 + a.duration
    threads = [threading.Thread(target=load.run, args=(end, a.seed * 1000 + i))
               for i in range(a.clients)]
    for t in threads:
        t.start()
    samples, loads = [], []
    while time.monotonic() < end and proc.poll() is None:
        samples.append((time.monotonic() - t0, rss_mb(proc.pid)))
        loads.append(os.getloadavg()[0])
        time.sleep(1)
    for t in threads:
        t.join()
    # idle: every dropped stream cancelled, nothing running or waiting
    idle_by = time.monotonic() + 60
    ms = {}
    while proc.poll() is None and time.monotonic() < idle_by:
        ms = metrics(url[0])
        load.count("idle scrape", 200)  # counted by the server once answered
        if all(v == 0 for (n, _), v in ms.items()
               if n in ("lpx:num_requests_running", "lpx:num_requests_waiting")):
            break
        time.sleep(0.2)
    # a scrape's own response is counted after its text is made: not in it
    ms = metrics(url[0]) if proc.poll() is None else {}
    alive = proc.poll() is None
    if alive:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    time.sleep(0.5)
    sanitizer = [l for l in log if SANITIZER.search(l)]

    warm = [s for s in samples if s[0] >= 0.1 * a.duration]
    fig = {
        "duration_s": a.duration, "clients": a.clients,
        "requests": sum(load.status.values()),
        "by_kind_status": {f"{k} {s}": n for (k, s), n in sorted(load.status.items())},
        "client_http": load.http, "client_errors": load.errors[:20],
        "n_client_errors": len(load.errors),
        "rss_mb_first": samples[0][1] if samples else 0,
        "rss_mb_last": samples[-1][1] if samples else 0,
        "rss_mb_peak": max((v for _, v in samples), default=0),
        "rss_slope_mb_per_min": round(slope_per_min(warm), 3),
        "rss_slope_last_half_mb_per_min": round(
            slope_per_min([x for x in samples if x[0] >= 0.5 * a.duration]), 3),
        "rss_mb_every_10s": [round(v, 1) for t, v in samples[::10]],
        # the machine's 1-minute load average (the whole machine: others' work too)
        "loadavg_mean": round(sum(loads) / len(loads), 2) if loads else 0,
        "loadavg_max": round(max(loads, default=0), 2),
        "cpus": os.cpu_count(),
        "server_exit": proc.returncode, "sanitizer_lines": sanitizer[:20],
    }
    problems = []
    if not alive:
        problems.append("the server died during the load")
    if load.http[5]:
        problems.append(f"{load.http[5]} responses were 5xx")
    if load.errors:
        problems.append(f"{len(load.errors)} client errors, e.g. {load.errors[0]}")
    if sanitizer:
        problems.append(f"sanitizer reports: {sanitizer[0].strip()}")
    if ms:
        srv_http = {c: labelled(ms, "lpx:http_responses_total", "status", f"{c}xx")
                    for c in (2, 4, 5)}
        fin = {r: labelled(ms, "lpx:request_success_total", "finished_reason", r)
               for r in ("stop", "length", "abort", "error")}
        gen = sum(v for (n, _), v in ms.items() if n == "lpx:generation_tokens_total")
        fig |= {"server_http": srv_http, "server_finished": fin, "server_generated": gen,
                "client_choices": load.choices, "client_tokens": load.tokens}
        for c in (2, 4, 5):
            if srv_http[c] != load.http[c]:
                problems.append(f"/metrics {c}xx {srv_http[c]:.0f} != client's {load.http[c]}")
        # every choice ends once: those the client saw finish, and the dropped streams
        # (aborted, unless one ran to its end before the server saw the client go)
        drops = sum(n for (k, s), n in load.status.items() if k == "drop" and s == 200)
        ended = fin["stop"] + fin["length"] + fin["abort"]
        if ended != load.choices + drops:
            problems.append(f"/metrics finished choices {ended:.0f} != client's {load.choices}"
                            f" + {drops} dropped streams")
        if fin["abort"] > drops:
            problems.append(f"/metrics abort {fin['abort']:.0f} > streams dropped {drops}")
        if fin["error"]:
            problems.append(f"/metrics: {fin['error']:.0f} choices ended in an engine error")
        if gen < load.tokens:
            problems.append(f"/metrics generated {gen:.0f} < tokens the client read "
                            f"{load.tokens}")
    fig["problems"] = problems
    for k, v in fig.items():
        print(f"soak: {k}: {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(fig, f, indent=1)
    print("soak: " + ("FAIL: " + "; ".join(problems) if problems else "OK"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
