"""Comparing argument validation with and without its compiled fast path (guard/fast_validity.py).

:func:`python_only` is a validator whose fast path is switched off; :func:`outcome` is what a
validator answers (its problems, or the exception it raises), for comparing the two.

Hypothesis strategies for instances of a JSON schema: mostly valid ones, and mutations of them.

:func:`near_valid` follows the schema (its enum, const and examples, a value of its type near its
bounds, its required properties and some optional ones, one ``anyOf`` branch); :func:`mutated` then
replaces one value anywhere in it (with a numeric or boolean-like string, a float that is an integer,
null, ...), drops a key or adds one. Together they cross both sides of every keyword the tool schemas
use, so a test can compare two validators on valid and invalid instances alike.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from guard.fast_validity import Declined
from guard.validation import ArgumentValidator, Mode


def python_only(schema: Mapping[str, Any], mode: Mode) -> ArgumentValidator:
    """The validator of ``schema`` without its fast path: the python pass alone."""
    validator = ArgumentValidator(schema, mode)
    validator.fast_path = Declined("compared against the python pass alone")
    return validator


def both_paths(schema: Mapping[str, Any], mode: Mode) -> tuple[ArgumentValidator, ArgumentValidator]:
    """The validator of ``schema`` with its fast path and :func:`python_only`'s (compiled once per
    schema and mode: checking a schema against its metaschema is the slow part)."""
    return _both_paths(json.dumps(schema, sort_keys=True), mode)


@functools.lru_cache(maxsize=512)
def _both_paths(schema_json: str, mode: Mode) -> tuple[ArgumentValidator, ArgumentValidator]:
    schema = json.loads(schema_json)
    return ArgumentValidator(schema, mode), python_only(schema, mode)


def outcome(validator: ArgumentValidator, arguments: Any) -> Any:
    """The problems ``validator`` finds (as dicts), or the exception it raises (type and message)."""
    try:
        return [p.model_dump() for p in validator.problems(arguments)]
    except Exception as exc:  # the python pass raises on some lax inputs: the same must be raised
        return (type(exc).__name__, str(exc))


DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"

WILD: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.sampled_from([1.0, -0.0, 0.5, 1e300, 2**53 + 1, 2**64, -(2**63)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["5", "680.00", " 7 ", "-1", "1e3", "true", "False", "yes", "0", "1", "nan", "inf"]),
    st.sampled_from(["", "x", "2025-01-20T17:00:00Z", "\u0661", "\ufeff", "a\n"]),
    st.text(max_size=4),
    st.just([]),
    st.just({}),
    st.lists(st.integers(0, 2), max_size=3),
    st.dictionaries(st.sampled_from(["a", "id", "status"]), st.integers(0, 2), max_size=2),
)
"""Any JSON value, weighted toward those where validators tend to differ."""


def near_valid(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Instances that mostly satisfy ``schema`` (not always: bounds are crossed by one)."""
    if not isinstance(schema, Mapping) or depth > 6:
        return WILD
    choices: list[st.SearchStrategy[Any]] = []
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        choices.append(st.sampled_from(schema["examples"]))
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            choices += [near_valid(branch, depth + 1) for branch in schema[key]]
    kind = schema.get("type")
    for name in kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []:
        choices.append(_of_type(schema, name, depth))
    return st.one_of(choices) if choices else WILD


def _of_type(schema: Mapping[str, Any], kind: str, depth: int) -> st.SearchStrategy[Any]:
    if kind == "string":
        low = int(schema.get("minLength", 0))
        text = st.text(min_size=max(low - 1, 0), max_size=low + 4)
        return st.one_of(text, st.sampled_from(["2025-01-20T17:00:00Z", "2025-01-20", "n1"]))
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
        integers = st.integers(int(low) - 1, int(high) + 1)
        return integers if kind == "integer" else st.one_of(integers, st.floats(low - 1, high + 1))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        low = int(schema.get("minItems", 0))
        return st.lists(near_valid(schema.get("items"), depth + 1), min_size=low, max_size=low + 3)
    if kind == "object":
        return _object(schema, depth)
    return WILD


def _object(schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties]
    optional = {name: near_valid(s, depth + 1) for name, s in properties.items() if name not in required}
    return st.fixed_dictionaries(
        {name: near_valid(properties[name], depth + 1) for name in required},
        optional=optional,
    )


@st.composite
def mutated(draw: st.DrawFn, instance: Any) -> Any:
    """``instance`` with one value replaced by a :data:`WILD` one, or one key dropped or added."""
    nodes = list(_nodes(instance, ()))
    path = draw(st.sampled_from(nodes))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    target = _at(instance, path)
    if action == "drop" and isinstance(target, dict) and target:
        key = draw(st.sampled_from(sorted(target)))
        return _with(instance, path, {k: v for k, v in target.items() if k != key})
    if action == "add" and isinstance(target, dict):
        key = draw(st.sampled_from(["extra", "id", "status", "$skip"]))
        return _with(instance, path, {**target, key: draw(WILD)})
    return _with(instance, path, draw(WILD))


def _nodes(value: Any, path: tuple[Any, ...]) -> Any:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, (*path, index))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def _with(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _with(value[head], rest, new)}
    return [_with(item, rest, new) if i == head else item for i, item in enumerate(value)]


def instances(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Valid-ish instances of ``schema`` and mutations of them, about half each."""
    base = near_valid(schema)
    return st.one_of(base, base.flatmap(mutated))
