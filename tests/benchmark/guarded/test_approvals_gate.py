"""ApprovalGate under GuardSession: a held call is queued, and only an approval of exactly it runs it, once.

The upstream is the real retail environment on SQLite through SqlBackend (a rehearsing backend) and
an in-process ledger through JournalBackend (no rehearsal); the queue is the real SQL approval store
on a SQLite file. "Nothing changed" is checked with the environment's own state hash, and what the
upstream received with a recording executor.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, executor_for, tool_infos
from guard.approvals import (
    ApprovalQuery,
    ApprovalState,
    ApprovalStore,
    SqlApprovalStore,
    arguments_digest,
)
from guard.approvals.gate import USED, ApprovalGate, policy_version, same_changes
from guard.checks import PythonCheck, RuleText
from guard.effects import ToolInfo
from guard.journal import JournalBackend
from guard.models import ChangeSet, RowChange, ToolOutcome, Verdict
from guard.policy import PolicyPack, PolicyPackModel, compile_pack
from guard.session import GuardSession, ToolResult
from tests.support.envs import RecordingExecutor, open_env

REFUNDS = "external_retail_toolset_stripe_models_refunds"
SHIPPED = "ORD-10000001"
REFUND = {
    "order_id": SHIPPED,
    "customer_id": "CUS-10000001",
    "refund_reason": "order_cancelled",
    "amount": 250.0,
}
SMALL = {**REFUND, "amount": 20.0}
PACK: dict[str, Any] = {
    "name": "refunds",
    "approvals": [
        {
            "id": "big_refund",
            "source": {"ref": "Refund policy §9.2", "quote": "Refunds above 100 need a manager."},
            "argument": "amount",
            "above": 100,
        }
    ],
}


class Clock:
    """Time the test moves by hand, shared by the gate (expiry stamps) and the store (expiry)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += timedelta(seconds=seconds)


