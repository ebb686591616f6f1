"""The steps of a guarded call (guard.steps), each run alone on a real retail environment (SQLite),
and the outcome factory (``ToolOutcome.of``): error class and retryability come from the failure's
class."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, executor_for, tool_infos
from guard import steps
from guard.checks import CheckContext, PythonCheck, RuleText
from guard.errors import ApprovalPending, ApprovalQueued, NotFound, TransientError
from guard.models import ChangeSet, EffectClass, PolicySource, ToolCall, ToolOutcome, Verdict
from guard.policy import EMPTY, PolicyPackModel, compile_pack
from guard.session import GuardSession, ToolResult

ORDERS = "external_retail_toolset_oms_models_orders"
PROCESSING = "ORD-10000002"
CANCEL = {"order_id": PROCESSING, "cancellation_reason": "customer_request"}
SOURCE = PolicySource(ref="test")
CANCELS = frozenset({"cancel_order"})


@pytest.fixture
def session(retail: Domain, sqlite_db: Database) -> Iterator[GuardSession]:
    with Environment(retail, sqlite_db) as env:
        guard = GuardSession(backend_for(env), executor_for(env), tool_infos(env), EMPTY, session_id="s")
        yield guard
        if not guard.closed:
            guard.rollback()


def status(session: GuardSession) -> str:
    rows = session.backend.query(f"SELECT status FROM {ORDERS} WHERE id = :id", {"id": PROCESSING})
    return str(rows[0]["status"])


def state(tool: str, arguments: Mapping[str, object] | None = None) -> steps.CallState:
    return steps.CallState(ToolCall(session_id="s", tool=tool, arguments=dict(arguments or {})))


def test_allow_refuses_unknown_and_reserved_names_in_one_way(session: GuardSession) -> None:
    for name in ("no_such_tool", steps.RESERVED_PREFIX + "x"):
        outcome = steps.allow(session, state(name))
        assert outcome is not None and outcome.verdict is Verdict.REFUSED
        assert outcome == steps.unknown_tool(outcome.call)
        assert outcome.error_class == "not_found" and outcome.violations[0].rule_id == "unknown_tool"
    known = state("cancel_order", CANCEL)
    assert steps.allow(session, known) is None
    assert known.info is not None and known.effect is not EffectClass.READ


def test_validate_refuses_arguments_that_do_not_fit_the_schema(session: GuardSession) -> None:
    bad = state("cancel_order", {"order_id": 12})
    assert steps.allow(session, bad) is None
    outcome = steps.validate(session, bad)
    assert outcome is not None and outcome.verdict is Verdict.REFUSED
    assert outcome.error_class == "invalid_arguments" and outcome.violations == []
    good = state("cancel_order", CANCEL)
    assert steps.allow(session, good) is None and steps.validate(session, good) is None


def test_before_call_refuses_on_a_broken_check(session: GuardSession) -> None:
    def never(ctx: CheckContext) -> str:
        return "refused by the test"

    check = PythonCheck("no_cancel", "before_call", never, RuleText("no cancelling"), CANCELS)
    session.checks.append(check)
    call = state("cancel_order", CANCEL)
    assert steps.allow(session, call) is None
    outcome = steps.before_call(session, call)
    assert outcome is not None and outcome.verdict is Verdict.REFUSED
    assert [v.rule_id for v in outcome.violations] == ["no_cancel"]
    assert outcome.hint is not None and not outcome.hint.retryable


def test_approval_holds_a_matched_call_only_after_its_rehearsal(session: GuardSession) -> None:
    model = PolicyPackModel.model_validate(
        {
            "name": "approve-cancels",
            "approvals": [{"id": "cancel_needs_ok", "source": SOURCE, "tools": ["cancel_order"]}],
        }
    )
    session.policy = compile_pack(model)
    call = state("cancel_order", CANCEL)
    assert steps.allow(session, call) is None
    assert steps.approval(session, call) is None  # transactional: rehearsed first
    assert call.rule is not None and call.rule.id == "cancel_needs_ok"
    before = status(session)
    assert steps.execute(session, call) is None and steps.after_call(session, call) is None
    assert status(session) != before  # the rehearsal ran ...
    outcome = steps.keep_or_undo(session, call)
    assert outcome.verdict is Verdict.HELD and outcome.changes  # ... its preview is kept ...
    assert status(session) == before  # ... its state is not
    assert outcome.hint is not None and not outcome.hint.retryable  # no gate: nothing queued


def test_execute_then_keep(session: GuardSession) -> None:
    call = state("cancel_order", CANCEL)
    for step in (steps.allow, steps.validate, steps.before_call, steps.approval, steps.execute):
        assert step(session, call) is None
    assert call.forwarded is not None and call.forwarded.changes
    assert steps.after_call(session, call) is None
    outcome = steps.keep_or_undo(session, call)
    assert outcome.verdict is Verdict.ALLOWED and outcome.changes == call.forwarded.changes
    assert status(session) == "cancelled"


def test_after_call_rolls_back_to_the_savepoint_on_a_broken_check(session: GuardSession) -> None:
    def never(ctx: CheckContext) -> str:
        return "refused by the test"

    session.checks.append(PythonCheck("after", "after_call", never, RuleText("no"), CANCELS))
    before = status(session)
    call = state("cancel_order", CANCEL)
    for step in (steps.allow, steps.validate, steps.before_call, steps.approval, steps.execute):
        assert step(session, call) is None
    outcome = steps.after_call(session, call)
    assert outcome is not None and outcome.verdict is Verdict.ROLLED_BACK
    assert outcome.error_class == "policy_violation" and status(session) == before


def test_the_pipeline_is_the_steps_in_order(session: GuardSession) -> None:
    assert session.pipeline == (
        steps.allow,
        steps.validate,
        steps.before_call,
        steps.approval,
        steps.execute,
        steps.after_call,
        steps.keep_or_undo,
    )


def test_the_outcome_factory_takes_class_and_retryability_from_the_failure() -> None:
    call = ToolCall(tool="t")
    transient = ToolOutcome.of(call, EffectClass.WRITE, Verdict.FAILED, TransientError("down", rule="r"))
    assert transient.error_class == "transient" and transient.hint is not None and transient.hint.retryable
    assert [v.rule_id for v in transient.violations] == ["r"]
    missing = ToolOutcome.of(call, EffectClass.READ, Verdict.REFUSED, NotFound("gone"))
    assert missing.hint is not None and not missing.hint.retryable and missing.violations == []
    queued = ToolOutcome.of(call, EffectClass.WRITE, Verdict.HELD, ApprovalQueued("wait", rule="a"))
    pending = ToolOutcome.of(call, EffectClass.WRITE, Verdict.HELD, ApprovalPending("wait", rule="a"))
    assert queued.error_class == pending.error_class == "approval_pending"
    assert queued.hint is not None and queued.hint.retryable
    assert pending.hint is not None and not pending.hint.retryable
    unknown = ToolOutcome.of(call, EffectClass.WRITE, Verdict.FAILED, TransientError("t/o"), applied=None)
    assert (
        unknown.outcome_unknown
        and unknown.hint is not None
        and "may have been applied" in unknown.hint.next_step
    )
    allowed = ToolOutcome.of(call, EffectClass.READ, Verdict.ALLOWED, result="ok", changes=ChangeSet())
    assert allowed.error_class is None and allowed.hint is None and allowed.result == "ok"


def test_run_hands_back_the_upstream_answer_of_a_forwarded_call(retail: Domain, sqlite_db: Database) -> None:
    with Environment(retail, sqlite_db) as env:
        inner = executor_for(env)
        answers: list[object] = []

        def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            done = inner(tool, arguments)
            answers.append(object())
            return ToolResult(done.text, done.is_error, raw=answers[-1])

        guard = GuardSession(backend_for(env), execute, tool_infos(env), EMPTY, session_id="s")
        outcome, answer = guard.run("cancel_order", CANCEL)
        assert outcome.verdict is Verdict.ALLOWED and answer is not None and answer.raw is answers[-1]
        refused, none = guard.run("no_such_tool", {})
        assert refused.verdict is Verdict.REFUSED and none is None and len(answers) == 1
        guard.rollback()
