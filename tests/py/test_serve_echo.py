"""echo with logprobs on /v1/completions (issue 24): the prompt's tokens come back with
their log-probabilities as OpenAI and vLLM give them (the first token's logprob and top
are null, then log_softmax of the row before each token), text_offset running over
prompt and output. The reference is `lpx logits`' rows of the same ids (the whole
prompt in one prefill) with numpy's float64 log_softmax; the server computes them in
chunks of 64 rows beside other requests, through the prefix cache, streaming or not.
The real SmolLM2 on the CPU; the official openai SDK parses every response."""
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

from serve_helpers import Server

# ~150 tokens: past the engine's 64 prompt-logprob rows a step, so chunks join up.
LONG = ("The history of the city begins with a small fishing village on the river. "
        "Over the centuries it grew into a trading port, then a capital, and its "
        "markets drew merchants from every coast. ") * 4
SHORT = "The capital of France is"


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def ids_of(srv, text):
    return srv.post("/tokenize", {"prompt": text}).json()["tokens"]


def reference(lpx_bin, smollm2, ids, tmp_path):
    """float64 log_softmax of every prefill row of ids: [len(ids)][vocab]."""
    out = tmp_path / "ref.f32"
    subprocess.run([lpx_bin, "logits", "-m", smollm2, "--ids", ",".join(map(str, ids)),
                    "-o", str(out)], check=True, capture_output=True)
    x = np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def token_text(srv, i):
    return srv.post("/detokenize", {"tokens": [i]}).json()["prompt"]


def complete(client, **kw):
    args = dict(model="smollm2", prompt=SHORT, max_tokens=4, temperature=0, echo=True,
                logprobs=3)
    args.update(kw)
    return client.completions.create(**args)


def check_prompt_part(srv, lp, ids, ref, top_n):
    """The first len(ids) entries of a completions logprobs object against ref."""
    n = len(ids)
    assert lp.tokens[:n] == [token_text(srv, i) for i in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    want = [ref[i - 1, ids[i]] for i in range(1, n)]
    np.testing.assert_allclose(lp.token_logprobs[1:n], want, rtol=0, atol=2e-4)
    for i in range(1, n):
        top = lp.top_logprobs[i]
        if top_n == 0:
            assert top is None
            continue
        order = np.argsort(-ref[i - 1], kind="stable")[:top_n]
        # Near-ties may swap: compare the values, and the keys where the gap is clear.
        np.testing.assert_allclose(sorted(top.values(), reverse=True), ref[i - 1, order],
                                   rtol=0, atol=2e-4)
        clear = [k for k in range(top_n - 1) if ref[i - 1, order[k]] - ref[i - 1, order[k + 1]] > 1e-3]
        for k in clear:
            assert token_text(srv, int(order[k])) in top
    offsets = lp.text_offset
    assert offsets[0] == 0
    for i in range(1, len(offsets)):
        assert offsets[i] == offsets[i - 1] + len(lp.tokens[i - 1].encode())


@pytest.mark.parametrize("top_n", [0, 3])
def test_echo_logprobs_match_the_prefill_rows(srv, client, lpx_bin, smollm2, tmp_path, top_n):
    ids = ids_of(srv, LONG)
    assert len(ids) > 2 * 64
    ref = reference(lpx_bin, smollm2, ids, tmp_path)
    r = complete(client, prompt=LONG, logprobs=top_n)
    c = r.choices[0]
    plain = complete(client, prompt=LONG, echo=False, logprobs=top_n).choices[0]
    assert c.text == LONG + plain.text
    check_prompt_part(srv, c.logprobs, ids, ref, top_n)
    # The output's entries are the plain request's, offsets shifted past the prompt.
    n = len(ids)
    assert c.logprobs.tokens[n:] == plain.logprobs.tokens
    assert c.logprobs.token_logprobs[n:] == plain.logprobs.token_logprobs
    assert c.logprobs.top_logprobs[n:] == plain.logprobs.top_logprobs
    shift = sum(len(t.encode()) for t in c.logprobs.tokens[:n])
    assert c.logprobs.text_offset[n:] == [o + shift for o in plain.logprobs.text_offset]
    assert r.usage.prompt_tokens == n and r.usage.completion_tokens == 4


def test_echo_logprobs_token_id_prompt(srv, client, lpx_bin, smollm2, tmp_path):
    ids = ids_of(srv, SHORT)
    ref = reference(lpx_bin, smollm2, ids, tmp_path)
    c = complete(client, prompt=ids).choices[0]
    check_prompt_part(srv, c.logprobs, ids, ref, 3)


def test_echo_logprobs_stream_equals_whole(srv, client):
    whole = complete(client, prompt=LONG).choices[0]
    chunks = list(complete(client, prompt=LONG, stream=True))
    first = chunks[0].choices[0]
    assert first.text == LONG and len(first.logprobs.tokens) == len(ids_of(srv, LONG))
    got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    text = ""
    for ch in chunks:
        for c in ch.choices:
            text += c.text
            if c.logprobs:
                for k in got:
                    got[k] += getattr(c.logprobs, k)
    assert text == whole.text
    for k in got:
        assert got[k] == getattr(whole.logprobs, k), k


def test_echo_logprobs_prompt_list_and_n(srv, client, lpx_bin, smollm2, tmp_path):
    prompts = [SHORT, "Once upon a time"]
    alone = [complete(client, prompt=p).choices[0] for p in prompts]
    r = complete(client, prompt=prompts, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for i, c in enumerate(r.choices):
        a = alone[i // 2]
        assert c.text == a.text
        assert c.logprobs.token_logprobs == a.logprobs.token_logprobs
        assert c.logprobs.top_logprobs == a.logprobs.top_logprobs
    # Streamed: each choice's echo chunk (with the prompt's logprobs) comes before its text.
    seen = {}
    for ch in complete(client, prompt=prompts, n=2, stream=True):
        for c in ch.choices:
            if c.index not in seen:
                assert c.text == prompts[c.index // 2] and c.logprobs.token_logprobs[0] is None
                seen[c.index] = []
            seen[c.index] += c.logprobs.token_logprobs
    assert seen == {c.index: c.logprobs.token_logprobs for c in r.choices}


def test_echo_logprobs_beside_cached_and_plain_requests(srv, client):
    """A prompt already in the prefix cache is computed again for its logprobs, and
    requests in the same steps (plain ones sharing the prefix) are unchanged."""
    base = complete(client, prompt=LONG)
    plain = complete(client, prompt=LONG, echo=False, logprobs=None).choices[0].text
    with ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(complete, client, prompt=LONG,
                            **({} if i % 2 else dict(echo=False, logprobs=None)))
                for i in range(6)]
        rs = [f.result() for f in futs]
    for i, r in enumerate(rs):
        if i % 2:
            assert r.choices[0].logprobs.token_logprobs == base.choices[0].logprobs.token_logprobs
        else:
            assert r.choices[0].text == plain


def test_echo_without_logprobs_is_unchanged(srv, client):
    r = complete(client, logprobs=None)
    assert r.choices[0].logprobs is None
    assert r.choices[0].text.startswith(SHORT)


def test_echo_logprobs_raw_json(srv):
    """The wire form: nulls where OpenAI has them."""
    r = srv.post("/v1/completions", {"prompt": SHORT, "max_tokens": 1, "echo": True,
                                     "logprobs": 1, "temperature": 0})
    lp = r.json()["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert all(isinstance(t, dict) and len(t) == 1 for t in lp["top_logprobs"][1:])
