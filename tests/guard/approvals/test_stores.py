"""The approval store contract, run against SQLite, PostgreSQL and Redis.

Each test gets its own SQLite file / PostgreSQL table prefix / Redis key prefix and removes what it
created. ``SHADOWGUARD_TEST_PG=off`` / ``SHADOWGUARD_TEST_REDIS=off`` skip a server backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from guard.approvals import (
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalRequest,
    ApprovalState,
    ApprovalStore,
    ApprovalStoreUnavailable,
    CheckResult,
    arguments_digest,
    open_approval_store,
)
from guard.models import ChangeSet, EffectClass


class FakeClock:
    """A clock the test moves by hand (thread-safe: race tests read it from many threads)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, **delta: float) -> datetime:
        with self._lock:
            self._now += timedelta(**delta)
            return self._now


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "redis"],
)
def store_url(request: pytest.FixtureRequest, approval_store_url: Callable[[str], str]) -> str:
    """A fresh, isolated store URL on one backend; whatever was created under it is removed after."""
    return approval_store_url(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_store(store_url: str, clock: FakeClock) -> Iterator[Callable[[], ApprovalStore]]:
    """Opens another store instance (its own engine / Redis client) on the test's backend."""
    opened: list[ApprovalStore] = []

    def opener() -> ApprovalStore:
        store = open_approval_store(store_url, clock=clock)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[[], ApprovalStore]) -> ApprovalStore:
    return open_store()


# -- helpers -----------------------------------------------------------------------------------------


def request(clock: FakeClock, **overrides: Any) -> ApprovalRequest:
    fields: dict[str, Any] = {
        "principal": "agent-7",
        "session_id": "sess-1",
        "upstream": "shop",
        "tool": "refund_order",
        "arguments": {"order_id": "o-1", "amount": 120.5, "items": ["a", "b"]},
        "effect": EffectClass.IRREVERSIBLE,
        "rule_id": "refunds-over-100",
        "preview": ChangeSet(),
        "checks": [CheckResult(rule_id="amount-positive", passed=True)],
        "policy_version": "sha256:policy-v1",
        "expires_at": clock() + timedelta(hours=1),
    }
    fields.update(overrides)
    return ApprovalRequest(**fields)


def snapshot(store: ApprovalStore, approval_id: str) -> tuple[Approval, list[ApprovalEvent]]:
    return store.get(approval_id), list(store.history(approval_id))


# -- create / get / list -----------------------------------------------------------------------------


def test_create_then_get_returns_the_same_pending_record(store: ApprovalStore, clock: FakeClock) -> None:
    req = request(clock)
    created = store.create(req)

    assert created.state is ApprovalState.PENDING
    assert created.id.startswith("apr_")
    assert created.created_at == clock()
    assert created.arguments_digest == arguments_digest(req.tool, req.arguments)
    assert store.get(created.id) == created
    [event] = store.history(created.id)
    assert (event.action, event.actor, event.at) == ("requested", "agent-7", clock())
    assert event.arguments_digest == created.arguments_digest


def test_list_filters_and_pages_newest_first(store: ApprovalStore, clock: FakeClock) -> None:
    made: list[Approval] = []
    for i in range(7):
        clock.advance(seconds=1)
        made.append(
            store.create(
                request(
                    clock,
                    session_id=f"sess-{i % 2}",
                    principal="alice" if i < 3 else "bob",
                    tool="refund_order" if i % 3 else "cancel_order",
                )
            )
        )
    store.decide(made[0].id, approve=False, reviewer="rev", reason="no")
    newest_first = [a.id for a in reversed(made)]

    assert [a.id for a in store.list(ApprovalQuery())] == newest_first
    assert [a.id for a in store.list(ApprovalQuery(session_id="sess-1"))] == [
        a.id for a in reversed(made) if a.session_id == "sess-1"
    ]
    assert [a.id for a in store.list(ApprovalQuery(principal="alice"))] == [m.id for m in made[2::-1]]
    assert [a.id for a in store.list(ApprovalQuery(tool="cancel_order"))] == [
        made[6].id,
        made[3].id,
        made[0].id,
    ]
    assert [a.id for a in store.list(ApprovalQuery(states=[ApprovalState.REJECTED]))] == [made[0].id]
    assert [a.id for a in store.list(ApprovalQuery(states=[ApprovalState.PENDING]))] == newest_first[:-1]
    both = ApprovalQuery(states=[ApprovalState.PENDING, ApprovalState.REJECTED], principal="alice")
    assert [a.id for a in store.list(both)] == [m.id for m in made[2::-1]]
    assert store.list(ApprovalQuery(states=[])) == []
    assert store.list(ApprovalQuery(session_id="no-such-session")) == []

    pages = [[a.id for a in store.list(ApprovalQuery(limit=3, offset=off))] for off in (0, 3, 6, 9)]
    assert pages == [newest_first[0:3], newest_first[3:6], newest_first[6:7], []]
    filtered = [a.id for a in store.list(ApprovalQuery(principal="bob", limit=2, offset=1))]
    assert filtered == [made[5].id, made[4].id]


