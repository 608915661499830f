"""The grammar engine against the jsonschema package: every document a random walk of a
schema's automaton produces (tests/unit/test_grammar.c's driver) parses and validates,
and documents the schema refuses are refused by the grammar too."""
import json

import jsonschema
import pytest

from grammar_schemas import SCHEMAS, run_tool


@pytest.mark.parametrize("name, schema, prompt, invalid", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_walks_validate(name, schema, prompt, invalid, tmp_path):
    validator = jsonschema.Draft202012Validator(schema)
    docs = []
    for seed in (1, 2, 3):
        docs += [json.loads(line) for line in run_tool("walk", schema, tmp_path, seed, 40)]
    assert len(docs) == 120 and all(docs), "a walk ended in a dead end"
    for d in docs:
        value = json.loads(d)  # raises on text that is not JSON
        errors = list(validator.iter_errors(value))
        assert not errors, f"{d!r}: {errors[0].message}"
    # The walks reach more than one document.
    assert len(set(docs)) > 10 or name in ("enum_top", "const", "type_union")


@pytest.mark.parametrize("name, schema, prompt, invalid", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_invalid_documents_refused_by_both(name, schema, prompt, invalid, tmp_path):
    validator = jsonschema.Draft202012Validator(schema)
    for d in invalid:
        assert not validator.is_valid(json.loads(d)), f"jsonschema takes {d}"
    got = run_tool("check", schema, tmp_path, docs=invalid) if invalid else []
    assert got == ["reject"] * len(invalid), list(zip(invalid, got))


def test_valid_documents_accepted(tmp_path):
    """Hand-written documents valid for jsonschema that the grammar must take (its
    whitespace and property order are the documented ones)."""
    cases = [
        (SCHEMAS[0][1], ['{"name": "Ann", "age": 30}', '{\n  "name": "B",\n  "age": -1\n}']),
        ({"type": "array", "items": {"type": "number"}}, ["[]", "[1, 2.5, -3e2]"]),
        ({"type": "string", "pattern": "^a(b|c)*d$"}, ['"ad"', '"abcbd"']),
        ({"anyOf": [{"type": "null"}, {"enum": [1, 2]}]}, ["null", "2"]),
    ]
    for schema, docs in cases:
        for d in docs:
            assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(d))
        assert run_tool("check", schema, tmp_path, docs=docs) == ["accept"] * len(docs)
