"""lpx bench serve against a real HTTP peer: a small Python SSE server (http.server)
that streams fixed token chunks with known timing, implements /tokenize, /detokenize,
/v1/models and a /metrics page with an lpx:gpu_* gauge, and can answer 500s or stall.
The tests against lpx serve itself are in test_bench_serve_lpx.py."""
import http.server
import json
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from report_helpers import assert_round_ticks, assert_self_contained, charts, chromium

TOKEN_GAP = 0.004  # s between streamed tokens


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        # Without this, Nagle's algorithm holds small token events back for the peer's
        # delayed ACK and tokens arrive in bursts.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        st = self.server.state
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "fake-model"}]})
        elif self.path == "/metrics":
            with st["lock"]:
                st["scrapes"] += 1
                text = (f"# TYPE lpx:gpu_utilization_percent gauge\n"
                        f'lpx:gpu_utilization_percent{{gpu="0"}} {10 * (st["scrapes"] % 9)}\n'
                        f"lpx:generation_tokens_total {st['completion_tokens']}\n")
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        st = self.server.state
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            # One token per whitespace-separated word; ids from a growing vocabulary.
            with st["lock"]:
                ids = [st["vocab"].setdefault(w, len(st["vocab"])) for w in req["prompt"].split()]
            self.send_json(200, {"tokens": ids, "count": len(ids)})
            return
        if self.path == "/detokenize":
            with st["lock"]:
                inv = {v: k for k, v in st["vocab"].items()}
            self.send_json(200, {"prompt": " ".join(inv[i] for i in req["tokens"])})
            return
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_json(404, {"error": {"message": "not found"}})
            return
        with st["lock"]:
            st["requests"] += 1
            n = st["requests"]
            st["bodies"].append(req)
        mode = st["mode"]
        if mode == "500" or (mode == "500-odd" and n % 2 == 1):
            self.send_json(500, {"error": {"message": "injected failure"}})
            return
        if mode == "429-odd" and n % 2 == 1:
            self.send_json(429, {"error": {"message": "rate limited"}})
            return
        if mode == "stall":
            time.sleep(3)
        text = req["messages"][0]["content"] if chat else req["prompt"]
        prompt_tokens = len(text.split())
        out = req["max_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if chat:
                self.event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            else:
                self.wfile.write(b": lpx\n\n")
            for i in range(out):
                time.sleep(TOKEN_GAP)
                if chat:
                    self.event({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]})
                else:
                    self.event({"choices": [{"index": 0, "text": f" t{i}"}]})
            with st["lock"]:
                st["prompt_tokens"] += prompt_tokens
                st["completion_tokens"] += out
            self.event({"choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                 "completion_tokens": out,
                                                 "total_tokens": prompt_tokens + out}})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def event(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


@pytest.fixture()
def fake():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.state = {"lock": threading.Lock(), "vocab": {}, "requests": 0, "scrapes": 0,
                 "prompt_tokens": 0, "completion_tokens": 0, "mode": "ok", "bodies": []}
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


def bench(lpx_bin, url, *args, timeout=60):
    return subprocess.run([lpx_bin, "bench", "serve", "--url", url, *args],
                          capture_output=True, text=True, timeout=timeout)


def field(out, name):
    for line in out.splitlines():
        if line.startswith(name):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in output:\n{out}")


def check_stats(run):
    """The summary in the JSON equals numpy's statistics of its own trace."""
    ok = [r for r in run["requests"] if r["ok"]]
    ttft = [r["ttft"] for r in ok]
    e2e = [r["e2e"] for r in ok]
    tpot = [(r["e2e"] - r["ttft"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    itl = [b - a for r in ok for a, b in zip(r["chunk_times"], r["chunk_times"][1:])]
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        assert run[f"mean_{name}_ms"] == pytest.approx(np.mean(v) * 1e3, rel=1e-9)
        for q in (50, 90, 99):
            key = f"{'median' if q == 50 else f'p{q}'}_{name}_ms"
            assert run[key] == pytest.approx(np.percentile(v, q) * 1e3, rel=1e-9)


def test_all_requests_succeed(lpx_bin, fake, tmp_path):
    out_json = tmp_path / "run.json"
    r = bench(lpx_bin, fake.url, "--num-prompts", "8", "--input-len", "16", "--output-len", "6",
              "--max-concurrency", "4", "--request-rate", "50", "--seed", "3",
              "--metrics-interval", "0.05", "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    assert field(r.stdout, "Successful requests:") == 8
    assert field(r.stdout, "Failed requests:") == 0
    st = fake.state
    # Token counts add up with the server's usage fields and its counters.
    assert field(r.stdout, "Total input tokens:") == st["prompt_tokens"] == 8 * 16
    assert field(r.stdout, "Total generated tokens:") == st["completion_tokens"] == 8 * 6
    # What the requests asked for: streaming with usage, ignore_eos, max_tokens, model.
    for b in st["bodies"]:
        assert b["model"] == "fake-model" and b["max_tokens"] == 6 and b["ignore_eos"] is True
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
        assert len(b["prompt"].split()) == 16  # exact length through /tokenize + /detokenize
    run = json.loads(out_json.read_text())["runs"][0]
    assert run["completed"] == 8 and run["max_concurrency"] == 4
    for q in run["requests"]:
        assert q["ok"] and q["output_tokens"] == 6 and len(q["chunk_times"]) == 6
        assert q["chunk_times"] == sorted(q["chunk_times"]) and q["ttft"] == q["chunk_times"][0]
        assert q["e2e"] >= q["chunk_times"][-1]
    check_stats(run)
    assert any(s["series"] == 'lpx:gpu_utilization_percent{gpu="0"}'
               for s in run["gpu_metrics"])


def test_chat_endpoint(lpx_bin, fake, tmp_path):
    out_json = tmp_path / "chat.json"
    r = bench(lpx_bin, fake.url, "--endpoint", "chat", "--model", "m", "--num-prompts", "3",
              "--input-len", "5", "--output-len", "4", "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    assert field(r.stdout, "Total generated tokens:") == 12
    assert all(b["messages"][0]["role"] == "user" and b["model"] == "m"
               for b in fake.state["bodies"])
    run = json.loads(out_json.read_text())["runs"][0]
    # The opening role delta carries no text: not a token.
    assert all(len(q["chunk_times"]) == 4 for q in run["requests"])


def test_dataset(lpx_bin, fake, tmp_path):
    ds = tmp_path / "d.jsonl"
    ds.write_text('{"prompt": "one two three", "output_len": 2}\n'
                  '{"prompt": "four five", "output_len": 5}\n')
    r = bench(lpx_bin, fake.url, "--dataset", str(ds))
    assert r.returncode == 0, r.stderr
    assert field(r.stdout, "Total input tokens:") == 5
    assert field(r.stdout, "Total generated tokens:") == 7
    ds.write_text('{"prompt": 3}\n')
    r = bench(lpx_bin, fake.url, "--dataset", str(ds))
    assert r.returncode == 1 and "d.jsonl:1" in r.stderr


def test_server_errors_counted(lpx_bin, fake):
    fake.state["mode"] = "500-odd"
    r = bench(lpx_bin, fake.url, "--num-prompts", "6", "--input-len", "4", "--output-len", "3")
    assert r.returncode == 0, r.stderr
    assert field(r.stdout, "Successful requests:") == 3
    assert field(r.stdout, "Failed requests:") == 3
    assert "HTTP 500" in r.stdout and "injected failure" in r.stdout
    fake.state["mode"] = "500"
    r = bench(lpx_bin, fake.url, "--num-prompts", "4", "--input-len", "4", "--output-len", "3")
    assert r.returncode == 1
    assert field(r.stdout, "Failed requests:") == 4
    assert "no request succeeded" in r.stderr
    # A 4xx: counted and reported the same way.
    fake.state["mode"], fake.state["requests"] = "429-odd", 0
    r = bench(lpx_bin, fake.url, "--num-prompts", "4", "--input-len", "4", "--output-len", "3")
    assert r.returncode == 0, r.stderr
    assert field(r.stdout, "Successful requests:") == 2
    assert field(r.stdout, "Failed requests:") == 2
    assert "HTTP 429" in r.stdout and "rate limited" in r.stdout


def test_timeouts_counted(lpx_bin, fake):
    fake.state["mode"] = "stall"
    r = bench(lpx_bin, fake.url, "--num-prompts", "2", "--input-len", "4", "--output-len", "3",
              "--timeout", "0.5")
    assert r.returncode == 1
    assert field(r.stdout, "Failed requests:") == 2
    assert "Timeout" in r.stdout or "timed out" in r.stdout


def test_server_down(lpx_bin):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}"
    r = bench(lpx_bin, url, "--model", "m", "--num-prompts", "3", "--input-len", "4",
              "--output-len", "2")
    assert r.returncode == 1
    assert field(r.stdout, "Failed requests:") == 3
    assert "approximate" in r.stderr  # no /tokenize reachable
    r = bench(lpx_bin, url, "--num-prompts", "1")
    assert r.returncode == 1 and "/v1/models" in r.stderr and "--model" in r.stderr


def test_usage_errors(lpx_bin):
    for args in (["--num-prompts", "0"], ["--request-rate", "-1"], ["--sweep", "foo=1"],
                 ["--bogus", "1"], ["--endpoint", "x"]):
        r = bench(lpx_bin, "http://127.0.0.1:1", *args)
        assert r.returncode == 2 and r.stderr.startswith("lpx bench serve: "), (args, r.stderr)
    r = subprocess.run([lpx_bin, "bench", "serve", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--max-concurrency" in r.stdout


def test_sweep_and_report(lpx_bin, fake, tmp_path):
    out_json, html = tmp_path / "s.json", tmp_path / "report.html"
    r = bench(lpx_bin, fake.url, "--num-prompts", "6", "--input-len", "8", "--output-len", "5",
              "--sweep", "max-concurrency=1,3", "--metrics-interval", "0.05",
              "--json", str(out_json), "--report", str(html))
    assert r.returncode == 0, r.stderr
    assert "| max conc |" in r.stdout
    runs = json.loads(out_json.read_text())["runs"]
    assert [x["max_concurrency"] for x in runs] == [1, 3]
    for run in runs:
        assert run["completed"] == 6
        check_stats(run)
    assert_self_contained(html.read_text(), [fake.url])
    render_in_chromium(html)


def render_in_chromium(html):
    """Opens the report in headless Chromium; the charts must have drawn shapes."""
    with chromium(html, "bench_serve_report.png") as drv:
        got = charts(drv)
        # sweep curve + per run: 4 histograms, throughput, GPU metrics
        assert len(got) == 1 + 2 * 6
        for c in got:
            assert c["width"] > 100 and c["height"] > 100, c
            assert_round_ticks(c)
        assert sum(h > 0 for c in got for h in c["bars"]) >= 8
        assert sum(n > 0 for c in got for n in c["lines"]) >= 5
