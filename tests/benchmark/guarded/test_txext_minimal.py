"""The transaction extension on a minimal SQLAlchemy MCP server that participates in a few lines
(TransactionParticipant): one round trip per guarded call with the piggyback, a failed or malformed
piggybacked operation, a caller with its own connection, a non-participant refused clearly, and a
transaction whose lease lapses. Split from test_txext.py, which drives the benchmark's environments.
"""

from collections.abc import Callable, Collection
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
import pytest
import sqlalchemy as sa
from mcp import Client, MCPError
from mcp.server import Server
from sqlalchemy.pool import StaticPool

from guard.backend import Backend, BackendError
from guard.models import ChangeSet, Verdict
from guard.session import GuardSession
from guard.sql_backend import SqlBackend
from guard.txext import (
    BEGIN,
    EXTENSION,
    FEATURES,
    OPS_META_KEY,
    TX_META_KEY,
    TX_STATE,
    TX_UNKNOWN,
    RemoteBackend,
    TransactionError,
    TransactionParticipant,
    TxParams,
    TxRequest,
    advertises,
    serialized,
)
from tests.benchmark.guarded.test_txext import blocking, tool_info_map
from tests.support.guardcore import keyed_table, text_column
from tests.support.proxy import request_meta

pytestmark = pytest.mark.anyio


# -- any SQLAlchemy server, in a few lines --------------------------------------------------------------

metadata = sa.MetaData()
items = keyed_table("items", metadata, text_column("name"))


def minimal_server(
    participate: bool,
    features: Collection[str] = FEATURES,
    seen: list[str] | None = None,
    **participant: Any,
) -> tuple[Server[Any], sa.Connection]:
    """A SQLite ``items`` server; ``features`` are the participant's, ``seen`` collects request methods,
    ``participant`` more TransactionParticipant arguments (lease, clock)."""
    engine = sa.create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    connection = engine.connect()
    metadata.create_all(connection)
    connection.commit()
    backend = SqlBackend(connection, [items])
    access = serialized(backend)
    tx = TransactionParticipant(
        session_key=lambda ctx: "main", access=access, features=features, **participant
    )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
        return types.ListToolsResult(tools=[types.Tool(name="add_item", input_schema=schema)])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = tx.transaction_of(ctx)
        args = params.arguments or {}

        def run(backend: Backend) -> str:
            tx.check_call("main", name, backend)
            with connection.begin_nested() if connection.in_transaction() else connection.begin():
                connection.execute(items.insert().values(id=args["id"], name=args["name"]))
            return "added"

        text = await access("main", run)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("items", on_list_tools=list_tools, on_call_tool=call_tool)
    if seen is not None:

        async def record(ctx: Any, call_next: Any) -> Any:
            seen.append(ctx.method)
            return await call_next(ctx)

        server.middleware.append(record)
    if participate:
        tx.install(server)
    return server, connection


def _names(connection: sa.Connection) -> list[str]:
    return list(connection.execute(sa.select(items.c.name).order_by(items.c.id)).scalars())


@pytest.mark.parametrize(("mode", "features"), [("legacy", FEATURES), ("auto", FEATURES), ("auto", ())])
async def test_piggyback_makes_a_guarded_call_one_round_trip(mode: str, features: tuple[str, ...]) -> None:
    """With the feature, savepoint and release ride on the tools/call and the change set comes back
    with its result; a participant without it (an older one) gets the same results, one round trip
    per operation."""
    seen: list[str] = []
    server, connection = minimal_server(participate=True, features=features, seen=seen)
    async with Client(server, mode=mode) as client:
        caps = client.server_capabilities
        entry = ((caps.extensions or {}) if mode == "auto" else (caps.experimental or {}))[EXTENSION]
        assert entry.get("features", []) == list(features)
        tools = await tool_info_map(client)

        def scenario() -> list[ChangeSet]:
            remote = RemoteBackend(client.session)
            session = GuardSession(remote, remote.executor(), tools)
            assert remote.piggybacking is bool(features)
            seen.clear()
            outcomes = [session.call("add_item", {"id": i, "name": f"item {i}"}) for i in (1, 2, 3)]
            calls = list(seen)
            assert all(o.verdict is Verdict.ALLOWED for o in outcomes)
            if features:
                assert calls == ["tools/call"] * 3
            else:
                per_call = ["shadowguard/tx/savepoint", "tools/call", "shadowguard/tx/changes"]
                assert calls == per_call + ["shadowguard/tx/release", *per_call] * 2 + [
                    "shadowguard/tx/release"
                ]
            assert session.commit().committed
            return [o.changes for o in outcomes]

        changes = await anyio.to_thread.run_sync(scenario)
    assert [[(c.key, c.op, c.after) for c in cs] for cs in changes] == [
        [(str(i), "insert", {"id": i, "name": f"item {i}"})] for i in (1, 2, 3)
    ]
    assert _names(connection) == ["item 1", "item 2", "item 3"]
    connection.close()


