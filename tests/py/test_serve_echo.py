"""The prompt's logprobs (issue 24): echo with logprobs on /v1/completions, where the
prompt's tokens come back with their log-probabilities as OpenAI and vLLM give them
(the first token's logprob and top are null, then log_softmax of the row before each
token), text_offset running over prompt and output; and vLLM's prompt_logprobs field on
both OpenAI endpoints (a list: null, then per token a map id -> {logprob, rank,
decoded_token}). The reference is `lpx logits`' rows of the same ids (the whole prompt
in one prefill) with numpy's float64 log_softmax, ranks counted over the raw logits;
the server computes them in chunks of 64 rows beside other requests, through the prefix
cache, streaming or not. The real SmolLM2 on the CPU; the official openai SDK parses
every response."""
import json
import lzma
import pathlib
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

from serve_helpers import Server

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures/tokenizer/smollm2"

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


def reference(lpx_bin, smollm2, ids, tmp_path, raw=False):
    """float64 log_softmax of every prefill row of ids: [len(ids)][vocab] (raw: and the
    float32 logits)."""
    out = tmp_path / "ref.f32"
    subprocess.run([lpx_bin, "logits", "-m", smollm2, "--ids", ",".join(map(str, ids)),
                    "-o", str(out)], check=True, capture_output=True)
    logits = np.fromfile(out, dtype="<f4").reshape(len(ids), -1)
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lsm = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    return (lsm, logits) if raw else lsm


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


# ---- vLLM's prompt_logprobs ------------------------------------------------------


@pytest.fixture(scope="module")
def hf_tok(tmp_path_factory):
    """SmolLM2's own tokenizer.json in the `tokenizers` package: vLLM's decoded_token
    is its decode of the one id, special tokens kept."""
    from tokenizers import Tokenizer
    d = tmp_path_factory.mktemp("smollm2_tok")
    (d / "tokenizer.json").write_bytes(lzma.decompress((FIX / "tokenizer.json.xz").read_bytes()))
    return Tokenizer.from_file(str(d / "tokenizer.json"))


def check_prompt_logprobs(hf_tok, plp, ids, ref, logits, k):
    """A prompt_logprobs list (JSON) against the reference rows: null first, then the
    token itself (its rank: the tokens at least as likely, as vLLM counts) and the k most
    likely, each with its decoded text."""
    assert len(plp) == len(ids) and plp[0] is None
    for i in range(1, len(ids)):
        row, tok = ref[i - 1], ids[i]
        d = plp[i]
        assert list(d)[0] == str(tok)  # the token itself first, as vLLM orders the map
        order = np.argsort(-row, kind="stable")[:k]
        clear = k == 0 or row[order[-1]] - row[np.argsort(-row, kind="stable")[k]] > 1e-3
        ids_top = {str(int(t)) for t in order}
        if clear:
            assert set(d) == ids_top | {str(tok)}
        else:
            assert len(d) in (k, k + 1)
        rank = int((logits[i - 1] >= logits[i - 1, tok]).sum())
        for key, e in d.items():
            t = int(key)
            np.testing.assert_allclose(e["logprob"], row[t], rtol=0, atol=2e-4)
            assert e["decoded_token"] == hf_tok.decode([t], skip_special_tokens=False)
            if t == tok and not (rank <= k):
                assert e["rank"] == rank
            else:  # one of the k most likely: its place (ties aside)
                assert abs(row[order[e["rank"] - 1]] - row[t]) <= 1e-3
        if rank <= k:  # the token is among them: its entry is its place there
            assert d[str(tok)]["rank"] <= k


@pytest.mark.parametrize("k", [0, 1, 5])
def test_prompt_logprobs_completions(srv, hf_tok, lpx_bin, smollm2, tmp_path, k):
    ids = ids_of(srv, LONG)
    ref, logits = reference(lpx_bin, smollm2, ids, tmp_path, raw=True)
    r = srv.post("/v1/completions", {"prompt": LONG, "max_tokens": 2, "temperature": 0,
                                     "prompt_logprobs": k})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["logprobs"] is None  # the output's are not asked for
    check_prompt_logprobs(hf_tok, c["prompt_logprobs"], ids, ref, logits, k)


def test_prompt_logprobs_chat_top_level(srv, client, hf_tok, lpx_bin, smollm2, tmp_path):
    msgs = [{"role": "user", "content": "Name three rivers of Europe."}]
    ids = srv.post("/tokenize", {"messages": msgs}).json()["tokens"]
    ref, logits = reference(lpx_bin, smollm2, ids, tmp_path, raw=True)
    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=3,
                                       temperature=0, n=2, extra_body={"prompt_logprobs": 2})
    # vLLM's place for a chat prompt's: once, beside the choices
    check_prompt_logprobs(hf_tok, r.model_extra["prompt_logprobs"], ids, ref, logits, 2)
    assert all("prompt_logprobs" not in (c.model_extra or {}) for c in r.choices)
    plain = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=3,
                                           temperature=0)
    assert r.choices[0].message.content == plain.choices[0].message.content
    assert "prompt_logprobs" not in (plain.model_extra or {})


