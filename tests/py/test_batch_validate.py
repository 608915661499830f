"""lpx batch checks a request body as lpx serve does (issue 27): the same chat roles, the
same context-length error for max_tokens past the context, on the same prompt token
count; a line far longer than the context can hold fails without being tokenized (it
cost 1.18 GB for a 60 MB line); a \\u0000 in a string and text after the JSON object
are per-line errors (cJSON cut the string at the NUL and ignored the rest)."""
import json
import os
import subprocess

import pytest
from serve_helpers import Server
from test_batch import batch, read_jsonl, write_jsonl

CTX = 512  # serve_helpers' --max-model-len


@pytest.fixture(scope="module")
def server(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2)
    yield s
    s.stop()


def failures(out):
    return {f["custom_id"]: f["error"] for f in read_jsonl(out / "failures.jsonl")}


def params(out):
    """custom_id -> the failure record's param (the field refused, or None)."""
    return {f["custom_id"]: f["param"] for f in read_jsonl(out / "failures.jsonl")}


def test_context_error_is_the_servers(tmp_path, lpx_bin, smollm2, server):
    rows = [
        {"id": "long-max", "prompt": "Hello there", "max_tokens": CTX},
        {"id": "chat-max", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 600},
        {"id": "long-prompt", "prompt": "word " * 700, "max_tokens": 4},
        {"id": "fits", "prompt": "Hello there", "max_tokens": 3},
        # the command line's default max_tokens (here 500) is cut to what is left
        {"id": "default-max", "prompt": "Hello there"},
    ]
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, rows)
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2, "-c", str(CTX),
              "-n", "500")
    assert r.returncode == 1, r.stderr  # not complete: three lines failed
    got = failures(tmp_path / "o")
    assert sorted(got) == ["chat-max", "long-max", "long-prompt"]
    for row in rows[:3]:
        chat = "messages" in row
        body = {k: v for k, v in row.items() if k != "id"}
        a = server.post("/v1/chat/completions" if chat else "/v1/completions", body)
        assert a.status_code == 400, a.text
        # the field named as the server's 400 names it
        assert params(tmp_path / "o")[row["id"]] == a.json()["error"]["param"], a.text
        if row["id"] != "long-prompt":
            assert got[row["id"]] == "context_length_exceeded: " + a.json()["error"]["message"]
    # a prompt past the context: batch stops counting there (the server, which counts
    # the whole prompt today, says "701 in the prompt"); the wording is the same function's
    assert got["long-prompt"] == (
        "context_length_exceeded: This model's maximum context length is 512 tokens. However, "
        "you requested more than 516 tokens (more than 512 in the prompt, 4 in the completion). "
        "Please reduce the length of the prompt or completion.")
    res = {x["custom_id"]: x for x in read_jsonl(tmp_path / "o" / "results.jsonl")}
    assert sorted(res) == ["default-max", "fits"]
    u = res["default-max"]["response"]["body"]["usage"]
    assert u["total_tokens"] <= CTX


def test_roles_are_the_servers(tmp_path, lpx_bin, smollm2, server):
    rows = [{"id": f"r-{role}", "messages": [{"role": "user", "content": "Hi"},
                                               {"role": role, "content": "x"}], "max_tokens": 1}
            for role in ["function", "User", "developer", "tool"]]
    rows.append({"id": "r-none", "messages": [{"content": "Hi"}], "max_tokens": 1})
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, rows)
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2)
    got = failures(tmp_path / "o")
    for row in rows:
        a = server.post("/v1/chat/completions", {k: v for k, v in row.items() if k != "id"})
        if a.status_code == 200:
            assert row["id"] not in got
            continue
        assert a.status_code == 400
        line = rows.index(row) + 1
        assert got[row["id"]] == f"line {line}: " + a.json()["error"]["message"]
        assert params(tmp_path / "o")[row["id"]] == a.json()["error"]["param"] == "messages"
    assert sorted(got) == ["r-User", "r-function", "r-none"]


def test_nul_and_trailing_text_are_line_errors(tmp_path, lpx_bin, smollm2):
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, [
        '{"id": "nul", "prompt": "secret\\u0000ignored"}',
        '{"id": "escaped", "prompt": "a \\\\u0000 is text", "max_tokens": 1}',
        '{"id": "garbage", "prompt": "hi", "max_tokens": 1} {"id": "x"}',
        '{"id": "spaces", "prompt": "hi", "max_tokens": 1}   \t',
    ])
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2)
    assert failures(tmp_path / "o") == {
        "nul": "line 1: a string holds \\u0000 (a NUL character): not supported",
        "garbage": "line 3: text after the JSON object (at byte 51)"}
    assert sorted(x["custom_id"] for x in read_jsonl(tmp_path / "o" / "results.jsonl")) == [
        "escaped", "spaces"]