async def test_a_failed_piggybacked_operation_fails_the_request_it_rides_on() -> None:
    """The same error as without piggybacking, raised by the next request; the tool does not run,
    and a savepoint queued after the failed operation is never opened (using it raises the error)."""
    server, connection = minimal_server(participate=True)
    async with Client(server, mode="auto") as client:

        def scenario() -> None:
            plain = RemoteBackend(client.session, piggyback=False)
            plain.begin()
            with pytest.raises(TransactionError) as direct:
                plain.release("p99")
            plain.rollback()

            remote = RemoteBackend(client.session)
            remote.begin()
            kept = remote.savepoint()
            remote.call_tool("add_item", {"id": 1, "name": "kept"})
            assert [c.key for c in remote.changes(kept)] == ["1"]
            remote.release(kept)
            remote.release("p99")  # queued: nothing is sent yet
            after = remote.savepoint()
            with pytest.raises(TransactionError) as piggybacked:
                remote.call_tool("add_item", {"id": 2, "name": "never added"})
            assert piggybacked.value.code == direct.value.code == TX_STATE
            assert str(piggybacked.value) == str(direct.value)
            for use in (lambda: remote.rollback_to(after), lambda: remote.changes(after)):
                with pytest.raises(TransactionError) as again:
                    use()
                assert again.value is piggybacked.value
            assert [(c.key, c.op) for c in remote.changes()] == [("1", "insert")]  # release of kept applied
            assert remote.query("SELECT COUNT(*) AS n FROM items") == [{"n": 1}]
            remote.commit()

        await anyio.to_thread.run_sync(scenario)
    assert _names(connection) == ["kept"]
    connection.close()


