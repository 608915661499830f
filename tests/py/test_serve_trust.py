"""lpx serve's trust boundaries (issue 27): a web page the user opens cannot
drive or read a local server (Host, Origin, Content-Type), /metrics is behind
the API key, the key can come from a file, log lines and JSON errors carry no
raw client bytes, a body means what it says (no NUL, no trailing text), and a
second SIGTERM ends a drain at once. The real SmolLM2 on the CPU; raw headers
through http.client and sockets."""
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest

from serve_helpers import Server

BODY = {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2)
    yield s
    s.stop()


def port(s):
    return int(s.url.rsplit(":", 1)[1])


def raw(s, method, path, body=None, headers=None):
    """One request with exactly these headers (http.client adds only Host, which
    a given Host replaces): (status, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port(s), timeout=60)
    h = dict(headers or {})
    c.putrequest(method, path, skip_host="Host" in h, skip_accept_encoding=True)
    for k, v in h.items():
        c.putheader(k, v)
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body else b"")
    if body is not None:
        c.putheader("Content-Length", str(len(data)))
    c.endheaders(data if body is not None else None)
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def error(body):
    """The error object; the body must be strict UTF-8 JSON."""
    return json.loads(body.decode("utf-8", errors="strict"))["error"]


# ---- Content-Type --------------------------------------------------------------------


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/jsonx"])
def test_post_needs_json_content_type(srv, ctype):
    h = {"Content-Type": ctype} if ctype else {}
    st, body = raw(srv, "POST", "/v1/completions", BODY, h)
    assert st == 415, body
    e = error(body)
    assert e["code"] == "unsupported_media_type" and "application/json" in e["message"]


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8",
                                   "Application/JSON"])
def test_json_content_type_accepted(srv, ctype):
    st, body = raw(srv, "POST", "/v1/completions", BODY, {"Content-Type": ctype})
    assert st == 200, body


# ---- Host (DNS rebinding) ----------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:%d", "localhost.evil.example",
                                  "127.0.0.1.evil.example", "[::2]:80"])
def test_foreign_host_refused_on_loopback(srv, host):
    h = host % port(srv) if "%d" in host else host
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/metrics", None),
                               ("GET", "/", None), ("POST", "/v1/completions", BODY)]:
        st, out = raw(srv, method, path, body, {"Host": h, **JSON})
        assert st == 400, (path, out)
        assert error(out)["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:%d", "127.0.0.1:%d", "127.0.0.1",
                                  "[::1]:%d", "[::1]"])
def test_loopback_hosts_accepted(srv, host):
    h = host % port(srv) if "%d" in host else host
    st, out = raw(srv, "POST", "/v1/completions", BODY, {"Host": h, **JSON})
    assert st == 200, out


def test_allowed_hosts(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--allowed-hosts", "proxy.internal, lpx.local")
    try:
        for h in ("proxy.internal", "lpx.local:8443", "localhost"):
            assert raw(s, "GET", "/v1/models", None, {"Host": h})[0] == 200, h
        st, out = raw(s, "GET", "/v1/models", None, {"Host": "evil.example"})
        assert st == 400 and error(out)["code"] == "host_not_allowed"
    finally:
        s.stop()


def test_any_host_when_bound_elsewhere(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--host", "0.0.0.0")
    try:
        assert raw(s, "GET", "/v1/models", None, {"Host": "lpx.svc.cluster.local"})[0] == 200
    finally:
        s.stop()
    s = Server(lpx_bin, smollm2, "--host", "0.0.0.0", "--allowed-hosts", "lpx.svc")
    try:
        assert raw(s, "GET", "/v1/models", None, {"Host": "lpx.svc:80"})[0] == 200
        assert raw(s, "GET", "/v1/models", None, {"Host": "other.example"})[0] == 400
    finally:
        s.stop()


# ---- Origin -----------------------------------------------------------------------------


def test_foreign_origin_refused(srv):
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
        for method, path, body in [("POST", "/v1/completions", BODY),
                                   ("POST", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "hi"}]}),
                                   ("GET", "/v1/models", None), ("GET", "/metrics", None)]:
            st, out = raw(srv, method, path, body, {"Origin": origin, **JSON})
            assert st == 403, (origin, path, out)
            assert error(out)["code"] == "origin_not_allowed"
    # Probes stay open; a preflight is answered (without CORS headers).
    assert raw(srv, "GET", "/health", None, {"Origin": "http://evil.example"})[0] == 200
    assert raw(srv, "OPTIONS", "/v1/completions", None, {"Origin": "http://evil.example"})[0] == 204


def test_same_origin_and_no_origin_pass(srv):
    h = f"127.0.0.1:{port(srv)}"
    st, out = raw(srv, "POST", "/v1/completions", BODY, {"Host": h, "Origin": "http://" + h, **JSON})
    assert st == 200, out
    st, out = raw(srv, "POST", "/v1/completions", BODY,
                  {"Host": f"localhost:{port(srv)}", "Origin": f"http://localhost:{port(srv)}", **JSON})
    assert st == 200, out
    # Behind a TLS proxy that passes the Host on.
    st, out = raw(srv, "POST", "/v1/completions", BODY,
                  {"Host": "localhost", "Origin": "https://localhost", **JSON})
    assert st == 200, out
    assert raw(srv, "POST", "/v1/completions", BODY, JSON)[0] == 200


def test_allowed_origin_passes(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--allowed-origins", "http://app.example")
    try:
        st, out = raw(s, "POST", "/v1/completions", BODY, {"Origin": "http://app.example", **JSON})
        assert st == 200, out
        assert raw(s, "POST", "/v1/completions", BODY, {"Origin": "http://evil.example", **JSON})[0] == 403
    finally:
        s.stop()


# ---- what the API key protects ------------------------------------------------------------


def test_metrics_need_the_key(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, api_key="k1")
    try:
        r = httpx.get(s.url + "/metrics")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer no"}).status_code == 401
        r = httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer k1"})
        assert r.status_code == 200 and "lpx:num_requests_running" in r.text
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        s.stop()
    s = Server(lpx_bin, smollm2, "--metrics-public", api_key="k1")
    try:
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/v1/models").status_code == 401
    finally:
        s.stop()


def test_api_key_file(lpx_bin, smollm2, tmp_path):
    f = tmp_path / "key"
    f.write_text("sk-from-file\n")
    f.chmod(0o600)
    s = Server(lpx_bin, smollm2, "--api-key-file", str(f))
    try:
        assert all("sk-from-file" not in a for a in s.proc.args)
        assert httpx.get(s.url + "/v1/models").status_code == 401
        r = httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer sk-from-file"})
        assert r.status_code == 200
    finally:
        s.stop()


@pytest.mark.parametrize("content, mode, why", [("\n", 0o600, "empty"), ("", 0o600, "empty"),
                                                ("k\n", 0o644, "readable by other users")])
def test_api_key_file_refused(lpx_bin, smollm2, tmp_path, content, mode, why):
    f = tmp_path / "key"
    f.write_text(content)
    f.chmod(mode)
    r = subprocess.run([lpx_bin, "serve", "-m", smollm2, "--port", "0", "--api-key-file", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and why in r.stderr and "--api-key-file" in r.stderr, r.stderr
    r = subprocess.run([lpx_bin, "serve", "-m", smollm2, "--port", "0", "--api-key-file",
                        str(tmp_path / "missing")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "No such file" in r.stderr, r.stderr


# ---- log lines and JSON errors carry no raw client bytes ----------------------------------------


def send_raw(s, data):
    with socket.create_connection(("127.0.0.1", port(s)), timeout=30) as c:
        c.sendall(data)
        out = b""
        while chunk := c.recv(65536):
            out += chunk
    return out


def test_log_escapes_path(srv):
    # %-escapes MHD decodes into the path: ESC, a newline, a forged line, a bad byte.
    path = b"/x%1b%5b31mred%0alpx%20serve:%20req%201%20GET%20/forged%20200%ff%c3"
    send_raw(srv, b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    end = time.monotonic() + 10
    while time.monotonic() < end and not any("red" in line for line in srv.log):
        time.sleep(0.05)
    line = next(line for line in srv.log if "red" in line)
    assert line.startswith("lpx serve: req ") and line.endswith(" 404 prompt=0 gen=0 " +
                                                              line.split(" gen=0 ")[1])
    assert "\x1b" not in line and "\\x1B[31mred\\x0Alpx serve: req 1 GET /forged 200\\xFF\\xC3 404" in line
    assert not any(l.startswith("lpx serve: req 1 GET /forged") for l in srv.log)


def test_error_bodies_are_valid_utf8(srv):
    # A body that is not UTF-8 is not JSON (RFC 8259): refused, naming the byte, before
    # any of it is echoed (the model in a 404, a field's name, the prompt in echo).
    bad = b'{"model": "\xff\xfe-\xc3(", "prompt": "x"}'
    st, out = raw(srv, "POST", "/v1/completions", bad, JSON)
    assert st == 400
    assert error(out)["message"] == "the request body is not valid UTF-8 (byte 11: 0xFF)"
    # 300 two-byte characters: the 200-byte cut falls on a character boundary.
    st, out = raw(srv, "POST", "/v1/completions", {"model": "é" * 300, "prompt": "x"}, JSON)
    e = error(out)
    assert "'" + "é" * 100 + "'" in e["message"] and "\ufffd" not in e["message"]
    st, out = raw(srv, "GET", "/%ff%fe" + "%C3%A9" * 150, None, {})
    e = error(out)
    assert st == 404 and e["message"].startswith("no route /\ufffd\ufffd") and "\ufffd" not in e["message"][12:]
    st, out = raw(srv, "POST", "/v1/completions", b'{"prompt": "x", "f\xff": 1}', JSON)
    assert st == 400 and "not valid UTF-8 (byte 18: 0xFF)" in error(out)["message"]


# ---- a body means what it says ----------------------------------------------------------------


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", b'{"prompt": "Say yes\\u0000 and then ignore this", "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}'),
    ("/tokenize", b'{"prompt": "a\\u0000b"}'),
    ("/v1/completions", b'{"prompt": "a\x00b", "max_tokens": 1}'),
])
def test_nul_in_a_string_is_400(srv, path, body):
    st, out = raw(srv, "POST", path, body, JSON)
    assert st == 400, out
    assert "NUL" in error(out)["message"]


def test_escaped_backslash_before_u0000_is_text(srv):
    st, out = raw(srv, "POST", "/tokenize", b'{"prompt": "a\\\\u0000b"}', JSON)
    assert st == 200, out
    st, out2 = raw(srv, "POST", "/tokenize", {"prompt": "a\\u0000b"}, JSON)
    assert json.loads(out) == json.loads(out2)


@pytest.mark.parametrize("tail", [b"x", b" {}", b'{"prompt": "other"}', b"]"])
def test_trailing_text_is_400(srv, tail):
    st, out = raw(srv, "POST", "/v1/completions", json.dumps(BODY).encode() + tail, JSON)
    assert st == 400, out
    assert "after the JSON value" in error(out)["message"]


def test_trailing_whitespace_is_fine(srv):
    assert raw(srv, "POST", "/v1/completions", json.dumps(BODY).encode() + b" \r\n\t\n", JSON)[0] == 200


# ---- a second SIGTERM during the drain -------------------------------------------------------


def test_second_sigterm_exits_at_once(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--shutdown-timeout", "600", "--max-num-seqs", "1")
    try:
        def long_request():
            try:
                httpx.post(s.url + "/v1/completions", json={"prompt": "Once upon a time",
                                                            "max_tokens": 400, "ignore_eos": True},
                           timeout=120)
            except httpx.HTTPError:
                pass

        t = threading.Thread(target=long_request, daemon=True)
        t.start()
        end = time.monotonic() + 30
        while s.metrics()["lpx:num_requests_running"] < 1 and time.monotonic() < end:
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 10
        while not any("draining" in l for l in s.log) and time.monotonic() < end:
            time.sleep(0.05)
        assert any("send it again to exit now" in l for l in s.log), "".join(s.log)
        assert s.proc.poll() is None  # still draining: the request runs on
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(10)
        assert time.monotonic() - t0 < 5
        assert rc == 1
        time.sleep(0.2)
        assert any("second SIGTERM: exiting now" in l for l in s.log), "".join(s.log)
    finally:
        s.stop()
