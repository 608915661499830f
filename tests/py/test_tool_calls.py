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


# Not a published template (those are in TDIR, with transformers goldens): written for
# these tests, a Llama-3-style template that asks for the pythonic call list as vLLM's
# Llama 3.2 pythonic template does.
PYTHONIC_TPL = ROOT / "tests/fixtures/tools/pythonic-test.jinja"


def model_dir(base, template):
    """The byte-level Qwen3-shaped fixture with the given template (a file of TDIR, or a
    path) and a long context."""
    src = template if isinstance(template, pathlib.Path) else TDIR / template
    d = base / src.name
    if not d.exists():
        shutil.copytree(ROOT / "tests/fixtures/model/hf-qwen3", d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["max_position_embeddings"] = CTX
        (d / "config.json").write_text(json.dumps(cfg))
        shutil.copy(src, d / "chat_template.jinja")
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


def check_calls(choice, names=None, one=False, short_ids=False):
    """The calls of a forced choice: finish tool_calls, known names, arguments valid
    (short_ids: Mistral's ids of 9 letters and digits)."""
    m = choice.message
    assert choice.finish_reason == "tool_calls", (choice.finish_reason, m)
    assert m.tool_calls and (len(m.tool_calls) == 1 or not one), m.tool_calls
    for c in m.tool_calls:
        assert c.type == "function"
        assert (len(c.id) == 9 and c.id.isalnum()) if short_ids else c.id.startswith("call_")
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


# ---- the pythonic format ([f(x=1)]) against Python's own ast ----------------------

def lpx_parse(lpx_bin, fmt, text):
    """The parser alone (tests/unit/test_tool_calls.c's driver) on text."""
    exe = pathlib.Path(lpx_bin).parent / "test_tool_calls"
    out = subprocess.run([str(exe), "parse", fmt], input=text.encode(), capture_output=True,
                         check=True).stdout
    return json.loads(out)


def ast_calls(text):
    """What vLLM's pythonic parser takes, read with Python's ast: a list of calls of plain
    names with keyword arguments whose values are literals (strings, numbers with a sign,
    True/False/None, lists, dicts with string keys); None when text is not one."""
    import ast
    import warnings

    def value(v):
        if isinstance(v, ast.Constant) and type(v.value) in (str, int, float, bool, type(None)):
            return v.value
        if (isinstance(v, ast.UnaryOp) and isinstance(v.op, (ast.USub, ast.UAdd))
                and isinstance(v.operand, ast.Constant) and type(v.operand.value) in (int, float)):
            return -v.operand.value if isinstance(v.op, ast.USub) else v.operand.value
        if isinstance(v, ast.List):
            return [value(x) for x in v.elts]
        if isinstance(v, ast.Dict) and all(isinstance(k, ast.Constant) and type(k.value) is str
                                           for k in v.keys):
            return {k.value: value(x) for k, x in zip(v.keys, v.values)}
        raise ValueError("not a literal")

    try:
        with warnings.catch_warnings():  # Python's own warning for an unknown escape
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(text.strip(), mode="eval").body
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls = []
        for c in tree.elts:
            if not isinstance(c, ast.Call) or not isinstance(c.func, ast.Name) or c.args:
                return None
            if any(k.arg is None for k in c.keywords):
                return None
            calls.append((c.func.id, {k.arg: value(k.value) for k in c.keywords}))
        return calls
    except (SyntaxError, ValueError):
        return None


def random_value(rng, depth=0):
    kind = rng.randrange(7 if depth < 3 else 5)
    if kind == 0:
        alphabet = "ab \"'\\\n\t\x01\u00e9\u4e16\U0001f600)]},=:#"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))
    if kind == 1:
        return rng.randrange(-10**20, 10**20)
    if kind == 2:
        return rng.choice([0.0, -0.5, 1e-7, 3.25e300, rng.uniform(-1e6, 1e6)])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(5)}": random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def py_text(rng, v):
    """v as Python source, with random spacing (repr for the scalars)."""
    sp = lambda: rng.choice(["", "", " ", "\n  "])  # noqa: E731
    if isinstance(v, list):
        inner = ("," + sp()).join(py_text(rng, x) for x in v)
        return "[" + sp() + inner + (rng.choice(["", ","]) if v else "") + sp() + "]"
    if isinstance(v, dict):
        inner = ("," + sp()).join(repr(k) + sp() + ":" + sp() + py_text(rng, x)
                                  for k, x in v.items())
        return "{" + sp() + inner + sp() + "}"
    return repr(v)