# -- decisions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("approve", "state"), [(True, ApprovalState.APPROVED), (False, ApprovalState.REJECTED)]
)
def test_decide_records_who_when_why(
    store: ApprovalStore, clock: FakeClock, approve: bool, state: ApprovalState
) -> None:
    created = store.create(request(clock))
    decided_at = clock.advance(minutes=5)

    decided = store.decide(created.id, approve=approve, reviewer="rita", reason="checked the order")

    assert (decided.state, decided.decided_by, decided.decided_at, decided.reason) == (
        state,
        "rita",
        decided_at,
        "checked the order",
    )
    assert store.get(created.id) == decided
    events = store.history(created.id)
    assert [e.action for e in events] == ["requested", state.value]
    assert (events[1].actor, events[1].at, events[1].reason) == ("rita", decided_at, "checked the order")
    assert events[1].arguments_digest == created.arguments_digest


def test_approve_then_consume_once(store: ApprovalStore, clock: FakeClock) -> None:
    created = store.create(request(clock))
    store.decide(created.id, approve=True, reviewer="rita", reason=None)
    used_at = clock.advance(seconds=3)

    used = store.consume(created.id, consumer="replica-a")

    assert (used.state, used.used_at, used.used_by) == (ApprovalState.APPROVED, used_at, "replica-a")
    assert store.get(created.id) == used
    assert [(e.action, e.actor) for e in store.history(created.id)] == [
        ("requested", "agent-7"),
        ("approved", "rita"),
        ("used", "replica-a"),
    ]


def test_cancel_pending(store: ApprovalStore, clock: FakeClock) -> None:
    created = store.create(request(clock))
    cancelled = store.cancel(created.id, reason="session closed")
    assert (cancelled.state, cancelled.reason) == (ApprovalState.CANCELLED, "session closed")
    last = store.history(created.id)[-1]
    assert (last.action, last.actor, last.reason) == ("cancelled", "shadowguard", "session closed")


def _approved(store: ApprovalStore, clock: FakeClock) -> Approval:
    created = store.create(request(clock))
    return store.decide(created.id, approve=True, reviewer="rita", reason=None)


def _rejected(store: ApprovalStore, clock: FakeClock) -> Approval:
    created = store.create(request(clock))
    return store.decide(created.id, approve=False, reviewer="rita", reason="too much")


def _used(store: ApprovalStore, clock: FakeClock) -> Approval:
    return store.consume(_approved(store, clock).id, consumer="replica-a")


def _expired(store: ApprovalStore, clock: FakeClock) -> Approval:
    created = store.create(request(clock, expires_at=clock() + timedelta(minutes=1)))
    clock.advance(minutes=2)
    return store.get(created.id)


def _approved_then_late(store: ApprovalStore, clock: FakeClock) -> Approval:
    created = store.create(request(clock, expires_at=clock() + timedelta(minutes=1)))
    store.decide(created.id, approve=True, reviewer="rita", reason=None)
    clock.advance(minutes=2)
    return store.get(created.id)


def _pending(store: ApprovalStore, clock: FakeClock) -> Approval:
    return store.create(request(clock))


def _cancelled(store: ApprovalStore, clock: FakeClock) -> Approval:
    return store.cancel(store.create(request(clock)).id, reason="gone")


Setup = Callable[[ApprovalStore, FakeClock], Approval]
Action = Callable[[ApprovalStore, str], Approval]


def _approve(store: ApprovalStore, approval_id: str) -> Approval:
    return store.decide(approval_id, approve=True, reviewer="other", reason=None)


def _reject(store: ApprovalStore, approval_id: str) -> Approval:
    return store.decide(approval_id, approve=False, reviewer="other", reason="late")


