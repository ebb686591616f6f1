"""Retries: the decision table (exhaustively and as properties), the backoff loop on a virtual clock,
and a guarded session that retries exactly what is safe on real SQLite/PostgreSQL and on a journal."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.envs import Environment
from benchmark.guarded import backend_for, executor_for, tool_infos
from guard.effects import ToolInfo
from guard.errors import (
    ConnectFailed,
    InvalidArguments,
    NotFound,
    RateLimited,
    ServerError,
    ToolFailure,
    TransientError,
    UpstreamTimeout,
)
from guard.journal import JournalBackend
from guard.metrics import FAILURES, OUTCOMES, RETRIES, ErrorCounters
from guard.models import AttemptRecord, EffectClass, Verdict
from guard.policy import PolicyPack, PolicyPackModel, compile_pack
from guard.retry import Attempt, Reason, RetryDecision, RetryPolicy, VirtualClock, decide, safe_to_resend
from guard.session import GuardSession, ToolResult

FAILURES_BY_KIND: list[type[ToolFailure]] = [
    UpstreamTimeout,
    ConnectFailed,
    ServerError,
    RateLimited,
    NotFound,
    InvalidArguments,
]
EFFECTS = list(EffectClass)


# -- the decision table ---------------------------------------------------------------------------
def expected_reason(
    failure: type[ToolFailure], effect: EffectClass, idempotent: bool, rolled_back: bool, left: int
) -> Reason:
    """The table of guard.retry's docstring, written out independently."""
    if failure not in (UpstreamTimeout, ConnectFailed, ServerError, RateLimited):
        return Reason.NOT_RETRYABLE
    proven_not_done = failure in (ConnectFailed, RateLimited)
    safe = proven_not_done or effect is EffectClass.READ or idempotent
    safe = safe or (rolled_back and effect is EffectClass.WRITE)
    if not safe:
        return Reason.OUTCOME_UNKNOWN
    return Reason.BUDGET if left <= 0 else Reason.RETRY


def fresh_decision(
    failure: ToolFailure, effect: EffectClass, *, idempotent: bool = False, rolled_back: bool, left: int = 3
) -> RetryDecision:
    """``decide`` for a call that failed at once (no time spent, a 60 s deadline, 0.5 s backoff)."""
    return decide(
        failure,
        effect=effect,
        idempotent=idempotent,
        rolled_back=rolled_back,
        retries_left=left,
        elapsed=0.0,
        deadline=60.0,
        backoff=0.5,
    )


@pytest.mark.parametrize(
    ("failure", "effect", "idempotent", "rolled_back", "left"),
    list(itertools.product(FAILURES_BY_KIND, EFFECTS, [False, True], [False, True], [0, 1])),
)
def test_the_decision_table(
    failure: type[ToolFailure], effect: EffectClass, idempotent: bool, rolled_back: bool, left: int
) -> None:
    decision = fresh_decision(failure("x"), effect, idempotent=idempotent, rolled_back=rolled_back, left=left)
    assert decision.reason is expected_reason(failure, effect, idempotent, rolled_back, left)
    assert decision.retry is (decision.reason is Reason.RETRY)


def test_the_cases_that_matter_most() -> None:
    def retried(
        failure: ToolFailure, effect: EffectClass, *, idempotent: bool = False, rolled_back: bool
    ) -> bool:
        return fresh_decision(failure, effect, idempotent=idempotent, rolled_back=rolled_back).retry

    timeout = UpstreamTimeout("timed out after sending")
    assert retried(timeout, EffectClass.READ, rolled_back=False)
    assert retried(timeout, EffectClass.WRITE, rolled_back=True), "the savepoint undid the unknown write"
    assert not retried(timeout, EffectClass.WRITE, rolled_back=False), "unknown outcome, nothing undone"
    assert not retried(timeout, EffectClass.IRREVERSIBLE, rolled_back=True), (
        "rows undone is not effect undone"
    )
    assert retried(timeout, EffectClass.IRREVERSIBLE, idempotent=True, rolled_back=False)
    assert retried(ConnectFailed("refused"), EffectClass.IRREVERSIBLE, rolled_back=False), "never sent"
    assert not retried(NotFound("no such order"), EffectClass.READ, rolled_back=True)


