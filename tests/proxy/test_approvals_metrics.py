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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.approvals import REVIEWERS_AUTH, VIEWER_TOKEN, bearer
from tests.support.processes import notes_http, shadowguard_serving
from tests.support.proxy import NOTES_APPROVALS_POLICY, notes_rows, text, write_config

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
class Receiver:
    """A webhook receiver answering every POST with ``status``; keeps the approval ids it was sent."""

    status: int
    received: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.received.append(body["approval"]["id"])
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/approvals"

    def of(self, approval_id: str) -> int:
        with self.lock:
            return self.received.count(approval_id)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@dataclass
class Rig:
    db: Path
    proxies: dict[str, Any]
    stores: dict[str, Path]
    failing: Receiver


@pytest.fixture(scope="module")
def rig(module_tmp: Path) -> Iterator[Rig]:
    db = module_tmp / "notes.sqlite"
    notes = notes_http(db).ready()
    taking, failing = Receiver(204), Receiver(500)
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
        [{"name": "notes", "transport": "http", "url": url, "policy": str(NOTES_APPROVALS_POLICY)}],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": "audit.jsonl"},
        telemetry={"exporter": "console"},
        approvals={"store": "sqlite:///approvals.db", "poll_s": 0.05, "sweep_s": 0.2, **approvals},
        webhook={"url": hook, "max_attempts": 2},
        auth=REVIEWERS_AUTH,
    )


# -- helpers --------------------------------------------------------------------------------------------


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


async def committed_note(rig: Rig, agent: Any, note: str) -> str:
    """Commit a note; returns the agent's guard session id."""
    await agent.ok("put_note", {"id": note, "body": "keep me", "status": "published"})
    committed = await agent.call("commit")
    assert not committed.is_error, text(committed)
    assert note in notes_rows(rig.db)
    listed = await agent.call("list_notes")
    return str(dict((listed.meta or {})["shadowguard/outcome"])["session"])


async def pending_approval(
    http: httpx2.AsyncClient, session_id: str, *, other_than: str | None = None
) -> Any:
    """The session's pending request, once a held call has made it (read through the API)."""
    with anyio.fail_after(TIMEOUT_S):
        while True:
            listed = await http.get(
                "/api/approvals",
                params={"state": "pending", "session_id": session_id},
                headers=bearer(VIEWER_TOKEN),
            )
            assert listed.status_code == 200, listed.text
            items = [a for a in listed.json()["items"] if a["id"] != other_than]
            if items:
                [item] = items
                return item
            await anyio.sleep(0.05)
