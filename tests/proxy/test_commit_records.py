"""Commit records (issue 15, docs/adr/011): a commit that landed is never reported lost, and a commit
across two upstreams that the proxy's death cut in two is reported upstream by upstream.

The proxy kills itself with SIGKILL at a named point of its commit (``SHADOWGUARD_CRASH_AT``,
proxy.commits.crash_point): between the upstream's commit and the ledger noting it. Before the
commit records, the restarted proxy answered such a commit ``changes_lost`` although its rows were
committed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

from proxy.commits import CRASH_ENV
from proxy.ledger import COMMITTING, INTERRUPTED, CommitRecord, SessionLedger
from tests.support.processes import SHADOWGUARD, Process
from tests.support.proxy import agent_on, notes_rows, notes_upstream, text, write_config

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"


# -- the ledger on its own -----------------------------------------------------------------------------


def test_a_commit_cut_by_a_restart_names_applied_unknown_and_not_applied(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = SessionLedger(url)
    record = CommitRecord(upstreams=("a", "b", "c"))
    ledger.committing("s", "alice", record)
    ledger.applied("s", "alice", CommitRecord(record.upstreams, ("a",)))
    assert ledger.peek("s", "alice") is None, "a commit under way belongs to its live process"
    ledger.close()

    restarted = SessionLedger(url)
    assert restarted.peek("s", "mallory") is None and restarted.take("s", None) is None
    entry = restarted.take("s", "alice")
    assert entry is not None and entry.state == INTERRUPTED and entry.commit is not None
    assert (entry.commit.applied, entry.commit.unknown, entry.commit.not_applied) == (("a",), ("b",), ("c",))
    assert restarted.take("s", "alice") is None, "told once"
    restarted.close()
    assert COMMITTING != INTERRUPTED


def test_two_principals_sessions_of_one_id_are_two_rows(tmp_path: Path) -> None:
    ledger = SessionLedger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.opened("shared", "alice")
    ledger.opened("shared", "bob")
    ledger.ended("shared", "bob", "idle")
    assert ledger.take("shared", "alice") is None, "alice's session is open: not lost"
    bobs = ledger.take("shared", "bob")
    assert bobs is not None and bobs.state == "idle"
    ledger.close()


# -- a real proxy killed mid-commit ----------------------------------------------------------------------


def two_upstreams(tmp: Path, marker: str) -> tuple[Path, Path, Path]:
    db_a, db_b = tmp / "a.sqlite", tmp / "b.sqlite"
    config = write_config(
        tmp / "proxy.yaml",
        [
            notes_upstream(db_a, marker, name="a", prefix="a_"),
            notes_upstream(db_b, marker, name="b", prefix="b_"),
        ],
        http={"host": "127.0.0.1", "port": 0},
        sessions={"store": f"sqlite:///{tmp / 'sessions.db'}"},
    )
    return config, db_a, db_b


async def commit_while_dying(url: str, session: str) -> None:
    """Send ``commit`` to a proxy that kills itself under it (the client then fails to disconnect)."""
    with contextlib.suppress(Exception):
        async with agent_on(url, MODERN) as agent:
            agent.session = session
            await agent.call("commit")


def wait_dead(process: Any) -> int:
    deadline = time.monotonic() + 60
    while process.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    code = process.proc.poll()
    assert code is not None, "the proxy did not stop at the crash point"
    return int(code)


@pytest.mark.parametrize(
    ("crash_at", "expected"),
    [
        ("kill:commit:after:a", {"a": "unknown", "b": "not_applied"}),
        ("kill:commit:after:b", {"a": "applied", "b": "unknown"}),
    ],
)
async def test_a_proxy_killed_between_two_upstream_commits_reports_each_upstream(
    tmp_path: Path, marker: str, crash_at: str, expected: dict[str, str]
) -> None:
    config, db_a, db_b = two_upstreams(tmp_path, marker)
    process = Process(
        [SHADOWGUARD, "serve", "--config", str(config)],
        config.with_suffix(".log"),
        announce="shadowguard serve: listening on",
        env={CRASH_ENV: crash_at},
    ).ready()
    note = f"r-{uuid.uuid4().hex[:8]}"
    try:
        async with agent_on(process.url, MODERN) as agent:
            session = agent.session
            assert session is not None
            await agent.ok("a_put_note", {"id": note, "body": "on a", "status": "draft"})
            await agent.ok("b_put_note", {"id": note, "body": "on b", "status": "draft"})
        await commit_while_dying(process.url, session)
        assert wait_dead(process) == -9
        landed = {"a": note in notes_rows(db_a), "b": note in notes_rows(db_b)}
        assert landed == {"a": True, "b": crash_at == "kill:commit:after:b"}

        process.restart([SHADOWGUARD, "serve", "--config", str(config)])
        async with httpx2.AsyncClient(base_url=process.base, timeout=60) as http:
            shown = await http.get(f"/api/sessions/{session}")
            assert shown.status_code == 200, shown.text
            body = shown.json()
            assert (body["open"], body["state"], body["committed"]) == (False, "commit_interrupted", False)
            assert body["upstreams"] == expected
        async with agent_on(process.url, MODERN) as agent:
            agent.session = session
            result = await agent.call("commit")
            message = text(result)
            assert result.is_error and result.structured_content is not None, message
            assert result.structured_content["committed"] is False
            assert result.structured_content["upstreams"] == expected
            (violation,) = result.structured_content["violations"]
            assert violation["rule_id"] == "commit_interrupted", message
            assert "changes_lost" not in message and "nothing was committed" not in message
            assert (
                "Outcome unknown on: " + repr(next(k for k, v in expected.items() if v == "unknown"))
                in message
            )
            if "applied" in expected.values():
                assert "Applied (committed) on: 'a'" in message
            # Told once: the session goes on, and a new commit keeps what is written now.
            await agent.ok("b_put_note", {"id": note, "body": "redone", "status": "draft"})
            await agent.ok("commit")
        assert notes_rows(db_b)[note]["body"] == "redone"
    finally:
        assert process.stop() == 0, process.log.read_text()


async def test_an_upstream_commit_that_fails_after_another_landed_is_a_partial_commit_record(
    tmp_path: Path, marker: str
) -> None:
    """In a live proxy: ``a`` committed, ``b``'s commit fails (injected). The answer and the sessions
    API name ``a`` applied and ``b`` not applied; the next commit repeats that nothing is pending."""
    config, db_a, db_b = two_upstreams(tmp_path, marker)
    process = Process(
        [SHADOWGUARD, "serve", "--config", str(config)],
        config.with_suffix(".log"),
        announce="shadowguard serve: listening on",
        env={CRASH_ENV: "fail:commit:before:b"},
    ).ready()
    note = f"p-{uuid.uuid4().hex[:8]}"
    try:
        async with agent_on(process.url, MODERN) as agent:
            await agent.ok("a_put_note", {"id": note, "body": "on a", "status": "draft"})
            await agent.ok("b_put_note", {"id": note, "body": "on b", "status": "draft"})
            result = await agent.call("commit")
            message = text(result)
            assert result.is_error and result.structured_content is not None, message
            assert result.structured_content["upstreams"] == {"a": "applied", "b": "not_applied"}
            assert [v["rule_id"] for v in result.structured_content["violations"]] == ["partial_commit"]
            assert message.startswith("Commit incomplete") and "Not applied (rolled back) on: 'b'" in message
            async with httpx2.AsyncClient(base_url=process.base, timeout=60) as http:
                shown = (await http.get(f"/api/sessions/{agent.session}")).json()
            assert shown["commit"] == {"a": "applied", "b": "not_applied"}
        assert note in notes_rows(db_a) and note not in notes_rows(db_b)
    finally:
        assert process.stop() == 0, process.log.read_text()