def _consume(store: ApprovalStore, approval_id: str) -> Approval:
    return store.consume(approval_id, consumer="replica-b")


def _cancel(store: ApprovalStore, approval_id: str) -> Approval:
    return store.cancel(approval_id, reason="session closed")


def _get(store: ApprovalStore, approval_id: str) -> Approval:
    return store.get(approval_id)


def _history(store: ApprovalStore, approval_id: str) -> Sequence[ApprovalEvent]:
    return store.history(approval_id)


@pytest.mark.parametrize(
    ("setup", "action", "message"),
    [
        (_approved, _approve, "already approved by rita"),
        (_approved, _reject, "already approved by rita"),
        (_rejected, _approve, "already rejected by rita"),
        (_expired, _approve, "expired at"),
        (_expired, _reject, "expired at"),
        (_cancelled, _approve, "is cancelled, not pending"),
        (_used, _consume, "already used"),
        (_rejected, _consume, "is rejected, not approved"),
        (_pending, _consume, "is pending, not approved"),
        (_expired, _consume, "is expired, not approved"),
        (_approved_then_late, _consume, "before it was used"),
        (_approved, _cancel, "already approved"),
        (_rejected, _cancel, "already rejected"),
        (_expired, _cancel, "expired at"),
    ],
    ids=lambda f: getattr(f, "__name__", "").strip("_") or None,
)
def test_conflicts_report_the_current_record_and_change_nothing(
    store: ApprovalStore, clock: FakeClock, setup: Setup, action: Action, message: str
) -> None:
    approval = setup(store, clock)
    before = snapshot(store, approval.id)

    with pytest.raises(ApprovalConflict, match=message) as raised:
        action(store, approval.id)

    assert raised.value.approval == before[0]
    assert snapshot(store, approval.id) == before


@pytest.mark.parametrize("action", [_approve, _reject, _consume, _cancel, _get, _history])
def test_forged_ids_are_not_found(store: ApprovalStore, clock: FakeClock, action: Callable[..., Any]) -> None:
    real = store.create(request(clock))
    forged = real.id[:-2] + ("xy" if not real.id.endswith("xy") else "zw")

    with pytest.raises(ApprovalNotFound) as raised:
        action(store, forged)

    assert raised.value.approval_id == forged
    assert snapshot(store, real.id)[0] == real


# -- expiry ------------------------------------------------------------------------------------------


def test_reads_expire_lazily_and_record_it(store: ApprovalStore, clock: FakeClock) -> None:
    created = store.create(request(clock, expires_at=clock() + timedelta(minutes=10)))
    clock.advance(minutes=9, seconds=59)
    assert store.get(created.id).state is ApprovalState.PENDING

    expired_at = clock.advance(seconds=1)
    expired = store.get(created.id)

    assert expired.state is ApprovalState.EXPIRED
    assert expired.decided_by is None and expired.used_at is None
    assert store.get(created.id) == expired
    events = store.history(created.id)
    assert [(e.action, e.actor, e.at) for e in events][1:] == [("expired", "shadowguard", expired_at)]


def test_list_sees_expiry(store: ApprovalStore, clock: FakeClock) -> None:
    soon = store.create(request(clock, expires_at=clock() + timedelta(minutes=1)))
    later = store.create(request(clock, expires_at=clock() + timedelta(hours=1)))
    clock.advance(minutes=5)

    assert [a.id for a in store.list(ApprovalQuery(states=[ApprovalState.PENDING]))] == [later.id]
    assert [a.id for a in store.list(ApprovalQuery(states=[ApprovalState.EXPIRED]))] == [soon.id]


def test_expire_due_moves_each_due_approval_once(store: ApprovalStore, clock: FakeClock) -> None:
    due = [store.create(request(clock, expires_at=clock() + timedelta(minutes=m))) for m in (1, 2)]
    not_due = store.create(request(clock, expires_at=clock() + timedelta(minutes=30)))
    decided = store.create(request(clock, expires_at=clock() + timedelta(minutes=1)))
    store.decide(decided.id, approve=True, reviewer="rita", reason=None)
    clock.advance(minutes=3)

    moved = store.expire_due()

    assert sorted(a.id for a in moved) == sorted(a.id for a in due)
    assert all(a.state is ApprovalState.EXPIRED for a in moved)
    assert store.expire_due() == []
    assert store.get(not_due.id).state is ApprovalState.PENDING
    assert store.get(decided.id).state is ApprovalState.APPROVED
    assert [e.action for e in store.history(due[0].id)] == ["requested", "expired"]


