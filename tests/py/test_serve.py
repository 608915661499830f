"""lpx serve end to end on the real SmolLM2 (CPU): the official openai SDK as
the client, every error case, disconnects, concurrency, metrics, SIGTERM."""
import json
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_helpers import Server

KEY = "sk-test-key"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, api_key=KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def complete(client, **kw):
    args = dict(model="smollm2", prompt=PROMPT, max_tokens=8, temperature=0)
    args.update(kw)
    return client.completions.create(**args)


def chat(client, text="What is 2+2?", **kw):
    args = dict(model="smollm2", messages=[{"role": "user", "content": text}], max_tokens=8,
                temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


# ---- the OpenAI API -------------------------------------------------------------


def test_models_and_health(srv, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2"]
    r = httpx.get(srv.url + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_completion_greedy_matches_lpx_run(lpx_bin, smollm2, client):
    r = complete(client)
    text = r.choices[0].text
    assert r.object == "text_completion" and r.model == "smollm2"
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    run = subprocess.run([lpx_bin, "run", "-m", smollm2, "-p", PROMPT, "-n", "8", "--temp", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == text.rstrip("\n")
    # Streaming gives the same text, token by token.
    stream = complete(client, stream=True, stream_options={"include_usage": True})
    parts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            parts.append(c.text)
            finish = c.finish_reason or finish
    assert "".join(parts) == text
    assert finish == "length" and usage.completion_tokens == 8


def test_chat_stream_equals_non_stream(client):
    r = chat(client)
    msg = r.choices[0].message
    assert r.object == "chat.completion" and msg.role == "assistant" and msg.content
    stream = chat(client, stream=True, stream_options={"include_usage": True})
    roles, parts, usage = [], [], None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            roles += [c.delta.role] if c.delta.role else []
            parts.append(c.delta.content or "")
    assert roles == ["assistant"]
    assert "".join(parts) == msg.content
    assert usage.prompt_tokens == r.usage.prompt_tokens
    assert usage.completion_tokens == r.usage.completion_tokens


def test_raw_sse_ends_with_done(srv):
    body = {"model": "smollm2", "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, headers=srv.headers(),
                      timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [l for l in r.iter_lines() if l]
    assert events[0] == ": lpx"  # an SSE comment sent at once
    events = [e for e in events if not e.startswith(":")]  # and keep-alives
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_n2_and_seed(client):
    # n = 2 with a seed: choice i is sampled with seed + i.
    r = complete(client, n=2, seed=7, temperature=1.0, max_tokens=4)
    assert sorted(c.index for c in r.choices) == [0, 1]
    again = complete(client, n=2, seed=7, temperature=1.0, max_tokens=4)
    assert [c.text for c in again.choices] == [c.text for c in r.choices]
    second = complete(client, seed=8, temperature=1.0, max_tokens=4)
    assert second.choices[0].text == r.choices[1].text
    assert r.usage.completion_tokens == 8


def test_stop_string(client):
    full = complete(client, max_tokens=8).choices[0].text
    word = full.split()[1] if len(full.split()) > 1 else full.split()[0]
    r = complete(client, max_tokens=8, stop=[word, "\u00a7never"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[:full.index(word)]


def test_logprobs(client):
    r = complete(client, max_tokens=4, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert value <= 0 and 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert abs(max(top.values()) - value) < 1e-4
    c = chat(client, max_tokens=4, logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == c.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    assert "".join(t.token for t in content) == c.choices[0].message.content


def test_sampling_params_accepted(client):
    r = complete(client, temperature=0.8, top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5,
                 seed=1, extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                                     "ignore_eos": True})
    assert r.usage.completion_tokens == 8


def test_tokenize_detokenize_generate(srv, client):
    t = srv.post("/tokenize", {"prompt": PROMPT}).json()
    assert t["count"] == len(t["tokens"]) == complete(client, max_tokens=1).usage.prompt_tokens
    d = srv.post("/detokenize", {"tokens": t["tokens"]}).json()
    assert d["prompt"] == PROMPT
    m = srv.post("/tokenize", {"messages": [{"role": "user", "content": "What is 2+2?"}]}).json()
    assert m["count"] == chat(client, max_tokens=1).usage.prompt_tokens
    g = srv.post("/generate", {"prompt": PROMPT, "max_new_tokens": 8, "temperature": 0}).json()
    assert g["text"] == complete(client).choices[0].text
    assert g["generated_tokens"] == 8 and g["prompt_tokens"] == t["count"]
    assert g["finish_reason"] == "length" and g["elapsed_ms"] > 0 and g["tokens_per_second"] > 0


# ---- errors ------------------------------------------------------------------------

LONG = "hello " * 600  # over --max-model-len 512

ERRORS = [
    ("/v1/completions", b"{not json", 400, "invalid_request_error"),
    ("/v1/completions", b"[1, 2]", 400, "invalid_request_error"),
    ("/v1/completions", {"max_tokens": 4}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": ""}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": 5}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "temperature": 3}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 2.5}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "n": 0}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "stop": [1]}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "x", "seed": -1}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": [1, 99999999]}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": []}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400,
     "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "top_logprobs": 2}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": LONG}, 400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": LONG, "stream": True}, 400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": "hello", "max_tokens": 600}, 400, "context_length_exceeded"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "stream": True},
     400, "context_length_exceeded"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "not_found_error"),
    ("/v1/nothing", {"prompt": "x"}, 404, "not_found_error"),
    ("/detokenize", {"tokens": [-1]}, 400, "invalid_request_error"),
    ("/generate", {"prompt": "x", "stream": True}, 400, "invalid_request_error"),
]


