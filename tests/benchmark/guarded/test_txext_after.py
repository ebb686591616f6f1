"""Queries after a request (feature ``after``, docs/adr/015): the SELECTs of the guard's after-call and
at-commit SQL checks ride on the tools/call (or the commit review's ``changes``) and are answered in
its result, so they cost no ``query`` round trip; answers are the ones ``query`` would give (errors
too), never kept past a request that may change the state; a participant without the feature gets
``query`` requests as before. The minimal SQLAlchemy server of test_txext_watch, its requests counted."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp.types as types
import pytest
from mcp import Client, MCPError

from guard.backend import Backend
from guard.checks import RuleText, SqlCheck
from guard.inline import inline_ok, run_inline
from guard.models import Verdict
from guard.session import GuardSession
from guard.txext import (
    AFTER,
    AFTER_META_KEY,
    CHANGES,
    FEATURES,
    PIGGYBACK,
    QUERY,
    QUERY_REFUSED,
    TX_META_KEY,
    WATCH,
    RemoteBackend,
    TransactionError,
    TransactionParticipant,
    TxParams,
    TxRequest,
)
from tests.benchmark.guarded.test_txext import raw_tx, tool_info_map
from tests.benchmark.guarded.test_txext_minimal import _call_with_meta
from tests.benchmark.guarded.test_txext_watch import inline_sender, rows, server_of

pytestmark = pytest.mark.anyio

R = TypeVar("R", bound=types.Result)
T = TypeVar("T")
EMPTY_NAME = "SELECT id FROM items WHERE name = ''"
DRAFTS = "SELECT id FROM items WHERE name = 'draft'"
NAMED = "SELECT id, name FROM items WHERE name = :name"


class Counting:
    """A client session that notes the method of every request it sends (a TxSession)."""

    def __init__(self, client: Client) -> None:
        self.session = client.session
        self.methods: list[str] = []

    async def send_request(
        self,
        request: types.Request[Any, Any],
        result_type: type[R],
        request_read_timeout_seconds: float | None = None,
    ) -> R:
        self.methods.append(request.method)
        return await self.session.send_request(request, result_type, request_read_timeout_seconds)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        *,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult:
        self.methods.append("tools/call")
        return await self.session.call_tool(name, arguments, read_timeout_seconds, meta=meta)

    def take(self) -> list[str]:
        methods, self.methods = self.methods, []
        return methods


def checks() -> list[SqlCheck]:
    return [
        SqlCheck.compile(
            "items.named", "after_call", EMPTY_NAME, RuleText("An item needs a name."), tools=["add_item"]
        ),
        SqlCheck.compile("items.no_draft", "at_commit", DRAFTS, RuleText("No drafts.")),
    ]


@pytest.mark.parametrize("features", [FEATURES, (PIGGYBACK, WATCH)])
async def test_check_queries_ride_on_the_call_and_on_the_review(features: Collection[str]) -> None:
    """With ``after``: a guarded write is one tools/call (its after-call query answered in it), a
    violating write is rolled back all the same, and a commit is changes (with the at-commit query)
    and commit. Without it: one ``query`` request per check, as before. Same outcomes either way."""
    server, connection = server_of(features)
    async with Client(server, mode="auto") as client:
        tools = await tool_info_map(client)
        counting = Counting(client)

        def scenario() -> tuple[list[list[str]], list[Verdict], bool]:
            remote = RemoteBackend(counting)
            session = GuardSession(remote, remote.executor(), tools, extra_checks=checks())
            assert remote.answering is (AFTER in features)
            counting.take()
            per_call, verdicts = [], []
            for args in ({"id": 2, "name": "two"}, {"id": 3, "name": ""}, {"id": 4, "name": "four"}):
                verdicts.append(session.call("add_item", args).verdict)
                per_call.append(counting.take())
            outcome = session.commit()
            per_call.append(counting.take())
            return per_call, verdicts, outcome.committed

        per_call, verdicts, committed = await anyio.to_thread.run_sync(scenario)
    assert verdicts == [Verdict.ALLOWED, Verdict.ROLLED_BACK, Verdict.ALLOWED] and committed
    assert rows(connection) == [(1, "one", 0), (2, "two", 0), (4, "four", 0)]
    if AFTER in features:
        assert per_call[0] == ["tools/call"]
        assert per_call[1] == ["tools/call", "shadowguard/tx/rollback_to"]
        assert per_call[3] == [CHANGES, "shadowguard/tx/commit"]
    else:
        assert per_call[0] == ["tools/call", QUERY]
        assert per_call[3] == [CHANGES, QUERY, "shadowguard/tx/commit"]
    connection.close()


async def test_answers_are_what_query_answers_and_last_one_state() -> None:
    """An answer asked ahead equals the ``query`` request's (parameters bound the same), a query
    the database refuses raises the same TransactionError, and after a rollback_to (the state moved)
    the query is asked again, not answered from before."""
    server, connection = server_of(FEATURES)
    async with Client(server, mode="auto") as client:
        counting = Counting(client)

        def scenario() -> None:
            remote = RemoteBackend(counting)
            remote.begin()
            bad = "SELECT missing_column FROM items"
            remote.expect([(NAMED, {"name": "two"}), (bad, {})])
            point = remote.savepoint()
            remote.call_tool("add_item", {"id": 2, "name": "two"})
            counting.take()
            assert remote.answered(NAMED, {"name": "two"}) and not remote.answered(NAMED, {"name": "one"})
            assert remote.query(NAMED, {"name": "two"}) == [{"id": 2, "name": "two"}]
            with pytest.raises(TransactionError) as asked_ahead:
                remote.query(bad, {})
            assert counting.take() == []
            assert remote.query(NAMED, {"name": "one"}) == [{"id": 1, "name": "one"}]  # not asked: sent
            assert counting.take() == [QUERY]
            remote.rollback_to(point)
            assert not remote.answered(NAMED, {"name": "two"}) and not remote.answered(bad, {})
            assert remote.query(NAMED, {"name": "two"}) == []
            with pytest.raises(TransactionError) as by_request:
                remote.query(bad, {})
            assert counting.take() == ["shadowguard/tx/rollback_to", QUERY, QUERY]
            assert asked_ahead.value.code == by_request.value.code == QUERY_REFUSED
            assert str(asked_ahead.value) == str(by_request.value)
            remote.rollback()

        await anyio.to_thread.run_sync(scenario)
    connection.close()


async def test_malformed_or_misplaced_queries_are_refused() -> None:
    """A malformed list, one on a method other than tools/call and changes, or one sent to a
    participant that does not serve ``after``: -32602, and the tool does not run."""
    for features, meta_value, method in [
        (FEATURES, [{"sql": ""}], "tools/call"),
        (FEATURES, [{"sql": EMPTY_NAME, "extra": 1}], "tools/call"),
        (FEATURES, "SELECT 1", "tools/call"),
        (FEATURES, [{"sql": EMPTY_NAME}], "shadowguard/tx/release"),
        ((PIGGYBACK, WATCH), [{"sql": EMPTY_NAME}], "tools/call"),
    ]:
        server, connection = server_of(features)
        async with Client(server, mode="auto") as client:
            tx = "t-after"
            await anyio.to_thread.run_sync(raw_tx, client, "shadowguard/tx/begin", tx)
            meta = {TX_META_KEY: tx, AFTER_META_KEY: meta_value}
            with pytest.raises(MCPError) as refused:
                if method == "tools/call":
                    await _call_with_meta(client, "add_item", {"id": 9, "name": "nine"}, meta)
                else:
                    params = {"_meta": meta, "savepoint": "sp1"}
                    request = TxRequest(method=method, params=TxParams.model_validate(params))
                    await client.session.send_request(request, types.EmptyResult)
            assert refused.value.code == types.INVALID_PARAMS, (features, meta_value, method)
            assert AFTER_META_KEY in refused.value.message
        assert rows(connection) == [(1, "one", 0)]
        connection.close()


@pytest.mark.parametrize("features", [FEATURES, (PIGGYBACK, WATCH)])
async def test_writes_with_answered_checks_are_guarded_on_the_event_loop(features: Collection[str]) -> None:
    """guard.inline takes a write whose after-call checks are SQL when their queries come with the
    call (``after``): a clean write needs nothing off the event loop, a write that breaks a check is
    undone off it (rollback_to) with the violation; without ``after`` the write is not inline.
    The writes that stay are committed, the broken one is not."""
    server, connection = server_of(features)
    async with Client(server, mode="auto") as client:
        tools = await tool_info_map(client)
        remote = RemoteBackend(client.session)
        session = await anyio.to_thread.run_sync(
            lambda: GuardSession(remote, remote.executor(), tools, extra_checks=checks())
        )
        assert inline_ok(session, "add_item", {"id": 2, "name": "two"}, None) is (AFTER in features)
        if AFTER in features:
            offloaded: list[str] = []

            async def offload(work: Callable[[], T]) -> T:
                offloaded.append(repr(work))  # a partial names its function
                return await anyio.to_thread.run_sync(work)

            send = inline_sender(client, remote)
            kept, _ = await run_inline(session, "add_item", {"id": 2, "name": "two"}, send, offload)
            assert kept.verdict is Verdict.ALLOWED and len(kept.changes) == 1 and offloaded == []
            broken, _ = await run_inline(session, "add_item", {"id": 3, "name": ""}, send, offload)
            assert broken.verdict is Verdict.ROLLED_BACK
            assert [v.rule_id for v in broken.violations] == ["items.named"]
            assert len(offloaded) == 1 and "undo_broken" in offloaded[0]
        else:
            await anyio.to_thread.run_sync(lambda: session.call("add_item", {"id": 2, "name": "two"}))
        assert (await anyio.to_thread.run_sync(session.commit)).committed
    assert rows(connection) == [(1, "one", 0), (2, "two", 0)]
    connection.close()


@pytest.mark.parametrize("calling", [False, True])
async def test_a_host_inside_calling_reports_in_the_tools_own_access(calling: bool) -> None:
    """A tools/call with a savepoint and an after-query: a host that runs its tool inside
    ``TransactionParticipant.calling`` serves it in one access to the backend (the report taken
    there), one that calls ``check_call`` in two (the middleware's report access); the answers are
    the same; a tool that raised answers no report either way."""
    accesses: list[str] = []
    server, connection = server_of(FEATURES, calling=calling, accesses=accesses)
    async with Client(server, mode="auto") as client:
        counting = Counting(client)

        def scenario() -> list[Any]:
            remote = RemoteBackend(counting)
            remote.begin()
            seen: list[Any] = []
            for args in ({"id": 2, "name": "two"}, {"id": 2, "name": "again"}):  # the second: a duplicate key
                remote.expect([(NAMED, {"name": args["name"]})])
                point = remote.savepoint()
                accesses.clear()
                try:
                    remote.call_tool("add_item", args)
                except MCPError as exc:
                    seen.append(("error", exc.code))
                seen.append(
                    (
                        len(accesses),
                        remote.changes(point).model_dump(),
                        remote.query(NAMED, {"name": args["name"]}),
                    )
                )
                remote.release(point)
            remote.rollback()
            return seen

        seen = await anyio.to_thread.run_sync(scenario)
    first, failed, after_failure = seen
    assert first[0] == (1 if calling else 2)
    assert [c["table"] for c in first[1]["changes"]] == ["items"] and first[2] == [{"id": 2, "name": "two"}]
    # The duplicate key raised in the tool: a JSON-RPC error, no report (the client asks again).
    assert failed == ("error", types.INTERNAL_ERROR)
    assert after_failure == (1, {"changes": []}, [])
    connection.close()


async def test_after_needs_piggyback() -> None:
    """Queries after a request ride with piggybacked operations: a participant cannot serve
    ``after`` without ``piggyback`` (as for ``watch``)."""

    async def access(key: str, work: Callable[[Backend], T], /) -> T:
        raise AssertionError("a participant that cannot be built is never asked to run anything")

    with pytest.raises(ValueError, match="'after' rides on piggybacked operations"):
        TransactionParticipant(session_key=lambda ctx: "main", access=access, features=(AFTER,))
