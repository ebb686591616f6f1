"""proxy.result_surface answers as the SDK's functions do (``validate_server_result`` and
``serialize_server_result`` for ``tools/call``): the same results, and a refusal where they refuse,
over generated results of every shape the 2026-07-28 union has (complete results, input rounds,
both, neither, extra keys, wrong types)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from proxy import result_surface

VERSION = sorted(MODERN_PROTOCOL_VERSIONS)[-1]

_text = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)})
_image = st.fixed_dictionaries(
    {"type": st.just("image"), "data": st.just("aGk="), "mimeType": st.sampled_from(["image/png", 3])}
)
_odd_block = st.fixed_dictionaries({"type": st.sampled_from(["text", "nope"])})
_blocks = st.lists(st.one_of(_text, _image, _odd_block), max_size=3)
_elicit = st.fixed_dictionaries(
    {
        "method": st.just("elicitation/create"),
        "params": st.fixed_dictionaries(
            {"message": st.just("ok?"), "requestedSchema": st.just({"type": "object", "properties": {}})}
        ),
    }
)
_fields: dict[str, st.SearchStrategy[Any]] = {
    "content": st.one_of(_blocks, st.just("not a list")),
    "isError": st.one_of(st.booleans(), st.none(), st.just("yes")),
    "structuredContent": st.one_of(
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.none()
    ),
    "_meta": st.dictionaries(st.sampled_from(["a", "shadowguard/outcome"]), st.integers(), max_size=2),
    "resultType": st.sampled_from(["complete", "input_required", "other", None]),
    "inputRequests": st.one_of(st.dictionaries(st.sampled_from(["q"]), _elicit, max_size=1), st.just(5)),
    "requestState": st.one_of(st.text(max_size=4), st.integers()),
    "extra": st.integers(),
}


@st.composite
def results(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.sets(st.sampled_from(sorted(_fields))))
    return {key: draw(_fields[key]) for key in keys}


def _outcome(func: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", func(*args)
    except ValidationError as exc:
        return "refused", exc.errors(include_url=False)


@settings(max_examples=600, deadline=None)
@given(results())
def test_sieve_answers_as_serialize_server_result(data: dict[str, Any]) -> None:
    expected = _outcome(mcp_methods.serialize_server_result, "tools/call", VERSION, data)
    assert _outcome(result_surface.sieve, VERSION, data) == expected


@settings(max_examples=600, deadline=None)
@given(results())
def test_check_refuses_what_validate_server_result_refuses(data: dict[str, Any]) -> None:
    expected = _outcome(mcp_methods.validate_server_result, "tools/call", VERSION, data)
    assert _outcome(result_surface.check, VERSION, data) == expected


def test_a_complete_result_is_sieved_by_its_member_and_a_round_by_the_union() -> None:
    complete = {"content": [{"type": "text", "text": "hi"}], "resultType": "complete", "extra": 1}
    assert result_surface.sieve(VERSION, complete) == {
        "content": [{"type": "text", "text": "hi"}],
        "resultType": "complete",
    }
    round_ = {"resultType": "input_required", "requestState": "s", "content": []}
    assert result_surface.sieve(VERSION, round_) == mcp_methods.serialize_server_result(
        "tools/call", VERSION, round_
    )


def test_a_version_without_a_schema_is_refused_as_the_sdk_refuses_it() -> None:
    with pytest.raises(ValueError):
        mcp_methods.serialize_server_result("tools/call", "1999-01-01", {"content": []})
    with pytest.raises(ValueError):
        result_surface.sieve("1999-01-01", {"content": []})
    with pytest.raises(ValueError):
        result_surface.check("1999-01-01", {"content": []})
