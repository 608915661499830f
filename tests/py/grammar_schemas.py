"""JSON Schemas of the structured-output tests (test_grammar_jsonschema.py against the
grammar engine alone, test_structured_outputs.py through lpx serve), each with a
request that asks a model for it and documents that the schema refuses."""
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 40},
                         "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}

# (name, schema, prompt, invalid documents)
SCHEMAS = [
    ("person", PERSON, "Describe a person with a name and an age.",
     ['{"name": "a"}', '{"name": 1, "age": 2}', '{"name": "a", "age": 1.5}',
      '{"name": "a", "age": 1, "x": 0}']),
    ("flat_types", {"type": "object",
                    "properties": {"title": {"type": "string"}, "price": {"type": "number"},
                                   "in_stock": {"type": "boolean"}, "note": {"type": "null"}},
                    "required": ["title", "price", "in_stock"],
                    "additionalProperties": False},
     "Describe a product: title, price and whether it is in stock.",
     ['{"title": "t", "price": "1", "in_stock": true}', '{"title": "t", "price": 1}']),
    ("enum_color", {"type": "object",
                    "properties": {"color": {"enum": ["red", "green", "blue"]}},
                    "required": ["color"], "additionalProperties": False},
     "What colour is the sky? Answer with a colour.",
     ['{"color": "yellow"}', '{"color": 1}']),
    ("enum_top", {"enum": ["yes", "no", 1, None]}, "Is water wet?", ['"maybe"', "2"]),
    ("const", {"type": "object", "properties": {"v": {"const": "fixed"},
                                                "n": {"type": "integer"}},
               "required": ["v", "n"], "additionalProperties": False},
     "Give a number.", ['{"v": "other", "n": 1}']),
    ("integer_list", {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                      "maxItems": 5},
     "List a few prime numbers.", ["[1]", "[1, 2, 3, 4, 5, 6]", '["1", 2]']),
    ("string_list", {"type": "object",
                     "properties": {"tags": {"type": "array", "items": {"type": "string",
                                                                       "maxLength": 12},
                                             "maxItems": 4}},
                     "required": ["tags"], "additionalProperties": False},
     "Give some tags for a blog post about cooking.",
     ['{"tags": [1]}', '{"tags": ["a", "b", "c", "d", "e"]}']),
    ("nested", {"type": "object",
                "properties": {"user": PERSON,
                               "address": {"type": "object",
                                           "properties": {"city": {"type": "string"},
                                                          "zip": {"type": "string",
                                                                  "pattern": "^[0-9]{5}$"}},
                                           "required": ["city", "zip"],
                                           "additionalProperties": False}},
                "required": ["user", "address"], "additionalProperties": False},
     "Make up a user and their address.",
     ['{"user": {"name": "a", "age": 1}, "address": {"city": "x", "zip": "123"}}']),
    ("array_of_objects", {"type": "array", "maxItems": 3, "items": PERSON},
     "List two people with names and ages.", ['[{"name": "a"}]', '{"name": "a", "age": 1}']),
    ("anyof_scalar", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 10}]},
     "Give a small number or a word.", ["true", '"this is a long string"', "1.5"]),
    ("anyof_objects", {"anyOf": [
        {"type": "object", "properties": {"cat": {"type": "string"}}, "required": ["cat"],
         "additionalProperties": False},
        {"type": "object", "properties": {"dog": {"type": "integer"}}, "required": ["dog"],
         "additionalProperties": False}]},
     "Name a pet.", ['{"cat": 1}', '{"bird": "x"}']),
    ("nullable", {"type": "object",
                  "properties": {"middle_name": {"type": ["string", "null"]},
                                 "first": {"type": "string"}},
                  "required": ["middle_name", "first"], "additionalProperties": False},
     "Give a first name and a middle name, if any.", ['{"middle_name": 1, "first": "a"}']),
    ("ref_defs", {"$defs": {"point": {"type": "object",
                                      "properties": {"x": {"type": "number"},
                                                     "y": {"type": "number"}},
                                      "required": ["x", "y"], "additionalProperties": False}},
                  "type": "object",
                  "properties": {"start": {"$ref": "#/$defs/point"},
                                 "end": {"$ref": "#/$defs/point"}},
                  "required": ["start", "end"], "additionalProperties": False},
     "Give a line segment from a start point to an end point.",
     ['{"start": {"x": 1}, "end": {"x": 1, "y": 2}}']),
    ("ref_definitions", {"definitions": {"level": {"enum": ["low", "mid", "high"]}},
                         "type": "object", "properties": {"risk": {"$ref": "#/definitions/level"}},
                         "required": ["risk"], "additionalProperties": False},
     "Rate the risk of crossing a busy road.", ['{"risk": "none"}']),
    ("recursive_tree", {"$defs": {"node": {"type": "object",
                                           "properties": {"name": {"type": "string",
                                                                   "maxLength": 10},
                                                          "children": {"type": "array",
                                                                       "maxItems": 2,
                                                                       "items": {"$ref": "#/$defs/node"}}},
                                           "required": ["name"],
                                           "additionalProperties": False}},
                        "$ref": "#/$defs/node"},
     "Describe a small family tree.", ['{"children": []}', '{"name": "a", "children": [1]}']),
    ("pattern", {"type": "object",
                 "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"},
                                "email": {"type": "string",
                                          "pattern": "^[a-z]+@[a-z]+\\.(com|org)$"}},
                 "required": ["code", "email"], "additionalProperties": False},
     "Give a product code like ABC-123 and an email address.",
     ['{"code": "ab-1", "email": "a@b.com"}', '{"code": "ABC-123", "email": "a@b.net"}']),
    ("pattern_lengths", {"type": "object",
                         "properties": {"slug": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$",
                                                 "minLength": 5, "maxLength": 12},
                                        "pairs": {"type": "string", "pattern": "^(ab)*$",
                                                  "minLength": 3, "maxLength": 7},
                                        "digits": {"type": "string", "pattern": "^\\d+$",
                                                   "maxLength": 4},
                                        "word": {"type": "string", "pattern": "^(\u00e9|\\n|[a-z])+$",
                                                 "minLength": 2, "maxLength": 3}},
                         "required": ["slug", "pairs", "digits", "word"],
                         "additionalProperties": False},
     "Give a slug like my-page, the text abab, a number and a short word.",
     ['{"slug": "abcd", "pairs": "abab", "digits": "1", "word": "ab"}',
      '{"slug": "abcde", "pairs": "ababababab", "digits": "1", "word": "ab"}',
      '{"slug": "abcde", "pairs": "abab", "digits": "12345", "word": "ab"}',
      '{"slug": "abcde", "pairs": "abab", "digits": "1", "word": "\u00e9"}',
      '{"slug": "abcde", "pairs": "abab", "digits": "1", "word": "abcd"}']),
    ("string_lengths", {"type": "object",
                        "properties": {"word": {"type": "string", "minLength": 3,
                                                "maxLength": 8}},
                        "required": ["word"], "additionalProperties": False},
     "Give a word.", ['{"word": "ab"}', '{"word": "abcdefghi"}']),
    ("extra_allowed", {"type": "object", "properties": {"id": {"type": "integer"}},
                       "required": ["id"]},
     "Give an id and anything else.", ['{"id": "x"}', "{}"]),
    ("extra_schema", {"type": "object", "properties": {"name": {"type": "string"}},
                      "required": ["name"], "additionalProperties": {"type": "integer"}},
     "Give a name and some counts.", ['{"name": "a", "n": "x"}']),
    ("optional_only", {"type": "object",
                       "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
                                      "c": {"type": "string"}},
                       "additionalProperties": False},
     "Give some fields.", ['{"d": 1}', '{"a": "x"}']),
    ("type_union", {"type": ["integer", "boolean", "null"]}, "Say true.",
     ['"x"', "1.5", "[]"]),
    ("untyped_any", {}, "Say anything as JSON.", []),
    ("classification", {"type": "object",
                        "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
                                       "confidence": {"type": "number"}},
                        "required": ["label", "confidence"], "additionalProperties": False},
     "Classify the sentiment of: 'I love this movie!'",
     ['{"label": "happy", "confidence": 1}']),
    ("allof_single", {"allOf": [PERSON]}, "Describe a person.", ['{"name": "a"}']),
]


def grammar_tool():
    path = ROOT / os.environ.get("LPX_BUILD", "build") / "test_grammar"
    assert path.exists(), f"{path} missing: build the unit tests"
    return str(path)


def run_tool(mode, schema, tmp_path, *args, docs=None):
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(schema))
    inp = "".join(json.dumps(d) + "\n" for d in docs) if docs is not None else None
    r = subprocess.run([grammar_tool(), mode, str(f), *map(str, args)], input=inp,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]  # not splitlines: documents hold U+2028 and the like


def is_prefix(schema, text, tmp_path):
    """Whether text is the beginning of a document the schema's grammar accepts."""
    return run_tool("prefix", schema, tmp_path, docs=[text]) == ["accept"]
