"""The approval queue's metrics and spans, read from real ``shadowguard serve`` processes.

Behind every proxy is the notes fixture over HTTP (transaction extension) with a policy pack whose
approval rule names ``delete_note`` (``notes_approvals_policy.yaml``). Each proxy has its own SQLite
approval store, sweeps it every 0.2 s, prints its spans to its log (the console exporter) and is read
through ``GET /metrics``:

* ``waiting``: ``wait_s`` 30, requests expire after 300 s; decisions through the API release the
  waiting call; webhook notices go to a receiver that takes them;
* ``sweeping``: ``wait_s`` 0, requests expire after 1 s; nobody reads the store but the sweep;
  webhook notices go to a receiver that answers 500;
* ``expiring``: ``wait_s`` 30, requests expire after 1 s: the waiting call and the sweep both look.

Tests of one proxy share its counters, so every check compares the values before and after; a
value that must show up is waited for on ``/metrics`` (a notice is sent in the background).

The requested, expired and cancelled counts come from the store's transition listener; the last test
shows, on every backend, that two replicas racing for the same transitions report each one once.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from guard.approvals import (
    Approval,
    ApprovalEvent,
    ApprovalQuery,
    ApprovalState,
    SqlApprovalStore,
    open_approval_store,
)
from guard.approvals.transitions import TransitionStore
from tests.support.approvals import (
    REVIEWERS_AUTH,
    VIEWER_TOKEN,
    api,
    bearer,
    committed_note,
    decide,
    delete_note_request,
    held_while,
    pending_approval,
    session_of,
)
from tests.support.processes import notes_http, shadowguard_serving
from tests.support.proxy import (
    NOTES_APPROVALS_POLICY,
    Agent,
    agent_on,
    notes_http_upstream,
    notes_rows,
    text,
    write_config,
)
from tests.support.webhook import WebhookReceiver

pytestmark = pytest.mark.anyio
TIMEOUT_S = 60.0
ERA = "2026-07-28"

REQUESTED = "shadowguard_approvals_requested_total"
DECIDED = "shadowguard_approvals_decided_total"
FINISHED = "shadowguard_approvals_finished_total"
WAITED = "shadowguard_approval_wait_seconds"
PENDING = "shadowguard_approvals_pending"
SWEPT = "shadowguard_approvals_swept_timestamp_seconds"
DELIVERIES = "shadowguard_webhook_deliveries_total"
OUTCOMES = ("used", "returned_to_review", "expired", "cancelled")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Rig:
    db: Path
    proxies: dict[str, Any]
    stores: dict[str, Path]
    failing: WebhookReceiver


@pytest.fixture(scope="module")
def rig(module_tmp: Path) -> Iterator[Rig]:
    db = module_tmp / "notes.sqlite"
    notes = notes_http(db).ready()
    taking, failing = WebhookReceiver([204]), WebhookReceiver([500])
    hooks = {"taking": taking.start(), "failing": failing.start()}
    settings = {
        "waiting": ({"wait_s": 30, "expires_after_s": 300}, "taking"),
        "sweeping": ({"wait_s": 0, "expires_after_s": 1}, "failing"),
        "expiring": ({"wait_s": 30, "expires_after_s": 1}, "taking"),
    }
    try:
        configs = {
            name: proxy_config(module_tmp / name, notes.url, hooks[hook], **approvals)
            for name, (approvals, hook) in settings.items()
        }
        with shadowguard_serving(configs) as proxies:
            yield Rig(
                db=db,
                proxies=proxies,
                stores={name: module_tmp / name / "approvals.db" for name in settings},
                failing=failing,
            )
    finally:
        notes.stop()
        taking.stop()
        failing.stop()


def proxy_config(folder: Path, url: str, hook: str, **approvals: Any) -> Path:
    """A proxy on ``url`` with the notes approvals pack, its spans on the console, its store swept every
    0.2 s, its notices sent to ``hook`` (two attempts)."""
    folder.mkdir()
    return write_config(
        folder / "proxy.yaml",
        [notes_http_upstream(url, NOTES_APPROVALS_POLICY)],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": "audit.jsonl"},
        telemetry={"exporter": "console"},
        approvals={"store": "sqlite:///approvals.db", "poll_s": 0.05, "sweep_s": 0.2, **approvals},
        webhook={"url": hook, "max_attempts": 2},
        auth=REVIEWERS_AUTH,
    )


# -- helpers --------------------------------------------------------------------------------------------


@asynccontextmanager
async def noted(
    rig: Rig, name: str, prefix: str
) -> AsyncIterator[tuple[Any, str, Agent, httpx2.AsyncClient]]:
    """On the proxy ``name``: a fresh note ``prefix``-<hex> written and committed by an agent, and a
    reviewer's API client; yields the proxy, the note, the agent and the client."""
    proxy, note = rig.proxies[name], f"{prefix}-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, ERA) as agent, api(proxy) as http:
        await committed_note(agent, rig.db, note)
        yield proxy, note, agent, http


