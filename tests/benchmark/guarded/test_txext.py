"""The transaction extension end to end: ``shadowguard env serve --stdio`` subprocesses (SQLite and
PostgreSQL state, both protocol eras) driven by GuardSession over RemoteBackend in a worker thread,
compared with a local SqlBackend running the same calls. A minimal SQLAlchemy MCP server that
participates through the helper in a few lines: test_txext_minimal.py.

The golden calls and hashes come from the answer key (tests may read it; the guard never does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters

from benchmark.envs import Database, Domain, Environment
from benchmark.envs.server import environment_state_hash, init_environment
from benchmark.guarded import backend_for, executor_for, is_error_text, tool_infos
from benchmark.procs import startup_timeout_s
from benchmark.tasks import BenchData, Task
from guard.checks import RuleText, SqlCheck
from guard.effects import ToolInfo
from guard.models import ChangeSet, Verdict
from guard.policy import PolicyPack, PolicyPackModel
from guard.session import GuardSession
from guard.txext import (
    BEGIN,
    QUERY_REFUSED,
    TX_META_KEY,
    TX_STATE,
    TX_UNKNOWN,
    RemoteBackend,
    TransactionError,
    TxParams,
    TxRequest,
    advertises,
)
from tests.support.proxy import request_meta

DOMAIN = "sandbox_external_retail"
T = TypeVar("T")

pytestmark = pytest.mark.anyio


# -- reference: the same calls on a local SqlBackend ----------------------------------------------------


@dataclass(frozen=True)
class Reference:
    task: Task
    calls: list[tuple[str, dict[str, Any]]]
    verdicts: list[Verdict]
    call_changes: list[ChangeSet]
    changes: ChangeSet
    pending: ChangeSet
    table: str
    keys_after: list[Any]
    init_hash: str
    golden_hash: str

    @property
    def write_index(self) -> int:
        return next(i for i, c in enumerate(self.call_changes) if c)


def _writes(task: Task, retail: Domain) -> int:
    return sum(
        retail.tools[c.tool].writes for c in task.answer.golden_tool_interactions if c.tool in retail.tools
    )


@pytest.fixture(scope="module")
def ref(retail: Domain, retail_tasks: list[Task], sqlite_db: Database) -> Reference:
    task = next(t for t in retail_tasks if t.variant == "base" and _writes(t, retail) >= 2)
    assert task.answer.expected is not None
    calls = [(c.tool, dict(c.parameters)) for c in task.answer.golden_tool_interactions]
    with Environment(retail, sqlite_db) as env:
        env.apply_patch(task.data_patch)
        init_hash = env.state_hash()
        backend = backend_for(env)
        session = GuardSession(backend, executor_for(env), tool_infos(env))
        outcomes = [session.call(tool, args) for tool, args in calls]
        changes = backend.changes()
        table = next(c.table for c in changes if c.op in ("insert", "update"))
        keys = [r["_key"] for r in backend.query(f"SELECT _key FROM {table} ORDER BY _seq")]
        pending = session.pending_changes()
        assert env.state_hash() == task.answer.expected.golden_db_hash
        session.rollback()
    return Reference(
        task=task,
        calls=calls,
        verdicts=[o.verdict for o in outcomes],
        call_changes=[o.changes for o in outcomes],
        changes=changes,
        pending=pending,
        table=table,
        keys_after=keys,
        init_hash=init_hash,
        golden_hash=task.answer.expected.golden_db_hash,
    )


# -- the participant as a subprocess --------------------------------------------------------------------


def _command(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("shadowguard")
    if script.is_file():
        return [str(script), *args]
    return [sys.executable, "-c", "from proxy.cli import main; main()", *args]


@asynccontextmanager
async def serve(bench: BenchData, database: Database, mode: str) -> AsyncIterator[Client]:
    args = _command(
        "env", "serve", "--domain", DOMAIN, "--data", str(bench.tasks_root), "--db", database.url, "--stdio"
    )
    params = StdioServerParameters(command=args[0], args=args[1:], env=dict(os.environ))
    async with Client(params, mode=mode, read_timeout_seconds=startup_timeout_s()) as client:
        yield client


async def tool_info_map(client: Client) -> dict[str, ToolInfo]:
    tools = (await client.list_tools()).tools
    return {
        t.name: ToolInfo(
            name=t.name,
            input_schema=t.input_schema,
            annotations=t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {},
        )
        for t in tools
    }


def blocking(func: Callable[..., Any], *args: Any) -> Any:
    """Call an async function of the client from the worker thread the guard runs in."""
    return anyio.from_thread.run(func, *args)


def state_hash_of(client: Client) -> Callable[[], str]:
    """The environment's state hash, asked over ``client`` from the guard's worker thread."""

    def state_hash() -> str:
        hashed: str = blocking(environment_state_hash, client.session)
        return hashed

    return state_hash


def raw_tx(client: Client, method: str, tx: str, **fields: Any) -> Any:
    params = TxParams.model_validate({"_meta": {TX_META_KEY: tx}, **fields})
    return blocking(client.session.send_request, TxRequest(method=method, params=params), types.EmptyResult)


# -- through GuardSession -------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "piggyback"), [("legacy", True), ("auto", True), ("auto", False)])
async def test_guard_session_over_the_extension(
    mode: str, piggyback: bool, bench: BenchData, database: Database, ref: Reference
) -> None:
    async with serve(bench, database, mode) as client:
        assert advertises(client.server_capabilities)
        assert await init_environment(client.session, task_id=ref.task.id) == ref.init_hash
        tools = await tool_info_map(client)
        state_hash = state_hash_of(client)

        def scenario() -> None:
            remote = RemoteBackend(client.session, timeout=60, piggyback=piggyback)
            session = GuardSession(remote, remote.executor(is_error=is_error_text), tools)
            assert remote.tx is not None
            assert remote.piggybacking is piggyback
            start = remote.savepoint()
            outcomes = [session.call(tool, args) for tool, args in ref.calls]
            assert [o.verdict for o in outcomes] == ref.verdicts
            assert [o.changes for o in outcomes] == ref.call_changes
            assert remote.changes() == ref.changes
            assert remote.changes(start) == ref.changes
            assert session.pending_changes() == ref.pending
            assert state_hash() == ref.golden_hash

            keys = remote.query(f"SELECT _key FROM {ref.table} ORDER BY _seq")
            assert [r["_key"] for r in keys] == ref.keys_after
            for sql in (f"DELETE FROM {ref.table}", f"SELECT 1; DELETE FROM {ref.table}"):
                with pytest.raises(TransactionError) as refused:
                    remote.query(sql)
                assert refused.value.code == QUERY_REFUSED
            with pytest.raises(TransactionError) as bad_column:
                remote.query(f"SELECT no_such_column FROM {ref.table}")
            assert bad_column.value.code == QUERY_REFUSED
            assert state_hash() == ref.golden_hash

            remote.rollback_to(start)
            assert state_hash() == ref.init_hash
            assert remote.changes() == ChangeSet()
            with pytest.raises(TransactionError) as closed:
                remote.rollback_to(start)
            assert closed.value.code == TX_STATE

            committed_tx = remote.tx
            again = [session.call(tool, args) for tool, args in ref.calls]
            assert [o.changes for o in again] == ref.call_changes
            committed = session.commit()
            assert committed.committed and committed.changes == ref.pending
            assert remote.tx is None
            assert state_hash() == ref.golden_hash

            # the committed transaction is over: a call naming it is refused before it runs
            tool, args = ref.calls[ref.write_index]
            with pytest.raises(MCPError) as stale:
                blocking(_call_with_tx, client, tool, args, committed_tx)
            assert stale.value.code == TX_UNKNOWN
            assert state_hash() == ref.golden_hash

        await anyio.to_thread.run_sync(scenario)


async def test_rollback_violations_and_refusals(
    bench: BenchData, sqlite_db: Database, ref: Reference
) -> None:
    write_index = ref.write_index
    write_tool, write_args = ref.calls[write_index]
    always = SqlCheck.compile(
        "always_violated",
        "after_call",
        f"SELECT COUNT(*) AS n FROM {ref.table} HAVING COUNT(*) > 0",
        RuleText(message="test rule: every write of this tool is refused"),
        tools=[write_tool],
    )
    strict = PolicyPack(model=PolicyPackModel(name="strict"), checks=[always])

    async with serve(bench, sqlite_db, "legacy") as client:
        assert await init_environment(client.session, task_id=ref.task.id) == ref.init_hash
        tools = await tool_info_map(client)
        state_hash = state_hash_of(client)

        def scenario() -> None:
            # an after_call violation (the check queries through the extension) rolls the call back
            remote = RemoteBackend(client.session)
            session = GuardSession(remote, remote.executor(is_error=is_error_text), tools, strict)
            for tool, args in ref.calls[:write_index]:
                session.call(tool, args)
            outcome = session.call(write_tool, write_args)
            assert outcome.verdict is Verdict.ROLLED_BACK
            assert outcome.changes == ref.call_changes[write_index]
            assert [v.rule_id for v in outcome.violations] == ["always_violated"]
            assert state_hash() == ref.init_hash
            assert remote.changes() == ChangeSet()

            # a kept write, then a session rollback
            session.rollback()
            kept = RemoteBackend(client.session)
            kept_session = GuardSession(kept, kept.executor(is_error=is_error_text), tools)
            for tool, args in ref.calls[: write_index + 1]:
                kept_session.call(tool, args)
            assert state_hash() != ref.init_hash
            tx = kept.tx
            assert tx is not None

            # protocol errors change nothing
            with pytest.raises(MCPError) as again:
                raw_tx(client, BEGIN, tx)
            assert again.value.code == TX_STATE
            with pytest.raises(MCPError) as unknown_param:
                raw_tx(client, "shadowguard/tx/savepoint", tx, name="x")
            assert unknown_param.value.code == types.INVALID_PARAMS
            assert "unknown parameter(s) ['name']" in unknown_param.value.message
            with pytest.raises(MCPError) as other_tx:
                raw_tx(client, "shadowguard/tx/changes", "someone-else")
            assert other_tx.value.code == TX_UNKNOWN
            before = state_hash()
            with pytest.raises(MCPError) as stale_call:
                blocking(_call_with_tx, client, write_tool, write_args, "someone-else")
            assert stale_call.value.code == TX_UNKNOWN
            assert state_hash() == before

            kept_session.rollback()
            assert kept.tx is None
            assert state_hash() == ref.init_hash

            # re-initialising the environment ends an open transaction, and says so
            gone = RemoteBackend(client.session, piggyback=False)
            gone.begin()
            gone.call_tool(write_tool, write_args)
            blocking(_init, client, ref.task)
            with pytest.raises(TransactionError) as replaced:
                gone.savepoint()
            assert replaced.value.code == TX_UNKNOWN
            assert "replaced or closed" in str(replaced.value)
            assert state_hash() == ref.init_hash

            # piggybacked, the savepoint fails with the request it rides on, with the same error,
            # before the tool runs; the savepoint it kept from opening raises it again
            late = RemoteBackend(client.session)
            late.begin()
            assert late.piggybacking
            late.call_tool(write_tool, write_args)
            blocking(_init, client, ref.task)
            savepoint = late.savepoint()
            with pytest.raises(TransactionError) as replaced_late:
                late.call_tool(write_tool, write_args)
            assert replaced_late.value.code == TX_UNKNOWN
            assert str(replaced_late.value) == str(replaced.value).replace(str(gone.tx), str(late.tx))
            assert state_hash() == ref.init_hash
            with pytest.raises(TransactionError) as reused:
                late.rollback_to(savepoint)
            assert reused.value is replaced_late.value

        await anyio.to_thread.run_sync(scenario)


async def _call_with_tx(client: Client, tool: str, args: dict[str, Any], tx: str) -> types.CallToolResult:
    return await client.call_tool(tool, args, meta=request_meta({TX_META_KEY: tx}))


async def _init(client: Client, task: Task) -> str:
    return await init_environment(client.session, task_id=task.id)
