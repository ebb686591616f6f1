"""The proxy in front of plain (non-transactional) upstreams: SQL tools, in-band error texts, start-up
checks of the config, and the environment stdio upstreams get (issue 14, deliverables 5, 6 and 7).

The upstream is tests/fixtures/sql_server.py (shaped like the SQLite servers agents are given: no
annotations, in-band "Error: ..." texts), started by the proxy as a stdio subprocess; the proxy runs
in this process and the agent talks to it in memory.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types

from guard.effects import ToolInfo, classify, detected_sql_argument
from guard.models import EffectClass
from proxy.config import UpstreamConfig
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream
from tests.support.proxy import text

pytestmark = pytest.mark.anyio
SQL_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "sql_server.py"


def sql_upstream(db: Path, *server_args: str, **extra: Any) -> UpstreamConfig:
    return UpstreamConfig(
        name="db",
        transport="stdio",
        command=sys.executable,
        args=[str(SQL_SERVER), "--db", str(db), *server_args],
        **extra,
    )


@asynccontextmanager
async def agent_on(*specs: UpstreamConfig) -> AsyncIterator[Client]:
    proxy = GuardProxy([Upstream.from_settings(s, keep_spare=False) for s in specs], SessionRegistry())
    async with proxy.running(), Client(proxy.server, cache=None) as client:
        yield client


def rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()


def tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def verdict(result: Any) -> dict[str, Any]:
    return dict(result.structured_content or {})


# -- SQL tools -------------------------------------------------------------------------------------------


def test_sql_tools_are_detected_by_shape_and_words_are_not_sql() -> None:
    query = {"type": "object", "properties": {"query": {"type": "string"}}}
    assert detected_sql_argument(query, "read_query Execute a SELECT query on the SQLite database") == "query"
    assert detected_sql_argument({"properties": {"sql": {"type": "string"}}}) == "sql"
    assert detected_sql_argument(query, "search_nodes Search for nodes based on a query") is None
    two = {"properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}
    assert detected_sql_argument(two, "run a SQL query") is None
    tool = ToolInfo(name="write_query", sql_dialect="", sql_argument="query")
    assert classify(tool, {"query": "SELECT 1"})[0] is EffectClass.READ
    assert classify(tool, {"query": "DELETE FROM items WHERE id = 1"})[0] is EffectClass.WRITE
    unbounded = ("DROP TABLE items", "TRUNCATE TABLE items", "DELETE FROM items", "UPDATE items SET a=1")
    for statement in unbounded:
        assert classify(tool, {"query": statement})[0] is EffectClass.IRREVERSIBLE, statement


async def test_sql_tool_effects_come_from_the_sql_argument(tmp_path: Path) -> None:
    db = tmp_path / "items.sqlite"
    spec = sql_upstream(db, sql_tools={"run": {"argument": "statement", "dialect": "sqlite"}})
    async with agent_on(spec) as client:
        read = await client.call_tool("read_query", {"query": "SELECT id, name FROM items"})
        assert not read.is_error and json.loads(text(read))[0]["name"] == "one"
        undone = await client.call_tool("rollback", {})
        assert not undone.is_error, undone.content
        assert "remain in effect" not in text(undone), "a read is nothing to undo"

        for tool, args in [
            ("write_query", {"query": "DROP TABLE items"}),
            ("write_query", {"query": "DELETE FROM items"}),
            ("write_query", {"query": "UPDATE items SET name = 'x'"}),
            ("run", {"statement": "DROP TABLE items", "database": "main"}),
        ]:
            held = await client.call_tool(tool, args)
            assert held.is_error and verdict(held)["verdict"] == "held", (tool, args, held.content)
            assert verdict(held)["effect"] == "irreversible"
        assert tables(db) == {"items"} and len(rows(db)) == 2, "nothing held was sent"

        write = await client.call_tool("write_query", {"query": "INSERT INTO items VALUES (3, 'three')"})
        assert not write.is_error and verdict(write) == {}, write.content
        assert (write.meta or {})["shadowguard/outcome"]["verdict"] == "allowed"
        assert len(rows(db)) == 3


# -- in-band error texts ---------------------------------------------------------------------------------


async def test_an_in_band_error_text_is_a_classified_failure_and_nothing_is_journaled(tmp_path: Path) -> None:
    db = tmp_path / "items.sqlite"
    async with agent_on(sql_upstream(db)) as client:
        failed = await client.call_tool("read_query", {"query": "UPDATE items SET name = 'x' WHERE id = 1"})
        assert failed.is_error, "a result whose text is an error is not a success"
        assert text(failed).startswith("Error: Only SELECT queries are allowed")
        assert verdict(failed)["verdict"] == "failed"
        assert verdict(failed)["error_class"] == "invalid_arguments"
        undone = await client.call_tool("rollback", {})
        assert not undone.is_error and verdict(undone)["rolled_back"] is True, undone.content


# -- start-up checks and the upstream's environment -------------------------------------------------------


async def test_transactional_true_on_an_upstream_without_the_extension_fails_at_start(tmp_path: Path) -> None:
    spec = sql_upstream(tmp_path / "items.sqlite", transactional=True)
    with pytest.raises(UpstreamError, match=r"upstream 'db'.*transactional: true.*does not advertise"):
        async with agent_on(spec):
            pass


async def test_an_unreachable_upstream_fails_at_start(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = UpstreamConfig(name="gone", transport="http", url=f"http://127.0.0.1:{port}/mcp")
    with pytest.raises(UpstreamError, match=r"upstream 'gone': cannot connect"):
        async with agent_on(spec):
            pass


async def test_sql_tools_naming_a_tool_the_upstream_lacks_fails_at_start(tmp_path: Path) -> None:
    spec = sql_upstream(tmp_path / "items.sqlite", sql_tools={"exec": {"argument": "sql"}})
    with pytest.raises(UpstreamError, match=r"sql_tools names 'exec'"):
        async with agent_on(spec):
            pass


async def test_stdio_upstreams_get_passed_and_literal_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SG_TEST_API_KEY", "from-the-proxy")
    monkeypatch.setenv("SG_TEST_NOT_PASSED", "private")
    spec = sql_upstream(
        tmp_path / "items.sqlite",
        "--env-tool",
        env={"SG_TEST_LITERAL": "literal"},
        pass_env=["SG_TEST_API_KEY"],
    )
    async with agent_on(spec) as client:

        async def value(name: str) -> Any:
            result = await client.call_tool("getenv", {"name": name})
            first = result.content[0]  # the tool's own answer; the guard may add a part after it
            assert isinstance(first, types.TextContent)
            return json.loads(first.text)

        assert await value("SG_TEST_API_KEY") == "from-the-proxy"
        assert await value("SG_TEST_LITERAL") == "literal"
        assert await value("SG_TEST_NOT_PASSED") is None


def test_a_passed_variable_the_proxy_lacks_is_a_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SG_TEST_UNSET", raising=False)
    spec = sql_upstream(tmp_path / "items.sqlite", pass_env=["SG_TEST_UNSET"])
    with pytest.raises(UpstreamError, match=r"upstream 'db': pass_env names SG_TEST_UNSET"):
        Upstream.from_settings(spec)
