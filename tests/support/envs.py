"""Benchmark environments in tests: load a domain, call its tools, read what they stored.

A tool answers with the MCP text the reference server returns: JSON for a result, and for a failure
``{"error": "Tool execution failed: <message>", "tool": <name>}``. ``call`` parses the text,
``failure``/``failure_text`` build the expected failure, ``error_of`` calls and returns the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import executor_for
from benchmark.tasks import BenchData
from guard.session import ToolResult

Patch = Mapping[str, Sequence[Mapping[str, Any]]]


def domain_fixture(name: str) -> Callable[..., Domain]:
    """A session-scoped ``domain`` fixture loading the benchmark domain ``name`` (for a ``conftest.py``
    or a module testing a domain other than its folder's: ``domain = domain_fixture("...")``)."""

    @pytest.fixture(scope="session", name="domain")
    def _domain(bench: BenchData) -> Domain:
        return load_domain(name, bench.bundle)

    return _domain


@contextmanager
def open_env(domain: Domain, database: Database, patch: Patch | None = None) -> Iterator[Environment]:
    """A fresh environment of ``domain`` on ``database``, with ``patch`` upserted over the defaults."""
    with Environment(domain, database) as environment:
        if patch:
            environment.apply_patch(patch)
        yield environment


def call(env: Environment, tool: str, args: Mapping[str, Any]) -> Any:
    """Calls ``tool`` and returns its answer parsed from JSON."""
    return json.loads(env.call_tool(tool, args))


FAILED = "Tool execution failed: "


def failure(tool: str, message: str) -> dict[str, str]:
    """The answer of ``tool`` failing with ``message``, parsed."""
    return {"error": FAILED + message, "tool": tool}


def failure_text(tool: str, message: str) -> str:
    """The answer of ``tool`` failing with ``message``, as the text the tool returns."""
    return json.dumps(failure(tool, message))


def failed(env: Environment, tool: str, args: Mapping[str, Any]) -> str:
    """Calls ``tool``, asserts its answer is exactly the reference failure text naming it, and returns
    the failure's message (what follows "Tool execution failed: ")."""
    text = env.call_tool(tool, args)
    out = json.loads(text)
    assert isinstance(out, dict) and isinstance(out.get("error"), str), text
    message: str = out["error"].removeprefix(FAILED)
    assert text == failure_text(tool, message), text
    return message


def error_of(env: Environment, tool: str, args: Mapping[str, Any]) -> str:
    """Calls ``tool``, asserts it failed naming itself, and returns the ``error`` text."""
    out = call(env, tool, args)
    assert isinstance(out, dict), out
    assert out.get("tool") == tool, out
    message: str = out["error"]
    return message


def stored(env: Environment, table: str, key: Any) -> dict[str, Any]:
    """The row of ``table`` under ``key`` as JSON values; fails the test when there is none."""
    record = env.table(table).get(key)
    assert record is not None, f"{table} has no row {key!r}"
    return record.model_dump(mode="json")


def record(env: Environment, table: str, key: Any) -> dict[str, Any]:
    """The row of ``table`` under ``key`` with its Python values (enums, ``Decimal``, ``datetime``);
    fails the test when there is none. :func:`stored` gives the JSON values."""
    row = env.table(table).get(key)
    assert row is not None, f"{table} has no row {key!r}"
    return row.model_dump()


def stored_rows(env: Environment, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` in the table's order, as JSON values (as :func:`stored`)."""
    return [row.model_dump(mode="json") for row in env.table(table).all()]


def records(env: Environment, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` in the table's order, with its Python values (as :func:`record`)."""
    return [row.model_dump() for row in env.table(table).all()]


class RecordingExecutor:
    """The real environment's executor (what the guard forwards a call to), remembering which tools
    the calls that reached it named."""

    def __init__(self, env: Environment) -> None:
        self.run = executor_for(env)
        self.calls: list[str] = []

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(tool)
        result: ToolResult = self.run(tool, arguments)
        return result


def create_item(env: Environment, table: str, item: Mapping[str, Any]) -> Any:
    """Calls the shared zendesk tools' ``zendesk_create_item`` on ``table``; returns the answer."""
    return call(env, "zendesk_create_item", {"table": table, "item": item})


def update_item(env: Environment, table: str, item_id: str, item: Mapping[str, Any]) -> Any:
    """Calls ``zendesk_update_item`` for row ``item_id`` of ``table``; returns the answer."""
    return call(env, "zendesk_update_item", {"table": table, "id": item_id, "item": item})