@pytest.fixture
def env(retail: Domain, sqlite_db: Database) -> Iterator[Environment]:
    with open_env(retail, sqlite_db) as environment:  # SQLite only (tests/benchmark/guarded/conftest.py)
        yield environment


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[SqlApprovalStore]:
    opened = SqlApprovalStore(f"sqlite:///{tmp_path / 'approvals.db'}", clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def pack() -> PolicyPack:
    return compile_pack(PolicyPackModel.model_validate(PACK))


def gate_for(
    store: ApprovalStore, pack: PolicyPack, clock: Clock, *, expires_after_s: float = 600.0
) -> ApprovalGate:
    return ApprovalGate(
        store,
        policy_version=policy_version(pack),
        consumer="replica-a",
        expires_after_s=expires_after_s,
        clock=clock,
        upstream="retail",
    )


def guarded(
    env: Environment,
    gate: ApprovalGate | None,
    pack: PolicyPack,
    *,
    session_id: str = "s1",
    principal: str | None = "agent-1",
    extra_checks: Sequence[PythonCheck] = (),
) -> tuple[GuardSession, RecordingExecutor]:
    upstream = RecordingExecutor(env)
    session = GuardSession(
        backend_for(env),
        upstream,
        tool_infos(env),
        pack,
        session_id=session_id,
        principal=principal,
        gate=gate,
        extra_checks=list(extra_checks),
    )
    return session, upstream


class Held(NamedTuple):
    """A refund held for approval in a fresh guarded session (:func:`hold_refund`)."""

    session: GuardSession
    upstream: RecordingExecutor
    held: ToolOutcome
    """The held call's outcome; its ``approval_id`` is set."""
    before: str
    """The environment's state hash before the call."""
    gate: ApprovalGate


def hold_refund(
    env: Environment,
    store: ApprovalStore,
    pack: PolicyPack,
    clock: Clock,
    *,
    expires_after_s: float = 600.0,
    approve: bool | None = None,
    reason: str | None = None,
) -> Held:
    """A guarded session (gate on ``store``) that has called ``create_refund`` above the pack's limit;
    with ``approve`` set, the reviewer ``maria`` has decided it (giving ``reason``)."""
    gate = gate_for(store, pack, clock, expires_after_s=expires_after_s)
    session, upstream = guarded(env, gate, pack)
    before = env.state_hash()
    held = session.call("create_refund", REFUND)
    assert held.approval_id is not None, held
    if approve is not None:
        store.decide(held.approval_id, approve=approve, reviewer="maria", reason=reason)
    return Held(session, upstream, held, before, gate)


def refunds(session: GuardSession) -> list[dict[str, Any]]:
    return session.backend.query(f"SELECT id, amount FROM {REFUNDS} ORDER BY id", {})


# -- a held call is queued ------------------------------------------------------------------------------
def test_a_held_call_is_queued_with_its_preview_and_nothing_is_kept(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    gate = gate_for(store, pack, clock)
    session, upstream = guarded(env, gate, pack)
    before = env.state_hash()

    held = session.call("create_refund", REFUND)

    assert held.verdict is Verdict.HELD and held.error_class == "approval_pending"
    assert held.approval_id is not None and held.approval_state == "pending"
    assert held.approval_expires_at == clock.now + timedelta(seconds=600)
    assert env.state_hash() == before
    approval = store.get(held.approval_id)
    assert (approval.session_id, approval.principal, approval.tool, approval.upstream) == (
        "s1",
        "agent-1",
        "create_refund",
        "retail",
    )
    assert approval.arguments == REFUND
    assert approval.arguments_digest == arguments_digest("create_refund", REFUND)
    assert approval.rule_id == "big_refund" and approval.rule_source is not None
    assert approval.rule_source.ref == "Refund policy §9.2"
    assert approval.rehearsed and [(c.table, c.op) for c in approval.preview] == [(REFUNDS, "insert")]
    assert approval.preview == held.changes.net()
    assert approval.policy_version == policy_version(pack)
    assert [a.id for a in gate.take_requested()] == [approval.id]
    assert gate.take_requested() == []
    assert held.hint is not None and held.hint.retryable
    assert approval.id in held.hint.next_step and "same call again" in held.hint.next_step
    assert upstream.calls == ["create_refund"], "rehearsed once"

    again = session.call("create_refund", REFUND)
    assert (again.verdict, again.approval_id) == (Verdict.HELD, approval.id)
    assert again.changes == approval.preview
    assert upstream.calls == ["create_refund"], "a pending request is not rehearsed again"
    assert gate.take_requested() == []
    assert len(store.list(ApprovalQuery(session_id="s1"))) == 1


def test_the_checks_that_passed_are_shown_to_the_reviewer(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    positive = PythonCheck(
        "positive_amount",
        "after_call",
        lambda ctx: [] if ctx.call is None or ctx.call.arguments["amount"] > 0 else ["not positive"],
        RuleText("A refund amount is positive."),
        frozenset({"create_refund"}),
    )
    session, _ = guarded(env, gate_for(store, pack, clock), pack, principal=None, extra_checks=[positive])
    held = session.call("create_refund", REFUND)
    assert held.approval_id is not None
    [check] = store.get(held.approval_id).checks
    assert (check.rule_id, check.passed, check.message) == (
        "positive_amount",
        True,
        "A refund amount is positive.",
    )


# -- approved: run once ---------------------------------------------------------------------------------
def test_approved_the_same_call_runs_once_and_commits(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, _, held, _, _ = hold_refund(env, store, pack, clock, approve=True, reason="ok")
    assert held.approval_id is not None

    ran = session.call("create_refund", REFUND)

    assert ran.verdict is Verdict.ALLOWED, ran
    assert (ran.approval_id, ran.approval_state) == (held.approval_id, USED)
    assert same_changes(ran.changes, held.changes)
    used = store.get(held.approval_id)
    assert used.used_at is not None and used.used_by == "replica-a"
    assert [r["amount"] for r in refunds(session)].count(250.0) == 1
    before_commit = env.state_hash()

    again = session.call("create_refund", REFUND)
    assert again.verdict is Verdict.HELD and again.approval_id not in (None, held.approval_id), (
        "a used approval does not run a second call: the same call asks again"
    )
    assert env.state_hash() == before_commit
    assert session.commit().committed
    rows: list[Any] = list(env.connection.exec_driver_sql(f"SELECT amount FROM {REFUNDS}").scalars())
    assert rows.count(250.0) == 1


def test_an_explicit_id_runs_once_and_reusing_it_is_refused(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, upstream, held, _, _ = hold_refund(env, store, pack, clock, approve=True)
    assert held.approval_id is not None

    ran = session.call("create_refund", REFUND, approval_id=held.approval_id)
    assert ran.verdict is Verdict.ALLOWED and ran.approval_id == held.approval_id
    after = env.state_hash()
    calls = list(upstream.calls)

    reused = session.call("create_refund", REFUND, approval_id=held.approval_id)
    assert (reused.verdict, reused.error_class) == (Verdict.REFUSED, "conflict")
    assert [v.rule_id for v in reused.violations] == ["approval_used"]
    assert "already used" in reused.violations[0].message
    assert env.state_hash() == after and upstream.calls == calls


def test_an_approval_is_consumed_once_across_gates(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    """Two replicas (two gates on one store) racing for one approval: one runs, the other is refused."""
    session, _, held, _, _ = hold_refund(env, store, pack, clock, approve=True)
    assert held.approval_id is not None
    other = gate_for(store, pack, clock)
    call = session.outcomes[0].call
    assert other.resolve(call, held.approval_id).action == "run"
    lost = gate_for(store, pack, clock).resolve(call, held.approval_id)
    assert lost.action == "refuse" and lost.rule_id == "approval_used"
    session.rollback()


# -- rejected, expired ----------------------------------------------------------------------------------
def test_rejected_the_reason_reaches_the_agent_once_then_the_call_asks_again(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    reason = "Refund exceeds the order total."
    session, upstream, held, before, _ = hold_refund(env, store, pack, clock, approve=False, reason=reason)
    assert held.approval_id is not None

    refused = session.call("create_refund", REFUND)
    assert (refused.verdict, refused.error_class) == (Verdict.REFUSED, "approval_rejected")
    assert refused.approval_id == held.approval_id and refused.approval_state == "rejected"
    assert refused.hint is not None and "Refund exceeds the order total." in refused.hint.message
    assert "by maria" in refused.violations[0].message
    assert upstream.calls == ["create_refund"] and env.state_hash() == before

    explicit = session.call("create_refund", REFUND, approval_id=held.approval_id)
    assert explicit.error_class == "approval_rejected", "an explicit id always reports its outcome"

    asked_again = session.call("create_refund", REFUND)
    assert asked_again.verdict is Verdict.HELD
    assert asked_again.approval_id not in (None, held.approval_id)
    # Both requests were made at the same instant (the clock stands still): the live one is found.
    assert session.call("create_refund", REFUND).approval_id == asked_again.approval_id
    assert env.state_hash() == before


def test_expired_nothing_is_done(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, upstream, held, before, _ = hold_refund(env, store, pack, clock, expires_after_s=60)
    assert held.approval_id is not None
    clock.advance(61)

    expired = session.call("create_refund", REFUND)

    assert (expired.verdict, expired.error_class) == (Verdict.REFUSED, "approval_expired")
    assert expired.approval_id == held.approval_id and expired.approval_state == "expired"
    assert "was not done" in expired.violations[0].message
    assert store.get(held.approval_id).state is ApprovalState.EXPIRED
    assert upstream.calls == ["create_refund"] and env.state_hash() == before


def test_approved_but_not_used_before_expiry_is_not_done(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, upstream, held, before, _ = hold_refund(
        env, store, pack, clock, expires_after_s=60, approve=True
    )
    assert held.approval_id is not None
    clock.advance(61)

    late = session.call("create_refund", REFUND, approval_id=held.approval_id)

    assert (late.verdict, late.error_class) == (Verdict.REFUSED, "approval_expired")
    assert store.get(held.approval_id).used_at is None
    assert upstream.calls == ["create_refund"] and env.state_hash() == before


# -- ids that do not fit the call -----------------------------------------------------------------------
def test_ids_that_do_not_fit_the_call_are_refused_and_nothing_runs(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    first, _ = guarded(env, gate_for(store, pack, clock), pack)
    held = first.call("create_refund", REFUND)
    assert held.approval_id is not None
    first.rollback()
    store.decide(held.approval_id, approve=True, reviewer="maria", reason=None)
    before = env.state_hash()
    changed_pack = compile_pack(
        PolicyPackModel.model_validate({**PACK, "approvals": [{**PACK["approvals"][0], "above": 50}]})
    )
    assert policy_version(changed_pack) != policy_version(pack)

    cases: list[tuple[str, dict[str, Any], str, str, str, PolicyPack]] = [
        (
            "s1",
            {**REFUND, "amount": 900.0},
            held.approval_id,
            "precondition_failed",
            "approval_mismatch",
            pack,
        ),
        ("s1", REFUND, "apr_forged", "not_found", "approval_not_found", pack),
        ("s2", REFUND, held.approval_id, "permission_denied", "approval_mismatch", pack),
        ("s1", REFUND, held.approval_id, "precondition_failed", "approval_policy_changed", changed_pack),
    ]
    for session_id, arguments, approval_id, error_class, rule, policy in cases:
        session, upstream = guarded(env, gate_for(store, policy, clock), policy, session_id=session_id)
        refused = session.call("create_refund", arguments, approval_id=approval_id)
        assert (refused.verdict, refused.error_class) == (Verdict.REFUSED, error_class), rule
        assert [v.rule_id for v in refused.violations] == [rule]
        assert upstream.calls == [], rule
        session.rollback()
        assert env.state_hash() == before
    assert store.get(held.approval_id).used_at is None, "a refused call does not use the approval"

    session, _ = guarded(env, gate_for(store, pack, clock), pack)
    ran = session.call("create_refund", REFUND, approval_id=held.approval_id)
    assert ran.verdict is Verdict.ALLOWED
    session.rollback()


def test_a_pending_request_under_a_changed_pack_is_cancelled_and_asked_again(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, _ = guarded(env, gate_for(store, pack, clock), pack)
    first = session.call("create_refund", REFUND).approval_id
    assert first is not None
    session.rollback()
    changed_pack = compile_pack(
        PolicyPackModel.model_validate({**PACK, "approvals": [{**PACK["approvals"][0], "above": 50}]})
    )
    later, _ = guarded(env, gate_for(store, changed_pack, clock), changed_pack)
    second = later.call("create_refund", REFUND)
    assert second.verdict is Verdict.HELD and second.approval_id not in (None, first)
    assert store.get(first).state is ApprovalState.CANCELLED
    later.rollback()


def test_without_a_gate_an_approval_id_is_refused(env: Environment, pack: PolicyPack) -> None:
    session, upstream = guarded(env, None, pack)
    refused = session.call("create_refund", SMALL, approval_id="apr_x")
    assert (refused.verdict, refused.violations[0].rule_id) == (Verdict.REFUSED, "approval_not_found")
    assert upstream.calls == []
    held = session.call("create_refund", REFUND)
    assert held.verdict is Verdict.HELD and held.approval_id is None, "no queue: only reported"


def test_a_gate_needs_a_session(env: Environment, store: SqlApprovalStore, pack: PolicyPack) -> None:
    with pytest.raises(ValueError, match="session_id"):
        GuardSession(
            backend_for(env),
            executor_for(env),
            tool_infos(env),
            pack,
            gate=gate_for(store, pack, Clock()),
        )


# -- the world moved: back to review --------------------------------------------------------------------
def test_a_different_change_set_on_execution_returns_to_review(
    env: Environment, store: SqlApprovalStore, pack: PolicyPack, clock: Clock
) -> None:
    session, upstream, held, _, gate = hold_refund(env, store, pack, clock)
    assert held.approval_id is not None
    gate.take_requested()
    store.decide(held.approval_id, approve=True, reviewer="maria", reason=None)
    # Another refund in between: the approved one would now get another id than the reviewer saw.
    assert session.call("create_refund", SMALL).verdict is Verdict.ALLOWED
    before = env.state_hash()
    pending = refunds(session)

    moved = session.call("create_refund", REFUND)

    assert moved.verdict is Verdict.HELD
    assert moved.approval_id is not None and moved.approval_id != held.approval_id
    assert "returns to review" in moved.violations[0].message
    assert refunds(session) == pending, "the executed call was rolled back"
    assert env.state_hash() == before
    assert store.get(held.approval_id).used_at is not None, "the first approval was used up"
    renewed = store.get(moved.approval_id)
    assert renewed.state is ApprovalState.PENDING and renewed.rule_id == "big_refund"
    assert not same_changes(renewed.preview, store.get(held.approval_id).preview)
    assert [a.id for a in gate.take_requested()] == [moved.approval_id]

    store.decide(moved.approval_id, approve=True, reviewer="maria", reason=None)
    assert session.call("create_refund", REFUND).verdict is Verdict.ALLOWED
    assert upstream.calls.count("create_refund") == 4


def test_same_changes_ignores_order_and_compares_net_effect() -> None:
    a = RowChange(table="t", key="1", op="insert", after={"x": 1})
    b = RowChange(table="t", key="2", op="update", before={"x": 1}, after={"x": 2})
    b_back = RowChange(table="t", key="2", op="update", before={"x": 2}, after={"x": 1})
    assert same_changes(ChangeSet(changes=[a, b]), ChangeSet(changes=[b, a]))
    assert same_changes(ChangeSet(changes=[a, b, b_back]), ChangeSet(changes=[a]))
    assert not same_changes(ChangeSet(changes=[a, b]), ChangeSet(changes=[a]))


# -- a backend that cannot rehearse ---------------------------------------------------------------------
class Mailer:
    """An upstream that cannot transact: every call takes effect at once."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.sent.append(str(arguments["to"]))
        return ToolResult(f"sent to {arguments['to']}")


def test_on_a_journal_an_irreversible_call_is_queued_unrehearsed_and_sent_once_approved(
    store: SqlApprovalStore, clock: Clock
) -> None:
    tools = {"send_email": ToolInfo(name="send_email", annotations={"destructiveHint": True})}
    pack = compile_pack(PolicyPackModel(name="mail"))
    mailer = Mailer()
    journal = JournalBackend(mailer, tools, pack, session_id="s1")
    session = GuardSession(
        journal, journal.execute, tools, pack, session_id="s1", gate=gate_for(store, pack, clock)
    )
    held = session.call("send_email", {"to": "a@example.com"})
    assert held.verdict is Verdict.HELD and held.approval_id is not None
    approval = store.get(held.approval_id)
    assert not approval.rehearsed and approval.preview == ChangeSet()
    assert approval.rule_id == "irreversible_unrehearsed"
    assert mailer.sent == []

    store.decide(held.approval_id, approve=True, reviewer="maria", reason=None)
    sent = session.call("send_email", {"to": "a@example.com"})
    assert sent.verdict is Verdict.ALLOWED and sent.approval_state == USED
    assert mailer.sent == ["a@example.com"]
    assert session.call("send_email", {"to": "a@example.com"}).verdict is Verdict.HELD
    assert mailer.sent == ["a@example.com"]


def test_policy_version_covers_the_module_file(tmp_path: Path) -> None:
    module = tmp_path / "rules.py"
    module.write_text("def ok(ctx):\n    return []\n")
    model = PolicyPackModel.model_validate({"name": "p", "module": "rules.py"})
    first = policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml"))
    assert first == policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml"))
    module.write_text("def ok(ctx):\n    return ['changed']\n")
    assert policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml")) != first


def test_policy_version_covers_every_file_of_a_package_module(tmp_path: Path) -> None:
    package = tmp_path / "checks"
    package.mkdir()
    (package / "__init__.py").write_text("from .rules import ok\n")
    rules = package / "rules.py"
    rules.write_text("def ok(ctx):\n    return []\n")
    model = PolicyPackModel.model_validate({"name": "p", "module": "checks/__init__.py"})
    first = policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml"))
    assert first == policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml"))
    rules.write_text("def ok(ctx):\n    return ['changed']\n")
    assert policy_version(PolicyPack(model=model, path=tmp_path / "p.yaml")) != first
