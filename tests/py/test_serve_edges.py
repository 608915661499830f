"""lpx serve, the rest of issue 27's hardening: one request's n choices cannot take
every batch slot (--max-num-seqs-per-request), HTTP edge cases over raw sockets (an
unknown Transfer-Encoding is answered at once, a malformed head gets a JSON error at
once from the server's front, not libmicrohttpd's HTML, a client that half-closes
after its request still gets the answer), and every JSON byte the server writes is
valid UTF-8 whatever the client sent. The real SmolLM2 on the CPU."""
import json
import random
import re
import socket
import threading
import time

import h11
import httpx
import pytest

from serve_helpers import Server


def port(s):
    return int(s.url.rsplit(":", 1)[1])


def raw(s, data, shut=False, timeout=30):
    """Sends data on a new connection (then half-closes it when shut); returns every
    byte the server sends until it closes."""
    c = socket.create_connection(("127.0.0.1", port(s)))
    try:
        c.sendall(data)
        if shut:
            c.shutdown(socket.SHUT_WR)
        c.settimeout(timeout)
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out
    finally:
        c.close()


def post_head(path, n_body, extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(n_body).encode() +
            b"\r\n" + extra + b"\r\n")


def final_response(out):
    """(status, headers, body) of the last response in out, after any interim 1xx."""
    while True:
        head, _, rest = out.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        if status >= 200:
            return status, head.decode("latin-1"), rest
        out = rest


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    # 4 slots: the default cap is 2 a request
    s = Server(lpx_bin, smollm2, "--max-num-seqs", "4")
    yield s
    s.stop()


# ---- fairness ---------------------------------------------------------------------------


def test_startup_line_names_the_cap(srv):
    assert any("max_num_seqs 4 (2 a request)" in l for l in srv.log), "".join(srv.log)


def test_n16_request_leaves_slots_to_others(srv):
    """An n=16 stream on 4 slots runs 2 of its choices at a time; a request sent after
    its first token gets its answer before the n=16 one ends (without the cap the 16
    choices hold every slot, and the second request waits behind all of them)."""
    body = {"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True, "n": 16,
            "temperature": 1, "seed": 1, "stream": True}
    started, t_end, chunks = threading.Event(), [], []

    def big():
        with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[6:]))
                    started.set()
        t_end.append(time.monotonic())

    t = threading.Thread(target=big)
    t.start()
    assert started.wait(120)
    r = httpx.post(srv.url + "/v1/completions",
                   json={"prompt": "Hi", "max_tokens": 1, "temperature": 0}, timeout=300)
    t_small = time.monotonic()
    t.join()
    assert r.status_code == 200, r.text
    assert t_end and t_small < t_end[0], "the second request waited for the n=16 one"
    # and the n=16 request still got all of its choices, each to max_tokens
    done = {c["index"] for ch in chunks for c in ch["choices"] if c["finish_reason"]}
    assert done == set(range(16))


