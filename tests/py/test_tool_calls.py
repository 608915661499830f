"""Tool calls through lpx serve and lpx batch, driven by the official openai SDK.

SmolLM2's chat template has no tool format, so the model here is the random-weight
Qwen3-shaped fixture (tests/fixtures/model/hf-qwen3: a byte-level vocabulary, so the
forcing grammar can spell anything) given the published chat templates of Qwen3,
Qwen2.5 and Llama 3.2 (tests/fixtures/templates/). A random model writes no calls of its
own, so "auto" is checked for what it must not break; the forced choices ("required", a
named function) must always give calls whose arguments validate with jsonschema, for
every one of FUNCTIONS; a stream's accumulated deltas equal the whole response; bad tool
definitions are 400s naming the field; and a conversation with a call and its result is
rendered exactly as transformers renders it (the /tokenize ids against the `tokenizers`
encoding of transformers' own rendering)."""
import json
import pathlib
import shutil
import subprocess

import jsonschema
import openai
import pytest

from serve_helpers import Server

ROOT = pathlib.Path(__file__).resolve().parents[2]
TDIR = ROOT / "tests/fixtures/templates"
CTX = 16384


def fn(name, params=None, description=None):
    f = {"name": name}
    if params is not None:
        f["parameters"] = params
    if description:
        f["description"] = description
    return {"type": "function", "function": f}


def obj(props, required=None):
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required,
            "additionalProperties": False}


S = {"type": "string", "maxLength": 8}
FUNCTIONS = [
    fn("get_weather", obj({"city": S, "unit": {"enum": ["celsius", "fahrenheit"]}}),
       "The current weather in a city."),
    fn("get_time", obj({"timezone": {"type": "string", "pattern": "^[A-Z][a-z]{1,6}$"}})),
    fn("set_alarm", obj({"hour": {"enum": [6, 7, 8]}, "on": {"type": "boolean"}})),
    fn("search", obj({"query": S, "limit": {"enum": [5, 10]}}, required=["query"])),
    fn("send_email", obj({"to": {"type": "array", "items": S, "minItems": 1, "maxItems": 2},
                          "subject": S, "urgent": {"type": "boolean"}})),
    fn("add_event", obj({"title": S, "when": obj({"day": {"enum": ["mon", "tue"]},
                                                  "slot": {"enum": [1, 2, 3]}})})),
    fn("convert", obj({"amount": {"enum": [1, 2.5, 10]}, "from": {"const": "EUR"},
                       "to": {"anyOf": [{"const": "USD"}, {"const": "GBP"}]}})),
    fn("now"),
    fn("rate", obj({"stars": {"enum": [1, 2, 3, 4, 5]}, "note": {"type": ["string", "null"],
                                                                "maxLength": 6}})),
    fn("lookup", {"$defs": {"id": {"type": "string", "pattern": "^[0-9]{3}$"}},
                  "type": "object", "properties": {"ids": {"type": "array",
                                                           "items": {"$ref": "#/$defs/id"},
                                                           "maxItems": 3}},
                  "required": ["ids"], "additionalProperties": False}),
    fn("toggle", obj({"flag": {"type": "boolean"}, "mode": {"enum": ["a", "b", None]}})),
]
SCHEMA = {f["function"]["name"]: f["function"].get("parameters",
                                                   {"type": "object",
                                                    "additionalProperties": False})
          for f in FUNCTIONS}
NAMES = [f["function"]["name"] for f in FUNCTIONS]
MSGS = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"}]


def model_dir(base, template):
    """The byte-level Qwen3-shaped fixture with the given template and a long context."""
    d = base / template
    if not d.exists():
        shutil.copytree(ROOT / "tests/fixtures/model/hf-qwen3", d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["max_position_embeddings"] = CTX
        (d / "config.json").write_text(json.dumps(cfg))
        shutil.copy(TDIR / template, d / "chat_template.jinja")
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("tool-models")


def serve(lpx_bin, models, template):
    return Server(lpx_bin, str(model_dir(models, template)), "--max-model-len", str(CTX),
                  "--max-num-seqs", "4", name="q")


@pytest.fixture(scope="module")
def srv(lpx_bin, models):
    s = serve(lpx_bin, models, "Qwen-Qwen3-0.6B.jinja")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=600)


def check_calls(choice, names=None, one=False):
    """The calls of a forced choice: finish tool_calls, known names, arguments valid."""
    m = choice.message
    assert choice.finish_reason == "tool_calls", (choice.finish_reason, m)
    assert m.tool_calls and (len(m.tool_calls) == 1 or not one), m.tool_calls
    for c in m.tool_calls:
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in (names or NAMES)
        jsonschema.validate(json.loads(c.function.arguments), SCHEMA[c.function.name])
    assert len({c.id for c in m.tool_calls}) == len(m.tool_calls)
    return m.tool_calls


