"""A held call through the real proxy, end to end: queued, decided through the approvals API, run once.

Behind each ``shadowguard serve`` (HTTP) is the notes fixture over HTTP with the transaction extension
and a policy pack whose approval rule names ``delete_note``. The approval store is a SQLite file
named relatively in the config (so it resolves against the config's folder); the tests read it
directly too. Proxies differ in how long a held call waits:

* ``waiting``: ``wait_s`` 30 — the agent's call blocks until a reviewer decides through the API;
* ``immediate``: ``wait_s`` 0 — the call comes back ``approval_pending`` at once, and the agent
  sends it again after the decision (with or without the approval id);
* ``expiring``: ``wait_s`` 30, ``expires_after_s`` 1 — the request expires while the call waits.

"Nothing was done" is checked in the upstream's database file, after the session committed. Every
proxy sends its webhook notices to a small receiver in the test process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import MCPError

from guard.approvals import ApprovalQuery, ApprovalState, SqlApprovalStore
from proxy.held import HeldCalls
from proxy.server import MAX_INPUT_ROUNDS
from tests.support.approvals import (
    REVIEWERS_AUTH,
    api,
    committed_note,
    decide,
    delete_note_request,
    held_while,
    pending_approval,
    session_of,
)
from tests.support.processes import notes_http, shadowguard_serving
from tests.support.proxy import (
    agent_on,
    notes_http_upstream,
    notes_rows,
    outcome_meta,
    text,
    write_config,
)
from tests.support.webhook import WebhookReceiver

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]
POLICY = """\
version: 1
name: notes-approvals
tools:
  allow: [get_note, list_notes, put_note, delete_note, echo_meta, whoami]
checks:
  - id: notes.no_todo_drafts
    phase: at_commit
    source: {ref: "Notes handbook §2", quote: "Do not leave placeholder drafts behind."}
    message: A draft whose body is TODO may not be committed.
    sql: SELECT id FROM notes WHERE status = 'draft' AND body = 'TODO'
approvals:
  - id: notes.delete_needs_review
    source: {ref: "Notes handbook §3", quote: "A note is deleted only with an editor's approval."}
    tools: [delete_note]
"""
DECIDE_TIMEOUT_S = 60.0


@dataclass
class Flow:
    """The upstream's database, the proxies with their approval stores and audit logs, the notices."""

    db: Path
    proxies: dict[str, Any]
    stores: dict[str, Path]
    audits: dict[str, Path]
    notices: WebhookReceiver


def proxy_config(folder: Path, url: str, pack: Path, hook: str, **approvals: Any) -> Path:
    folder.mkdir()
    return write_config(
        folder / "proxy.yaml",
        [notes_http_upstream(url, pack)],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": "audit.jsonl"},
        approvals={"store": "sqlite:///approvals.db", "poll_s": 0.05, **approvals},
        webhook={"url": hook},
        auth=REVIEWERS_AUTH,
    )


@pytest.fixture(scope="module")
def flow(module_tmp: Path) -> Iterator[Flow]:
    db = module_tmp / "notes.sqlite"
    pack = module_tmp / "notes-approvals.yaml"
    pack.write_text(POLICY, encoding="utf-8")
    notes = notes_http(db).ready()
    settings = {
        "waiting": {"wait_s": 30, "expires_after_s": 300},
        "immediate": {"wait_s": 0, "expires_after_s": 300},
        "expiring": {"wait_s": 30, "expires_after_s": 1},
    }
    notices = WebhookReceiver()
    hook = notices.start()
    try:
        configs = {
            name: proxy_config(module_tmp / name, notes.url, pack, hook, **approvals)
            for name, approvals in settings.items()
        }
        with shadowguard_serving(configs) as proxies:
            yield Flow(
                db=db,
                proxies=proxies,
                stores={name: module_tmp / name / "approvals.db" for name in settings},
                audits={name: module_tmp / name / "audit.jsonl" for name in settings},
                notices=notices,
            )
    finally:
        notes.stop()
        notices.stop()


