"""Structured outputs through lpx serve and lpx batch, the real SmolLM2 on the CPU:
for every schema of grammar_schemas.py, greedy and at temperature 1.0 with two seeds,
each output parses and validates with jsonschema (or, cut by max_tokens, is a prefix
of a document the grammar takes); bad schemas are 400s naming the keyword; json_object
outputs are objects; streaming gives the same text; batch bodies take it too."""
import json
import subprocess

import jsonschema
import openai
import pytest

from grammar_schemas import SCHEMAS, is_prefix
from serve_helpers import Server

MAX_TOKENS = 96


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, "--max-num-seqs", "4")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)


def fmt(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": True}}


def check_output(schema, text, finish, tmp_path):
    if finish == "length":
        assert is_prefix(schema, text, tmp_path), f"not a valid prefix: {text!r}"
        return "length"
    assert finish == "stop", finish
    value = json.loads(text)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
    assert not errors, f"{text!r}: {errors[0].message}"
    return "stop"


@pytest.mark.slow
@pytest.mark.parametrize("name, schema, prompt, invalid", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_chat_outputs_validate(client, name, schema, prompt, invalid, tmp_path):
    msgs = [{"role": "system", "content": "You answer in JSON."},
            {"role": "user", "content": prompt}]
    for temp, seed in ((0, 0), (1.0, 1), (1.0, 2)):
        r = client.chat.completions.create(model="smollm2", messages=msgs, temperature=temp,
                                           seed=seed, max_tokens=MAX_TOKENS,
                                           response_format=fmt(name, schema))
        c = r.choices[0]
        check_output(schema, c.message.content, c.finish_reason, tmp_path)


@pytest.mark.slow
def test_most_outputs_finish(client, tmp_path):
    """Across the schemas, completions (not chat) too: most end with stop, not length."""
    stops = total = 0
    for name, schema, prompt, _ in SCHEMAS:
        r = client.completions.create(model="smollm2", prompt=prompt + "\nJSON: ",
                                      temperature=1.0, seed=7, max_tokens=MAX_TOKENS,
                                      extra_body={"response_format": fmt(name, schema)})
        c = r.choices[0]
        stops += check_output(schema, c.text, c.finish_reason, tmp_path) == "stop"
        total += 1
    assert stops >= total * 0.7, f"{stops} of {total} ended with stop"


def test_length_gives_a_valid_prefix(client, tmp_path):
    schema = SCHEMAS[0][1]
    r = client.chat.completions.create(model="smollm2", max_tokens=5, temperature=0,
                                       messages=[{"role": "user", "content": "A person?"}],
                                       response_format=fmt("p", schema))
    c = r.choices[0]
    assert c.finish_reason == "length" and r.usage.completion_tokens == 5
    assert is_prefix(schema, c.message.content, tmp_path)
    with pytest.raises(json.JSONDecodeError):
        json.loads(c.message.content)


def test_json_object(client):
    for temp, seed in ((0, 0), (1.0, 3), (1.0, 4)):
        r = client.chat.completions.create(
            model="smollm2", temperature=temp, seed=seed, max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": "Describe a cat in JSON."}],
            response_format={"type": "json_object"})
        c = r.choices[0]
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
        else:
            assert c.message.content.lstrip().startswith("{")


def test_streaming_is_the_same(client):
    args = dict(model="smollm2", temperature=0, max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": SCHEMAS[0][2]}],
                response_format=fmt("person", SCHEMAS[0][1]))
    whole = client.chat.completions.create(**args).choices[0].message.content
    parts = [ch.choices[0].delta.content or "" for ch in
             client.chat.completions.create(stream=True, **args) if ch.choices]
    assert "".join(parts) == whole
    jsonschema.validate(json.loads(whole), SCHEMAS[0][1])


def test_constrained_differs_from_free(client):
    """The mask is applied: the free greedy answer is prose, the constrained one JSON."""
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    free = client.chat.completions.create(model="smollm2", messages=msgs, temperature=0,
                                          max_tokens=20).choices[0].message.content
    forced = client.chat.completions.create(
        model="smollm2", messages=msgs, temperature=0, max_tokens=40,
        response_format=fmt("a", {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"], "additionalProperties": False}))
    assert free != forced.choices[0].message.content
    assert set(json.loads(forced.choices[0].message.content)) == {"city"}


@pytest.mark.parametrize("schema, words", [
    ({"type": "integer", "multipleOf": 3}, ["keyword 'multipleOf'"]),
    ({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}},
     ["response_format.json_schema.schema.properties.age", "keyword 'minimum'"]),
    ({"type": "string", "format": "email"}, ["keyword 'format'"]),
    ({"oneOf": [{"type": "string"}]}, ["keyword 'oneOf'"]),
    ({"type": "object", "patternProperties": {"^x": {}}}, ["keyword 'patternProperties'"]),
    ({"if": {}, "then": {}}, ["keyword 'if'"]),
    ({"type": "strng"}, ["'strng' is not a JSON Schema type"]),
    ({"$ref": "#/$defs/nope"}, ["keyword '$ref'"]),
    ({"type": "string", "pattern": "(?<=a)b"}, ["schema.pattern", "lookarounds"]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 1},
     ["'minItems' 3 is above 'maxItems' 1"]),
    ({"type": "string", "pattern": "^(ab)*$", "minLength": 3, "maxLength": 3},
     ["schema.pattern", "no string of the length"]),
])
def test_bad_schemas_are_400s(client, schema, words):
    for call in (lambda: client.chat.completions.create(
                     model="smollm2", messages=[{"role": "user", "content": "x"}],
                     response_format=fmt("bad", schema)),
                 lambda: client.completions.create(model="smollm2", prompt="x",
                                                   extra_body={"response_format":
                                                               fmt("bad", schema)})):
        with pytest.raises(openai.BadRequestError) as e:
            call()
        assert e.value.status_code == 400 and e.value.param == "response_format"
        for w in words:
            assert w in e.value.message, e.value.message


def test_bad_response_formats(srv):
    for rf in [{"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema",
                                                         "json_schema": {"name": "x"}},
               {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}},
               "json", {"type": "json_object", "schema": {}}]:
        r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                              "response_format": rf})
        assert r.status_code == 400, (rf, r.text)
        assert r.json()["error"]["param"] == "response_format"


@pytest.mark.slow
def test_batch_with_response_format(lpx_bin, smollm2, tmp_path):
    schema = SCHEMAS[2][1]
    rows = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"messages": [{"role": "user", "content": SCHEMAS[2][2]}],
                      "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": i,
                      "response_format": fmt("c", schema)}} for i in range(4)]
    rows.append({"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"messages": [{"role": "user", "content": "x"}],
                          "response_format": fmt("b", {"type": "integer", "maximum": 3})}})
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    r = subprocess.run([lpx_bin, "batch", "-m", smollm2, "-i", str(inp), "-o", str(out),
                        "--max-model-len", "512"], capture_output=True, text=True, timeout=600)
    results = [json.loads(l) for l in open(out / "results.jsonl")]
    assert sorted(x["custom_id"] for x in results) == ["r0", "r1", "r2", "r3"], r.stderr
    for x in results:
        c = x["response"]["body"]["choices"][0]
        assert c["finish_reason"] == "stop"
        jsonschema.validate(json.loads(c["message"]["content"]), schema)
    failures = open(out / "failures.jsonl").read()
    assert '"bad"' in failures and "keyword 'maximum'" in failures, failures