@pytest.mark.parametrize("path,body,status,etype", ERRORS)
def test_error(srv, path, body, status, etype):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    h = {**srv.headers(), "Content-Type": "application/json"}
    r = httpx.post(srv.url + path, headers=h, timeout=60, **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == etype and err["message"]
    assert set(err) == {"message", "type", "param", "code"}
    if etype == "context_length_exceeded":
        assert "512" in err["message"] and "tokens (" in err["message"]


def test_sdk_raises_typed_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, prompt=LONG)
    assert e.value.body["type"] == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        complete(client, model="nope")


def test_auth_and_body_limit(srv):
    body = {"prompt": "x", "max_tokens": 1}
    for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.post(srv.url + "/v1/completions", json=body, headers=h)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(srv.url + "/v1/models").status_code == 401
    assert httpx.get(srv.url + "/health").status_code == 200  # probes need no key
    big = b'{"prompt": "' + b"a" * (5 << 20) + b'"}'
    try:
        r = httpx.post(srv.url + "/v1/completions", content=big, headers=srv.headers(), timeout=60)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    except httpx.WriteError:
        pass  # the server may answer and close before the whole body is sent
    r = httpx.get(srv.url + "/v1/completions", headers=srv.headers())
    assert r.status_code == 405


# ---- disconnects, concurrency, metrics ------------------------------------------------


def test_disconnect_mid_stream_frees_everything(srv):
    body = {"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, headers=srv.headers(),
                      timeout=60) as r:
        lines = r.iter_lines()
        got = 0
        while got < 3:
            got += bool(next(lines))
        assert srv.metrics()["lpx:num_requests_running"] == 1
    # The client is gone: its request must end and free its KV.
    m = srv.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0


def test_disconnect_non_streaming_frees_everything(srv):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True}).encode()
    host, port = srv.url[7:].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        end = time.monotonic() + 30
        while srv.metrics()["lpx:num_requests_running"] == 0 and time.monotonic() < end:
            time.sleep(0.02)
        assert srv.metrics()["lpx:num_requests_running"] == 1
    m = srv.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0


def test_concurrent_streams_match_sequential(srv, client):
    # 64 streaming clients over 8 prompts: batches of every shape (16 run, the
    # rest queue) must give each prompt the output it gets alone.
    prompts = [f"{i} + {i} =" for i in range(8)]

    def stream(p):
        out = []
        for chunk in client.completions.create(model="smollm2", prompt=p, max_tokens=4,
                                               temperature=0, stream=True):
            out += [c.text for c in chunk.choices]
        return "".join(out)

    sequential = [complete(client, prompt=p, max_tokens=4).choices[0].text for p in prompts]
    with ThreadPoolExecutor(64) as pool:
        concurrent = list(pool.map(stream, prompts * 8))
    assert concurrent == sequential * 8