SAMPLING = [dict(temperature=0), dict(temperature=1.0, seed=1), dict(temperature=1.0, seed=2)]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_named_function_is_called_with_valid_arguments(client, name):
    for kw in SAMPLING:
        r = client.chat.completions.create(
            model="q", messages=MSGS, tools=FUNCTIONS, max_tokens=1500,
            tool_choice={"type": "function", "function": {"name": name}}, **kw)
        calls = check_calls(r.choices[0], [name], one=True)
        assert r.choices[0].message.content is None


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [True, False])
def test_required_gives_valid_calls(client, parallel):
    counts = []
    for kw in SAMPLING + [dict(temperature=1.0, seed=s) for s in range(3, 13)]:
        r = client.chat.completions.create(
            model="q", messages=MSGS, tools=FUNCTIONS, tool_choice="required",
            parallel_tool_calls=parallel, max_tokens=3000, **kw)
        counts.append(len(check_calls(r.choices[0], one=not parallel)))
    # parallel: the grammar lets a call follow a call (seeds 2..12 made 1 to 5 here)
    assert max(counts) > 1 if parallel else max(counts) == 1, counts


def accumulate(stream):
    """An SDK stream's deltas put together: content, calls by index, finish_reason."""
    content, calls, finish, roles = None, {}, None, []
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        if d.role:
            roles.append(d.role)
        if d.content:
            content = (content or "") + d.content
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                assert e["id"] is None, "a call's id came twice"
                e["id"] = tc.id
                assert tc.function.name, "the first delta of a call names the function"
                e["name"] = tc.function.name
            else:
                assert e["id"], "a call's first delta carries its id"
                assert not tc.function.name
            e["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    assert roles == ["assistant"]
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("choice", ["required", "auto", "none",
                                    {"type": "function", "function": {"name": "add_event"}}])
def test_stream_equals_whole_response(client, choice):
    kw = dict(model="q", messages=MSGS, tools=FUNCTIONS, tool_choice=choice, temperature=0,
              max_tokens=400)
    whole = client.chat.completions.create(**kw).choices[0]
    content, calls, finish = accumulate(client.chat.completions.create(stream=True, **kw))
    want = [{"name": c.function.name, "arguments": c.function.arguments}
            for c in whole.message.tool_calls or []]
    assert [{"name": c["name"], "arguments": c["arguments"]} for c in calls] == want
    assert all(c["id"].startswith("call_") for c in calls)
    assert content == whole.message.content and finish == whole.finish_reason
    if choice in ("auto", "none"):
        # a random model writes no calls: all of its text is content
        assert not want and whole.message.content
    else:
        assert want and whole.message.content is None and finish == "tool_calls"
        # the arguments came in more than one piece
        chunks = list(client.chat.completions.create(stream=True, **kw))
        pieces = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert len(pieces) > len(want)


BAD = [
    (dict(tools=[{"type": "retrieval"}]), "tools", "tools[0].type: 'retrieval' is not supported"),
    (dict(tools=[fn("f", {}), fn("f", {})]), "tools", "'f' is given twice"),
    (dict(tools=[fn("a b", {})]), "tools", "tools[0].function.name"),
    (dict(tools=[fn("f", {"type": "object", "properties": {"x": {"type": "number",
                                                                 "multipleOf": 3}}})]),
     "tools", "tools[0].function.parameters.properties.x: keyword 'multipleOf'"),
    (dict(tools=[fn("f", {"type": "objekt"})]), "tools", "'objekt' is not a JSON Schema type"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {},
                                                   "extra": 1}}]),
     "tools", "field 'extra' is not supported"),
    (dict(tools=FUNCTIONS, tool_choice={"type": "function", "function": {"name": "nope"}}),
     "tool_choice", "'nope', which is not in 'tools'"),
    (dict(tool_choice="required"), "tool_choice", "needs 'tools'"),
    (dict(tools=FUNCTIONS, tool_choice="sometimes"), "tool_choice", "is not one of"),
    (dict(tools=FUNCTIONS, parallel_tool_calls="yes"), "parallel_tool_calls", "a boolean"),
    (dict(tools=FUNCTIONS, tool_choice="required", response_format={"type": "json_object"}),
     "tool_choice", "not supported"),
]


@pytest.mark.parametrize("kw, param, msg", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_tools_are_400s(client, kw, param, msg):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="q", messages=MSGS, max_tokens=4, **kw)
    err = e.value.body
    assert e.value.status_code == 400 and err["param"] == param, err
    assert msg in err["message"], err["message"]


def test_bad_tool_call_in_messages_is_a_400(client):
    msgs = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{not json"}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="q", messages=msgs, max_tokens=4)
    assert e.value.body["param"] == "messages"
    assert "tool_calls[0].function.arguments is not valid JSON" in e.value.body["message"]


def test_template_without_tools_refuses_them(lpx_bin, models):
    s = serve(lpx_bin, models, "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
    try:
        r = s.post("/v1/chat/completions", {"messages": MSGS, "tools": FUNCTIONS[:1],
                                             "max_tokens": 4})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "tools" and "no tool-call format" in err["message"]
        # no tools: fine
        assert s.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2,
                                               "tool_choice": "none"}).status_code == 200
    finally:
        s.stop()


# ---- rendering: the conversation as transformers renders it ------------------------