async def refused(agent: Any, name: str, arguments: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The guard's verdict on a call sent with ``meta`` that must come back as an error."""
    result = await agent.call(name, arguments, meta=meta)
    assert result.is_error, result
    assert result.structured_content is not None, result
    return dict(result.structured_content)


@contextmanager
def store_of(flow: Flow, name: str) -> Iterator[SqlApprovalStore]:
    """The approval store of proxy ``name``, read directly (closed on exit)."""
    store = SqlApprovalStore(f"sqlite:///{flow.stores[name]}")
    try:
        yield store
    finally:
        store.close()


def assert_cancelled(flow: Flow, approval_id: str, because: str) -> None:
    """The request was cancelled (in the ``immediate`` proxy's store), its reason naming ``because``."""
    with store_of(flow, "immediate") as store:
        cancelled = store.get(approval_id)
    assert cancelled.state is ApprovalState.CANCELLED
    assert cancelled.reason is not None and because in cancelled.reason, cancelled.reason


def audit(flow: Flow, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in flow.audits[name].read_text().splitlines()]


async def call_while_deciding(
    agent: Any, http: httpx2.AsyncClient, session_id: str, note: str, decision: str, reason: str | None
) -> tuple[Any, dict[str, Any]]:
    """Send ``delete_note`` (it waits for a reviewer) and decide it through the API meanwhile."""
    pending: dict[str, Any] = {}

    async def deciding() -> None:
        pending.update(await pending_approval(http, session_id))
        assert pending["tool"] == "delete_note" and pending["arguments"] == {"id": note}
        await decide(http, pending["id"], decision, reason)

    return await held_while(agent, note, deciding), pending


# -- a waiting call released by the reviewer's decision -----------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_approved_through_the_api_the_waiting_call_runs_once_then_commits(
    flow: Flow, mode: str
) -> None:
    proxy, note = flow.proxies["waiting"], f"{mode[:3]}-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, mode) as agent, api(proxy) as http:
        await committed_note(agent, flow.db, note)
        session_id = await session_of(agent)
        pending: dict[str, Any] = {}

        async def deciding() -> None:
            pending.update(await pending_approval(http, session_id))
            # While a person decides: nothing is done, nothing is locked, and a commit is refused.
            assert note in notes_rows(flow.db)
            assert pending["rehearsed"] is True and pending["rule_id"] == "notes.delete_needs_review"
            assert [(c["table"], c["key"], c["op"]) for c in pending["preview"]["changes"]] == [
                ("notes", note, "delete")
            ]
            status = await http.get(f"/api/sessions/{session_id}")
            assert status.status_code == 200
            refused = (await http.post(f"/api/sessions/{session_id}/commit")).json()
            assert refused["committed"] is False
            assert [v["rule_id"] for v in refused["violations"]] == ["approval_pending"]
            assert pending["id"] in refused["violations"][0]["message"]
            assert note in notes_rows(flow.db)
            await decide(http, pending["id"], "approve", "Checked with the author.")

        released = await held_while(agent, note, deciding)
        assert not released.is_error, text(released)
        assert json.loads(text(released)) == {"deleted": note}
        stamp = outcome_meta(released)
        assert (stamp["verdict"], stamp["approval_id"], stamp["approval_state"]) == (
            "allowed",
            pending["id"],
            "used",
        )
        assert note in notes_rows(flow.db), "run in the session's transaction, not committed yet"
        assert await agent.commit() == {"committed": True, "changes": 1, "applied_calls": 0, "violations": []}
    assert note not in notes_rows(flow.db)

    with store_of(flow, "waiting") as store:
        used = store.get(pending["id"])
        assert used.state is ApprovalState.APPROVED and used.used_at is not None and used.used_by
        assert used.decided_by == "maria" and used.reason == "Checked with the author."
        assert [e.action for e in store.history(pending["id"])] == ["requested", "approved", "used"]
    calls = [r for r in audit(flow, "waiting") if r.get("approval_id") == pending["id"]]
    assert [(r["kind"], r.get("verdict"), r.get("approval_state")) for r in calls] == [
        ("call", "held", "pending"),
        ("approval_decision", None, None),
        ("call", "allowed", "used"),
    ]