def test_cap_is_a_usage_checked_flag(lpx_bin, smollm2):
    import subprocess
    r = subprocess.run([lpx_bin, "serve", "-m", smollm2, "--max-num-seqs-per-request", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--max-num-seqs-per-request" in r.stderr
    h = subprocess.run([lpx_bin, "serve", "--help"], capture_output=True, text=True).stdout
    assert "--max-num-seqs-per-request N" in h


# ---- HTTP edge cases --------------------------------------------------------------------

BODY = json.dumps({"prompt": "The capital of France is", "max_tokens": 30,
                   "ignore_eos": True, "temperature": 0}).encode()


@pytest.mark.parametrize("te", [b"gzip", b"gzip, chunked", b"identity"])
def test_unknown_transfer_encoding_is_501_at_once(srv, te):
    data = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: " + te + b"\r\n\r\n" + BODY)
    t0 = time.monotonic()
    status, head, body = final_response(raw(srv, data))  # the server closes: no timeout
    assert time.monotonic() - t0 < 5  # the read timeout is 30 s
    assert status == 501
    err = json.loads(body.decode("utf-8"))["error"]
    assert err["code"] == "unsupported_transfer_encoding" and te.decode() in err["message"]


def responses(s, cls):
    """/metrics' count of HTTP responses of status class cls (4 for 4xx)."""
    text = httpx.get(s.url + "/metrics", timeout=30).text
    return float(re.search(r'lpx:http_responses_total\{status="%dxx"[^}]*\} (\S+)' % cls,
                           text).group(1))


CHUNKED = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
CLEN = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: ")
TLS_HELLO = bytes.fromhex("16030100f4010000f00303") + bytes(range(32)) + b"\x00" * 40


@pytest.mark.parametrize("data, status, code", [
    # request lines: garbage, binary, bytes that never make a line (TLS on the plain
    # port, NULs: these waited for the read deadline), versions, an empty method
    (b"hello world\r\n\r\n", 400, "malformed_http"),
    (b"\x01\x02\x03 \xff\xfe \x80\r\n\r\n", 400, "malformed_http"),
    (TLS_HELLO, 400, "malformed_http"),
    (b"\x00\x00\x00\x00", 400, "malformed_http"),
    (b"GET / HTTP/9.9\r\n\r\n", 505, "http_version_not_supported"),
    (b"GET / HTTP/0.9\r\n\r\n", 505, "http_version_not_supported"),
    (b"GET /health\r\n\r\n", 400, "malformed_http"),
    (b" /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "malformed_http"),
    (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 414, "uri_too_long"),
    # header lines
    (b"GET /health HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed_http"),
    (b"GET /health HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n", 400, "malformed_http"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n\r\n", 400, "malformed_http"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\x01b\r\n\r\n", 400, "malformed_http"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\rX-A: b\r\n\r\n", 400, "malformed_http"),
    (b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431,
     "header_fields_too_large"),
    # Content-Length (libmicrohttpd's own answer to these wrote its head twice)
    (CLEN + b"1x\r\n\r\n{}", 400, "malformed_http"),
    (CLEN + b"-1\r\n\r\n{}", 400, "malformed_http"),
    (CLEN + b"99999999999999999999999\r\n\r\n{}", 413, "request_too_large"),
    (CLEN + b"2\r\nContent-Length: 3\r\n\r\n{}", 400, "malformed_http"),
    # the first chunk line: the 70 KB extension (libmicrohttpd's HTML 500)
    (CHUNKED + b"2;" + b"x" * 70000 + b"\r\n{}\r\n0\r\n\r\n", 400, "malformed_http"),
    (CHUNKED + b"zz\r\n{}\r\n0\r\n\r\n", 400, "malformed_http"),
    (CHUNKED + b"f" * 20 + b"\r\n{}\r\n0\r\n\r\n", 413, "request_too_large"),
])
def test_malformed_http_is_a_json_error_at_once(srv, data, status, code):
    """What libmicrohttpd would refuse while parsing a head (with HTML bodies of its
    own, or not at all until the read deadline) the server's front answers at once
    with an OpenAI error object, then closes."""
    before = responses(srv, status // 100)
    t0 = time.monotonic()
    out = raw(srv, data)
    assert time.monotonic() - t0 < 5
    got, head, body = final_response(out)
    assert got == status, out[:300]
    assert "Content-Type: application/json" in head and "Connection: close" in head
    assert "Date: " in head
    err = json.loads(body.decode("utf-8"))["error"]
    assert err["code"] == code and err["type"] == "invalid_request_error", err
    assert responses(srv, status // 100) == before + 1  # counted as any answer is


def test_head_cut_by_a_half_close_is_answered(srv):
    """A client that shuts its side before its head ended gets a 400 at once (it can
    never be whole), not a 408 at the deadline."""
    t0 = time.monotonic()
    out = raw(srv, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ", shut=True)
    assert time.monotonic() - t0 < 5
    status, _, body = final_response(out)
    assert status == 400 and json.loads(body)["error"]["code"] == "malformed_http"


@pytest.mark.parametrize("data", [
    b"\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    b"GET /health HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: " +
    b"a" * 16000 + b"\r\n\r\n",
])
def test_lenient_heads_are_still_served(srv, data):
    """Empty lines before the request line and bare LFs (RFC 9112 2.2 lets a server
    accept both, as libmicrohttpd does), and a head just under the front's 16 KiB,
    which libmicrohttpd must then take."""
    status, _, body = final_response(raw(srv, data))
    assert status == 200 and json.loads(body) == {"status": "ok"}


def test_chunked_bodies_with_extensions_and_continue(srv):
    """A chunk extension the server ignores (RFC 9112 7.1.1), and a chunked body sent
    only after the server's 100 Continue (the front does not wait for its first chunk
    line, which the client holds back)."""
    b = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
    ext = b"%x;name=value\r\n" % len(b) + b + b"\r\n0\r\n\r\n"
    status, _, body = final_response(raw(srv, CHUNKED + ext))
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2
    c = socket.create_connection(("127.0.0.1", port(srv)))
    try:
        c.sendall(CHUNKED[:-2] + b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        c.settimeout(10)
        assert c.recv(100).startswith(b"HTTP/1.1 100 ")
        c.sendall(b"%x\r\n" % len(b) + b + b"\r\n0\r\n\r\n")
        out = b""
        while chunk := c.recv(65536):
            out += chunk
    finally:
        c.close()
    status, _, body = final_response(out)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2


def first_response(out):
    """(status, head, body) of the first final response in out: what the front or
    libmicrohttpd answered the connection's first request (bytes after it are a next
    request's, libmicrohttpd's alone: docs/server.md, "Malformed HTTP"); None when
    there is none."""
    while True:
        head, _, rest = out.partition(b"\r\n\r\n")
        if not head:
            return None
        status = int(head.split(b" ")[1])
        if status >= 200:
            n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
            return status, head.decode("latin-1"), rest[:n]
        out = rest


def whole_head(data):
    """Whether h11 (httpx's HTTP/1.1 parser, an independent reference) reads a whole
    valid request head in data whose body has not all come."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    try:
        if not isinstance(conn.next_event(), h11.Request):
            return False
        while isinstance(ev := conn.next_event(), h11.Data):
            pass
        return ev is h11.NEED_DATA  # not EndOfMessage: that request was whole
    except h11.RemoteProtocolError:
        return False


def test_mutated_heads_get_json_or_nothing(srv):
    """400 heads, each a valid request with bytes changed, inserted or cut (then the
    client half-closes): whatever the server answers is an OpenAI error object or a
    real answer, never libmicrohttpd's HTML, and it answers at once."""
    rng = random.Random(27)
    good = CLEN + b"%d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY
    n_head = good.index(b"\r\n\r\n") + 4
    statuses = {}
    for _ in range(400):
        d = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            if not d:
                break
            i = rng.randrange(min(n_head, len(d)))
            op = rng.random()
            byte = rng.choice([0, 1, 9, 10, 13, 32, 58, 59, 127, 128, 255, rng.randrange(256)])
            if op < 0.4:
                d[i] = byte
            elif op < 0.7:
                d.insert(i, byte)
            elif op < 0.85:
                del d[i]
            else:
                del d[i:]
        c = socket.create_connection(("127.0.0.1", port(srv)))
        c.sendall(bytes(d))
        c.shutdown(socket.SHUT_WR)
        c.settimeout(5)  # a kept-alive connection stays open after its answer
        out = b""
        try:
            while chunk := c.recv(65536):
                out += chunk
        except socket.timeout:
            if not out:  # neither answered nor closed: a whole head, waiting for its body
                assert whole_head(bytes(d)), bytes(d)
                statuses["waits for its body"] = statuses.get("waits for its body", 0) + 1
                continue
        finally:
            c.close()
        got = first_response(out) if out else None
        if not got:
            statuses["closed"] = statuses.get("closed", 0) + 1
            continue
        status, head, body = got
        statuses[status] = statuses.get(status, 0) + 1
        assert "Content-Type: application/json" in head, (bytes(d), out[:300])
        json.loads(body.decode("utf-8"))
    print("mutated heads:", statuses)
    assert statuses.get(400, 0) > 100  # the mutations did break heads


@pytest.mark.parametrize("keep_alive", [True, False])
def test_half_closed_client_gets_its_answer(srv, keep_alive):
    """The client shuts its sending side after a complete request (a FIN: to the
    server's poll the same as a close). 30 tokens take several ticks of the server's
    100 ms watch, so the watch sees the FIN every time."""
    for _ in range(3):
        extra = b"" if keep_alive else b"Connection: close\r\n"
        out = raw(srv, post_head(b"/v1/completions", len(BODY), extra) + BODY, shut=True)
        status, head, body = final_response(out)
        assert status == 200, out
        assert json.loads(body.decode("utf-8"))["usage"]["completion_tokens"] == 30


def test_half_closed_stream_gets_its_answer(srv):
    b = json.dumps({"prompt": "The capital of France is", "max_tokens": 30,
                    "ignore_eos": True, "temperature": 0, "stream": True}).encode()
    out = raw(srv, post_head(b"/v1/completions", len(b)) + b, shut=True)
    status, head, body = final_response(out)
    assert status == 200 and b"data: [DONE]" in body, out


def test_closed_client_is_still_cancelled(srv):
    """The probe that tells a half-close from a close: a client that really closed
    resets it, and its request ends (KV freed) long before its 400 tokens."""
    b = json.dumps({"prompt": "Once", "max_tokens": 400, "ignore_eos": True}).encode()
    c = socket.create_connection(("127.0.0.1", port(srv)))
    c.sendall(post_head(b"/v1/completions", len(b)) + b)
    end = time.monotonic() + 30
    while srv.metrics()["lpx:num_requests_running"] == 0 and time.monotonic() < end:
        time.sleep(0.02)
    c.close()
    m = srv.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0
    gen = [l for l in srv.log if "(client gone)" in l and "/v1/completions" in l]
    assert gen and int(gen[-1].split("gen=")[1].split()[0]) < 400, "".join(srv.log[-5:])


# ---- every JSON byte written is valid UTF-8 -------------------------------------------

BAD = b"\xff\xfe\xc3("  # bytes that start no UTF-8 character, and a cut one


def strict(body):
    """The body decoded as strict clients do: every byte valid UTF-8, then JSON."""
    return json.loads(body.decode("utf-8", errors="strict"))


def raw_request(s, method, path, body=b""):
    head = (method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n")
    return final_response(raw(s, head + body))


@pytest.mark.parametrize("path", [b"/v1/nope" + BAD, b"/v1/nope%ff%c3", b"/x" + "é".encode() * 150])
def test_404_url_is_valid_utf8(srv, path):
    status, _, body = raw_request(srv, b"GET", path)
    assert status == 404
    assert "no route /" in strict(body)["error"]["message"]


@pytest.mark.parametrize("body", [
    b'{"model":"m' + BAD + b'","prompt":"hi"}',
    b'{"prompt":"hi' + BAD + b'","max_tokens":1,"echo":true}',
    b'{"prompt":"hi","max_tokens":1,"stop":"' + BAD + b'"}',
    b'{"prompt":"hi","max_tokens":1,"bogus' + BAD + b'":1}',
])
def test_invalid_utf8_body_is_a_400_naming_the_byte(srv, body):
    status, _, out = raw_request(srv, b"POST", b"/v1/completions", body)
    assert status == 400
    err = strict(out)["error"]
    assert err["message"] == f"the request body is not valid UTF-8 (byte {body.index(BAD)}: 0xFF)"


def test_long_model_name_is_cut_on_a_character(srv):
    # 300 two-byte characters: "%.200s" would have cut the 100th in half
    status, _, out = raw_request(srv, b"POST", b"/v1/completions",
                                 b'{"model":"' + "é".encode() * 300 + b'","prompt":"hi"}')
    assert status == 404
    assert "é" * 100 in strict(out)["error"]["message"]


def test_echo_of_token_ids_that_end_mid_character(srv, smollm2):
    """Ids whose bytes are half a character (byte-level BPE): the echoed prompt and the
    text are valid UTF-8 (U+FFFD where a character is cut), and so are the logprobs'
    tokens of a run without echo (the two are not allowed together)."""
    from gguf import GGUFReader
    r = GGUFReader(smollm2)
    toks = r.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(toks.parts[i]).decode("utf-8") for i in toks.data]
    # GPT-2 byte-level symbols: "Ã" is the byte 0xC3, the lead of a two-byte character
    lead = vocab.index("Ã")
    for stream, echo in ((False, True), (True, True), (False, False), (True, False)):
        status, _, out = raw_request(srv, b"POST", b"/v1/completions", json.dumps(
            {"prompt": [[lead, lead]], "max_tokens": 8, "echo": echo, "stream": stream,
             "temperature": 2.0, "seed": 3, **({} if echo else {"logprobs": 5})}).encode())
        assert status == 200, out
        if not stream:
            text = strict(out)["choices"][0]["text"]
            assert text.startswith("\ufffd") or not echo
        else:
            for line in out.split(b"\n"):
                if line.startswith(b"data: {"):
                    strict(line[6:])