def test_prompt_logprobs_prompt_list_and_n(srv, client):
    prompts = [SHORT, "Once upon a time"]
    alone = [srv.post("/v1/completions", {"prompt": p, "max_tokens": 2, "temperature": 0,
                                          "prompt_logprobs": 3}).json()["choices"][0]
             for p in prompts]
    r = client.completions.create(model="smollm2", prompt=prompts, n=2, max_tokens=2,
                                  temperature=0, extra_body={"prompt_logprobs": 3})
    for i, c in enumerate(r.choices):
        assert c.model_extra["prompt_logprobs"] == alone[i // 2]["prompt_logprobs"]
        assert len(c.model_extra["prompt_logprobs"]) == len(ids_of(srv, prompts[i // 2]))


def test_prompt_logprobs_with_echo_logprobs(srv):
    """Both asked, with different counts: each has its own, from the same rows."""
    r = srv.post("/v1/completions", {"prompt": SHORT, "max_tokens": 2, "temperature": 0,
                                     "echo": True, "logprobs": 1, "prompt_logprobs": 4})
    c = r.json()["choices"][0]
    n = len(ids_of(srv, SHORT))
    lp, plp = c["logprobs"], c["prompt_logprobs"]
    assert all(len(t) == 1 for t in lp["top_logprobs"][1:n])
    assert all(len(d) >= 4 for d in plp[1:])
    for i in range(1, n):
        own = list(plp[i].values())[0]
        assert own["logprob"] == lp["token_logprobs"][i]
        assert own["decoded_token"] == lp["tokens"][i]
    # token id prompts take it too, and give the same
    ids = ids_of(srv, SHORT)
    r2 = srv.post("/v1/completions", {"prompt": ids, "max_tokens": 2, "temperature": 0,
                                      "echo": True, "logprobs": 1, "prompt_logprobs": 4})
    assert r2.json()["choices"][0]["prompt_logprobs"] == plp


@pytest.mark.parametrize("body,why", [
    ({"prompt_logprobs": 21}, "[0, 20]"),
    ({"prompt_logprobs": -1}, "[0, 20]"),
    ({"prompt_logprobs": 1.5}, "integer"),
    ({"prompt_logprobs": "2"}, "integer"),
    ({"prompt_logprobs": 0, "stream": True}, "stream"),
    ({"prompt_logprobs": 3, "stream": True}, "stream"),
])
def test_prompt_logprobs_refused(srv, body, why):
    for path, base in [("/v1/completions", {"prompt": SHORT}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})]:
        r = srv.post(path, {**base, "max_tokens": 1, **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "prompt_logprobs" and why in err["message"], err
    r = srv.post("/generate", {"prompt": SHORT, "prompt_logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_logprobs"


# ---- echo on chat (vLLM's) -------------------------------------------------------

CONTINUE = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]


def chat(client, **kw):
    args = dict(model="smollm2", messages=CONTINUE, max_tokens=6, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def test_chat_echo_prepends_the_continued_message(client):
    plain = chat(client).choices[0].message.content
    r = chat(client, n=2, extra_body={"echo": True})
    assert [c.message.content for c in r.choices] == ["The capital of France is" + plain] * 2
    # the output itself is the same: usage counts the generated tokens only
    assert r.usage.completion_tokens == 2 * chat(client).usage.completion_tokens
    # text parts are joined with newlines, as vLLM joins them
    parts = CONTINUE[:1] + [{"role": "assistant", "content": [
        {"type": "text", "text": "The capital"}, {"type": "text", "text": "of France is"}]}]
    got = chat(client, messages=parts, extra_body={"echo": True}).choices[0].message.content
    alone = chat(client, messages=parts).choices[0].message.content
    assert got == "The capital\nof France is" + alone


def test_chat_echo_without_a_continued_message_changes_nothing(client):
    msgs = CONTINUE[:1]
    assert (chat(client, messages=msgs, extra_body={"echo": True}).choices[0].message.content
            == chat(client, messages=msgs).choices[0].message.content)


def test_chat_echo_stream_equals_whole(client):
    whole = chat(client, n=2, extra_body={"echo": True})
    text = {0: "", 1: ""}
    first = {}
    for ch in chat(client, n=2, stream=True, extra_body={"echo": True}):
        for c in ch.choices:
            if c.delta.content:
                first.setdefault(c.index, c.delta.content)
                text[c.index] += c.delta.content
    assert first == {0: "The capital of France is", 1: "The capital of France is"}
    assert [text[0], text[1]] == [c.message.content for c in whole.choices]


def test_chat_echo_refusals(srv):
    r = srv.post("/v1/chat/completions", {"messages": CONTINUE, "echo": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"