@settings(max_examples=500, deadline=None)
@given(
    failure=st.sampled_from([*FAILURES_BY_KIND, TransientError]),
    effect=st.sampled_from(EFFECTS),
    idempotent=st.booleans(),
    rolled_back=st.booleans(),
    left=st.integers(min_value=-2, max_value=10),
    elapsed=st.floats(min_value=0, max_value=200, allow_nan=False),
    deadline=st.floats(min_value=0, max_value=200, allow_nan=False),
    backoff=st.floats(min_value=0, max_value=20, allow_nan=False),
    retry_after=st.one_of(st.none(), st.floats(min_value=0, max_value=120, allow_nan=False)),
)
def test_a_retry_is_always_recoverable_safe_within_budget_and_deadline(
    failure: type[ToolFailure],
    effect: EffectClass,
    idempotent: bool,
    rolled_back: bool,
    left: int,
    elapsed: float,
    deadline: float,
    backoff: float,
    retry_after: float | None,
) -> None:
    instance = failure("x", retry_after=retry_after)
    decision = decide(
        instance,
        effect=effect,
        idempotent=idempotent,
        rolled_back=rolled_back,
        retries_left=left,
        elapsed=elapsed,
        deadline=deadline,
        backoff=backoff,
    )
    if decision.retry:
        assert instance.retryable and left > 0
        assert safe_to_resend(instance, effect, idempotent, rolled_back)
        assert decision.delay >= backoff and decision.delay >= (retry_after or 0.0)
        assert elapsed + decision.delay <= deadline
    unknown = not instance.safe_to_retry and effect is not EffectClass.READ and not idempotent
    if unknown and not (rolled_back and effect is EffectClass.WRITE):
        assert not decision.retry, "a write whose outcome is unknown is never blindly resent"
    if not instance.retryable:
        assert decision.reason is Reason.NOT_RETRYABLE


# -- the loop ------------------------------------------------------------------------------------
def policy(**kwargs: Any) -> tuple[RetryPolicy, VirtualClock]:
    clock = VirtualClock()
    return RetryPolicy(clock=clock, rng=random.Random(7), **kwargs), clock


def failing(*failures: ToolFailure | None) -> Iterator[Attempt[int]]:
    for i, failure in enumerate(failures):
        yield Attempt(i, failure=failure)


def test_backoff_is_exponential_with_equal_jitter() -> None:
    retry, clock = policy(base_delay=0.2, max_delay=10.0, budgets={TransientError.error_class: 6})
    attempts = failing(*(UpstreamTimeout("t") for _ in range(6)), None)
    last, failed = retry.run(lambda: next(attempts), effect=EffectClass.READ)
    assert last.value == 6 and last.failure is None
    delays = [a.decision.delay for a in failed if a.decision]
    for n, delay in enumerate(delays):
        envelope = min(0.2 * 2**n, 10.0)
        assert envelope / 2 <= delay <= envelope
    assert clock.slept == pytest.approx(sum(delays))


def test_retry_after_is_honoured() -> None:
    retry, clock = policy()
    attempts = failing(RateLimited("HTTP 429", retry_after=7.0), None)
    last, failed = retry.run(lambda: next(attempts), effect=EffectClass.WRITE)
    assert last.failure is None and failed[0].decision is not None
    assert failed[0].decision.delay == 7.0 and clock.now() == 7.0


def test_budgets_are_per_class_and_the_pack_can_lower_them() -> None:
    retry, _ = policy(budgets={TransientError.error_class: 2, RateLimited.error_class: 1})
    attempts = failing(
        UpstreamTimeout("a"), RateLimited("b"), UpstreamTimeout("c"), UpstreamTimeout("d"), None
    )
    last, failed = retry.run(lambda: next(attempts), effect=EffectClass.READ)
    assert last.value == 3 and [a.decision.reason for a in failed if a.decision] == [
        Reason.RETRY,
        Reason.RETRY,
        Reason.RETRY,
        Reason.BUDGET,
    ]
    attempts = failing(UpstreamTimeout("a"), UpstreamTimeout("b"), None)
    last, failed = retry.run(lambda: next(attempts), effect=EffectClass.READ, max_attempts=2)
    assert last.value == 1 and failed[-1].decision is not None and failed[-1].decision.reason is Reason.BUDGET


