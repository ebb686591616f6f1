"""On the benchmark's real tool input schemas (the bundle's tool_schemas.json, all five domains),
argument validation with its compiled fast path (guard/fast_validity.py) answers exactly as the
python pass alone: the same problems or the same exception, lax and strict, as written (2020-12)
and as drafts 7 and 2019-09, on valid-ish instances and mutations of them; in strict mode the
compiled check and the python pass agree on validity itself."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.tasks import BenchData
from guard.fast_validity import FastValidity
from guard.validation import ArgumentValidator, Mode
from tests.support.validation import DRAFT7, DRAFT2019, both_paths, instances, outcome


@pytest.fixture(scope="module")
def schemas(bench: BenchData) -> list[Mapping[str, Any]]:
    """Every distinct input schema of the bundle's tools."""
    bundle = json.loads((bench.bundle / "tool_schemas.json").read_text(encoding="utf-8"))
    found = [tool["input_schema"] for tools in bundle.values() for tool in tools]
    unique = {json.dumps(schema, sort_keys=True): schema for schema in found}
    return list(unique.values())


def test_the_benchmark_schemas_all_take_the_fast_path(schemas: list[Mapping[str, Any]]) -> None:
    for mode in ("lax", "strict"):
        declined = {
            json.dumps(s)[:80]: v.fast_path
            for s in schemas
            if not isinstance((v := ArgumentValidator(s, mode)).fast_path, FastValidity)
        }
        assert declined == {}, mode


@pytest.mark.parametrize("mode", ["lax", "strict"])
@pytest.mark.parametrize("draft", ["as written", DRAFT7, DRAFT2019])
@settings(max_examples=400)
@given(data=st.data())
def test_the_fast_path_answers_as_the_python_pass(
    schemas: list[Mapping[str, Any]], mode: Mode, draft: str, data: st.DataObject
) -> None:
    schema = data.draw(st.sampled_from(schemas))
    if draft != "as written":
        schema = {"$schema": draft, **schema}
    arguments = data.draw(instances(schema))
    fast, slow = both_paths(schema, mode)
    assert isinstance(fast.fast_path, FastValidity)
    assert outcome(fast, arguments) == outcome(slow, arguments)
    if mode == "strict":
        assert fast.fast_path.valid(arguments) is slow._validator.is_valid(arguments)
    elif fast.fast_path.valid(arguments):
        assert outcome(slow, arguments) == []
