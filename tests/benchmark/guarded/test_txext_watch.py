"""Watched reads (docs/adr/013, feature ``watch``): a read-classified call carries no savepoint of its
own, only the change log's position; a "read" that wrote is still reported, and undone exactly (to
the anchor savepoint) or refused, never let through unrecorded; a participant without the feature
gets today's operations. A minimal SQLAlchemy server with a read, a write and a read that writes,
its SQL counted at the connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
import mcp.types as types
import pytest
import sqlalchemy as sa
from mcp import Client, MCPError
from mcp.server import Server
from sqlalchemy.pool import StaticPool

from guard.backend import Backend
from guard.inline import AsyncExecutor, inline_ok, run_inline
from guard.models import Verdict
from guard.session import GuardSession, ToolResult
from guard.sql_backend import SqlBackend
from guard.txext import (
    FEATURES,
    NOT_REVERSIBLE,
    OPS_META_KEY,
    PIGGYBACK,
    ROLLBACK_TO,
    TX_META_KEY,
    WATCH,
    NotReversibleTransactionError,
    RemoteBackend,
    TransactionParticipant,
    serialized,
)
from guard.txext.toolcalls import text_of
from tests.benchmark.guarded.test_txext import blocking, raw_tx, tool_info_map
from tests.benchmark.guarded.test_txext_minimal import _call_with_meta
from tests.support.guardcore import keyed_table, text_column

pytestmark = pytest.mark.anyio
T = TypeVar("T")

metadata = sa.MetaData()
items = keyed_table(
    "items",
    metadata,
    text_column("name"),
    sa.Column("views", sa.Integer, nullable=False, server_default="0"),
)
READ = {"readOnlyHint": True}
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
TOOLS = [
    types.Tool(name="add_item", input_schema=SCHEMA),
    types.Tool(name="get_item", input_schema=SCHEMA, annotations=types.ToolAnnotations(read_only_hint=True)),
    # Says it reads; counts a view (a misclassified "read" that writes).
    types.Tool(name="view_item", input_schema=SCHEMA, annotations=types.ToolAnnotations(read_only_hint=True)),
]


class Statements:
    """The SQL the upstream's connection runs (savepoint statements and capture-log reads), seen by
    SQLite itself: SqlBackend reads the capture log on the DBAPI connection, past SQLAlchemy's events."""

    def __init__(self, connection: sa.Connection) -> None:
        self.seen: list[str] = []
        cast(sqlite3.Connection, connection.connection.dbapi_connection).set_trace_callback(self._record)

    def _record(self, statement: str) -> None:
        self.seen.append(statement.split()[0].upper() + (" LOG" if "_sg_changes" in statement else ""))

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen


def server_of(
    features: Collection[str], *, calling: bool = False, accesses: list[str] | None = None
) -> tuple[Server[Any], sa.Connection]:
    """The items server; ``calling``: its tool runs inside ``TransactionParticipant.calling`` (else
    after ``check_call``); ``accesses`` notes each access to the backend."""
    engine = sa.create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    connection = engine.connect()
    metadata.create_all(connection)
    connection.execute(items.insert().values(id=1, name="one"))
    connection.commit()
    serial = serialized(SqlBackend(connection, [items]))

    async def access(key: str, work: Callable[[Backend], T], /) -> T:
        if accesses is not None:
            accesses.append(key)
        return await serial(key, work)

    tx = TransactionParticipant(session_key=lambda ctx: "main", access=access, features=features)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = tx.transaction_of(ctx), params.arguments or {}

        def run(backend: Backend) -> str:
            if calling:
                with tx.calling("main", name, backend):
                    return tool(backend)
            tx.check_call("main", name, backend)
            return tool(backend)

        def tool(backend: Backend) -> str:
            if params.name == "add_item":
                connection.execute(items.insert().values(id=args["id"], name=args["name"]))
            elif params.name == "view_item":
                viewed = items.update().where(items.c.id == args["id"]).values(views=items.c.views + 1)
                connection.execute(viewed)
            row = connection.execute(sa.select(items.c.name).where(items.c.id == args["id"])).scalar()
            return str(row)

        text = await access("main", run)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("items", on_list_tools=list_tools, on_call_tool=call_tool)
    tx.install(server)
    return server, connection