def test_the_deadline_stops_retries() -> None:
    retry, clock = policy(deadline=5.0)
    attempts = failing(RateLimited("a", retry_after=3.0), RateLimited("b", retry_after=3.0), None)
    last, failed = retry.run(lambda: next(attempts), effect=EffectClass.READ)
    assert last.value == 1 and failed[-1].decision is not None
    assert failed[-1].decision.reason is Reason.DEADLINE and clock.now() == 3.0


def test_the_guards_own_exceptions_are_not_retried() -> None:
    retry, _ = policy()
    calls = []

    def broken() -> Attempt[int]:
        calls.append(1)
        raise RuntimeError("bug in the guard")

    with pytest.raises(RuntimeError, match="bug in the guard"):
        retry.run(broken, effect=EffectClass.READ)
    assert calls == [1]


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=5, max_delay=1)
    with pytest.raises(ValueError, match="budgets"):
        RetryPolicy(budgets={TransientError.error_class: -1})


# -- a guarded session ---------------------------------------------------------------------------
ORDER = "ORD-10000002"
SPEED = {"order_id": ORDER, "new_shipping_speed": "next_day"}


class Flaky:
    """The real environment behind an upstream that fails the first ``n`` calls of chosen tools."""

    def __init__(self, env: Environment, failures: Mapping[str, list[Exception]], *, ran: bool) -> None:
        self.run = executor_for(env)
        self.failures = {tool: list(excs) for tool, excs in failures.items()}
        self.ran = ran
        self.calls: list[str] = []

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(tool)
        pending = self.failures.get(tool)
        if pending:
            exc = pending.pop(0)
            if self.ran:
                self.run(tool, arguments)  # the upstream did the work; the answer is lost
            raise exc
        result: ToolResult = self.run(tool, arguments)
        return result


def session_on(
    env: Environment, upstream: Flaky, pack: PolicyPack | None = None
) -> tuple[GuardSession, VirtualClock, ErrorCounters]:
    clock = VirtualClock()
    counters = ErrorCounters()
    kwargs: dict[str, Any] = {"retry": RetryPolicy(clock=clock, rng=random.Random(1)), "observer": counters}
    if pack is not None:
        return GuardSession(backend_for(env), upstream, tool_infos(env), pack, **kwargs), clock, counters
    return GuardSession(backend_for(env), upstream, tool_infos(env), **kwargs), clock, counters


def speed_of(session: GuardSession) -> str:
    rows = session.backend.query(
        "SELECT shipping_speed FROM external_retail_toolset_oms_models_orders WHERE id = :id", {"id": ORDER}
    )
    return str(rows[0]["shipping_speed"])


def what_happened(attempt: AttemptRecord) -> tuple[str, bool, bool, str]:
    """An attempt's error class, whether its writes were rolled back, whether it was retried, and why."""
    return attempt.error_class, attempt.rolled_back, attempt.retried, attempt.reason


def test_a_write_that_timed_out_after_running_is_rolled_back_and_applied_once(env: Environment) -> None:
    upstream = Flaky(env, {"update_shipping_speed": [httpx2.ReadTimeout("timed out")]}, ran=True)
    session, clock, counters = session_on(env, upstream)
    outcome = session.call("update_shipping_speed", SPEED)
    assert (outcome.verdict, outcome.retries, outcome.error_class) == (Verdict.ALLOWED, 1, None)
    assert upstream.calls == ["update_shipping_speed", "update_shipping_speed"]
    first = outcome.attempts[0]
    assert what_happened(first) == ("transient", True, True, "retry")
    assert [c.key for c in first.changes] == [ORDER], "the lost attempt had written, then was rolled back"
    assert session.backend.changes().changes == outcome.changes.changes, "exactly one application survives"
    assert clock.now() == first.delay_s > 0
    assert counters.value(FAILURES, error_class="transient", source="exception") == 1
    assert counters.value(RETRIES, reason="retry") == 1
    assert counters.value(OUTCOMES, verdict="allowed", error_class="none") == 1
    committed = session.commit()
    assert [(c.key, c.op) for c in committed.changes] == [(ORDER, "update")]