async def test_a_caller_with_its_own_connection_gets_the_same_piggyback() -> None:
    """RemoteBackend.send_tool_call is the one piggyback sequence (the proxy's executor uses it):
    the caller's ``_meta`` rides with the transaction's, the change set comes back with the result
    (no ``changes`` request), and a JSON-RPC error of the tool itself stays the caller's own."""
    seen: list[str] = []
    server, connection = minimal_server(participate=True, seen=seen)
    metas: list[dict[str, Any]] = []

    async def record_meta(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":  # without what the SDK adds on the 2026-07-28 wire
            metas.append(
                {k: v for k, v in (ctx.meta or {}).items() if not k.startswith("io.modelcontextprotocol/")}
            )
        return await call_next(ctx)

    server.middleware.append(record_meta)
    async with Client(server, mode="auto") as client:

        def sender(item: int) -> Callable[[dict[str, Any]], types.CallToolResult]:
            args = {"id": item, "name": f"item {item}"}
            return lambda meta: cast(
                types.CallToolResult, blocking(_call_with_meta, client, "add_item", args, meta)
            )

        def scenario() -> None:
            idle = RemoteBackend(client.session)
            with pytest.raises(BackendError, match="no transaction"):
                idle.send_tool_call(sender(0))
            remote = RemoteBackend(client.session, meta={"example/session": "s1"})
            remote.begin()
            savepoint = remote.savepoint()
            seen.clear()
            result = remote.send_tool_call(sender(1), {"example/trace": "t1"})
            assert not result.is_error
            assert metas == [
                {
                    "example/trace": "t1",
                    "example/session": "s1",
                    TX_META_KEY: remote.tx,
                    OPS_META_KEY: [{"op": "savepoint", "savepoint": savepoint}],
                }
            ]
            assert [(c.key, c.op) for c in remote.changes(savepoint)] == [("1", "insert")]
            assert [m for m in seen if m != "tools/list"] == ["tools/call"]  # the client may list tools
            remote.release(savepoint)
            with pytest.raises(MCPError) as own:
                remote.send_tool_call(sender(1))  # the same id again: the tool fails, no operation did
            assert OPS_META_KEY in metas[-1]
            assert not isinstance(own.value.data, dict) or "shadowguard/tx/op" not in own.value.data
            assert remote.query("SELECT COUNT(*) AS n FROM items") == [{"n": 1}]
            remote.commit()

        await anyio.to_thread.run_sync(scenario)
    assert _names(connection) == ["item 1"]
    connection.close()


async def test_malformed_or_unwanted_piggybacked_operations_are_refused() -> None:
    server, connection = minimal_server(participate=True)
    old, old_connection = minimal_server(participate=True, features=())
    async with Client(server, mode="auto") as client, Client(old, mode="auto") as old_client:

        def scenario() -> None:
            for target in (client, old_client):
                remote = RemoteBackend(target.session)
                remote.begin()
                assert remote.piggybacking is (target is client)
                assert remote.tx is not None
                for ops in ([{"op": "drop", "savepoint": "x"}], [{"op": "savepoint"}], "savepoint"):
                    meta = {TX_META_KEY: remote.tx, OPS_META_KEY: ops}
                    with pytest.raises(MCPError) as refused:
                        blocking(_call_with_meta, target, "add_item", {"id": 9, "name": "no"}, meta)
                    assert refused.value.code == types.INVALID_PARAMS
                remote.rollback()
            with pytest.raises(MCPError) as before_begin:
                meta = {TX_META_KEY: "t1", OPS_META_KEY: [{"op": "savepoint", "savepoint": "p1"}]}
                blocking(_send_with_meta, client, BEGIN, meta)
            assert before_begin.value.code == types.INVALID_PARAMS

        await anyio.to_thread.run_sync(scenario)
    assert _names(connection) == [] and _names(old_connection) == []
    connection.close()
    old_connection.close()


async def _call_with_meta(
    client: Client, tool: str, args: dict[str, Any], meta: dict[str, Any]
) -> types.CallToolResult:
    return await client.call_tool(tool, args, meta=request_meta(meta))


async def _send_with_meta(client: Client, method: str, meta: dict[str, Any]) -> types.EmptyResult:
    params = TxParams.model_validate({"_meta": meta})
    return await client.session.send_request(TxRequest(method=method, params=params), types.EmptyResult)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_minimal_server_participates(mode: str) -> None:
    server, connection = minimal_server(participate=True)
    async with Client(server, mode=mode) as client:
        assert advertises(client.server_capabilities)
        caps = client.server_capabilities
        assert EXTENSION in ((caps.extensions or {}) if mode == "auto" else (caps.experimental or {}))
        tools = await tool_info_map(client)

        def scenario() -> None:
            remote = RemoteBackend(client.session)
            session = GuardSession(remote, remote.executor(), tools)
            first = session.call("add_item", {"id": 1, "name": "kept"})
            assert first.verdict is Verdict.ALLOWED
            assert [(c.table, c.key, c.op, c.after) for c in first.changes] == [
                ("items", "1", "insert", {"id": 1, "name": "kept"})
            ]
            sp = remote.savepoint()
            remote.call_tool("add_item", {"id": 2, "name": "undone"})
            assert remote.query("SELECT COUNT(*) AS n FROM items") == [{"n": 2}]
            remote.rollback_to(sp)
            assert remote.query("SELECT name FROM items") == [{"name": "kept"}]
            assert session.commit().committed

        await anyio.to_thread.run_sync(scenario)
    assert connection.execute(sa.select(items.c.name)).scalars().all() == ["kept"]
    connection.close()


async def test_non_participant_is_refused_clearly() -> None:
    server, connection = minimal_server(participate=False)
    async with Client(server, mode="legacy") as client:
        assert not advertises(client.server_capabilities)

        def scenario() -> None:
            with pytest.raises(BackendError, match="does not participate"):
                RemoteBackend(client.session).begin()

        await anyio.to_thread.run_sync(scenario)
    connection.close()


# -- leases ---------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def participant_of(server: Server[Any]) -> TransactionParticipant:
    """The participant ``install`` put on ``server`` (its middleware are the participant's methods)."""
    for middleware in server.middleware:
        owner = getattr(middleware, "__self__", None)
        if isinstance(owner, TransactionParticipant):
            return owner
    raise AssertionError("no TransactionParticipant is installed on the server")


async def test_a_transaction_whose_lease_lapses_is_rolled_back_and_its_session_freed() -> None:
    """A guard that stops sending (it died) loses its transaction after the lease: rolled back, and
    the host told (``on_lapse``) so it can free the session; renewed ones are kept."""
    clock, lapsed = Clock(), []

    async def on_lapse(key: str) -> None:
        lapsed.append(key)

    server, connection = minimal_server(participate=True, lease_s=30.0, clock=clock, on_lapse=on_lapse)
    participant = participant_of(server)
    async with Client(server) as client:
        remote = RemoteBackend(client.session)
        await anyio.to_thread.run_sync(remote.begin)
        assert remote.lease_s == 30.0
        await anyio.to_thread.run_sync(remote.call_tool, "add_item", {"id": 1, "name": "kept"})
        clock.now += 20
        await remote.renew()
        clock.now += 20  # 40 s since the call, 20 since the renewal
        assert await participant.reap() == [] and lapsed == []
        clock.now += 11
        assert await participant.reap() == ["main"] and lapsed == ["main"]
        assert _names(connection) == [], "the lapsed transaction was rolled back"
        with pytest.raises(TransactionError) as gone:
            await anyio.to_thread.run_sync(remote.commit)
        assert gone.value.code == TX_UNKNOWN and "lease lapsed" in str(gone.value)
        with pytest.raises(ValueError):
            TransactionParticipant(
                session_key=lambda ctx: "main", access=serialized(SqlBackend(connection, [items])), lease_s=0
            )