CALL_ARGS = {"city": "Paris", "unit": "celsius"}
CONVERSATION = MSGS + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps(CALL_ARGS)}}]},
    {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp\": 21}"},
    {"role": "user", "content": "And tomorrow?"},
]


def transformers_ids(model, messages, tools):
    """transformers' rendering of the conversation (arguments as objects, as its users
    pass them), encoded by the `tokenizers` package."""
    from tokenizers import Tokenizer
    from transformers.utils.chat_template_utils import render_jinja_template
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        if m["role"] == "assistant" and m["content"] is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    text, _ = render_jinja_template(conversations=[msgs], tools=tools,
                                    chat_template=(model / "chat_template.jinja").read_text(),
                                    add_generation_prompt=True, bos_token=cfg["bos_token"],
                                    eos_token=cfg["eos_token"])
    return Tokenizer.from_file(str(model / "tokenizer.json")).encode(
        text[0], add_special_tokens=False).ids


@pytest.mark.parametrize("template", ["Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja",
                                      "meta-llama-Llama-3.2-3B-Instruct.jinja"])
def test_tool_conversation_renders_as_transformers(lpx_bin, models, template):
    s = serve(lpx_bin, models, template)
    try:
        tools = FUNCTIONS[:3]
        r = s.post("/tokenize", {"messages": CONVERSATION, "tools": tools})
        assert r.status_code == 200, r.text
        want = transformers_ids(model_dir(models, template), CONVERSATION, tools)
        assert r.json()["tokens"] == want
        # the chat request renders the same prompt
        r = s.post("/v1/chat/completions", {"messages": CONVERSATION, "tools": tools,
                                            "max_tokens": 1})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(want)
    finally:
        s.stop()


def test_two_turn_conversation(client, srv, models):
    """Call, tool result, answer: the SDK's own message objects sent back, streaming
    and not; the second turn's prompt is transformers' rendering."""
    tools = FUNCTIONS[:2]
    msgs = list(MSGS)
    r = client.chat.completions.create(model="q", messages=msgs, tools=tools,
                                       tool_choice="required", parallel_tool_calls=False,
                                       temperature=0, max_tokens=300)
    call = check_calls(r.choices[0], one=True)[0]
    msgs.append(r.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": "{\"temp\": 21}"})
    whole = client.chat.completions.create(model="q", messages=msgs, tools=tools,
                                           temperature=0, max_tokens=24)
    assert whole.choices[0].finish_reason in ("stop", "length")
    content, calls, finish = accumulate(client.chat.completions.create(
        model="q", messages=msgs, tools=tools, temperature=0, max_tokens=24, stream=True))
    assert content == whole.choices[0].message.content and finish == whole.choices[0].finish_reason
    sent = json.loads(json.dumps(msgs))
    sent[2].setdefault("content", None)
    want = transformers_ids(model_dir(models, "Qwen-Qwen3-0.6B.jinja"), sent, tools)
    assert whole.usage.prompt_tokens == len(want)
    assert srv.post("/tokenize", {"messages": msgs, "tools": tools}).json()["tokens"] == want


def test_llama3_format(lpx_bin, models):
    """The Llama 3.2 template's JSON format: forced calls parse ("parameters")."""
    s = serve(lpx_bin, models, "meta-llama-Llama-3.2-3B-Instruct.jinja")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=600)
        for choice in ("required", {"type": "function", "function": {"name": "set_alarm"}}):
            kw = dict(model="q", messages=MSGS, tools=FUNCTIONS, tool_choice=choice,
                      temperature=0, max_tokens=400)
            r = c.chat.completions.create(**kw)
            check_calls(r.choices[0], one=True)
            content, calls, finish = accumulate(c.chat.completions.create(stream=True, **kw))
            got = r.choices[0].message.tool_calls[0].function
            assert [(x["name"], x["arguments"]) for x in calls] == [(got.name, got.arguments)]
    finally:
        s.stop()


def test_batch_bodies_take_tools(lpx_bin, models, tmp_path):
    model = model_dir(models, "Qwen-Qwen3-0.6B.jinja")
    rows = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"messages": MSGS, "tools": FUNCTIONS, "max_tokens": 400,
                      "temperature": 1.0, "seed": i,
                      "tool_choice": {"type": "function", "function": {"name": NAMES[i]}}}}
            for i in range(3)]
    rows.append({"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"messages": MSGS, "tools": [fn("f", {}), fn("f", {})]}})
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    r = subprocess.run([lpx_bin, "batch", "-m", str(model), "-i", str(inp), "-o", str(out),
                        "--max-model-len", str(CTX)], capture_output=True, text=True, timeout=600)
    results = {x["custom_id"]: x for x in map(json.loads, open(out / "results.jsonl"))}
    assert sorted(results) == ["r0", "r1", "r2"], r.stderr
    for i in range(3):
        c = results[f"r{i}"]["response"]["body"]["choices"][0]
        assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
        [call] = c["message"]["tool_calls"]
        assert call["function"]["name"] == NAMES[i] and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMA[NAMES[i]])
    failures = open(out / "failures.jsonl").read()
    assert '"bad"' in failures and "given twice" in failures, failures