async def scrape(http: httpx2.AsyncClient) -> Samples:
    answer = await http.get("/metrics")
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def until(http: httpx2.AsyncClient, ready: Callable[[Samples], bool]) -> Samples:
    """``/metrics`` once ``ready`` holds for it."""
    with anyio.fail_after(TIMEOUT_S):
        while True:
            samples = await scrape(http)
            if ready(samples):
                return samples
            await anyio.sleep(0.05)


async def swept_again(http: httpx2.AsyncClient) -> None:
    """Wait for the end of a sweep that ends after now."""
    last = value(await scrape(http), SWEPT)
    await until(http, lambda m: value(m, SWEPT) > last)


def finished(before: Samples, after: Samples) -> dict[str, float]:
    return {outcome: moved(before, after, FINISHED, outcome=outcome) for outcome in OUTCOMES}


def spans(proxy: Any, name: str) -> list[dict[str, Any]]:
    """The spans called ``name`` the console exporter printed to the proxy's log."""
    text = proxy.log.read_text(errors="replace")
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    start = text.find('{\n    "name": ')
    while start != -1:
        span, end = decoder.raw_decode(text, start)
        if span["name"] == name:
            found.append(span)
        start = text.find('{\n    "name": ', end)
    return found


def span_of(proxy: Any, name: str, approval_id: str) -> dict[str, Any]:
    [span] = [s for s in spans(proxy, name) if s["attributes"].get("shadowguard.approval.id") == approval_id]
    return span


def seconds_between(approval: dict[str, Any]) -> float:
    decided = datetime.fromisoformat(approval["decided_at"])
    return (decided - datetime.fromisoformat(approval["created_at"])).total_seconds()


# -- decisions a waiting call sees ----------------------------------------------------------------------