def test_idle_connections_do_not_starve_others(srv, client):
    host, port = srv.url[7:].split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(64)]
    half = idle[0]
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{")
    try:
        assert complete(client, max_tokens=1).usage.completion_tokens == 1
        assert httpx.get(srv.url + "/health").status_code == 200
    finally:
        for s in idle:
            s.close()


def test_metrics_parse(srv, client):
    complete(client, max_tokens=2)
    fams = {f.name: f for f in text_string_to_metric_families(srv.get("/metrics").text)}
    for name in ["lpx:time_to_first_token_seconds", "lpx:inter_token_latency_seconds",
                 "lpx:e2e_request_latency_seconds", "lpx:request_queue_time_seconds"]:
        assert fams[name].type == "histogram"
    for name in ["lpx:num_requests_running", "lpx:num_requests_waiting", "lpx:kv_cache_usage_perc"]:
        assert fams[name].type == "gauge"
    for name in ["lpx:prompt_tokens", "lpx:generation_tokens", "lpx:request_success",
                 "lpx:preemptions", "lpx:engine_steps", "lpx:engine_steps_ahead",
                 "lpx:prefix_cache_queries", "lpx:prefix_cache_hits"]:
        assert fams[name].type == "counter"
    m = srv.metrics()
    assert m["lpx:generation_tokens_total"] >= 2 and m["lpx:time_to_first_token_seconds_count"] >= 1
    # 2 tokens: the prefill step, and the step for the second token queued before the
    # prefill's token was read (one step ahead, on by default)
    assert m["lpx:engine_steps_total"] >= 2 and m["lpx:engine_steps_ahead_total"] >= 1
    assert m["lpx:engine_steps_ahead_total"] < m["lpx:engine_steps_total"]
    assert m["lpx:request_queue_time_seconds_count"] >= 1
    reasons = {s.labels["finished_reason"]: s.value for s in fams["lpx:request_success"].samples}
    assert reasons["length"] >= 1
    assert not any(n.startswith("lpx:gpu_") for n in fams)  # no GPU in CI


def test_prefix_cache(srv, client):
    """A prompt sent twice: the second time its full blocks come from the prefix
    cache (counted in tokens, vLLM's metric names) and the tokens are the same."""
    prompt = ("Here is a list of the planets of the solar system, from the closest to the "
              "Sun to the farthest, with one fact about each of them: Mercury,")
    n = srv.post("/tokenize", {"prompt": prompt}).json()["count"]
    assert n > 17
    before = srv.metrics()
    a = complete(client, prompt=prompt, max_tokens=6)
    mid = srv.metrics()
    b = complete(client, prompt=prompt, max_tokens=6)
    after = srv.metrics()
    assert a.choices[0].text == b.choices[0].text
    q = "lpx:prefix_cache_queries_total"
    h = "lpx:prefix_cache_hits_total"
    assert mid[q] - before[q] == n and after[q] - mid[q] == n
    # every full block but the one with the last token, which is always computed
    assert after[h] - mid[h] == (n - 1) // 16 * 16
    assert after["lpx:kv_cache_blocks_cached"] >= (n - 1) // 16
    # OpenAI's usage field says the same per request
    assert a.usage.prompt_tokens_details.cached_tokens == mid[h] - before[h]
    assert b.usage.prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16


def test_request_log_lines(srv, client):
    complete(client, max_tokens=5)  # no other test here asks for 5 tokens
    # The line is written when the connection's response is done, maybe after the
    # client has it.
    ours = lambda: [l for l in srv.log if "POST /v1/completions 200" in l and "gen=5 " in l]
    end = time.monotonic() + 60
    while not ours():
        assert time.monotonic() < end, "".join(srv.log[-5:])  # only against a hang
        time.sleep(0.02)
    assert "prompt=" in ours()[-1] and "ms" in ours()[-1]


# ---- overload, timeout, shutdown ---------------------------------------------------------
# None of these depends on how fast the machine is: a generation of LONG_TOKENS takes
# seconds even at the bandwidth floor of the fastest CPU (each token reads all weights),
# and every wait is for an event, with a deadline only against a hang.


@pytest.fixture(scope="module")
def small(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--max-num-seqs", "1", "--max-queue", "1", "--max-model-len", "2048")
    yield s
    s.stop()


LONG_TOKENS = 2000  # with the prompt, just under --max-model-len 2048
LONG_GEN = {"prompt": PROMPT, "max_tokens": LONG_TOKENS, "ignore_eos": True}


def open_stream(srv, body):
    """Starts a streaming request and returns (client, response) once it is
    accepted, retrying on 503 as Retry-After asks (a request that ended just
    before may still be counted for a moment)."""
    c = httpx.Client(timeout=60)
    end = time.monotonic() + 60
    while True:
        r = c.send(c.build_request("POST", srv.url + "/v1/completions",
                                   json=dict(body, stream=True)), stream=True)
        if r.status_code != 503 or time.monotonic() > end:
            break
        r.close()
        time.sleep(0.1)
    assert r.status_code == 200
    return c, r


def wait_until(cond, what):
    """Polls until cond() holds (a deadline only against a hang)."""
    end = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.02)


def running(srv):
    return srv.metrics()["lpx:num_requests_running"]


def test_queue_full(small):
    a = open_stream(small, LONG_GEN)  # runs (--max-num-seqs 1)
    wait_until(lambda: running(small) == 1, "the first stream never ran")
    b = open_stream(small, LONG_GEN)  # waits (--max-queue 1)
    try:
        r = small.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "queue_full"
    finally:
        for c, r in (a, b):
            r.close()
            c.close()
    m = small.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0
    # Accepting again once the ended requests are counted out.
    end = time.monotonic() + 60
    while small.post("/v1/completions", {"prompt": "x", "max_tokens": 1}).status_code != 200:
        assert time.monotonic() < end, "still refusing after the queue emptied"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def timeout_srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--max-num-seqs", "1", "--max-model-len", "2048",
               "--request-timeout", "1")
    yield s
    s.stop()


