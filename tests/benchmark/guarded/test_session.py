"""GuardSession on a real retail environment (SQLite and PostgreSQL): what is kept, what is undone.

The rules here are built directly (SqlCheck, PythonCheck) or through ``compile_pack``; each one
rejects a kind of write the retail policy forbids. "Nothing changed" is always checked with the
benchmark's own state hash, taken before the call and after the guard's verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from benchmark.envs import Domain, Environment
from benchmark.guarded import backend_for, executor_for, tool_infos
from guard.checks import Check, CheckContext, PythonCheck, RuleText, SqlCheck
from guard.effects import ToolInfo
from guard.models import EffectClass, PolicySource, Verdict
from guard.policy import EMPTY, PolicyPack, PolicyPackModel, compile_pack
from guard.retry import RetryPolicy, VirtualClock
from guard.session import GuardSession, SessionClosedError, ToolResult
from tests.support.envs import RecordingExecutor

ORDERS = "external_retail_toolset_oms_models_orders"
TICKETS = "zendesk_tickets"
SHIPPED, PROCESSING = "ORD-10000001", "ORD-10000002"
SOURCE = PolicySource(ref="sandbox_external_retail.policy_kb_sources.md#8.1", quote="NOT eligible")
CANCEL = {"order_id": SHIPPED, "cancellation_reason": "customer_request"}
NEW_TICKET = {
    "table": "tickets",
    "item": {
        "subject": "Delayed order",
        "description": "Customer reports a delay.",
        "status": "open",
        "type": "incident",
        "priority": "normal",
        "requester_id": "10003",
        "assignee_id": "2",
    },
}


def guard(
    env: Environment,
    *checks: Check,
    policy: PolicyPack = EMPTY,
    tools: dict[str, ToolInfo] | None = None,
) -> tuple[GuardSession, RecordingExecutor]:
    recorder = RecordingExecutor(env)
    session = GuardSession(
        backend_for(env), recorder, tools or tool_infos(env), policy, extra_checks=checks, session_id="s1"
    )
    return session, recorder


def order_status(session: GuardSession, order_id: str) -> str:
    rows = session.backend.query(f"SELECT status FROM {ORDERS} WHERE id = :id", {"id": order_id})
    return str(rows[0]["status"])


def not_cancellable(ctx: CheckContext) -> Iterator[dict[str, Any]]:
    """Policy 8.1: only pending_payment and processing orders may be cancelled."""
    for change in ctx.changes:
        if change.table != ORDERS or change.op != "update" or not change.before or not change.after:
            continue
        if change.after["status"] == "cancelled" and change.before["status"] not in (
            "pending_payment",
            "processing",
        ):
            yield {"id": change.key, "status": change.before["status"]}


CANCEL_AFTER = PythonCheck(
    "cancel_eligibility",
    "after_call",
    not_cancellable,
    RuleText("Only pending_payment or processing orders can be cancelled.", "Tell the customer.", SOURCE),
    frozenset({"cancel_order"}),
)
CANCEL_BEFORE = SqlCheck.compile(
    "cancel_eligibility_before",
    "before_call",
    f"SELECT id, status FROM {ORDERS} "
    "WHERE id = :order_id AND status NOT IN ('pending_payment', 'processing')",
    RuleText("Only pending_payment or processing orders can be cancelled.", source=SOURCE),
    tools=["cancel_order"],
)
NO_NEXT_DAY = SqlCheck.compile(
    "no_next_day",
    "after_call",
    f"SELECT id, shipping_speed FROM {ORDERS} WHERE id = :order_id AND shipping_speed = 'next_day'",
    RuleText("Next-day shipping is not offered."),
    tools=["update_shipping_speed"],
)


# -- after_call ------------------------------------------------------------------------------------
def test_after_call_violation_restores_the_pre_call_state(env: Environment) -> None:
    session, recorder = guard(env, CANCEL_AFTER)
    before = env.state_hash()
    outcome = session.call("cancel_order", CANCEL)
    assert outcome.verdict is Verdict.ROLLED_BACK
    assert recorder.calls == ["cancel_order"]
    assert [v.rule_id for v in outcome.violations] == ["cancel_eligibility"]
    assert outcome.violations[0].rows == [{"id": SHIPPED, "status": "shipped"}]
    assert outcome.violations[0].source == SOURCE
    assert [(c.table, c.key, c.op) for c in outcome.changes] == [(ORDERS, SHIPPED, "update")]
    assert env.state_hash() == before
    assert order_status(session, SHIPPED) == "shipped"
    assert session.pending_changes().changes == []

    allowed = session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    assert allowed.verdict is Verdict.ALLOWED
    assert order_status(session, PROCESSING) == "cancelled"
    assert session.commit().committed
    assert env.state_hash() != before


def test_sql_after_call_check_binds_the_call_arguments(env: Environment) -> None:
    session, _ = guard(env, NO_NEXT_DAY)
    before = env.state_hash()
    bad = session.call("update_shipping_speed", {"order_id": PROCESSING, "new_shipping_speed": "next_day"})
    assert bad.verdict is Verdict.ROLLED_BACK
    assert bad.violations[0].rows == [{"id": PROCESSING, "shipping_speed": "next_day"}]
    assert env.state_hash() == before
    ok = session.call("update_shipping_speed", {"order_id": PROCESSING, "new_shipping_speed": "standard"})
    assert ok.verdict is Verdict.ALLOWED and ok.violations == []
    assert env.state_hash() != before


# -- before_call -----------------------------------------------------------------------------------
def test_before_call_refusal_runs_nothing(env: Environment) -> None:
    session, recorder = guard(env, CANCEL_BEFORE)
    before = env.state_hash()
    outcome = session.call("cancel_order", CANCEL)
    assert outcome.verdict is Verdict.REFUSED
    assert recorder.calls == []
    assert outcome.changes.changes == []
    assert outcome.violations[0].rows == [{"id": SHIPPED, "status": "shipped"}]
    assert env.state_hash() == before
    assert session.call("cancel_order", {**CANCEL, "order_id": PROCESSING}).verdict is Verdict.ALLOWED
    assert recorder.calls == ["cancel_order"]


def test_a_compiled_pack_refuses_and_rolls_back(env: Environment) -> None:
    schema = {name: list(spec.field_names) for name, spec in env.domain.tables.items()}
    model = PolicyPackModel.model_validate(
        {
            "name": "retail-test",
            "checks": [
                {
                    "id": "cancel_eligibility",
                    "source": SOURCE.model_dump(),
                    "phase": "before_call",
                    "tools": ["cancel_order"],
                    "sql": CANCEL_BEFORE.sql,
                    "message": "Only pending_payment or processing orders can be cancelled.",
                },
                {
                    "id": "no_next_day",
                    "source": {"ref": "test"},
                    "phase": "after_call",
                    "tools": ["update_shipping_speed"],
                    "sql": NO_NEXT_DAY.sql,
                    "message": "Next-day shipping is not offered.",
                },
            ],
        }
    )
    pack = compile_pack(model, schema=schema, tools=list(env.tools))
    session, recorder = guard(env, policy=pack)
    before = env.state_hash()
    assert session.call("cancel_order", CANCEL).verdict is Verdict.REFUSED
    speed = {"order_id": PROCESSING, "new_shipping_speed": "next_day"}
    assert session.call("update_shipping_speed", speed).verdict is Verdict.ROLLED_BACK
    assert recorder.calls == ["update_shipping_speed"]
    assert env.state_hash() == before


# -- effect classes --------------------------------------------------------------------------------
def test_a_read_classified_tool_that_writes_is_rolled_back(env: Environment) -> None:
    pack = compile_pack(
        PolicyPackModel.model_validate(
            {"name": "mislabelled", "tools": {"effects": {"update_shipping_speed": "read"}}}
        )
    )
    session, _ = guard(env, policy=pack)
    before = env.state_hash()
    outcome = session.call(
        "update_shipping_speed", {"order_id": PROCESSING, "new_shipping_speed": "standard"}
    )
    assert outcome.effect is EffectClass.READ
    assert outcome.verdict is Verdict.ROLLED_BACK
    assert [v.rule_id for v in outcome.violations] == ["read_only_wrote"]
    assert env.state_hash() == before


def test_a_tool_annotated_read_only_that_writes_is_rolled_back(env: Environment) -> None:
    tools = tool_infos(env)
    tools["cancel_order"] = ToolInfo("cancel_order", annotations={"readOnlyHint": True})
    session, _ = guard(env, tools=tools)
    before = env.state_hash()
    outcome = session.call("cancel_order", CANCEL)
    assert (outcome.effect, outcome.verdict) == (EffectClass.READ, Verdict.ROLLED_BACK)
    assert env.state_hash() == before
    read = session.call("get_order", {"order_id": SHIPPED})
    assert (read.effect, read.verdict, read.changes.changes) == (EffectClass.READ, Verdict.ALLOWED, [])


# -- failures --------------------------------------------------------------------------------------
def test_a_failed_call_keeps_nothing(env: Environment) -> None:
    session, _ = guard(env)
    before = env.state_hash()
    outcome = session.call(
        "cancel_order", {"order_id": "ORD-NOPE", "cancellation_reason": "customer_request"}
    )
    assert outcome.verdict is Verdict.FAILED
    assert outcome.result is not None and outcome.result.startswith('{"error": ')
    assert env.state_hash() == before


def test_a_call_that_writes_and_then_fails_keeps_nothing(env: Environment) -> None:
    """An upstream that applied part of a call and then reported an error: the part is undone."""
    run = executor_for(env)

    def partial(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        run("cancel_order", {**CANCEL, "order_id": PROCESSING})
        return ToolResult(text="upstream timed out after the first step", is_error=True)

    session = GuardSession(
        backend_for(env), partial, tool_infos(env), retry=RetryPolicy(clock=VirtualClock())
    )
    before = env.state_hash()
    outcome = session.call("cancel_order", CANCEL)
    assert outcome.verdict is Verdict.FAILED
    assert [(c.key, c.op) for c in outcome.changes] == [(PROCESSING, "update")]
    assert env.state_hash() == before
    assert session.commit().changes.changes == []


# -- at_commit -------------------------------------------------------------------------------------
def open_tickets_created(ctx: CheckContext) -> Iterator[str]:
    """Ticket workflow: a ticket the session created must not be left open at the end."""
    for change in ctx.changes:
        if (
            change.table == TICKETS
            and change.op == "insert"
            and change.after
            and change.after["status"] == "open"
        ):
            yield f"ticket {change.key} is still open"


def test_at_commit_refuses_then_the_session_fixes_and_commits(retail: Domain, env: Environment) -> None:
    check = PythonCheck("ticket_left_open", "at_commit", open_tickets_created, RuleText("unused"))
    session, _ = guard(env, check)
    created = session.call("zendesk_create_item", NEW_TICKET)
    assert created.verdict is Verdict.ALLOWED
    refused = session.commit()
    assert not refused.committed and not session.closed
    assert [v.message for v in refused.violations] == ["ticket 6 is still open"]
    assert [(c.table, c.op) for c in refused.changes] == [(TICKETS, "insert")]

    solve = {"table": "tickets", "id": "6", "item": {"status": "solved"}}
    assert session.call("zendesk_update_item", solve).verdict is Verdict.ALLOWED
    done = session.commit()
    assert done.committed and done.violations == []
    assert [(c.table, c.op, c.after and c.after["status"]) for c in done.changes] == [
        (TICKETS, "insert", "solved")
    ]
    with pytest.raises(SessionClosedError):
        session.call("get_order", {"order_id": SHIPPED})
    with pytest.raises(SessionClosedError):
        session.commit()

    with Environment(retail, env.database) as straight:
        straight.call_tool("zendesk_create_item", NEW_TICKET)
        straight.call_tool("zendesk_update_item", solve)
        assert env.state_hash() == straight.state_hash()


def test_a_sql_at_commit_check_sees_the_final_shadow_state(env: Environment) -> None:
    check = SqlCheck.compile(
        "no_cancelled_orders",
        "at_commit",
        f"SELECT id FROM {ORDERS} WHERE status = 'cancelled'",
        RuleText("No order may end cancelled in this workflow."),
    )
    session, _ = guard(env, check)
    before = env.state_hash()
    session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    refused = session.commit()
    assert not refused.committed
    assert refused.violations[0].rows == [{"id": PROCESSING}]
    session.rollback()
    assert env.state_hash() == before
    with pytest.raises(SessionClosedError):
        session.rollback()


# -- fail closed -----------------------------------------------------------------------------------
def broken(ctx: CheckContext) -> list[str]:
    raise RuntimeError("predicate bug")


@pytest.mark.parametrize("phase", ["before_call", "after_call"])
def test_a_check_that_raises_refuses_the_call_and_is_logged(
    env: Environment, phase: Any, caplog: pytest.LogCaptureFixture
) -> None:
    check = PythonCheck("broken", phase, broken, RuleText("unused"))
    session, recorder = guard(env, check)
    before = env.state_hash()
    with caplog.at_level(logging.ERROR, logger="guard.checks"):
        outcome = session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    expected = Verdict.REFUSED if phase == "before_call" else Verdict.ROLLED_BACK
    assert outcome.verdict is expected
    assert recorder.calls == ([] if phase == "before_call" else ["cancel_order"])
    (violation,) = outcome.violations
    assert violation.rule_id == "broken"
    assert "could not be evaluated (RuntimeError: predicate bug)" in violation.message
    assert env.state_hash() == before
    (record,) = [r for r in caplog.records if r.name == "guard.checks"]
    assert record.getMessage() == "check broken failed"
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError


def test_a_sql_check_that_fails_in_the_database_is_a_violation_and_the_session_goes_on(
    env: Environment, caplog: pytest.LogCaptureFixture
) -> None:
    """The failed statement is contained in its own savepoint (PostgreSQL aborts the transaction)."""
    check = SqlCheck.compile(
        "typo",
        "after_call",
        f"SELECT id FROM {ORDERS} WHERE no_such_column = 1",
        RuleText("x"),
        tools=["cancel_order"],
    )
    session, _ = guard(env, check)
    before = env.state_hash()
    with caplog.at_level(logging.ERROR, logger="guard.checks"):
        outcome = session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    assert outcome.verdict is Verdict.ROLLED_BACK
    assert "could not be evaluated" in outcome.violations[0].message
    assert any(r.getMessage() == "check typo failed" for r in caplog.records)
    assert env.state_hash() == before
    assert session.call("get_order", {"order_id": PROCESSING}).verdict is Verdict.ALLOWED
    session.checks.clear()
    assert session.call("cancel_order", {**CANCEL, "order_id": PROCESSING}).verdict is Verdict.ALLOWED
    assert session.commit().committed


def test_an_at_commit_check_that_raises_refuses_the_commit(
    env: Environment, caplog: pytest.LogCaptureFixture
) -> None:
    session, _ = guard(env, PythonCheck("broken", "at_commit", broken, RuleText("unused")))
    session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    with caplog.at_level(logging.ERROR, logger="guard.checks"):
        outcome = session.commit()
    assert not outcome.committed
    assert outcome.violations[0].rule_id == "broken"
    assert any(r.getMessage() == "check broken failed" for r in caplog.records)


# -- refused tools ---------------------------------------------------------------------------------
def test_unknown_reserved_and_not_allowed_tools_are_refused(env: Environment) -> None:
    tools = tool_infos(env)
    tools["__reserved__admin"] = ToolInfo("__reserved__admin")
    pack = compile_pack(
        PolicyPackModel.model_validate({"name": "narrow", "tools": {"allow": ["get_order", "cancel_order"]}})
    )
    session, recorder = guard(env, policy=pack, tools=tools)
    before = env.state_hash()
    for tool, rule in [
        ("no_such_tool", "unknown_tool"),
        ("__reserved__admin", "unknown_tool"),
        ("__reserved__", "unknown_tool"),
        ("zendesk_delete_item", "tool_not_allowed"),
    ]:
        outcome = session.call(tool, {"table": "tickets", "id": "1"})
        assert outcome.verdict is Verdict.REFUSED, tool
        assert [v.rule_id for v in outcome.violations] == [rule]
        assert outcome.violations[0].hint
    assert recorder.calls == []
    assert env.state_hash() == before
    assert session.call("get_order", {"order_id": SHIPPED}).verdict is Verdict.ALLOWED


# -- approvals and the audit record ----------------------------------------------------------------
def test_an_approval_rule_holds_the_call_with_its_preview(env: Environment) -> None:
    pack = compile_pack(
        PolicyPackModel.model_validate(
            {
                "name": "approvals",
                "approvals": [
                    {"id": "big_refund", "source": {"ref": "9.2"}, "argument": "amount", "above": 100}
                ],
            }
        )
    )
    session, _ = guard(env, policy=pack)
    before = env.state_hash()
    refund = {"order_id": SHIPPED, "customer_id": "CUS-10000001", "refund_reason": "order_cancelled"}
    held = session.call("create_refund", {**refund, "amount": 250.0})
    assert held.verdict is Verdict.HELD
    assert held.violations[0].rule_id == "big_refund"
    assert held.result is None
    assert {c.table for c in held.changes} == {"external_retail_toolset_stripe_models_refunds"}
    assert env.state_hash() == before
    small = session.call("create_refund", {**refund, "amount": 20.0})
    assert small.verdict is Verdict.ALLOWED, small
    assert env.state_hash() != before


def test_outcomes_are_the_audit_record(env: Environment) -> None:
    session, _ = guard(env, CANCEL_AFTER)
    session.call("get_order", {"order_id": SHIPPED})
    session.call("cancel_order", CANCEL)
    session.call("nope")
    assert [(o.call.tool, o.verdict) for o in session.outcomes] == [
        ("get_order", Verdict.ALLOWED),
        ("cancel_order", Verdict.ROLLED_BACK),
        ("nope", Verdict.REFUSED),
    ]
    assert all(o.call.session_id == "s1" and o.duration_ms > 0 for o in session.outcomes)
    assert session.outcomes[1].call.arguments == CANCEL
    session.rollback()


def test_an_executor_that_raises_keeps_nothing_and_the_session_goes_on(env: Environment) -> None:
    """A transport error after the upstream wrote: classified transient, retried (each attempt rolled
    back), and when the retries run out the call fails with nothing kept; the session goes on."""
    run = executor_for(env)

    def crashes(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        if tool == "cancel_order":
            run(tool, arguments)
            raise ConnectionError("upstream went away")
        result: ToolResult = run(tool, arguments)
        return result

    session = GuardSession(
        backend_for(env), crashes, tool_infos(env), retry=RetryPolicy(clock=VirtualClock())
    )
    before = env.state_hash()
    outcome = session.call("cancel_order", {**CANCEL, "order_id": PROCESSING})
    assert (outcome.verdict, outcome.error_class, outcome.retries) == (Verdict.FAILED, "transient", 8)
    assert all(a.rolled_back and a.changes for a in outcome.attempts)
    assert env.state_hash() == before
    assert session.pending_changes().changes == []
    speed = {"order_id": PROCESSING, "new_shipping_speed": "standard"}
    assert session.call("update_shipping_speed", speed).verdict is Verdict.ALLOWED
    committed = session.commit()
    assert committed.committed
    assert [(c.key, c.op) for c in committed.changes] == [(PROCESSING, "update")]
    assert committed.changes.changes[0].after is not None
    assert committed.changes.changes[0].after["status"] == "processing"
