"""The compiled fast path of argument validation (guard/fast_validity.py, guard/validation.py).

- On the notes fixture's schemas, the validator with its fast path answers exactly as the python pass
  alone (the same problems, or the same exception), lax and strict, as written (2020-12) and as
  drafts 7 and 2019-09; the compiled check and the python pass agree on every instance
  (tests/benchmark/guarded/test_validation_fast.py does the same over the bundle's tool schemas).
- Invalid arguments get the python pass's messages, byte for byte.
- A schema the fast path declines (and why) still validates as before.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft201909Validator, Draft202012Validator

from benchmark.fixtures.notes_server import NOTE_SCHEMA
from benchmark.fixtures.notes_server import TOOLS as NOTES_TOOLS
from guard.fast_validity import Declined, FastValidity, compile_validity
from guard.validation import ArgumentValidator, Mode
from tests.support.validation import DRAFT7, DRAFT2019, both_paths, instances, outcome, python_only


@settings(max_examples=300)
@given(
    data=st.data(), mode=st.sampled_from(["lax", "strict"]), draft=st.sampled_from([None, DRAFT7, DRAFT2019])
)
def test_on_the_notes_schemas_the_fast_path_answers_as_the_python_pass(
    data: st.DataObject, mode: Mode, draft: str | None
) -> None:
    schemas = [t.input_schema for t in NOTES_TOOLS] + [NOTE_SCHEMA]
    schema = data.draw(st.sampled_from(schemas))
    schema = {"$schema": draft, **schema} if draft else schema
    arguments = data.draw(instances(schema))
    fast, slow = both_paths(schema, mode)
    assert isinstance(fast.fast_path, FastValidity)
    assert outcome(fast, arguments) == outcome(slow, arguments)
    assert fast.fast_path.valid(arguments) is slow._validator.is_valid(arguments)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "Invalid arguments for get_note: id: missing"),
        ({"id": ""}, 'Invalid arguments for get_note: id: "" fails minLength 1'),
        ({"id": 5}, "Invalid arguments for get_note: id: wrong type: got an integer 5"),
        ({"id": "n1", "x": 1}, "Invalid arguments for get_note: x: unexpected argument"),
    ],
)
def test_invalid_arguments_get_the_python_pass_messages(arguments: dict[str, Any], message: str) -> None:
    schema = NOTES_TOOLS[0].input_schema
    fast, slow = ArgumentValidator(schema), python_only(schema, "lax")
    assert isinstance(fast.fast_path, FastValidity) and not fast.fast_path.valid(arguments)
    failure, expected = fast.check("get_note", arguments), slow.check("get_note", arguments)
    assert failure is not None and expected is not None
    assert str(failure) == str(expected) == message
    assert failure.fields == expected.fields


NOT_A_DIGIT = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\D$"}}}


def test_a_declined_schema_still_validates_with_the_python_pass() -> None:
    validator = ArgumentValidator(NOT_A_DIGIT, "strict")
    assert isinstance(validator.fast_path, Declined)
    assert "pattern: regex dialects differ" in validator.fast_path.reason
    assert "#/properties/code" in validator.fast_path.reason
    # Why: Rust's \D is ASCII, Python's is Unicode; compiled anyway, the fast path would let it through.
    arabic_one = "\u0661"
    assert jsonschema_rs.Draft202012Validator(NOT_A_DIGIT).is_valid({"code": arabic_one})
    failure = validator.check("t", {"code": arabic_one})
    assert failure is not None
    assert str(failure) == 'Invalid arguments for t: code: "\u0661" fails pattern "^\\\\D$"'
    assert validator.problems({"code": "x"}) == []


@pytest.mark.parametrize(
    ("schema", "mode", "reason"),
    [
        ({"patternProperties": {"^a": {}}}, "strict", "patternProperties: regex"),
        ({"multipleOf": 0.1}, "strict", "multipleOf: float division"),
        ({"$ref": "https://example.com/s.json"}, "strict", "$ref: not a reference to a subschema"),
        ({"$ref": "#/$defs/missing"}, "strict", "$ref: not a reference to a subschema"),
        ({"$id": "https://example.com/s.json"}, "strict", "$id: base URIs"),
        ({"$defs": {"a": {"$anchor": "a"}}, "$ref": "#/$defs/a"}, "strict", "$anchor"),
        ({"properties": {"a": {"$schema": DRAFT7}}}, "strict", "$schema: base URIs"),
        ({"unevaluatedProperties": False}, "strict", "unevaluatedProperties: depends"),
        ({"$defs": {"n": {"not": {"type": "null"}}}, "$ref": "#/$defs/n"}, "lax", "not: lax types"),
        ({"oneOf": [{"type": "number"}, {"type": "string"}]}, "lax", "oneOf: lax types"),
        ({"if": {"type": "integer"}, "then": {"minimum": 0}}, "lax", "if: lax types"),
        ({"contains": {"type": "integer"}}, "lax", "contains: lax types"),
        ({"minimum": 0}, "lax", "minimum: in lax mode a string may reach it"),
        ({"type": ["string", "integer"], "maximum": 5}, "lax", "maximum: in lax mode"),
        (
            {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
            "lax",
            "minimum: in lax mode a string may reach it (at #/anyOf/0)",
        ),
        (
            {"properties": {"a": {"anyOf": [{"properties": {"b": {"type": "number", "minimum": 0}}}]}}},
            "lax",
            "minimum: in lax mode",
        ),
    ],
)
def test_what_declines_the_fast_path(schema: dict[str, Any], mode: Mode, reason: str) -> None:
    fast_path = ArgumentValidator(schema, mode).fast_path
    assert isinstance(fast_path, Declined) and reason in fast_path.reason


@pytest.mark.parametrize(
    ("schema", "mode"),
    [
        ({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}, "lax"),
        ({"type": "object", "properties": {"n": {"type": "number", "exclusiveMaximum": 5}}}, "lax"),
        ({"oneOf": [{"type": "number"}, {"type": "string"}], "not": {"const": 3}}, "strict"),
        ({"format": "email", "x-vendor": {"pattern": "["}, "$comment": "annotations are ignored"}, "lax"),
        ({"$defs": {"id": {"type": "string"}}, "properties": {"id": {"$ref": "#/$defs/id"}}}, "lax"),
    ],
)
def test_what_keeps_it(schema: dict[str, Any], mode: Mode) -> None:
    assert isinstance(ArgumentValidator(schema, mode).fast_path, FastValidity)


def test_only_drafts_the_agreement_is_tested_for() -> None:
    assert isinstance(compile_validity({}, Draft7Validator), FastValidity)
    assert isinstance(compile_validity({}, Draft201909Validator), FastValidity)
    assert isinstance(compile_validity({}, Draft202012Validator), FastValidity)
    old = ArgumentValidator({"$schema": "http://json-schema.org/draft-04/schema#"}).fast_path
    assert isinstance(old, Declined) and "draft-04/schema#: not a draft" in old.reason


def test_what_the_compiled_check_cannot_read_goes_to_the_python_pass() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array"}}}
    fast_path = compile_validity(schema, Draft202012Validator)
    assert isinstance(fast_path, FastValidity)
    assert not fast_path.valid({1: 2}) and not fast_path.valid({"a": {1, 2}})  # no JSON: no verdict
    problems = outcome(ArgumentValidator(schema), {"a": {1}})
    assert problems == outcome(python_only(schema, "lax"), {"a": {1}}) and problems != []
