"""lpx monitor --url against a real `lpx serve` (SmolLM2 on the CPU backend): the figures
monitor shows must be the server's own (/metrics, and the usage of the requests that
made them), and a URL that is down or not an lpx server must be said clearly.

NVML is pointed at a library that does not exist, so every machine runs these tests as
the CI machine does: no GPU, server columns only."""
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import ROOT
from serve_helpers import Server

NO_GPU = dict(os.environ, LPX_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")


def monitor(lpx_bin, *args, **kw):
    return subprocess.run([lpx_bin, "monitor", *args], capture_output=True, text=True,
                          timeout=60, env=NO_GPU, **kw)


class Lines:
    """A running `lpx monitor`, its stdout read line by line."""

    def __init__(self, lpx_bin, *args):
        self.proc = subprocess.Popen([lpx_bin, "monitor", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=NO_GPU)

    def next(self):
        line = self.proc.stdout.readline()
        assert line, "monitor ended early: " + self.proc.stderr.read()
        return line

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        rest, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, rest, err


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--max-num-seqs", "1")
    yield s
    s.stop()


def test_tokens_per_second_agree_with_metrics_and_usage(lpx_bin, srv):
    before = srv.wait_idle(60)
    mon = Lines(lpx_bin, "--url", srv.url, "--json", "--interval", "0.2")
    samples = [json.loads(mon.next())]  # taken before the request below is sent
    r = srv.post("/v1/completions", {"model": srv.model, "prompt": "The capital of France is",
                                      "max_tokens": 48, "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    want_gen = before["lpx:generation_tokens_total"] + usage["completion_tokens"]
    # The response comes after the counters were updated: the next samples show it.
    while samples[-1]["server"]["generation_tokens_total"] < want_gen:
        samples.append(json.loads(mon.next()))
    rc, _, err = mon.stop()
    assert rc == 0, err
    after = srv.metrics()

    srvs = [s["server"] for s in samples]
    assert all(s["server"]["up"] and "gpu" not in s for s in samples)
    assert srvs[0]["generation_tokens_total"] == before["lpx:generation_tokens_total"]
    assert srvs[0]["generation_tokens_per_s"] is None  # no rate before two scrapes
    assert srvs[-1]["generation_tokens_total"] == want_gen == after["lpx:generation_tokens_total"]
    assert (srvs[-1]["prompt_tokens_total"] - srvs[0]["prompt_tokens_total"]
            == usage["prompt_tokens"])
    # Each rate is the counter's delta over the time between the two scrapes.
    for prev, cur in zip(srvs, srvs[1:]):
        delta = cur["generation_tokens_total"] - prev["generation_tokens_total"]
        assert cur["interval_s"] > 0
        assert cur["generation_tokens_per_s"] * cur["interval_s"] == pytest.approx(delta)
        pdelta = cur["prompt_tokens_total"] - prev["prompt_tokens_total"]
        assert cur["prompt_tokens_per_s"] * cur["interval_s"] == pytest.approx(pdelta)
    assert sum(s["generation_tokens_per_s"] * s["interval_s"] for s in srvs[1:]) == \
        pytest.approx(usage["completion_tokens"])
    assert srvs[-1]["requests_running"] == after["lpx:num_requests_running"]
    assert srvs[-1]["kv_cache_usage_perc"] == after["lpx:kv_cache_usage_perc"]


def stream(srv, tokens, started, done):
    """A streaming completion of `tokens` tokens; sets `started` at its first chunk and
    hangs up (the server then ends the request) once `done` is set."""
    body = {"model": srv.model, "prompt": "Count:", "max_tokens": tokens, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=120) as r:
        for _ in r.iter_lines():
            started.set()
            if done.is_set():
                break


def test_running_waiting_and_kv_agree_with_metrics(lpx_bin, srv):
    """One request decodes (--max-num-seqs 1) while a second waits: monitor, read between
    two reads of /metrics that both show that, must show it too."""
    srv.wait_idle(60)
    for _ in range(3):
        first, second, done = threading.Event(), threading.Event(), threading.Event()
        threads = [threading.Thread(target=stream, args=(srv, 400, first, done)),
                   threading.Thread(target=stream, args=(srv, 8, second, done))]
        threads[0].start()
        assert first.wait(60)
        threads[1].start()
        end = time.monotonic() + 30
        while True:
            m0 = srv.metrics()
            if m0["lpx:num_requests_waiting"] == 1 or time.monotonic() > end:
                break
            time.sleep(0.01)
        r = monitor(lpx_bin, "--url", srv.url, "--json", "--count", "1")
        m1 = srv.metrics()
        done.set()
        for t in threads:
            t.join(120)
        srv.wait_idle(60)
        steady = all(m["lpx:num_requests_running"] == 1 and m["lpx:num_requests_waiting"] == 1
                     for m in (m0, m1))
        if steady:
            break
    assert steady, "the long request never ran alongside a waiting one"
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["server"]
    assert s["requests_running"] == 1 and s["requests_waiting"] == 1
    # The running request's KV grows while it decodes: monitor's reading lies between.
    assert 0 < m0["lpx:kv_cache_usage_perc"] <= s["kv_cache_usage_perc"] \
        <= m1["lpx:kv_cache_usage_perc"]
    assert m0["lpx:kv_cache_blocks_used"] <= s["kv_cache_blocks_used"] \
        <= m1["lpx:kv_cache_blocks_used"]
    assert s["kv_cache_blocks_total"] == m0["lpx:kv_cache_blocks_total"]
    assert m0["lpx:generation_tokens_total"] <= s["generation_tokens_total"] \
        <= m1["lpx:generation_tokens_total"]


def test_table_without_gpu(lpx_bin, srv):
    r = monitor(lpx_bin, "--url", srv.url, "--count", "2", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# no NVIDIA GPU to monitor (") and "the server only" in lines[0]
    assert lines[1].split() == ["#", "time", "tok/s", "run", "wait", "kv%"]
    rows = [l.split() for l in lines if not l.startswith("#")]
    assert len(rows) == 2 and all(len(row) == 5 for row in rows)
    assert rows[0][1] == "-"  # no rate from a single scrape
    m = srv.metrics()
    assert float(rows[1][1]) >= 0
    assert rows[1][2:] == ["%.0f" % m["lpx:num_requests_running"],
                           "%.0f" % m["lpx:num_requests_waiting"],
                           "%.1f" % (100 * m["lpx:kv_cache_usage_perc"])]


def test_gpu_and_server_columns(lpx_bin, srv):
    """With a GPU (the fake NVML's healthy H200), each GPU row carries the server's figures."""
    fake = str(ROOT / os.environ.get("LPX_BUILD", "build") / "libfake_nvml.so")
    env = dict(os.environ, LPX_NVML_LIBRARY=fake, LPX_FAKE_NVML_STATE="healthy")
    run = [lpx_bin, "monitor", "--url", srv.url, "--count", "1"]
    r = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    head, _, row = r.stdout.splitlines()
    assert head.split()[:8] == ["#", "time", "tok/s", "run", "wait", "kv%", "gpu", "sm%"]
    assert row.split()[1:6] == ["-", "0", "0", "0.0", "0"]
    r = subprocess.run(run + ["--json"], capture_output=True, text=True, timeout=60, env=env)
    doc = json.loads(r.stdout)
    assert doc["gpu"] == 0 and doc["memory_total_bytes"] == 141 << 30
    assert doc["server"]["up"] and doc["server"]["url"] == srv.url + "/metrics"
    assert doc["server"]["generation_tokens_total"] == srv.metrics()["lpx:generation_tokens_total"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """An HTTP server answering GET /metrics with `status` and `body`."""

    def __init__(self, status, body, port=0):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *a):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", port), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_unreachable_url(lpx_bin):
    url = "http://127.0.0.1:%d" % free_port()
    r = monitor(lpx_bin, "--url", url, "--count", "1")
    assert r.returncode == 1 and r.stdout.count("\n") <= 1
    err = r.stderr.splitlines()[-1]
    assert err.startswith("lpx monitor: %s/metrics: " % url) and "onnect" in err, r.stderr


@pytest.mark.parametrize("status,body,says", [
    (404, "Not Found", "HTTP 404: is it an lpx server (lpx serve)?"),
    (200, "vllm:num_requests_running{model_name=\"m\"} 0\n",
     "no lpx:generation_tokens_total series in the answer: this is not an lpx server"),
])
def test_not_an_lpx_server(lpx_bin, status, body, says):
    fake = FakeServer(status, body)
    try:
        r = monitor(lpx_bin, "--url", fake.url, "--count", "1")
    finally:
        fake.close()
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] == "lpx monitor: %s/metrics: %s" % (fake.url, says), r.stderr


def test_server_going_away_is_an_alert(lpx_bin, srv):
    """A server that stops answering after the first sample is an alert, not an exit."""
    fake = FakeServer(200, httpx.get(srv.url + "/metrics").text)
    log = Lines(lpx_bin, "--url", fake.url, "--interval", "0.1")
    lines = [log.next(), log.next(), log.next()]  # no-GPU note, header, first row
    fake.close()
    while "ALERT" not in lines[-1]:
        lines.append(log.next())
    lines.append(log.next())  # a row after the alert: still running
    rc, _, err = log.stop()
    assert rc == 0, err
    assert "server ALERT unreachable: %s/metrics: " % fake.url in lines[-2]
    assert lines[-1].split()[1:] == ["down", "-", "-", "-"]


def test_server_going_away_json_keeps_sampling(lpx_bin, srv):
    """--json: the header is one line, alerts are a list, and a server that went away is
    retried at every sample (it answers again: the alert clears)."""
    r = monitor(lpx_bin, "--url", srv.url, "--count", "1")
    assert [l for l in r.stdout.splitlines() if l.strip() in ("", "#")] == []
    body = httpx.get(srv.url + "/metrics").text
    fake = FakeServer(200, body)
    port = fake.httpd.server_address[1]
    log = Lines(lpx_bin, "--url", fake.url, "--interval", "0.1", "--json")
    first = json.loads(log.next())
    assert first["alerts"] == [] and first["server"]["up"]
    fake.close()
    down = json.loads(log.next())
    while down["server"]["up"]:
        down = json.loads(log.next())
    assert len(down["alerts"]) == 1 and down["alerts"][0].startswith("unreachable: ")
    assert json.loads(log.next())["server"]["up"] is False  # still sampling
    back = FakeServer(200, body, port)  # the server is back on its port
    try:
        again = json.loads(log.next())
        while not again["server"]["up"]:
            again = json.loads(log.next())
        assert again["alerts"] == []
    finally:
        rc, _, err = log.stop()
        back.close()
    assert rc == 0 and "server alert cleared" in err, err


def test_url_usage(lpx_bin):
    r = monitor(lpx_bin, "--url", "127.0.0.1:8000")
    assert r.returncode == 2
    assert r.stderr == "lpx monitor: --url '127.0.0.1:8000': expected http://HOST:PORT of a " \
                       "running lpx serve\n"
    assert "--url URL" in monitor(lpx_bin, "--help").stdout
