"""The guard's pipeline on the event loop (guard.inline) on the small shop (tests.support.guardcore):
which calls qualify, the same outcome as the worker-thread pipeline for each path a read can take,
and backend work (undo, restart, a retry's wait) handed to ``offload`` instead of run on the loop."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import anyio
import pytest

from guard.checks import CheckContext, PythonCheck, RuleText
from guard.effects import ToolInfo
from guard.errors import ErrorClass, TransientError
from guard.inline import inline_ok, ops_ride_on_calls, run_inline
from guard.journal import JournalBackend
from guard.models import EffectClass, ToolOutcome, Verdict
from guard.policy import EMPTY
from guard.retry import Attempt, RetryPolicy, VirtualClock
from guard.session import GuardSession, ToolResult
from tests.support.guardcore import ORDERS, TOOLS, Shop, open_shop

T = TypeVar("T")
PEEK = ToolInfo(
    name="peek_order",
    input_schema={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    annotations={"readOnlyHint": True},
)
"""Says it reads; writes (a read-classified tool that changes a row)."""
PEEKING = {**TOOLS, "peek_order": PEEK}


class Upstream:
    """The shop as an upstream: ``peek_order`` writes while claiming to read; ``flaky`` failures
    are raised (transient) before the shop sees the call."""

    def __init__(self, shop: Shop, flaky: int = 0) -> None:
        self.shop = shop
        self.flaky = flaky

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        if self.flaky > 0:
            self.flaky -= 1
            raise TransientError("the upstream timed out", tool=tool, rule="test_flaky")
        if tool == "peek_order":
            self.shop._update(str(arguments["order_id"]), status="peeked")
            return ToolResult(json.dumps(self.shop.order(str(arguments["order_id"]))))
        return self.shop(tool, arguments)

    async def send(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        return self(tool, arguments)


class Offload:
    """Runs the work it is handed (on the test's one SQLite connection) and counts it."""

    def __init__(self) -> None:
        self.works = 0

    async def __call__(self, work: Callable[[], T], /) -> T:
        self.works += 1
        return work()


def guard(shop: Shop, upstream: Upstream, *, journal: bool = False) -> GuardSession:
    retry = RetryPolicy(clock=VirtualClock())
    if journal:
        backend = JournalBackend(upstream, PEEKING, EMPTY, session_id="s")
        return GuardSession(backend, backend.execute, PEEKING, EMPTY, session_id="s", retry=retry)
    return GuardSession(shop.backend, upstream, PEEKING, EMPTY, session_id="s", retry=retry)


def inline(
    session: GuardSession, upstream: Upstream, tool: str, arguments: dict[str, Any], offload: Offload
) -> tuple[ToolOutcome, ToolResult | None]:
    async def go() -> tuple[ToolOutcome, ToolResult | None]:
        return await run_inline(session, tool, arguments, upstream.send, offload)

    return anyio.run(go)


def summary(outcome: ToolOutcome) -> tuple[Any, ...]:
    return (
        outcome.verdict,
        outcome.error_class,
        outcome.result,
        [(c.table, c.key, c.op) for c in outcome.changes],
        [v.rule_id for v in outcome.violations],
        outcome.retries,
        [(a.error_class, a.retried) for a in outcome.attempts],
    )


def test_inline_ok_takes_reads_that_need_nothing_but_their_savepoint(shop: Shop) -> None:
    journaled = guard(shop, Upstream(shop), journal=True)
    assert ops_ride_on_calls(journaled.backend)
    assert inline_ok(journaled, "get_order", {"order_id": "O1"}, None)
    assert inline_ok(journaled, "no_such_tool", {}, None)  # refused before anything runs
    assert not inline_ok(journaled, "set_total", {"order_id": "O1", "total": 1}, None)
    assert not inline_ok(journaled, "get_order", {"order_id": "O1"}, "approval-1")


def test_inline_ok_leaves_checked_reads_and_round_trip_savepoints_to_the_thread(shop: Shop) -> None:
    sql = guard(shop, Upstream(shop))
    assert not ops_ride_on_calls(sql.backend)  # SqlBackend: every savepoint is a statement
    assert not inline_ok(sql, "get_order", {"order_id": "O1"}, None)
    journaled = guard(shop, Upstream(shop), journal=True)

    def never(ctx: CheckContext) -> str | None:
        return None

    check = PythonCheck(
        "look", "after_call", never, RuleText("reads are looked at"), frozenset({"get_order"})
    )
    journaled.checks.append(check)
    assert not inline_ok(journaled, "get_order", {"order_id": "O1"}, None)
    assert inline_ok(journaled, "peek_order", {"order_id": "O1"}, None)


CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "allowed read": ("get_order", {"order_id": "O1"}, 0),
    "unknown tool": ("no_such_tool", {}, 0),
    "invalid arguments": ("get_order", {"order_id": 7}, 0),
    "error result": ("get_order", {"order_id": "O9"}, 0),
    "read that wrote": ("peek_order", {"order_id": "O1"}, 0),
    "retried then allowed": ("get_order", {"order_id": "O1"}, 2),
    "retries run out": ("get_order", {"order_id": "O1"}, 99),
}