async def test_rejected_through_the_api_the_reason_reaches_the_waiting_agent(flow: Flow) -> None:
    proxy, note = flow.proxies["waiting"], f"rej-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, "2026-07-28") as agent, api(proxy) as http:
        await committed_note(agent, flow.db, note)
        session_id = await session_of(agent)
        rejected, pending = await call_while_deciding(
            agent, http, session_id, note, "reject", "This note is under legal hold."
        )
        assert rejected.is_error
        verdict = rejected.structured_content
        assert verdict is not None
        assert (verdict["verdict"], verdict["error_class"]) == ("refused", "approval_rejected")
        assert verdict["approval_id"] == pending["id"] and verdict["approval_state"] == "rejected"
        assert "This note is under legal hold." in text(rejected)
        assert "by maria" in text(rejected)
        assert (await agent.commit())["changes"] == 0
    assert note in notes_rows(flow.db), "a rejected call is not done"


async def test_expired_while_waiting_nothing_is_done(flow: Flow) -> None:
    proxy, note = flow.proxies["expiring"], f"exp-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, "legacy") as agent:
        await committed_note(agent, flow.db, note)
        expired = await agent.refused("delete_note", {"id": note})
        assert (expired["verdict"], expired["error_class"]) == ("refused", "approval_expired")
        assert expired["approval_state"] == "expired"
        assert "was not done" in expired["violations"][0]["message"]
        assert not (await agent.call("commit")).is_error
    assert note in notes_rows(flow.db)
    with store_of(flow, "expiring") as store:
        assert store.get(expired["approval_id"]).state is ApprovalState.EXPIRED


# -- a call that comes back approval_pending, and is sent again -----------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_pending_at_once_then_sent_again_after_approval(flow: Flow, mode: str) -> None:
    proxy, note = flow.proxies["immediate"], f"{mode[:3]}-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, mode) as agent, api(proxy) as http:
        await committed_note(agent, flow.db, note)
        held = await agent.call("delete_note", {"id": note})
        assert held.is_error
        verdict = held.structured_content
        assert verdict is not None
        assert (verdict["verdict"], verdict["error_class"]) == ("held", "approval_pending")
        approval_id = verdict["approval_id"]
        stamp = outcome_meta(held)
        assert (stamp["approval_id"], stamp["approval_state"]) == (approval_id, "pending")
        assert stamp["approval_expires_at"] == verdict["approval_expires_at"]
        shown = text(held)
        assert approval_id in shown and verdict["approval_expires_at"] in shown
        assert "send exactly the same call again" in shown and "Do not change the arguments" in shown
        assert verdict["hint"]["retryable"] is True
        with anyio.fail_after(DECIDE_TIMEOUT_S):
            while not flow.notices.notices_of(approval_id):
                await anyio.sleep(0.05)
        [notice] = flow.notices.notices_of(approval_id)
        assert notice["event"] == "approval.requested"
        assert notice["approval"]["tool"] == "delete_note" and notice["approval"]["tables"] == ["notes"]
        assert notice["review_url"] == f"{proxy.base}/review/{approval_id}"
        assert note not in json.dumps(notice), "a notice carries no arguments"

        again = await agent.refused("delete_note", {"id": note})
        assert again["verdict"] == "held" and again["approval_id"] == approval_id, "still the same request"
        assert len(flow.notices.notices_of(approval_id)) == 1, "no second notice for the same request"
        refused_commit = await agent.call("commit")
        assert refused_commit.is_error and refused_commit.structured_content is not None
        assert [v["rule_id"] for v in refused_commit.structured_content["violations"]] == ["approval_pending"]
        assert note in notes_rows(flow.db)

        await decide(http, approval_id, "approve", None)
        ran = await agent.call("delete_note", {"id": note})
        assert not ran.is_error, text(ran)
        assert (outcome_meta(ran)["approval_id"], outcome_meta(ran)["approval_state"]) == (
            approval_id,
            "used",
        )

        reused = await refused(agent, "delete_note", {"id": note}, meta={"shadowguard/approval": approval_id})
        assert (reused["error_class"], reused["violations"][0]["rule_id"]) == ("conflict", "approval_used")
        await agent.commit()
    assert note not in notes_rows(flow.db)


