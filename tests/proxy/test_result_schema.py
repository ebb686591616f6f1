"""The lean relay's output-schema check (proxy/result_schema.py) in front of the SDK's.

A real SDK ``ClientSession`` holds the notes fixture's listing (as its own ``tools/list`` leaves it).
Content the compiled check passes is content the SDK's ``validate_tool_result`` passes (a property
over valid-ish and mutated results, as written and as draft 7); content it does not pass gets the
SDK's own error, word for word; a tool the session has not listed, a result without structured
content and a schema the fast path declines always go to the SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import mcp.types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.client.session import ClientSession

from benchmark.fixtures.notes_server import NOTE_SCHEMA
from benchmark.fixtures.notes_server import TOOLS as NOTES_TOOLS
from guard.fast_validity import Declined, FastValidity
from proxy.result_schema import OutputSchemaCheck
from tests.support.validation import DRAFT7, instances

NOTE = {"id": "n1", "body": "first note", "status": "published"}
CODED = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\D$"}}}


@contextmanager
def listed(*tools: types.Tool) -> Iterator[ClientSession]:
    """A session (never started) whose output-schema cache holds ``tools``, filled as its own
    ``tools/list`` fills it."""
    send, receive = anyio.create_memory_object_stream[Any](1)
    with send, receive:
        session = ClientSession(receive, send)
        session._absorb_tool_listing(types.ListToolsResult(tools=list(tools)), complete=True)
        yield session


def tool(name: str, output_schema: dict[str, Any]) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object"}, output_schema=output_schema)


def result(content: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content=content)


async def sdk_error(session: ClientSession, name: str, answer: types.CallToolResult) -> str | None:
    try:
        await session.validate_tool_result(name, answer)
    except RuntimeError as exc:
        return str(exc)
    return None


def test_the_sdk_session_holds_the_schema_the_check_reads() -> None:
    with listed(*NOTES_TOOLS) as session:
        assert session._tool_output_schemas["get_note"] == NOTE_SCHEMA  # an SDK upgrade must keep it
        assert OutputSchemaCheck().conforms(session, "get_note", result(NOTE))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"id": "n1", "status": "draft"}, "'body' is a required property"),
        ({**NOTE, "body": 5}, "5 is not of type 'string'"),
        ({**NOTE, "status": None}, "None is not of type 'string'"),
    ],
)
async def test_invalid_content_gets_the_sdks_own_error(content: Any, message: str) -> None:
    with listed(*NOTES_TOOLS) as session:
        assert not OutputSchemaCheck().conforms(session, "get_note", result(content))
        error = await sdk_error(session, "get_note", result(content))
    assert error is not None  # the message is str() of python-jsonschema's best match, several lines
    assert error.splitlines()[0] == f"Invalid structured content returned by tool get_note: {message}"


@pytest.mark.anyio
async def test_what_always_goes_to_the_sdk() -> None:
    check = OutputSchemaCheck()
    with listed(*NOTES_TOOLS, tool("coded", CODED)) as session:
        assert not check.conforms(session, "not_listed", result(NOTE))  # the SDK lists tools first
        assert not check.conforms(session, "list_notes", result(NOTE))  # no output schema
        assert not check.conforms(session, "get_note", types.CallToolResult(content=[]))  # no content
        assert not check.conforms(session, "coded", result({"code": "x"}))  # pattern: declined
        assert isinstance(next(iter(check._by_schema.values()))[1], Declined)
        assert await sdk_error(session, "coded", result({"code": "\u0661"})) is not None  # the SDK's
        assert await sdk_error(session, "coded", result({"code": "x"})) is None
    assert not check.conforms(object(), "get_note", result(NOTE))  # a session without the cache


def test_a_new_listing_is_checked_with_its_own_schema() -> None:
    check = OutputSchemaCheck()
    with listed(tool("t", {"type": "object"})) as session:
        assert check.conforms(session, "t", result({"a": 1}))
        relisted = types.ListToolsResult(tools=[tool("t", {"required": ["b"]})])
        session._absorb_tool_listing(relisted, complete=True)
        assert not check.conforms(session, "t", result({"a": 1}))


@settings(max_examples=200)
@given(data=st.data(), draft7=st.booleans())
def test_content_the_check_passes_the_sdk_passes(data: st.DataObject, draft7: bool) -> None:
    schema = {"$schema": DRAFT7, **NOTE_SCHEMA} if draft7 else NOTE_SCHEMA
    content = data.draw(instances(schema).filter(lambda c: isinstance(c, dict)))  # the result's type
    check = OutputSchemaCheck()
    with listed(tool("get_note", schema)) as session:
        conforms = check.conforms(session, "get_note", result(content))
        assert isinstance(next(iter(check._by_schema.values()))[1], FastValidity)
        assert conforms is (anyio.run(sdk_error, session, "get_note", result(content)) is None)