async def test_an_approved_waiting_call_is_requested_decided_timed_used_and_traced(rig: Rig) -> None:
    async with noted(rig, "waiting", "ok") as (proxy, note, agent, http):
        session_id = await session_of(agent)
        before = await scrape(http)
        pending: dict[str, Any] = {}

        async def approve() -> None:
            pending.update(await pending_approval(http, session_id))
            # The sweep counts the queue while the call waits: this request is all it holds.
            await until(http, lambda m: value(m, PENDING) == 1)
            await decide(http, pending["id"], "approve", "Checked with the author.")

        ran = await held_while(agent, note, approve)
        assert not ran.is_error, text(ran)
        assert dict((ran.meta or {})["shadowguard/outcome"])["approval_state"] == "used"
        assert not (await agent.call("commit")).is_error
        decided = (await http.get(f"/api/approvals/{pending['id']}", headers=bearer(VIEWER_TOKEN))).json()
        after = await until(
            http,
            lambda m: moved(before, m, DELIVERIES, result="delivered") == 1 and value(m, PENDING) == 0,
        )

    assert moved(before, after, REQUESTED, upstream="notes", tool="delete_note") == 1
    assert moved(before, after, DECIDED, decision="approved") == 1
    assert moved(before, after, DECIDED, decision="rejected") == 0
    assert finished(before, after) == {"used": 1, "returned_to_review": 0, "expired": 0, "cancelled": 0}
    assert moved(before, after, WAITED + "_count", decision="approved") == 1
    assert moved(before, after, WAITED + "_sum", decision="approved") == pytest.approx(
        seconds_between(decided), abs=1e-3
    )
    assert moved(before, after, WAITED + "_bucket", decision="approved", le="86400.0") == 1
    assert moved(before, after, DELIVERIES, result="failed") == 0
    assert note not in notes_rows(rig.db)

    wait = span_of(proxy, "shadowguard.approval.wait", pending["id"])
    assert wait["attributes"] == {
        "shadowguard.approval.id": pending["id"],
        "shadowguard.approval.outcome": "approved",
    }
    [call] = [
        s for s in spans(proxy, "shadowguard.tool_call") if s["context"]["span_id"] == wait["parent_id"]
    ]
    assert call["attributes"]["tool"] == "delete_note", "the wait is traced inside the agent's call"
    decision = span_of(proxy, "shadowguard.approval.decide", pending["id"])
    assert decision["attributes"] == {
        "shadowguard.approval.id": pending["id"],
        "shadowguard.reviewer": "maria",
        "shadowguard.approval.decision": "approved",
    }
    assert note not in json.dumps([wait, decision]), "no arguments on the approval spans"
    assert "Checked with the author." not in json.dumps(decision), "nor the reviewer's reason"


async def test_a_rejected_waiting_call_is_decided_and_timed_not_finished(rig: Rig) -> None:
    async with noted(rig, "waiting", "no") as (proxy, note, agent, http):
        session_id = await session_of(agent)
        before = await scrape(http)
        pending: dict[str, Any] = {}

        async def reject() -> None:
            pending.update(await pending_approval(http, session_id))
            await decide(http, pending["id"], "reject", "Under legal hold.")

        refused = await held_while(agent, note, reject)
        assert refused.is_error and refused.structured_content is not None
        assert refused.structured_content["error_class"] == "approval_rejected"
        decided = (await http.get(f"/api/approvals/{pending['id']}", headers=bearer(VIEWER_TOKEN))).json()
        after = await until(http, lambda m: moved(before, m, DELIVERIES, result="delivered") == 1)
        await agent.call("rollback")

    assert moved(before, after, REQUESTED, upstream="notes", tool="delete_note") == 1
    assert moved(before, after, DECIDED, decision="rejected") == 1
    assert moved(before, after, DECIDED, decision="approved") == 0
    assert finished(before, after) == dict.fromkeys(OUTCOMES, 0), "a rejected request is only decided"
    assert moved(before, after, WAITED + "_count", decision="rejected") == 1
    assert moved(before, after, WAITED + "_count", decision="approved") == 0
    assert moved(before, after, WAITED + "_sum", decision="rejected") == pytest.approx(
        seconds_between(decided), abs=1e-3
    )
    wait = span_of(proxy, "shadowguard.approval.wait", pending["id"])
    assert wait["attributes"]["shadowguard.approval.outcome"] == "rejected"
    decision = span_of(proxy, "shadowguard.approval.decide", pending["id"])
    assert decision["attributes"]["shadowguard.approval.decision"] == "rejected"
    assert note in notes_rows(rig.db)