async def test_ids_that_do_not_fit_are_refused_and_nothing_is_done(flow: Flow) -> None:
    proxy, n = flow.proxies["immediate"], uuid.uuid4().hex[:8]
    kept, other = f"fit-{n}-a", f"fit-{n}-b"
    async with agent_on(proxy.url, "2026-07-28") as agent, api(proxy) as http:
        await committed_note(agent, flow.db, kept)
        await committed_note(agent, flow.db, other)
        approval_id = (await agent.refused("delete_note", {"id": kept}))["approval_id"]
        await decide(http, approval_id, "approve", None)

        changed = await refused(
            agent, "delete_note", {"id": other}, meta={"shadowguard/approval": approval_id}
        )
        assert (changed["error_class"], changed["violations"][0]["rule_id"]) == (
            "precondition_failed",
            "approval_mismatch",
        )
        forged = await refused(
            agent, "delete_note", {"id": kept}, meta={"shadowguard/approval": "apr_forged"}
        )
        assert forged["violations"][0]["rule_id"] == "approval_not_found"
        with pytest.raises(MCPError) as bad:
            await agent.call("delete_note", {"id": kept}, meta={"shadowguard/approval": 7})
        assert bad.value.code == -32602 and "shadowguard/approval" in bad.value.message

        async with agent_on(proxy.url, "2026-07-28") as intruder:
            stolen = await refused(
                intruder, "delete_note", {"id": kept}, meta={"shadowguard/approval": approval_id}
            )
            assert stolen["error_class"] == "permission_denied"
        assert not (await agent.call("commit")).is_error
        assert {kept, other} <= set(notes_rows(flow.db))

        ran = await agent.call("delete_note", {"id": kept}, meta={"shadowguard/approval": approval_id})
        assert not ran.is_error, text(ran)
        assert not (await agent.call("commit")).is_error
    rows = notes_rows(flow.db)
    assert kept not in rows and other in rows


async def test_a_change_set_that_moved_since_the_rehearsal_returns_to_review(flow: Flow) -> None:
    proxy, note = flow.proxies["immediate"], f"moved-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, "legacy") as agent, api(proxy) as http:
        await committed_note(agent, flow.db, note, body="as reviewed")
        first = (await agent.refused("delete_note", {"id": note}))["approval_id"]
        await decide(http, first, "approve", None)
        # The note changes after the rehearsal: deleting it now would delete something else.
        await agent.ok("put_note", {"id": note, "body": "edited since", "status": "published"})

        moved = await agent.refused("delete_note", {"id": note})

        assert moved["verdict"] == "held" and moved["approval_id"] != first
        assert "returns to review" in moved["violations"][0]["message"]
        with store_of(flow, "immediate") as store:
            assert store.get(first).used_at is not None
            renewed = store.get(moved["approval_id"])
        assert renewed.state is ApprovalState.PENDING
        [change] = renewed.preview.changes
        assert change.before is not None and change.before["body"] == "edited since"
        assert (await agent.json("get_note", {"id": note}))["body"] == "edited since", "not deleted"

        await decide(http, moved["approval_id"], "approve", None)
        assert not (await agent.call("delete_note", {"id": note})).is_error
        assert not (await agent.call("commit")).is_error
    assert note not in notes_rows(flow.db)


async def test_a_rollback_cancels_the_sessions_pending_requests(flow: Flow) -> None:
    proxy, note = flow.proxies["immediate"], f"cancel-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, "2026-07-28") as agent:
        await committed_note(agent, flow.db, note)
        approval_id = (await agent.refused("delete_note", {"id": note}))["approval_id"]
        assert not (await agent.call("rollback")).is_error
        assert_cancelled(flow, approval_id, "rolled its session back")
        with store_of(flow, "immediate") as store:
            assert store.list(ApprovalQuery(states=[ApprovalState.PENDING], session_id=agent.session)) == []
        explicit = await refused(
            agent, "delete_note", {"id": note}, meta={"shadowguard/approval": approval_id}
        )
        assert explicit["violations"][0]["rule_id"] == "approval_cancelled"
        asked_again = await agent.refused("delete_note", {"id": note})
        assert asked_again["verdict"] == "held" and asked_again["approval_id"] != approval_id
        await agent.call("rollback")
    assert note in notes_rows(flow.db)