@pytest.mark.parametrize("case", list(CASES))
def test_run_inline_gives_the_outcome_run_gives(case: str) -> None:
    tool, arguments, flaky = CASES[case]
    with open_shop() as shop:
        expected, answer = guard(shop, Upstream(shop, flaky)).run(tool, arguments)
        left = shop.rows()
    with open_shop() as shop:
        session = guard(shop, Upstream(shop, flaky))
        outcome, inline_answer = inline(session, Upstream(shop, flaky), tool, arguments, Offload())
        assert summary(outcome) == summary(expected)
        assert inline_answer == answer
        assert shop.rows() == left == ORDERS  # a read that wrote was undone in both
        assert session.outcomes == [outcome]


def test_a_read_that_wrote_is_undone_off_the_loop(shop: Shop) -> None:
    session, offload = guard(shop, Upstream(shop)), Offload()
    outcome, _ = inline(session, Upstream(shop), "peek_order", {"order_id": "O1"}, offload)
    assert outcome.verdict is Verdict.ROLLED_BACK and outcome.effect is EffectClass.READ
    assert [v.rule_id for v in outcome.violations] == ["read_only_wrote"]
    # the change set was asked for, the rest (checks, undo) ran off the loop, the transaction restarted
    assert offload.works == 3
    assert shop.order("O1") == ORDERS[0]


def test_a_clean_read_on_a_journal_runs_entirely_on_the_loop(shop: Shop) -> None:
    session, offload = guard(shop, Upstream(shop), journal=True), Offload()
    for _ in range(3):
        outcome, answer = inline(session, Upstream(shop), "get_order", {"order_id": "O2"}, offload)
        assert outcome.verdict is Verdict.ALLOWED and answer is not None
        assert json.loads(answer.text)["status"] == "shipped"
    assert offload.works == 0
    assert session.backend.changes().changes == [] and not session.kept


def test_a_retry_waits_off_the_loop_on_the_policy_clock(shop: Shop) -> None:
    session, offload = guard(shop, Upstream(shop), journal=True), Offload()
    outcome, _ = inline(session, Upstream(shop, flaky=1), "get_order", {"order_id": "O1"}, offload)
    assert outcome.verdict is Verdict.ALLOWED and outcome.retries == 1
    assert [(a.error_class, a.retried) for a in outcome.attempts] == [(ErrorClass.TRANSIENT.value, True)]
    clock = session.retry.clock
    assert isinstance(clock, VirtualClock) and clock.slept > 0
    assert offload.works == 2  # undoing the failed attempt, and the wait


def attempts(flaky: int) -> Iterator[Attempt[int]]:
    for i in range(20):
        yield Attempt(i, failure=TransientError("busy", tool="t") if i < flaky else None)


async def run_async(flaky: int) -> tuple[Attempt[int], list[Attempt[int]]]:
    tries = attempts(flaky)

    async def attempt() -> Attempt[int]:
        return next(tries)

    async def sleep(seconds: float) -> None:
        return None

    policy = RetryPolicy(clock=VirtualClock(), rng=random.Random(7))
    return await policy.run_async(attempt, effect=EffectClass.READ, sleep=sleep)


@pytest.mark.parametrize("flaky", [0, 3, 50])
def test_run_async_decides_as_run_does(flaky: int) -> None:
    tries = attempts(flaky)
    policy = RetryPolicy(clock=VirtualClock(), rng=random.Random(7))
    last, failed = policy.run(lambda: next(tries), effect=EffectClass.READ)
    last_async, failed_async = anyio.run(run_async, flaky)
    assert last_async.value == last.value
    assert [a.decision for a in failed_async] == [a.decision for a in failed]
    assert len(failed) == min(flaky, 9)  # the transient budget: 8 retries, then the budget stops it