def stream_events(c, r, lines):
    events = [l for l in lines if l]
    r.close()
    c.close()
    return events


def assert_timed_out(plain, events):
    assert plain.status_code == 504 and plain.json()["error"]["type"] == "timeout_error"
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["error"]["code"] == "request_timeout"


def test_request_timeout_running_stream(timeout_srv):
    # The stream runs and sends tokens all the time (it once never timed out:
    # the check was only reached when no token came for 100 ms); the
    # non-streaming request waits in the queue. Both outlast --request-timeout 1.
    c, r = open_stream(timeout_srv, LONG_GEN)
    lines = r.iter_lines()
    # Its first data event: a token (it runs) or, on a very slow machine, already the
    # timeout error; the outcome asserted below is the same either way.
    first = next(l for l in lines if l.startswith("data: "))
    plain = timeout_srv.post("/v1/completions", LONG_GEN)
    events = [first] + stream_events(c, r, lines)
    assert_timed_out(plain, events)
    m = timeout_srv.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0


def test_request_timeout_queued_stream(timeout_srv):
    # The non-streaming request runs; the stream spends its time in the queue.
    with ThreadPoolExecutor(1) as pool:
        plain = pool.submit(timeout_srv.post, "/v1/completions", LONG_GEN)
        wait_until(lambda: plain.done() or running(timeout_srv) == 1, "the request never ran")
        c, r = open_stream(timeout_srv, LONG_GEN)
        events = stream_events(c, r, r.iter_lines())
        plain = plain.result()
    assert_timed_out(plain, events)
    m = timeout_srv.wait_idle()
    assert m["lpx:num_requests_running"] == 0 and m["lpx:kv_cache_usage_perc"] == 0