async def test_a_call_whose_changes_moved_returns_to_review_then_is_used(rig: Rig) -> None:
    """Approved, but the note changed since the rehearsal: the approval is consumed, the call undone and
    asked again (returned_to_review); the second approval runs it (used). Each counted once."""
    async with noted(rig, "waiting", "moved") as (proxy, note, agent, http):
        session_id = await session_of(agent)
        before = await scrape(http)
        ids: list[str] = []

        async def edit_then_approve_twice() -> None:
            first = await pending_approval(http, session_id)
            # The waiting call holds no lock: the same session edits the note meanwhile.
            await agent.ok("put_note", {"id": note, "body": "edited since", "status": "published"})
            await decide(http, first["id"], "approve", None)
            second = await pending_approval(http, session_id, other_than=first["id"])
            await decide(http, second["id"], "approve", None)
            ids.extend([first["id"], second["id"]])

        ran = await held_while(agent, note, edit_then_approve_twice)
        assert not ran.is_error, text(ran)
        assert dict((ran.meta or {})["shadowguard/outcome"])["approval_id"] == ids[1]
        assert not (await agent.call("commit")).is_error
        after = await until(http, lambda m: moved(before, m, DELIVERIES, result="delivered") == 2)

    assert moved(before, after, REQUESTED, upstream="notes", tool="delete_note") == 2
    assert moved(before, after, DECIDED, decision="approved") == 2
    assert finished(before, after) == {"used": 1, "returned_to_review": 1, "expired": 0, "cancelled": 0}
    assert moved(before, after, WAITED + "_count", decision="approved") == 2
    assert [
        span_of(proxy, "shadowguard.approval.wait", i)["attributes"]["shadowguard.approval.outcome"]
        for i in ids
    ] == [
        "approved",
        "approved",
    ]
    assert note not in notes_rows(rig.db)


async def test_a_rollback_while_the_call_waits_cancels_the_request(rig: Rig) -> None:
    async with noted(rig, "waiting", "cancel") as (proxy, note, agent, http):
        session_id = await session_of(agent)
        before = await scrape(http)
        pending: dict[str, Any] = {}

        async def roll_back() -> None:
            pending.update(await pending_approval(http, session_id))
            rolled = await http.post(f"/api/sessions/{session_id}/rollback")
            assert rolled.status_code == 200, rolled.text

        refused = await held_while(agent, note, roll_back)
        assert refused.is_error
        after = await scrape(http)

    assert finished(before, after) == {"used": 0, "returned_to_review": 0, "expired": 0, "cancelled": 1}
    assert (
        moved(before, after, DECIDED, decision="approved")
        + moved(before, after, DECIDED, decision="rejected")
        == 0
    )
    assert moved(before, after, WAITED + "_count", decision="approved") == 0
    wait = span_of(proxy, "shadowguard.approval.wait", pending["id"])
    assert wait["attributes"]["shadowguard.approval.outcome"] == "cancelled"
    assert note in notes_rows(rig.db)


# -- expiry ---------------------------------------------------------------------------------------------


async def test_a_request_nobody_reads_is_expired_by_the_sweep_and_its_failed_notice_counted(rig: Rig) -> None:
    async with noted(rig, "sweeping", "swept") as (_, note, agent, http):
        before = await scrape(http)
        held = await agent.refused("delete_note", {"id": note})
        assert held["verdict"] == "held"
        approval_id = held["approval_id"]
        # Only the sweep reads this proxy's store from now on: the expiry, the gauge and the notice.
        after = await until(
            http,
            lambda m: (
                moved(before, m, FINISHED, outcome="expired") == 1
                and value(m, PENDING) == 0
                and moved(before, m, DELIVERIES, result="failed") == 1
            ),
        )
        assert moved(before, after, REQUESTED, upstream="notes", tool="delete_note") == 1
        assert finished(before, after) == {"used": 0, "returned_to_review": 0, "expired": 1, "cancelled": 0}
        assert moved(before, after, DELIVERIES, result="delivered") == 0
        attempts = rig.failing.notices_of(approval_id)
        assert len(attempts) == 2, "two attempts (webhook.max_attempts), one failed notice"
        store = SqlApprovalStore(f"sqlite:///{rig.stores['sweeping']}")
        try:
            assert store.get(approval_id).state is ApprovalState.EXPIRED
        finally:
            store.close()

        # The agent learns the outcome when it sends the call again; it is not counted again.
        expired = await agent.refused("delete_note", {"id": note})
        assert (expired["error_class"], expired["approval_id"]) == ("approval_expired", approval_id)
        again = await scrape(http)
        assert finished(before, again) == finished(before, after)
        assert moved(before, again, REQUESTED, upstream="notes", tool="delete_note") == 1
        await agent.call("rollback")
    assert note in notes_rows(rig.db)