def test_a_read_is_retried_through_refusals_and_rate_limits(env: Environment) -> None:
    request = httpx2.Request("POST", "http://upstream.invalid/mcp")
    limited = httpx2.HTTPStatusError(
        "429", request=request, response=httpx2.Response(429, headers={"Retry-After": "4"}, request=request)
    )
    upstream = Flaky(env, {"get_order": [httpx2.ConnectError("refused"), limited]}, ran=False)
    session, clock, _ = session_on(env, upstream)
    outcome = session.call("get_order", {"order_id": ORDER})
    assert (outcome.verdict, outcome.retries) == (Verdict.ALLOWED, 2)
    assert [a.error_class for a in outcome.attempts] == ["transient", "rate_limited"]
    assert outcome.attempts[1].delay_s == 4.0 and clock.now() >= 4.0
    session.rollback()


IRREVERSIBLE_SPEED = {"name": "p", "tools": {"effects": {"update_shipping_speed": "irreversible"}}}


def irreversible_answer_lost(env: Environment, *, ran: bool) -> tuple[GuardSession, Flaky, ErrorCounters]:
    """A session whose pack makes ``update_shipping_speed`` irreversible, on an upstream that loses the
    first answer of that call (after running it when ``ran``)."""
    pack = compile_pack(PolicyPackModel.model_validate(IRREVERSIBLE_SPEED))
    upstream = Flaky(env, {"update_shipping_speed": [httpx2.RemoteProtocolError("disconnected")]}, ran=ran)
    session, _, counters = session_on(env, upstream, pack)
    return session, upstream, counters


def test_an_irreversible_call_applied_with_its_answer_lost_is_kept_not_resent(env: Environment) -> None:
    """Undoing its rows would not undo what an irreversible call did; the change set proves it ran."""
    session, upstream, counters = irreversible_answer_lost(env, ran=True)
    before = speed_of(session)
    outcome = session.call("update_shipping_speed", SPEED)
    assert (outcome.verdict, outcome.error_class, outcome.retries) == (Verdict.ALLOWED, None, 0)
    assert upstream.calls == ["update_shipping_speed"], "never sent twice"
    assert speed_of(session) != before, "its shadow rows are kept"
    lost = outcome.attempts[0]
    assert what_happened(lost) == ("transient", False, False, "outcome_unknown")
    assert outcome.result is not None and "was applied, but the upstream's answer was lost" in outcome.result
    assert "do not send the call again" in outcome.result
    assert counters.value(FAILURES, error_class="transient", source="exception") == 1
    committed = session.commit()
    assert [(c.key, c.op) for c in committed.changes] == [(ORDER, "update")]


def test_an_irreversible_call_with_an_unknown_outcome_is_not_resent(env: Environment) -> None:
    """Nothing in the change set: whether it did anything outside the database is unknown."""
    session, upstream, _ = irreversible_answer_lost(env, ran=False)
    before = speed_of(session)
    outcome = session.call("update_shipping_speed", SPEED)
    assert (outcome.verdict, outcome.error_class, outcome.retries) == (Verdict.FAILED, "transient", 0)
    assert outcome.attempts[0].reason == "outcome_unknown"
    assert upstream.calls == ["update_shipping_speed"]
    assert speed_of(session) == before
    assert outcome.hint is not None and "guard retried 0 time(s)" in outcome.hint.next_step
    session.rollback()


def test_the_pack_can_forbid_retries_of_a_tool(env: Environment) -> None:
    pack = compile_pack(
        PolicyPackModel.model_validate({"name": "p", "retry": [{"tool": "get_order", "max_attempts": 1}]})
    )
    upstream = Flaky(env, {"get_order": [httpx2.ConnectError("refused")]}, ran=False)
    session, _, _ = session_on(env, upstream, pack)
    outcome = session.call("get_order", {"order_id": ORDER})
    assert (outcome.verdict, outcome.retries, outcome.attempts[0].reason) == (Verdict.FAILED, 0, "budget")
    assert outcome.hint is not None and outcome.hint.retryable
    session.rollback()


def test_a_refusal_is_not_retried_and_gets_a_hint(env: Environment) -> None:
    upstream = Flaky(env, {}, ran=False)
    session, clock, _ = session_on(env, upstream)
    outcome = session.call("get_order", {"order_id": "ORD-NOPE"})
    assert (outcome.verdict, outcome.error_class, outcome.retries) == (Verdict.FAILED, "not_found", 0)
    assert outcome.result is not None and outcome.result.startswith('{"error": ')
    assert outcome.hint is not None and outcome.hint.message == "Order not found: ORD-NOPE"
    assert upstream.calls == ["get_order"] and clock.now() == 0.0
    session.rollback()