def test_health_while_loading(lpx_bin, smollm2):
    # The port is bound before the model is loaded: /health and the API say
    # 503 "loading" until it is ready, then 200. "listening" is said only then.
    p = subprocess.Popen([lpx_bin, "serve", "-m", smollm2, "--port", "0"], stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stderr.readline()
        assert line.startswith("lpx serve: loading ") and "listening" not in line, line
        url = "http://127.0.0.1:" + line.split("port ")[1].split()[0]
        seen, end = [], time.monotonic() + 120
        while not seen or seen[-1][0] != 200:
            assert time.monotonic() < end, seen[-3:]  # only against a hang
            time.sleep(0.01)  # leave the CPU to the loading server
            r = httpx.get(url + "/health")
            seen.append((r.status_code, r.json()["status"]))
            if r.status_code == 503:
                m = httpx.get(url + "/v1/models")
                assert m.status_code in (503, 200)
                if m.status_code == 503:
                    assert m.json()["error"]["code"] == "loading" and m.headers["retry-after"]
        assert all(x == (503, "loading") for x in seen[:-1]) and seen[-1] == (200, "ok")
        line = p.stderr.readline()
        while line.startswith("lpx serve: req "):
            line = p.stderr.readline()
        assert line.startswith("lpx serve: listening on " + url + ": model "), line
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow  # generates 480 tokens to the end
def test_sigterm_drains(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--shutdown-timeout", "60")
    try:
        # Long enough to be still running while /health and a new request are tried:
        # as long as --max-model-len 512 allows.
        body = {"prompt": PROMPT, "max_tokens": 480, "ignore_eos": True, "stream": True,
                "temperature": 0}
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            first = next(l for l in lines if l)
            s.proc.send_signal(signal.SIGTERM)
            end = time.monotonic() + 10
            while httpx.get(s.url + "/health").status_code != 503 and time.monotonic() < end:
                time.sleep(0.02)
            assert httpx.get(s.url + "/health").status_code == 503
            refused = httpx.post(s.url + "/v1/completions", json={"prompt": "x"})
            assert refused.status_code == 503 and refused.headers["retry-after"]
            rest = [first] + [l for l in lines if l]
        # The request in flight finished normally.
        assert rest[-1] == "data: [DONE]"
        assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "length"
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


def test_sigterm_timeout_ends_streams_with_error(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--shutdown-timeout", "0.3")
    try:
        body = dict(LONG_GEN, stream=True, max_tokens=480)
        with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            first = next(l for l in lines if l)
            s.proc.send_signal(signal.SIGTERM)
            rest = [first] + [l for l in lines if l]
        assert rest[-1] == "data: [DONE]"
        assert json.loads(rest[-2][6:])["error"]["code"] == "shutdown"
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


# ---- command line -----------------------------------------------------------------


@pytest.mark.parametrize("opt,value,want", [
    ("--port", "abc", "expected a whole number from 0 to 65535"),
    ("--port", "80abc", "expected a whole number from 0 to 65535"),
    ("--port", "99999999999", "expected a whole number from 0 to 65535"),
    ("--port", "65536", "expected a whole number from 0 to 65535"),
    ("--max-num-seqs", "4097", "expected a whole number from 1 to 4096"),
    ("--max-model-len", "1", "expected a whole number from 2 to 2147483647"),
    ("--max-queue", "99999999999999999999", "expected a whole number from 1 to 1048576"),
    ("--gpu-memory-utilization", "90%", "expected a number from 0.01 to 1"),
    ("--request-timeout", "-5", "expected a number from 0.001 to 1e+07"),
    ("--shutdown-timeout", "1e999", "expected a number from 0 to 1e+07"),
    ("-t", "0", "expected a whole number from 1 to 4096"),
    ("--threads", "four", "expected a whole number from 1 to 4096"),
])
def test_bad_number_is_usage_error(lpx_bin, tmp_path, opt, value, want):
    """Garbage, trailing text, overflow and out-of-range values: one line in the wording
    of every command (src/cli/cli_num.c), exit 2, before anything listens or loads. Were
    the value taken, the missing model would end it with 1 (--port 0: no fixed port)."""
    r = subprocess.run([lpx_bin, "serve", "-m", str(tmp_path / "none.gguf"), "--port", "0", opt,
                        value], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"lpx serve: {opt}: {want} (got '{value}')\n"


@pytest.mark.parametrize("args,msg", [
    (["--bogus", "1"], "unknown option '--bogus' (see lpx serve --help)"),
    (["--timeout", "5"], "unknown option '--timeout' (see lpx serve --help)"),
    (["--port"], "--port: needs a value"),
    (["-m"], "-m: needs a value"),
    (["--port", "0"], "-m MODEL is required (see lpx serve --help)"),
])
def test_usage_errors(lpx_bin, args, msg):
    r = subprocess.run([lpx_bin, "serve", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"lpx serve: {msg}\n"