async def test_an_expiry_the_waiting_call_and_the_sweep_both_look_for_is_counted_once(rig: Rig) -> None:
    async with noted(rig, "expiring", "exp") as (proxy, note, agent, http):
        before = await scrape(http)
        expired = await agent.refused("delete_note", {"id": note})
        assert (expired["verdict"], expired["error_class"]) == ("refused", "approval_expired")
        # Two sweeps end after the call came back: the second one started after the expiry.
        for _ in range(2):
            await swept_again(http)
        after = await until(http, lambda m: moved(before, m, DELIVERIES, result="delivered") == 1)
        await agent.call("rollback")

    assert moved(before, after, REQUESTED, upstream="notes", tool="delete_note") == 1
    assert finished(before, after) == {"used": 0, "returned_to_review": 0, "expired": 1, "cancelled": 0}
    assert value(after, PENDING) == 0
    assert moved(before, after, WAITED + "_count", decision="approved") == 0
    wait = span_of(proxy, "shadowguard.approval.wait", expired["approval_id"])
    assert wait["attributes"]["shadowguard.approval.outcome"] == "expired"
    assert note in notes_rows(rig.db)


# -- the transitions the counts come from -------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend", ["sqlite", "redis", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_two_replicas_racing_for_the_same_transitions_report_each_once(
    backend: str, approval_store_url: Callable[[str], str]
) -> None:
    url = approval_store_url(backend)
    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]
    replicas = {name: open_approval_store(url, clock=lambda: now[0]) for name in ("a", "b")}
    reports: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def listener(name: str) -> Callable[[ApprovalEvent, Approval], None]:
        def report(event: ApprovalEvent, approval: Approval) -> None:
            assert event.approval_id == approval.id
            with lock:
                reports.append((name, event.action, approval.id))

        return report

    try:
        for name, store in replicas.items():
            assert isinstance(store, TransitionStore)
            store.add_listener(listener(name))
        a, b = replicas["a"], replicas["b"]
        request = delete_note_request(now[0] + timedelta(seconds=60), principal="agent")
        made = [a.create(request) for _ in range(12)]
        decided, cancelled, due = made[0], made[1], [m.id for m in made[2:]]
        b.decide(decided.id, approve=True, reviewer="maria", reason=None)
        a.cancel(cancelled.id, reason="the session ended")
        now[0] += timedelta(seconds=61)

        # Both replicas sweep and read the due requests at once: each expiry is made by one of them.
        def read_all(store: Any) -> None:
            for approval_id in due:
                store.get(approval_id)

        def list_pending(store: Any) -> None:
            store.list(ApprovalQuery(states=[ApprovalState.PENDING]))

        with ThreadPoolExecutor(max_workers=6) as pool:
            jobs: list[Future[Any]] = [
                pool.submit(job, store) for store in (a, b) for job in (read_all, list_pending)
            ]
            jobs += [pool.submit(store.expire_due) for store in (a, b)]
            for job in jobs:
                job.result()

        assert sorted((n, action) for n, action, i in reports if i in (decided.id, cancelled.id)) == [
            ("a", "cancelled"),
            ("a", "requested"),
            ("a", "requested"),
            ("b", "approved"),
        ]
        expiries = [i for _, action, i in reports if action == "expired"]
        assert sorted(expiries) == sorted(due), "every due request expired once, none twice"
        assert [action for _, action, _ in reports].count("requested") == len(made)
    finally:
        for store in replicas.values():
            store.close()