def inline_sender(client: Client, remote: RemoteBackend) -> AsyncExecutor:
    """guard.inline's executor: each call a tools/call on ``client`` in ``remote``'s transaction."""

    async def send(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        async def call(meta: dict[str, Any]) -> types.CallToolResult:
            return await _call_with_meta(client, tool, dict(arguments), meta)

        result = await remote.send_tool_call_async(call)
        return ToolResult(text=text_of(result), is_error=bool(result.is_error))

    return send


def rows(connection: sa.Connection) -> list[tuple[int, str, int]]:
    return [tuple(r) for r in connection.execute(sa.select(items).order_by(items.c.id))]  # type: ignore[misc]


@pytest.mark.parametrize("features", [FEATURES, (PIGGYBACK,)])
async def test_a_watched_read_opens_no_savepoint_of_its_own(features: tuple[str, ...]) -> None:
    """Three reads after a write: with ``watch``, one anchor savepoint for the run of reads and a
    watch per read (no SAVEPOINT/RELEASE per read); an older participant gets a savepoint per read.
    The change sets are the same (empty)."""
    server, connection = server_of(features)
    statements = Statements(connection)
    async with Client(server, mode="auto") as client:

        def scenario() -> list[list[str]]:
            remote = RemoteBackend(client.session)
            remote.begin()
            assert remote.watching is (WATCH in features)
            write = remote.savepoint()
            remote.call_tool("add_item", {"id": 2, "name": "two"})
            remote.release(write)
            per_read = []
            for _ in range(3):
                statements.take()
                with remote.reading():
                    read = remote.savepoint()
                assert remote.call_tool("get_item", {"id": 2}).content[0].text == "two"  # type: ignore[union-attr]
                assert not remote.changes(read)
                remote.release(read)
                per_read.append(statements.take())
            remote.commit()
            return per_read

        per_read = await anyio.to_thread.run_sync(scenario)
    if WATCH in features:
        # The first read releases the write's savepoint and opens the anchor; later ones none.
        assert per_read[0].count("SAVEPOINT") == 1 and per_read[0].count("RELEASE") == 1
        assert [s for s in per_read[2] if s in ("SAVEPOINT", "RELEASE")] == []
        # only the tool: no row changed since the last read, so SQLite's count of changed rows tells
        # both the log's position (the one the last read took) and this read's changes (none)
        assert per_read[2] == ["SELECT"]
    else:
        assert [s for s in per_read[2] if s in ("SAVEPOINT", "RELEASE")] == ["RELEASE", "SAVEPOINT"]
    assert rows(connection) == [(1, "one", 0), (2, "two", 0)]
    connection.close()


async def test_a_watched_read_that_wrote_is_reported_and_undone_exactly() -> None:
    """A read-classified call that writes: its change is reported like a savepoint's, and rolling
    back to its watch undoes exactly it (the write kept before it stays); reads go on after it."""
    server, connection = server_of(FEATURES)
    async with Client(server, mode="auto") as client:

        def scenario() -> None:
            remote = RemoteBackend(client.session)
            remote.begin()
            write = remote.savepoint()
            remote.call_tool("add_item", {"id": 2, "name": "two"})
            remote.release(write)
            for _ in range(2):  # a clean read first: the anchor is shared by the run of reads
                with remote.reading():
                    clean = remote.savepoint()
                remote.call_tool("get_item", {"id": 1})
                remote.release(clean)
            with remote.reading():
                wrote = remote.savepoint()
            remote.call_tool("view_item", {"id": 1})
            changed = remote.changes(wrote)
            assert [(c.key, c.op, (c.after or {}).get("views")) for c in changed] == [("1", "update", 1)]
            remote.rollback_to(wrote)
            assert [(c.key, c.op) for c in remote.changes()] == [("2", "insert")]
            with remote.reading():
                again = remote.savepoint()
            remote.call_tool("get_item", {"id": 2})
            assert not remote.changes(again)
            remote.release(again)
            remote.commit()

        await anyio.to_thread.run_sync(scenario)
    assert rows(connection) == [(1, "one", 0), (2, "two", 0)]
    connection.close()


async def test_a_participant_refuses_to_undo_a_watch_alone() -> None:
    """On the wire: a watch that saw changes cannot be rolled back to (NOT_REVERSIBLE, nothing
    undone, the change still in the transaction's change set); one that saw none closes."""
    server, connection = server_of(FEATURES)
    async with Client(server, mode="auto") as client:

        def scenario() -> None:
            remote = RemoteBackend(client.session)
            remote.begin()
            assert remote.tx is not None
            meta = {TX_META_KEY: remote.tx, OPS_META_KEY: [{"op": "watch", "savepoint": "w1"}]}
            answer = blocking(_call_with_meta, client, "view_item", {"id": 1}, meta)
            reported = answer.meta[TX_META_KEY]["savepoints"]["w1"]["changes"]
            assert [(c["key"], c["op"]) for c in reported] == [("1", "update")]
            with pytest.raises(MCPError) as refused:
                raw_tx(client, ROLLBACK_TO, remote.tx, savepoint="w1")
            assert refused.value.code == NOT_REVERSIBLE
            assert [(c.key, c.op) for c in remote.changes()] == [("1", "update")]
            meta[OPS_META_KEY] = [{"op": "watch", "savepoint": "w2"}]
            blocking(_call_with_meta, client, "get_item", {"id": 1}, meta)
            raw_tx(client, ROLLBACK_TO, remote.tx, savepoint="w2")
            remote.rollback()

        await anyio.to_thread.run_sync(scenario)
    assert rows(connection) == [(1, "one", 0)]
    connection.close()


async def test_a_read_that_wrote_after_another_call_is_refused_not_half_undone() -> None:
    """When the anchor no longer bounds the watched call alone (another call ran since), the client
    does not roll back to it: the participant refuses, and nothing is undone."""
    server, connection = server_of(FEATURES)
    async with Client(server, mode="auto") as client:

        def scenario() -> None:
            remote = RemoteBackend(client.session)
            remote.begin()
            with remote.reading():
                wrote = remote.savepoint()
            remote.call_tool("view_item", {"id": 1})
            remote.call_tool("add_item", {"id": 3, "name": "three"})  # outside any savepoint
            with pytest.raises(NotReversibleTransactionError):
                remote.rollback_to(wrote)
            assert [(c.key, c.op) for c in remote.changes()] == [("1", "update"), ("3", "insert")]
            remote.rollback()

        await anyio.to_thread.run_sync(scenario)
    assert rows(connection) == [(1, "one", 0)]
    connection.close()


async def test_watch_is_refused_by_a_participant_without_it() -> None:
    server, connection = server_of((PIGGYBACK,))
    async with Client(server, mode="auto") as client:

        def scenario() -> None:
            remote = RemoteBackend(client.session)
            remote.begin()
            assert remote.piggybacking and not remote.watching
            assert remote.tx is not None
            meta = {TX_META_KEY: remote.tx, OPS_META_KEY: [{"op": "watch", "savepoint": "w1"}]}
            with pytest.raises(MCPError) as refused:
                blocking(_call_with_meta, client, "get_item", {"id": 1}, meta)
            assert refused.value.code == types.INVALID_PARAMS
            remote.rollback()

        await anyio.to_thread.run_sync(scenario)
    connection.close()


@pytest.mark.parametrize("features", [FEATURES, (PIGGYBACK,)])
async def test_run_inline_over_a_participant_undoes_a_read_that_wrote(features: tuple[str, ...]) -> None:
    """The proxy's path for reads (guard.inline) over RemoteBackend: a clean read is allowed, a
    "read" that wrote is rolled back (read_only_wrote) with exactly its change undone, and the
    session's earlier write is committed; the same with and without ``watch``."""
    server, connection = server_of(features)
    async with Client(server, mode="auto") as client:
        tools = await tool_info_map(client)
        remote = RemoteBackend(client.session)
        session = await anyio.to_thread.run_sync(lambda: GuardSession(remote, remote.executor(), tools))

        send = inline_sender(client, remote)
        written = await anyio.to_thread.run_sync(lambda: session.call("add_item", {"id": 2, "name": "two"}))
        assert written.verdict is Verdict.ALLOWED
        verdicts = []
        for tool in ("get_item", "view_item", "get_item"):
            assert inline_ok(session, tool, {"id": 1}, None)
            outcome, _ = await run_inline(session, tool, {"id": 1}, send, anyio.to_thread.run_sync)
            verdicts.append((outcome.verdict, [v.rule_id for v in outcome.violations]))
        assert verdicts == [
            (Verdict.ALLOWED, []),
            (Verdict.ROLLED_BACK, ["read_only_wrote"]),
            (Verdict.ALLOWED, []),
        ]
        assert (await anyio.to_thread.run_sync(session.commit)).committed
    assert rows(connection) == [(1, "one", 0), (2, "two", 0)]
    connection.close()
