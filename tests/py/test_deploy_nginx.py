"""A real nginx with deploy/nginx/lpx-upstream.conf in front of three `lpx serve` replicas
on loopback; one is killed with SIGKILL under load. Every non-streaming request still
succeeds (nginx retries it on another replica), and each survivor's /metrics counts
exactly the requests nginx's log says it answered (docs/deploy.md)."""
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import Server

ROOT = Path(__file__).resolve().parents[2]
N_REQUESTS = 24
CONCURRENCY = 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_conf(tmp, ports, listen):
    """The shipped config with loopback replicas and port; temp files and logs in tmp."""
    conf = (ROOT / "deploy/nginx/lpx-upstream.conf").read_text()
    servers = re.findall(r"^ *server \S+:8080 (.*);$", conf, re.M)
    assert len(servers) == len(ports)
    lines = iter(f"    server 127.0.0.1:{p} {servers[i]};" for i, p in enumerate(ports))
    conf = re.sub(r"^ *server \S+:8080 .*;$", lambda _: next(lines), conf, flags=re.M)
    conf, n = re.subn(r"listen 8080;", f"listen 127.0.0.1:{listen};", conf)
    assert n == 1
    (tmp / "upstream.conf").write_text(conf)
    temps = "\n".join(f"    {k}_temp_path {tmp}/{k};" for k in
                      ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (tmp / "nginx.conf").write_text(f"""daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{}}
http {{
    log_format up '$status "$uri" "$upstream_addr"';
    access_log {tmp}/access.log up;
{temps}
    include {tmp}/upstream.conf;
}}
""")
    return tmp / "nginx.conf"


@pytest.fixture
def nginx_bin():
    path = shutil.which("nginx") or shutil.which("/usr/sbin/nginx")
    if not path:
        pytest.skip("nginx is not installed (scripts/install-deps.sh --test installs nginx-light)")
    return path


@pytest.fixture
def lb(tmp_path, nginx_bin, lpx_bin, smollm2):
    """(nginx's URL, the three replicas) with nginx answering /health."""
    replicas = [Server(lpx_bin, smollm2, "-t", "1") for _ in range(3)]
    nginx = None
    try:
        ports = [int(s.url.rsplit(":", 1)[1]) for s in replicas]
        listen = free_port()
        nginx = subprocess.Popen([nginx_bin, "-p", str(tmp_path), "-c",
                                  str(nginx_conf(tmp_path, ports, listen))],
                                 stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{listen}"
        end = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert nginx.poll() is None and time.monotonic() < end, nginx.stderr.read()
            time.sleep(0.05)
        yield url, replicas
    finally:
        if nginx and nginx.poll() is None:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(10)
        for s in replicas:
            s.stop()


def test_sigkill_one_replica_nonstreaming_all_succeed(tmp_path, lb):
    url, replicas = lb
    victim = replicas[0]
    killed = threading.Event()

    def kill_when_busy():
        # kill while the victim holds requests, so some are cut mid-decode
        while victim.metrics()["lpx:num_requests_running"] == 0:
            time.sleep(0.01)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        killed.set()

    def one(i):
        body = {"model": "smollm2", "prompt": f"Item {i}:", "max_tokens": 24,
                "ignore_eos": True}
        return httpx.post(url + "/v1/completions", json=body, timeout=120)

    threading.Thread(target=kill_when_busy, daemon=True).start()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        rs = list(pool.map(one, range(N_REQUESTS)))
    assert killed.wait(1), "the victim never ran a request"
    assert [r.status_code for r in rs] == [200] * N_REQUESTS, [r.text for r in rs]
    assert all(r.json()["choices"][0]["finish_reason"] == "length" for r in rs)
    # nginx's log: the replicas each completion tried, the last one answered it
    answered, retried = {}, 0
    for line in (tmp_path / "access.log").read_text().splitlines():
        status, uri, addrs = re.fullmatch(r'(\d+) "([^"]*)" "([^"]*)"', line).groups()
        if uri != "/v1/completions":
            continue
        assert status == "200", line
        tried = addrs.split(", ")
        retried += len(tried) > 1
        answered[tried[-1]] = answered.get(tried[-1], 0) + 1
    assert sum(answered.values()) == N_REQUESTS
    assert retried >= 1  # at least the requests cut on the victim went on elsewhere
    for s in replicas[1:]:
        text = httpx.get(s.url + "/metrics").text
        done = {r: float(v) for r, v in re.findall(
            r'^lpx:request_success_total\{finished_reason="(\w+)",[^}]*\} (\S+)$', text,
            re.M)}
        assert done == {"stop": 0, "length": answered.get(s.url[7:], 0), "abort": 0,
                        "error": 0}, (s.url, answered)


def test_sigkill_cuts_its_streams_with_an_error_others_finish(lb):
    url, replicas = lb
    victim = replicas[0]
    outcome = {}

    def stream(i, started):
        body = {"model": "smollm2", "prompt": f"Story {i}:", "max_tokens": 200,
                "ignore_eos": True, "stream": True}
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
                assert r.status_code == 200
                last = None
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        started.set()
                        last = line
                outcome[i] = "done" if last == "data: [DONE]" else "cut"
        except httpx.TransportError as e:
            outcome[i] = type(e).__name__
        finally:
            started.set()

    # one stream at a time until the victim runs one: least_conn spreads them, and each
    # has sent its first event, so nginx can no longer retry it elsewhere
    ts = []
    while victim.metrics()["lpx:num_requests_running"] == 0:
        assert len(ts) < 6, "no stream reached the victim"
        started = threading.Event()
        ts.append(threading.Thread(target=stream, args=(len(ts), started)))
        ts[-1].start()
        assert started.wait(60)
        time.sleep(0.1)
    on_victim = victim.metrics()["lpx:num_requests_running"]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    for t in ts:
        t.join(120)
    errors = [o for o in outcome.values() if o != "done"]
    assert len(outcome) == len(ts) and len(errors) == on_victim, outcome
    # the client sees the cut: the chunked body ends without its last chunk
    assert set(errors) <= {"RemoteProtocolError", "ReadError", "cut"}, outcome


def test_rolling_restart_under_load_fails_nothing(tmp_path, lb, lpx_bin, smollm2):
    """Each replica in turn: SIGTERM (drain: in-flight requests finish, new ones get 503,
    which nginx retries elsewhere), then a new process on the same port."""
    url, replicas = lb
    conf = (ROOT / "deploy/nginx/lpx-upstream.conf").read_text()
    fail_timeout = max(float(t) for t in re.findall(r"fail_timeout=(\d+)s", conf))
    statuses, stop = [], threading.Event()

    def load(w):
        i = 0
        while not stop.is_set():
            body = {"model": "smollm2", "prompt": f"Load {w} {i}:", "max_tokens": 8,
                    "ignore_eos": True}
            try:
                statuses.append(httpx.post(url + "/v1/completions", json=body,
                                           timeout=120).status_code)
            except httpx.TransportError as e:
                statuses.append(type(e).__name__)
            i += 1

    workers = [threading.Thread(target=load, args=(w,)) for w in range(4)]
    for t in workers:
        t.start()
    try:
        for k in range(len(replicas)):
            old = replicas[k]
            port = old.url.rsplit(":", 1)[1]
            n = len(statuses)
            while len(statuses) < n + 4:  # the load reaches this replica's turn
                time.sleep(0.05)
            old.proc.send_signal(signal.SIGTERM)
            assert old.proc.wait(60) == 0, "".join(old.log)
            # a later --port wins over the helper's --port 0
            replicas[k] = Server(lpx_bin, smollm2, "-t", "1", "--port", port)
            assert replicas[k].url == old.url
            # ready, and past nginx's window for the failures its drain and load caused
            time.sleep(fail_timeout + 0.5)
    finally:
        stop.set()
        for t in workers:
            t.join(120)
    assert statuses and set(statuses) == {200}, ({s: statuses.count(s) for s in set(statuses)},
                                                 (tmp_path / "error.log").read_text()[-3000:])