async def test_a_client_that_can_answer_input_requests_is_asked_to_check_again(flow: Flow) -> None:
    """2026-07-28 with elicitation: a pending call is an input request; answering it never approves."""
    proxy, note = flow.proxies["immediate"], f"ask-{uuid.uuid4().hex[:8]}"
    asked: list[str] = []
    async with api(proxy) as http:

        async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            approval_id = params.message.split("approval ", 1)[1].split(" ", 1)[0]
            if len(asked) == 1:
                # Accepting alone must not run it: the retried call is held again.
                assert note in notes_rows(flow.db)
            else:
                await decide(http, approval_id, "approve", None)
            return types.ElicitResult(action="accept", content={})

        async with agent_on(proxy.url, "2026-07-28", elicitation_callback=answer) as agent:
            await committed_note(agent, flow.db, note)
            ran = await agent.call("delete_note", {"id": note})
            assert not ran.is_error, text(ran)
            assert len(asked) == 2 and "accept to check again" in asked[0].lower()
            assert "Answering does not approve it" in asked[0]
            stamp = outcome_meta(ran)
            assert stamp["approval_state"] == "used" and stamp["approval_id"] in asked[0]
            assert not (await agent.call("commit")).is_error
    assert note not in notes_rows(flow.db)


async def test_a_client_that_keeps_answering_gets_the_held_result_not_a_rounds_error(flow: Flow) -> None:
    """The SDK client gives up after 10 input rounds (InputRequiredRoundsExceededError): the proxy asks
    at most MAX_INPUT_ROUNDS times, then answers with the held result the agent can act on."""
    proxy, note = flow.proxies["immediate"], f"rounds-{uuid.uuid4().hex[:8]}"
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with agent_on(proxy.url, "2026-07-28", elicitation_callback=answer) as agent:
        await committed_note(agent, flow.db, note)
        held = await agent.refused("delete_note", {"id": note})
        assert held["verdict"] == "held" and held["approval_state"] == "pending"
        assert len(asked) == MAX_INPUT_ROUNDS
        await agent.call("rollback")
    assert note in notes_rows(flow.db)


async def test_closing_the_connection_cancels_the_sessions_pending_requests(flow: Flow) -> None:
    proxy, note = flow.proxies["immediate"], f"closed-{uuid.uuid4().hex[:8]}"
    async with agent_on(proxy.url, "legacy") as agent:
        await committed_note(agent, flow.db, note)
        approval_id = (await agent.refused("delete_note", {"id": note}))["approval_id"]
    # The client ended its HTTP session (DELETE /mcp): the guard session ended with it.
    assert_cancelled(flow, approval_id, "connection closed")
    assert note in notes_rows(flow.db)


async def test_the_sweep_expires_requests_nobody_reads(tmp_path: Path) -> None:
    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]
    store = SqlApprovalStore(f"sqlite:///{tmp_path / 'approvals.db'}", clock=lambda: now[0])
    held = HeldCalls(store, expires_after_s=60, wait_s=0, poll_s=0.05, consumer="test")
    try:
        request = delete_note_request(now[0] + timedelta(seconds=60))
        first, second = store.create(request), store.create(request)
        assert {a.id for a in held.pending("s1", None)} == {first.id, second.id}
        assert await held.sweep() == []
        now[0] += timedelta(seconds=61)
        assert sorted(a.id for a in await held.sweep()) == sorted([first.id, second.id])
        assert held.pending("s1", None) == []
        assert held.cancel_pending("s1", None, "the agent's connection closed before a decision") == []
    finally:
        held.close()