def test_pythonic_parser_matches_python_ast(lpx_bin):
    import random
    rng = random.Random(5)
    texts = []
    for _ in range(150):
        calls = []
        for _ in range(rng.randrange(1, 4)):
            name = rng.choice(["get_weather", "f", "_x1", "Now"])
            keys = rng.sample(["city", "unit", "q", "n", "opts", "_a"], rng.randrange(4))
            args = ", ".join(f"{k}={py_text(rng, random_value(rng))}" for k in keys)
            calls.append(f"{name}({args}{rng.choice(['', ','] if keys else [''])})")
        texts.append(rng.choice(["", " ", "\n"]) + "[" + ", ".join(calls) + "]")
    for text in texts:
        want = ast_calls(text)
        assert want is not None, text
        got = lpx_parse(lpx_bin, "pythonic", text)
        assert got["content"] is None, (text, got)
        assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == want, text
        # the arguments' text as json.dumps writes it (vLLM's), up to float spelling
        for c, (_, args) in zip(got["tool_calls"], want):
            if not any(isinstance(x, float) for x in json.loads(c["arguments"]).values()):
                assert c["arguments"] == json.dumps(args, ensure_ascii=False), text
    # Damaged ones: a byte dropped or added. lpx takes a list of calls only when Python's
    # ast reads the same calls; otherwise the whole text is content.
    taken = python_only = 0
    for i, text in enumerate(texts * 2):
        at = rng.randrange(len(text))
        bad = text[:at] + text[at + 1:] if i % 2 else text[:at] + rng.choice("()[]{},='\"\\x") + text[at:]
        got = lpx_parse(lpx_bin, "pythonic", bad)
        want = ast_calls(bad)
        if got["tool_calls"]:
            taken += 1
            assert [(c["name"], json.loads(c["arguments"])) for c in got["tool_calls"]] == want, bad
        else:
            assert got["content"] == (bad or None), bad
            python_only += want is not None
    # Python reads a few that lpx leaves as content (e.g. "a" "b", one string to Python)
    assert 0 < taken < len(texts) * 2 and python_only <= len(texts) // 10, (taken, python_only)


def test_pythonic_format_through_serve(lpx_bin, models):
    """A template asking for the pythonic list: tools are taken and rendered (as
    transformers renders them), "auto" output is what the parser makes of the raw text
    ("none" gives the raw text, same seed), a stream equals the whole response, and a
    forced call is a 400 (no forcing grammar for this format)."""
    tpl = PYTHONIC_TPL
    s = serve(lpx_bin, models, tpl)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=600)
        tools = FUNCTIONS[:3]
        conv = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(CALL_ARGS)}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21"}]
        r = s.post("/tokenize", {"messages": conv, "tools": tools})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == transformers_ids(model_dir(models, tpl), conv, tools)
        # (seed 3 makes this random model write a NUL byte, which a whole response cuts
        # its text at while a stream goes on: a server bug of its own, not this format's)
        for seed in (1, 2, 4):
            kw = dict(model="q", messages=MSGS, tools=tools, temperature=1.0, seed=seed,
                      max_tokens=24)
            raw = c.chat.completions.create(tool_choice="none", **kw).choices[0]
            auto = c.chat.completions.create(**kw).choices[0]
            want = lpx_parse(lpx_bin, "pythonic", raw.message.content or "")
            assert auto.message.content == want["content"]
            got = [(t.function.name, t.function.arguments) for t in auto.message.tool_calls or []]
            assert got == [(t["name"], t["arguments"]) for t in want["tool_calls"]]
            content, calls, finish = accumulate(c.chat.completions.create(stream=True, **kw))
            assert content == auto.message.content and finish == auto.finish_reason
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            r = s.post("/v1/chat/completions", {"messages": MSGS, "tools": tools,
                                                 "tool_choice": choice, "max_tokens": 4})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "tool_choice" and "pythonic" in err["message"], err
    finally:
        s.stop()


