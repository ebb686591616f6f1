"""proxy.wire_json reads and writes the values the standard library does: the same value read from any
JSON text (including what pydantic-core refuses, which the standard library then reads), and text that
reads back as the same value (written in its own spelling: UTF-8, shortest round-trip floats)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import wire_json

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (NaN equal to NaN; an int and a float of one value are not the same)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=500, deadline=None)
@given(_values)
def test_what_is_written_reads_back_as_the_same_value(value: Any) -> None:
    written = wire_json.dumps(value)
    assert _same(json.loads(written), value)
    assert _same(wire_json.loads(written), value)


@settings(max_examples=500, deadline=None)
@given(_values, st.booleans())
def test_a_text_is_read_as_the_standard_library_reads_it(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _same(wire_json.loads(text.encode()), json.loads(text))


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', "[" * 300 + "]" * 300, '{"a": 1e400}', "123456789012345678901234567890"],
)
def test_what_pydantic_core_refuses_or_bounds_is_read_by_the_standard_library(text: str) -> None:
    assert _same(wire_json.loads(text), json.loads(text))


def test_malformed_json_is_refused_with_the_standard_librarys_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        wire_json.loads(b'{"a": ')


def test_a_value_pydantic_core_cannot_write_is_written_by_the_standard_library() -> None:
    assert wire_json.dumps({"s": "\ud800"}) == b'{"s":"\\ud800"}'