def test_naive_expiry_is_refused_and_nothing_is_stored(store: ApprovalStore, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        store.create(request(clock, expires_at=datetime(2026, 3, 1, 10, 0)))
    assert store.list(ApprovalQuery()) == []


# -- durability and races ----------------------------------------------------------------------------


def test_a_new_store_instance_sees_everything(
    open_store: Callable[[], ApprovalStore], clock: FakeClock
) -> None:
    first = open_store()
    decided = _approved(first, clock)
    clock.advance(seconds=1)
    pending = first.create(request(clock, session_id="sess-2"))
    kept = snapshot(first, decided.id)
    first.close()

    second = open_store()

    assert snapshot(second, decided.id) == kept
    assert second.get(pending.id) == pending
    assert [a.id for a in second.list(ApprovalQuery())] == [pending.id, decided.id]
    assert second.consume(decided.id, consumer="replica-b").used_by == "replica-b"


def test_racing_replicas_decide_once_and_consume_once(
    open_store: Callable[[], ApprovalStore], clock: FakeClock
) -> None:
    replicas = [open_store(), open_store()]
    approval = replicas[0].create(request(clock))
    threads = 16
    start = threading.Barrier(threads)
    outcomes: dict[str, list[str]] = {"decide": [], "consume": []}
    lock = threading.Lock()

    def contender(n: int) -> None:
        store = replicas[n % 2]
        start.wait()
        steps: list[tuple[str, Callable[[], object]]] = [
            ("decide", lambda: store.decide(approval.id, approve=True, reviewer=f"rev-{n}", reason=None)),
            ("consume", lambda: store.consume(approval.id, consumer=f"replica-{n}")),
        ]
        for step, act in steps:
            try:
                act()
                result = "ok"
            except ApprovalConflict:
                result = "conflict"
            with lock:
                outcomes[step].append(result)

    workers = [threading.Thread(target=contender, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert sorted(outcomes["decide"]) == ["conflict"] * (threads - 1) + ["ok"]
    assert sorted(outcomes["consume"]) == ["conflict"] * (threads - 1) + ["ok"]
    final = replicas[1].get(approval.id)
    assert final.state is ApprovalState.APPROVED and final.used_at is not None
    assert [e.action for e in replicas[1].history(approval.id)] == ["requested", "approved", "used"]


# -- opening stores from URLs ------------------------------------------------------------------------


def test_relative_sqlite_path_resolves_against_base_dir(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "q").mkdir()
    store = open_approval_store("sqlite:///q/approvals.db", clock=clock, base_dir=tmp_path)
    try:
        created = store.create(request(clock))
    finally:
        store.close()
    assert (tmp_path / "q" / "approvals.db").is_file()
    reopened = open_approval_store(f"sqlite:///{tmp_path}/q/approvals.db", clock=clock)
    try:
        assert reopened.get(created.id) == created
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///:memory:", "in-memory SQLite is not durable"),
        ("sqlite://", "in-memory SQLite is not durable"),
        ("mysql://root:hunter2@db/queue", "unknown scheme 'mysql'"),
        ("approvals.db", "unknown scheme '\\(none\\)'"),
        ("sqlite:///a.db?table_prefix=drop table;", "table_prefix must be"),
        ("redis://127.0.0.1:6379/0?prefix=a*b", "prefix must be"),
        ("redis://127.0.0.1:6379/0?prefix=a&prefix=b", "prefix given more than once"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        open_approval_store(url, base_dir=tmp_path)
    assert "hunter2" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://sg:hunter2@127.0.0.1:1/queue",
        "redis://:hunter2@127.0.0.1:1/0",
    ],
)
def test_unreachable_servers_name_the_url_without_its_password(url: str) -> None:
    with pytest.raises(ApprovalStoreUnavailable, match=r"127\.0\.0\.1:1\b") as raised:
        open_approval_store(url)
    assert "hunter2" not in str(raised.value)
    assert "***" in str(raised.value)


def test_unopenable_sqlite_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ApprovalStoreUnavailable, match="no-such-dir"):
        open_approval_store("sqlite:///no-such-dir/approvals.db", base_dir=tmp_path)
