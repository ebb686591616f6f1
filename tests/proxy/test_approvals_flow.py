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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from guard.approvals import ApprovalState, SqlApprovalStore
from tests.support.approvals import REVIEWERS_AUTH, VIEWER_TOKEN, bearer
from tests.support.processes import notes_http, shadowguard_serving
from tests.support.proxy import notes_rows, outcome_meta, text, write_config

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
class Notices:
    """The webhook receiver: what the proxies POSTed."""

    received: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, approval_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [n for n in self.received if n["approval"]["id"] == approval_id]


@dataclass
class Flow:
    """The upstream's database, the proxies with their approval stores and audit logs, the notices."""

    db: Path
    proxies: dict[str, Any]
    stores: dict[str, Path]
    audits: dict[str, Path]
    notices: Notices


def webhook_receiver(notices: Notices) -> ThreadingHTTPServer:
    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with notices.lock:
                notices.received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return ThreadingHTTPServer(("127.0.0.1", 0), Receive)


def proxy_config(folder: Path, url: str, pack: Path, hook: str, **approvals: Any) -> Path:
    folder.mkdir()
    return write_config(
        folder / "proxy.yaml",
        [{"name": "notes", "transport": "http", "url": url, "policy": str(pack)}],
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
    notices = Notices()
    receiver = webhook_receiver(notices)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/hooks/approvals"
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
        receiver.shutdown()
        receiver.server_close()


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


async def session_of(agent: Any) -> str:
    """The guard session id the proxy gives this agent (a read names it in the outcome)."""
    return str(outcome_meta(await agent.call("list_notes"))["session"])


async def committed_note(flow: Flow, agent: Any, note: str, body: str = "keep me") -> None:
    await agent.ok("put_note", {"id": note, "body": body, "status": "published"})
    committed = await agent.call("commit")
    assert not committed.is_error, text(committed)
    assert note in notes_rows(flow.db)


async def pending_approval(http: httpx2.AsyncClient, session_id: str) -> dict[str, Any]:
    """The session's pending request, once the held call has made it (read through the API)."""
    with anyio.fail_after(DECIDE_TIMEOUT_S):
        while True:
            listed = await http.get(
                "/api/approvals",
                params={"state": "pending", "session_id": session_id},
                headers=bearer(VIEWER_TOKEN),
            )
            assert listed.status_code == 200, listed.text
            items: list[dict[str, Any]] = listed.json()["items"]
            if items:
                assert len(items) == 1, items
                return items[0]
            await anyio.sleep(0.05)