def test_mistral_format(lpx_bin, models):
    """Mistral v0.3's published template: forced calls parse (the list, ", "-separated),
    their ids are the 9 letters and digits the template demands, and the SDK's message
    sent back with the tool's result renders as transformers renders it."""
    tpl = "mistralai-Mistral-7B-Instruct-v0.3.jinja"
    s = serve(lpx_bin, models, tpl)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=600)
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        # (parallel: the greedy random model would write calls until max_tokens)
        for choice, par, smp in (("required", False, dict(temperature=0)),
                                 ("required", True, dict(temperature=1.0, seed=2)),
                                 ({"type": "function", "function": {"name": "set_alarm"}}, True,
                                  dict(temperature=0))):
            kw = dict(model="q", messages=msgs, tools=FUNCTIONS, tool_choice=choice,
                      parallel_tool_calls=par, max_tokens=3000, **smp)
            r = c.chat.completions.create(**kw)
            calls = check_calls(r.choices[0], one=not par or not isinstance(choice, str),
                                short_ids=True)
            content, streamed, finish = accumulate(c.chat.completions.create(stream=True, **kw))
            assert [(x["name"], x["arguments"]) for x in streamed] == [
                (t.function.name, t.function.arguments) for t in calls]
            assert all(len(x["id"]) == 9 and x["id"].isalnum() for x in streamed)
        conv = msgs + [r.choices[0].message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": calls[0].id, "content": "{\"ok\": 1}"}]
        conv[1].setdefault("content", None)
        got = s.post("/tokenize", {"messages": conv, "tools": FUNCTIONS[:3]})
        assert got.status_code == 200, got.text
        assert got.json()["tokens"] == transformers_ids(model_dir(models, tpl), conv, FUNCTIONS[:3])
        # auto: the parse of the raw text ("none", same seed), streamed the same
        for seed in (1, 2):
            kw = dict(model="q", messages=msgs, tools=FUNCTIONS[:3], temperature=1.0, seed=seed,
                      max_tokens=24)
            raw = c.chat.completions.create(tool_choice="none", **kw).choices[0]
            auto = c.chat.completions.create(**kw).choices[0]
            want = lpx_parse(lpx_bin, "mistral", raw.message.content or "")
            assert auto.message.content == want["content"]
            content, _, finish = accumulate(c.chat.completions.create(stream=True, **kw))
            assert content == auto.message.content and finish == auto.finish_reason
    finally:
        s.stop()


def test_chat_echo_with_tools(client):
    """vLLM's chat echo with the output parsed for calls: the continued message goes
    before the content outside the calls, streamed the same."""
    msgs = MSGS + [{"role": "assistant", "content": "Let me see."}]
    for choice in ("auto", {"type": "function", "function": {"name": "set_alarm"}}):
        kw = dict(model="q", messages=msgs, tools=FUNCTIONS, tool_choice=choice, temperature=0,
                  max_tokens=300)
        plain = client.chat.completions.create(**kw).choices[0].message
        r = client.chat.completions.create(extra_body={"echo": True}, **kw).choices[0]
        assert r.message.content == "Let me see." + (plain.content or "")
        assert [(t.function.name, t.function.arguments) for t in r.message.tool_calls or []] == [
            (t.function.name, t.function.arguments) for t in plain.tool_calls or []]
        content, calls, finish = accumulate(client.chat.completions.create(
            stream=True, extra_body={"echo": True}, **kw))
        assert content == r.message.content and finish == r.finish_reason