def test_huge_line_costs_its_bytes_not_gigabytes(tmp_path, lpx_bin, smollm2):
    """The issue's 60 MB line peaked at 1.18 GB before its context error. Now the prompt
    is refused on its byte count (more than the context's tokens can come from)."""
    inp = tmp_path / "in.jsonl"
    with open(inp, "w") as f:
        f.write(json.dumps({"id": "huge", "prompt": "word " * (12 << 20), "max_tokens": 4}))
        f.write("\n")
    p = subprocess.Popen([lpx_bin, "batch", "-i", str(inp), "-o", str(tmp_path / "o"), "-m",
                          smollm2, "-c", "2048"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    assert os.waitstatus_to_exitcode(status) == 1, err
    got = failures(tmp_path / "o")["huge"]
    assert got.startswith("context_length_exceeded: This model's maximum context length is "
                          "2048 tokens. However, you requested more than 2052 tokens (more "
                          "than 2048 in the prompt, 4 in the completion).")
    peak_mb = ru.ru_maxrss / 1024
    print(f"peak RSS {peak_mb:.0f} MB for a {os.path.getsize(inp) >> 20} MB line")
    assert peak_mb < 600


# ---- numbers: one reading (sample/request_body.h) for serve and batch -------------------

BAD_NUMBERS = [
    {"temperature": -0.5}, {"temperature": 2.5}, {"temperature": "hot"},
    {"top_p": 0}, {"top_p": 1.5}, {"min_p": -0.1}, {"min_p": 2},
    {"top_k": -2}, {"top_k": 1.5}, {"top_k": 2 ** 31},
    {"presence_penalty": 3}, {"frequency_penalty": -2.5}, {"repetition_penalty": 0},
    {"repetition_penalty": 11}, {"seed": -1}, {"seed": 0.5},
    {"max_tokens": 0}, {"max_tokens": -3}, {"max_tokens": 2 ** 31}, {"max_tokens": "ten"},
    {"n": 0}, {"n": 17}, {"n": 1.5},
    {"logprobs": 21}, {"logprobs": -1}, {"logprobs": True},
]
BAD_CHAT_NUMBERS = [
    {"logprobs": 3}, {"top_logprobs": 21}, {"top_logprobs": 2},  # needs logprobs: true
    {"max_completion_tokens": 0},
]


def test_bad_numbers_get_the_servers_error(tmp_path, lpx_bin, smollm2, server):
    """A table of bodies with a number out of range (or of the wrong type): lpx batch
    refuses each line with exactly the message lpx serve gives in its 400, which also
    names the field as param."""
    rows, want, want_param = [], {}, {}
    for i, extra in enumerate(BAD_NUMBERS + BAD_CHAT_NUMBERS):
        chat = i >= len(BAD_NUMBERS)
        body = ({"messages": [{"role": "user", "content": "Hi"}]} if chat
                else {"prompt": "Hi"}) | {"max_tokens": 1} | extra
        a = server.post("/v1/chat/completions" if chat else "/v1/completions", body)
        assert a.status_code == 400, (body, a.text)
        err = a.json()["error"]
        assert err["param"] == next(iter(extra)), err
        rows.append({"id": f"b{i}"} | body)
        want[f"b{i}"] = f"line {i + 1}: " + err["message"]
        want_param[f"b{i}"] = err["param"]
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, rows)
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2, "-c", str(CTX))
    assert r.returncode == 1, r.stderr
    assert failures(tmp_path / "o") == want
    assert params(tmp_path / "o") == want_param


def test_server_mode_failure_names_the_servers_param(tmp_path, lpx_bin, server):
    """Against a server (--server), a line the server refuses with a 400 (past its
    context: batch's input check cannot know the server's context) records the param of
    the server's error object."""
    body = {"prompt": "Hello there", "max_tokens": CTX}
    a = server.post("/v1/completions", body)
    assert a.status_code == 400 and a.json()["error"]["param"], a.text
    inp = tmp_path / "in.jsonl"
    write_jsonl(inp, [{"id": "past"} | body, {"id": "ok", "prompt": "Hi", "max_tokens": 1}])
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "--server", server.url)
    assert r.returncode == 1, r.stderr
    assert params(tmp_path / "o") == {"past": a.json()["error"]["param"]}


def test_invalid_utf8_lines_and_ids_are_written_as_utf8(tmp_path, lpx_bin, smollm2, server):
    """Lines holding bytes that are not UTF-8 are refused as serve refuses such a body
    (the same byte named); every byte lpx batch writes (failures.jsonl with the ids,
    run.log) is valid UTF-8, decoded strictly."""
    bad = b"\xff\xfe\xc3("
    lines = [b'{"id": "a' + bad + b'", "prompt": "hi", "max_tokens": 2}',
             b'{"id": "b", "prompt": "x' + bad + b'", "max_tokens": 2}',
             b'{"custom_id": "c' + bad + b'", "method": "POST", "url": "/v1/x", "body": {}}',
             b'{"id": "ok", "prompt": "hi", "max_tokens": 2}']
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\n".join(lines) + b"\n")
    r = batch(lpx_bin, "-i", str(inp), "-o", str(tmp_path / "o"), "-m", smollm2, "-c", str(CTX))
    assert r.returncode == 1, r.stderr
    for name in ("failures.jsonl", "results.jsonl", "summary.json", "run.log"):
        (tmp_path / "o" / name).read_bytes().decode("utf-8", errors="strict")
    got = {f["custom_id"]: f["error"] for f in
           (json.loads(l) for l in (tmp_path / "o" / "failures.jsonl").read_bytes()
            .decode("utf-8", errors="strict").splitlines())}
    import httpx
    a = httpx.post(server.url + "/v1/completions", headers={"Content-Type": "application/json"},
                   content=b'{"prompt": "x' + bad + b'", "max_tokens": 2}')
    assert a.status_code == 400
    assert a.json()["error"]["message"] == "the request body is not valid UTF-8 (byte 13: 0xFF)"
    assert got == {"a\ufffd\ufffd\ufffd(": "line 1: not valid UTF-8 (byte 9: 0xFF)",
                   "b": "line 2: not valid UTF-8 (byte 24: 0xFF)",
                   "c\ufffd\ufffd\ufffd(": 'line 3: url must be "/v1/chat/completions" or '
                                             '"/v1/completions"'}
