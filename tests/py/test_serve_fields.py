"""lpx serve never pretends (issue 24): every request field it does not carry
out is a 400 naming the field; the cheap ones work (logit_bias, echo, prompt
batches, stream_options.continuous_usage_stats); CORS only for the origins
given. The real SmolLM2 on the CPU, the official openai SDK as the client."""
import json

import httpx
import openai
import pytest

from serve_helpers import Server

PROMPT = "The capital of France is"
MSGS = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def complete(client, **kw):
    args = dict(model="smollm2", prompt=PROMPT, max_tokens=6, temperature=0)
    args.update(kw)
    return client.completions.create(**args)


def chat(client, **kw):
    args = dict(model="smollm2", messages=MSGS, max_tokens=6, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def token_id(srv, text):
    r = srv.post("/tokenize", {"prompt": text, "add_special_tokens": False}).json()
    assert r["count"] == 1, r
    return r["tokens"][0]


def refused(call, param):
    with pytest.raises(openai.BadRequestError) as e:
        call()
    assert e.value.status_code == 400 and e.value.param == param, e.value.body
    assert param in e.value.message
    return e.value


# ---- refused: a 400 naming the field, never a 200 of the wrong shape -------------


@pytest.mark.parametrize("kw, param", [
    (dict(response_format={"type": "yaml"}), "response_format"),
    (dict(response_format={"type": "json_schema",
                           "json_schema": {"name": "x", "schema": {"type": "integer",
                                                                   "multipleOf": 2}}}),
     "response_format"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), "tools"),
    (dict(tool_choice="required"), "tool_choice"),
    (dict(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice"),
    (dict(functions=[{"name": "f"}]), "functions"),
    (dict(reasoning_effort="low"), "reasoning_effort"),
    (dict(logit_bias={"49152": 5}), "logit_bias"),  # outside the vocabulary
    (dict(logit_bias={"5": 101}), "logit_bias"),
    (dict(extra_body={"frobnicate": True}), "frobnicate"),
    (dict(extra_body={"echo": "yes"}), "echo"),  # a boolean (chat echo: test_serve_echo.py)
    (dict(stream=True, stream_options={"include_usage": True, "x": 1}), "stream_options"),
])
def test_chat_refuses(client, kw, param):
    refused(lambda: chat(client, **kw), param)


@pytest.mark.parametrize("kw, param", [
    (dict(suffix=" and that is all."), "suffix"),
    (dict(best_of=3), "best_of"),
    (dict(best_of=3, n=2), "best_of"),
    (dict(logit_bias={"-3": 1}), "logit_bias"),
    (dict(extra_body={"response_format": {"type": "json_schema", "json_schema": {}}}),
     "response_format"),
    (dict(extra_body={"min_tokens": 4}), "min_tokens"),
    (dict(extra_body={"top_logprobs": 2}), "top_logprobs"),
    (dict(prompt=["a", [1, 2]]), "prompt"),
    (dict(prompt=["a"] * 17), "prompt"),
    (dict(prompt=["a"] * 5, n=16), "n"),
])
def test_completions_refuse(client, kw, param):
    refused(lambda: complete(client, **kw), param)


def test_refusal_is_an_openai_error_object(srv):
    r = srv.post("/v1/completions", {"prompt": PROMPT, "frobnicate": 1})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "frobnicate" and err["code"] == "unknown_parameter"
    assert err["type"] == "invalid_request_error"
    # A field lpx knows, with a value it does not implement: OpenAI's code for that.
    r = srv.post("/v1/chat/completions", {"messages": MSGS, "function_call": {"name": "f"}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_value"
    # The plain endpoints too: /generate makes no logprobs, so it refuses them.
    r = srv.post("/generate", {"prompt": PROMPT, "logprobs": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = srv.post("/tokenize", {"prompt": PROMPT, "temperature": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"


def test_accepted_values_that_ask_nothing_new(client):
    base = chat(client).choices[0].message.content
    r = chat(client, response_format={"type": "text"}, tools=[], tool_choice="none",
             user="u-1", store=False, metadata={"k": "v"}, service_tier="auto",
             parallel_tool_calls=True)
    assert r.choices[0].message.content == base
    base = complete(client).choices[0].text
    assert complete(client, best_of=1, suffix="", user="u").choices[0].text == base
    assert [c.text for c in complete(client, n=2, best_of=2).choices] == [base, base]


# ---- logit_bias --------------------------------------------------------------------


def test_logit_bias_forces_and_bans(srv, client):
    the = token_id(srv, " the")
    r = complete(client, logit_bias={str(the): 100}, max_tokens=4)
    assert r.choices[0].text == " the" * 4
    # Banning the greedy first token changes the first token and nothing else is broken.
    base = complete(client, max_tokens=1).choices[0].text
    first = token_id(srv, base)
    banned = complete(client, max_tokens=1, logit_bias={str(first): -100}).choices[0].text
    assert banned and banned != base
    # Chat and seeded sampling take it too; a bias on another token leaves greedy alone.
    r = chat(client, logit_bias={str(the): 100}, max_tokens=3)
    assert r.choices[0].message.content.split() == ["the"] * 3
    seeded = dict(temperature=0.9, seed=7, max_tokens=8)
    assert complete(client, **seeded, logit_bias={str(the): 100}).choices[0].text == " the" * 8
    assert complete(client, logit_bias={"0": 0.5}).choices[0].text == complete(client).choices[0].text


def test_logit_bias_rows_beside_plain_ones(srv, client):
    # A biased request in the same batch as unbiased ones changes only itself.
    from concurrent.futures import ThreadPoolExecutor
    the = token_id(srv, " the")
    plain = complete(client, max_tokens=12).choices[0].text
    with ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(complete, client, max_tokens=12,
                            **({"logit_bias": {str(the): 100}} if i % 2 else {}))
                for i in range(4)]
        texts = [f.result().choices[0].text for f in futs]
    assert texts == [plain, " the" * 12, plain, " the" * 12]


# ---- echo ------------------------------------------------------------------------


def test_echo(srv, client):
    base = complete(client).choices[0].text
    assert complete(client, echo=True).choices[0].text == PROMPT + base
    ids = srv.post("/tokenize", {"prompt": PROMPT}).json()["tokens"]
    r = complete(client, prompt=ids, echo=True)
    assert r.choices[0].text.endswith(base) and PROMPT in r.choices[0].text
    chunks = list(complete(client, echo=True, stream=True))
    assert chunks[0].choices[0].text == PROMPT
    assert "".join(c.choices[0].text for c in chunks if c.choices) == PROMPT + base


# ---- prompt batches ------------------------------------------------------------------


def test_prompt_list_is_a_batch(client):
    prompts = [PROMPT, "Once upon a time", "1, 2, 3,"]
    alone = [complete(client, prompt=p) for p in prompts]
    r = complete(client, prompt=prompts, n=2)
    assert [c.index for c in r.choices] == list(range(6))
    assert [c.text for c in r.choices] == [a.choices[0].text for a in alone for _ in range(2)]
    # usage counts each prompt once and every choice's output.
    assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert r.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    # Token id lists, streamed: each choice's text by its index.
    ids = [[1, 2, 3], [4, 5]]
    want = [complete(client, prompt=p).choices[0].text for p in ids]
    got = {}
    for ch in complete(client, prompt=ids, stream=True):
        for c in ch.choices:
            got[c.index] = got.get(c.index, "") + c.text
    assert got == {0: want[0], 1: want[1]}


def test_seeded_prompt_batch_matches_single_requests(client):
    kw = dict(temperature=0.8, seed=11, max_tokens=8)
    alone = [complete(client, prompt=p, n=2, **kw) for p in ["a", "b"]]
    both = complete(client, prompt=["a", "b"], n=2, **kw)
    assert [c.text for c in both.choices] == [c.text for r in alone for c in r.choices]


# ---- continuous usage ------------------------------------------------------------------


def test_continuous_usage_stats(client):
    chunks = list(complete(client, stream=True, max_tokens=6,
                           stream_options={"include_usage": True, "continuous_usage_stats": True}))
    with_text = [c for c in chunks if c.choices]
    counts = [c.usage.completion_tokens for c in with_text]
    assert counts == sorted(counts) and counts[-1] == 6
    assert all(c.usage.prompt_tokens == with_text[0].usage.prompt_tokens > 0 for c in with_text)
    assert all(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
               for c in with_text)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    chunks = list(chat(client, stream=True, stream_options={"continuous_usage_stats": True}))
    assert all(c.usage is not None for c in chunks)
    assert chunks[-1].usage.completion_tokens == 6
    # Without it chunks carry no usage.
    assert all(c.usage is None for c in complete(client, stream=True))


# ---- CORS --------------------------------------------------------------------------------


def test_no_cors_by_default(srv):
    # A foreign origin is refused outright (test_serve_trust.py), and gets no CORS headers.
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1},
                   headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    r = httpx.options(srv.url + "/v1/completions",
                      headers={"Origin": "http://evil.example",
                               "Access-Control-Request-Method": "POST"})
    assert r.status_code == 204 and "access-control-allow-origin" not in r.headers
    assert "POST" in r.headers["allow"]


def test_cors_allowed_origins(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--allowed-origins", "http://a.example, http://b.example:8000",
               api_key="k")
    try:
        pre = httpx.options(s.url + "/v1/chat/completions",
                            headers={"Origin": "http://b.example:8000",
                                     "Access-Control-Request-Method": "POST",
                                     "Access-Control-Request-Headers": "authorization,content-type"})
        assert pre.status_code == 204  # no API key asked of a preflight
        assert pre.headers["access-control-allow-origin"] == "http://b.example:8000"
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert pre.headers["access-control-allow-headers"] == "authorization,content-type"
        assert "Origin" in pre.headers["vary"]
        r = httpx.post(s.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1},
                       headers={"Origin": "http://a.example", "Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://a.example"
        # An error a page may read (401), and a stream, carry it too.
        r = httpx.post(s.url + "/v1/completions", json={"prompt": PROMPT},
                       headers={"Origin": "http://a.example"})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "http://a.example"
        with httpx.stream("POST", s.url + "/v1/completions",
                          json={"prompt": PROMPT, "max_tokens": 2, "stream": True},
                          headers={"Origin": "http://a.example", "Authorization": "Bearer k"}) as r:
            assert r.headers["access-control-allow-origin"] == "http://a.example"
            r.read()
        r = httpx.options(s.url + "/v1/completions",
                          headers={"Origin": "http://c.example", "Access-Control-Request-Method": "POST"})
        assert r.status_code == 204 and "access-control-allow-origin" not in r.headers
    finally:
        s.stop()
    s = Server(lpx_bin, smollm2, "--allowed-origins", "*")
    try:
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "http://any.example"})
        assert r.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-origin" not in httpx.get(s.url + "/v1/models").headers
    finally:
        s.stop()


def test_ignored_fields_are_the_ones_docs_list(srv, client):
    """docs/server.md's table of fields accepted and ignored names exactly the server's
    IGNORED fields (src/server/params.c), and each of them is taken on both endpoints."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[2]
    code = (root / "src/server/params.c").read_text()
    ignored = re.findall(r'\{"(\w+)", K_\w+\}', code.split("/* IGNORED */")[1].split("};")[0])
    doc = (root / "docs/server.md").read_text().split("Accepted and ignored on purpose")[1]
    rows = re.findall(r"^\| `(\w+)` \| both OpenAI \|", doc.split("\n\n")[1], re.M)
    assert ignored and sorted(rows) == sorted(ignored)
    values = {"user": "u", "service_tier": "auto", "store": False, "metadata": {"k": "v"}}
    assert set(values) == set(ignored)
    assert chat(client, extra_body=values).choices[0].message.content == chat(client).choices[0].message.content
    assert complete(client, extra_body=values).choices[0].text == complete(client).choices[0].text
