"""The proxy as a new user meets it (issue 14, deliverables 1, 2, 3 and 8): a plain 2026-07-28 client
with no ``_meta``, texts that are true for journaled upstreams, destructive tools with no reviewer,
and audit records and metrics of what a rollback undid and what it did not.

One ``shadowguard serve`` over HTTP for the module, in front of three upstreams: the notes fixture
with the transaction extension (``notes``), the notes fixture without it (journaled, prefix ``j_``,
its pack names a compensation for ``put_note``) and tests/fixtures/sql_server.py (journaled, stdio,
prefix ``sql_``, nothing compensates its writes). No reviewer is configured.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from tests.support.processes import notes_http, shadowguard_serve_refused, shadowguard_serving
from tests.support.proxy import (
    Agent,
    agent_on,
    journal_upstream,
    notes_http_upstream,
    notes_rows,
    request_meta,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio
SQL_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "sql_server.py"
PLAIN = "2026-07-28"


@dataclass
class Served:
    url: str
    base: str
    notes_db: Path
    journal_db: Path
    sql_db: Path
    audit: Path
    log: Path


def upstream_configs(notes_url: str, journal_url: str, sql_db: Path) -> list[dict[str, Any]]:
    return [
        notes_http_upstream(notes_url),
        journal_upstream(journal_url),
        {
            "name": "db",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SQL_SERVER), "--db", str(sql_db)],
            "prefix": "sql_",
        },
    ]


@pytest.fixture(scope="module")
def served(module_tmp: Path) -> Iterator[Served]:
    notes_db, journal_db, sql_db = (module_tmp / f"{n}.sqlite" for n in ("notes", "journal", "sql"))
    notes = notes_http(notes_db)
    journal = notes_http(journal_db, transactional=False)
    try:
        notes.ready()
        journal.ready()
        audit = module_tmp / "audit.jsonl"
        config = write_config(
            module_tmp / "proxy.yaml",
            upstream_configs(notes.url, journal.url, sql_db),
            http={"host": "127.0.0.1", "port": 0},
            audit={"path": str(audit)},
            approvals={"wait_s": 600, "store": f"sqlite:///{module_tmp / 'approvals.db'}"},
        )
        with shadowguard_serving({"proxy": config}) as processes:
            proxy = processes["proxy"]
            assert proxy.url is not None
            yield Served(proxy.url, proxy.base, notes_db, journal_db, sql_db, audit, proxy.log)
    finally:
        notes.stop()
        journal.stop()


def stamp(result: Any) -> dict[str, Any]:
    return dict((result.meta or {})["shadowguard/outcome"])


def records(served: Served, kind: str, session: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in served.audit.read_text().splitlines()]
    return [r for r in lines if r["kind"] == kind and r["session"] == session]


def metric(served: Served, name: str, **labels: str) -> float:
    body = httpx2.get(served.base + "/metrics", timeout=10).text
    total = 0.0
    for line in body.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- 1. sessions without ceremony ---------------------------------------------------------------------------


async def test_a_plain_2026_client_lists_reads_and_writes_with_no_meta(served: Served) -> None:
    note = f"plain-{uuid.uuid4().hex[:6]}"
    async with Client(served.url, mode=PLAIN, cache=None, read_timeout_seconds=30) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"get_note", "put_note", "j_put_note", "sql_read_query", "commit", "rollback"} <= names

        read = await client.call_tool("get_note", {"id": "n1"})
        assert not read.is_error, text(read)
        assert json.loads(text(read))["body"] == "first note"
        assert "session" not in stamp(read), "a read names no session: it ran on its own"

        write = await client.call_tool("put_note", {"id": note, "body": "from a plain client"})
        assert not write.is_error, text(write)
        minted = stamp(write)["session"]
        assert stamp(write)["send"] == {"_meta": {"shadowguard/session": minted}}
        assert note not in notes_rows(served.notes_db), "the write is pending in the minted session"

        commit = await client.call_tool("commit", {})
        assert commit.is_error, "a commit that names no session cannot guess one"
        assert "shadowguard/session" in text(commit)

        commit = await client.call_tool("commit", {}, meta=request_meta({"shadowguard/session": minted}))
        assert not commit.is_error, text(commit)
        assert notes_rows(served.notes_db)[note]["body"] == "from a plain client"


async def test_a_read_without_a_session_that_wrote_is_not_kept(served: Served) -> None:
    async with Client(served.url, mode=PLAIN, cache=None, read_timeout_seconds=30) as client:
        for _ in range(3):
            read = await client.call_tool("list_notes", {})
            assert not read.is_error, text(read)
            assert "session" not in stamp(read)


# -- 2. honest surfaces per upstream ------------------------------------------------------------------------


async def test_texts_say_what_is_pending_and_what_is_already_applied(served: Served) -> None:
    session, note = f"honest-{uuid.uuid4().hex[:6]}", f"honest-{uuid.uuid4().hex[:6]}"
    async with agent_on(served.url, PLAIN) as agent:
        agent.session = session
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
        for name in ("commit", "rollback"):
            description = tools[name].description or ""
            assert "journal" in description and "db" in description, description
            assert "already" in description, description
        assert "can be undone" not in (tools["commit"].description or "")

        journaled = await agent.call("j_put_note", {"id": note, "body": "real at once"})
        assert not journaled.is_error, text(journaled)
        assert stamp(journaled)["applied"] is True
        assert "already applied" in text(journaled)
        assert note in notes_rows(served.journal_db)

        pending = await agent.call("put_note", {"id": note, "body": "pending until commit"})
        assert not pending.is_error and stamp(pending)["applied"] is False
        assert "already applied" not in text(pending)

        read = await agent.call("get_note", {"id": "n1"})
        assert "applied" not in stamp(read)

        commit = await agent.call("commit")
        assert not commit.is_error, text(commit)
        body = text(commit)
        assert "no changes to make durable" not in body
        assert commit.structured_content is not None
        assert commit.structured_content["changes"] == 1
        assert commit.structured_content["applied_calls"] == 1
        assert stamp(journaled)["call_id"] in body, "the commit names the applied call by the agent's id"
    [record] = records(served, "commit", session)
    assert record["changes"] == 1 and record["applied_calls"] == [stamp(journaled)["call_id"]]


# -- 8. what a rollback undid and what it did not -----------------------------------------------------------


async def test_rollback_reports_undone_and_not_undone_calls_everywhere(served: Served) -> None:
    session, note = f"undo-{uuid.uuid4().hex[:6]}", f"undo-{uuid.uuid4().hex[:6]}"
    incomplete_before = metric(served, "shadowguard_rollbacks_total", reason="agent", result="incomplete")
    complete_before = metric(served, "shadowguard_rollbacks_total", reason="agent", result="complete")
    async with agent_on(served.url, PLAIN) as agent:
        agent.session = session
        compensable = await agent.call("j_put_note", {"id": note, "body": "undone by a compensation"})
        stuck = await agent.call("sql_write_query", {"query": "INSERT INTO items VALUES (99, 'stays')"})
        pending = await agent.call("put_note", {"id": note, "body": "discarded"})
        for result in (compensable, stuck, pending):
            assert not result.is_error, text(result)

        rollback = await agent.call("rollback")
        assert rollback.is_error, "a rollback that left a call in effect is not a success"
        body, verdict = text(rollback), rollback.structured_content
        assert verdict is not None and verdict["rolled_back"] is False
        assert verdict["changes"] == 1
        assert verdict["undone_calls"] == [stamp(compensable)["call_id"]]
        assert verdict["not_undone_calls"] == [stamp(stuck)["call_id"]]
        assert stamp(stuck)["call_id"] in body and stamp(compensable)["call_id"] in body
        assert note not in notes_rows(served.journal_db)
        assert note not in notes_rows(served.notes_db)

        clean = await agent.call("rollback")
        assert not clean.is_error, text(clean)
    [record] = records(served, "rollback", session)
    assert record["changes"] == 1
    assert record["undone_calls"] == [stamp(compensable)["call_id"]]
    assert record["not_undone_calls"] == [stamp(stuck)["call_id"]]
    assert record["rolled_back"] is False
    after = metric(served, "shadowguard_rollbacks_total", reason="agent", result="incomplete")
    assert after == incomplete_before + 1
    assert metric(served, "shadowguard_rollbacks_total", reason="agent", result="complete") == complete_before


async def test_a_failure_of_unknown_outcome_does_not_also_say_nothing_was_kept() -> None:
    from guard.models import EffectClass, ErrorHint, ToolCall, ToolOutcome, Verdict
    from proxy.server import render_outcome

    hint = ErrorHint(
        error_class="transient",
        message="timed out",
        next_step="Its outcome is unknown: it may have been applied.",
        retryable=True,
    )
    outcome = ToolOutcome(
        call=ToolCall(tool="put_note", arguments={}),
        effect=EffectClass.WRITE,
        verdict=Verdict.FAILED,
        error_class="transient",
        hint=hint,
        outcome_unknown=True,
    )
    rendered = text(render_outcome(outcome, None, "s"))
    assert "nothing of it was kept" not in rendered and "may have been applied" in rendered


# -- 3. destructive tools and no reviewer -------------------------------------------------------------------


async def test_a_held_call_no_reviewer_can_approve_is_refused_at_once(served: Served) -> None:
    session = f"noreview-{uuid.uuid4().hex[:6]}"
    async with Client(served.url, mode=PLAIN, cache=None, read_timeout_seconds=20) as client:
        agent = Agent(client, session)
        await agent.ok("put_note", {"id": f"{session}-a", "body": "kept"})
        refused = await agent.refused("j_delete_note", {"id": "n2"})
        assert refused["verdict"] == "refused", refused
        assert [v["rule_id"] for v in refused["violations"]] == ["no_reviewer"]
        assert "no reviewer" in refused["violations"][0]["message"]
        commit = await agent.call("commit")
        assert not commit.is_error, "a call no one can approve does not block the commit"
    assert "n2" in notes_rows(served.journal_db)
    assert "no reviewer can decide" in served.log.read_text(), "a warning at start-up"


def test_require_reviewers_refuses_to_start_without_one(module_tmp: Path) -> None:
    notes = notes_http(module_tmp / "require.sqlite")
    try:
        config = write_config(
            module_tmp / "require.yaml",
            [notes_http_upstream(notes.ready().url, None)],
            http={"host": "127.0.0.1", "port": 0},
            approvals={"require_reviewers": True, "store": f"sqlite:///{module_tmp / 'require.db'}"},
        )
        refusal = shadowguard_serve_refused(config)
    finally:
        notes.stop()
    assert "delete_note" in refusal and "approvals.require_reviewers" in refusal