def test_retries_give_up_after_the_budget_with_nothing_kept(env: Environment) -> None:
    upstream = Flaky(env, {"update_shipping_speed": [httpx2.ReadTimeout("t")] * 12}, ran=True)
    session, _, _ = session_on(env, upstream)
    outcome = session.call("update_shipping_speed", SPEED)
    assert (outcome.verdict, outcome.retries, len(outcome.attempts)) == (Verdict.FAILED, 8, 9)
    assert outcome.attempts[-1].reason == "budget"
    assert session.backend.changes().changes == []
    assert outcome.hint is not None and "Nothing of the failed attempts was kept" in outcome.hint.next_step
    session.rollback()


# -- an upstream that cannot transact ------------------------------------------------------------
class Ledger:
    """An in-memory upstream that applies every call at once (no transactions)."""

    def __init__(self, lose_answers: int) -> None:
        self.points = 0
        self.calls: list[str] = []
        self.lose_answers = lose_answers

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(tool)
        if tool == "add_points":
            self.points += int(arguments["amount"])
        elif tool == "set_points":
            self.points = int(arguments["amount"])
        if self.lose_answers:
            self.lose_answers -= 1
            raise TimeoutError("timed out")
        return ToolResult(f"points={self.points}")


AMOUNT_SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}
LEDGER_TOOLS = {
    "get_points": ToolInfo(name="get_points", annotations={"readOnlyHint": True}),
    "add_points": ToolInfo(
        name="add_points", input_schema=AMOUNT_SCHEMA, annotations={"destructiveHint": False}
    ),
    "set_points": ToolInfo(
        name="set_points",
        input_schema=AMOUNT_SCHEMA,
        annotations={"destructiveHint": False, "idempotentHint": True},
    ),
}


def journal_session(ledger: Ledger, pack: PolicyPack | None = None) -> GuardSession:
    pack = pack or compile_pack(PolicyPackModel(name="ledger"))
    journal = JournalBackend(ledger, LEDGER_TOOLS, pack)
    retry = RetryPolicy(clock=VirtualClock(), rng=random.Random(3))
    return GuardSession(journal, journal.execute, LEDGER_TOOLS, pack, retry=retry)


def test_on_a_journal_a_write_with_an_unknown_outcome_is_never_resent() -> None:
    ledger = Ledger(lose_answers=1)
    session = journal_session(ledger)
    outcome = session.call("add_points", {"amount": 5})
    assert (outcome.verdict, outcome.error_class, outcome.retries) == (Verdict.FAILED, "transient", 0)
    assert outcome.attempts[0].reason == "outcome_unknown" and not outcome.attempts[0].rolled_back
    assert ledger.calls == ["add_points"] and ledger.points == 5, "applied once, and only once"
    assert outcome.hint is not None and "outcome is unknown" in outcome.hint.next_step
    read = session.call("get_points", {})
    assert (read.verdict, ledger.calls) == (Verdict.ALLOWED, ["add_points", "get_points"])


def test_on_a_journal_reads_and_idempotent_writes_are_resent_unless_the_pack_says_otherwise() -> None:
    ledger = Ledger(lose_answers=1)
    session = journal_session(ledger)
    assert session.call("get_points", {}).retries == 1
    ledger = Ledger(lose_answers=1)
    outcome = journal_session(ledger).call("set_points", {"amount": 5})
    assert (outcome.verdict, outcome.retries, ledger.calls) == (
        Verdict.ALLOWED,
        1,
        ["set_points", "set_points"],
    )
    assert ledger.points == 5
    pack = compile_pack(
        PolicyPackModel.model_validate(
            {"name": "p", "retry": [{"tool": "set_points", "max_attempts": 3, "idempotent": False}]}
        )
    )
    ledger = Ledger(lose_answers=1)
    outcome = journal_session(ledger, pack).call("set_points", {"amount": 5})
    assert (outcome.verdict, outcome.attempts[0].reason, ledger.calls) == (
        Verdict.FAILED,
        "outcome_unknown",
        ["set_points"],
    )
