"""Concurrent-session isolation trial of ``bench chaos`` (:func:`run_isolation`).

``sessions`` MCP clients at once, each its own guard session through one ``shadowguard serve`` over
the notes fixture (HTTP, transactional, one SQLite file, ``writers: 1`` so sessions queue for
SQLite's one writer in the proxy for at most ``writer_wait_s``). Each session writes its own note,
reads the note of the next session, and commits; a write or commit refused with a retryable error is
sent again after a short jittered pause. Counted:

* **leaks**: a session read the next session's note before that session had sent its commit, or a
  note is in the database whose session never sent its commit;
* **lost-commits**: a commit the client saw acknowledged whose note is not in the database;
* **hangs**: one call that took longer than ``writer_wait_s`` + :data:`BLOCK_SLACK_S` (a session
  blocked by another beyond the configured bound, plus the proxy's own work on a loaded machine), or
  a session that never got its write in (it then rolls back, so that nothing it left holds the
  writer slot);
* **5xx**: HTTP answers of 500 or more.

Figures: committed writes per second over the wall time, p50/p99 of a session's write-to-commit time
(retries included) and the longest single call.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, MCPError

from benchmark.chaos_stack import (
    NotesHttp,
    TrialRecord,
    client,
    meta,
    notes_rows,
    start_proxy,
    text_of,
    write_config,
)
from benchmark.fixtures import NOTES_POLICY
from benchmark.perf_proxy import ProxyBenchError, _p99

WRITER_WAIT_S = 10.0
BLOCK_SLACK_S = 50.0
"""A call may take this long beyond ``writer_wait_s`` (the proxy's own work on a loaded machine)."""
RETRY_PAUSE_S = (0.05, 0.5)
MAX_SENDS = 60


class IsolationError(RuntimeError):
    """The trial could not run; the message says why."""


class _Run:
    def __init__(self, rec: TrialRecord, sessions: int, url: str, rng: random.Random) -> None:
        self.rec, self.sessions, self.url, self.rng = rec, sessions, url, rng
        self.prefix = f"iso{rec.trial}-{os.getpid()}-"
        self.commit_sent: dict[int, float] = {}
        self.acked: set[int] = set()
        self.latencies_ms: list[float] = []
        self.longest_call_s = 0.0
        self.retries = 0
        self.seen: list[int] = []
        self.bound_s = WRITER_WAIT_S + BLOCK_SLACK_S

    def note(self, i: int) -> str:
        return f"{self.prefix}{i}"

    async def _call(self, c: Client, i: int, name: str, args: dict[str, Any]) -> types.CallToolResult | None:
        started = time.monotonic()
        try:
            with anyio.fail_after(self.bound_s * 2):
                answer = await c.call_tool(name, args, meta=meta(f"{self.prefix}s{i}"))
        except MCPError as exc:
            self.rec.problem(None, f"session {i}: {name} got JSON-RPC error {exc.code}: {exc}"[:300])
            return None
        except TimeoutError:
            answer = None
        took = time.monotonic() - started
        self.longest_call_s = max(self.longest_call_s, took)
        if took > self.bound_s:
            self.rec.problem(
                "hangs", f"hang: session {i}'s {name} took {took:.1f} s (bound {self.bound_s:.0f} s)"
            )
        return answer

    async def _until_done(
        self, c: Client, i: int, name: str, args: dict[str, Any]
    ) -> types.CallToolResult | None:
        for _ in range(MAX_SENDS):
            answer = await self._call(c, i, name, args)
            if answer is None or not answer.is_error:
                return answer
            if not ((answer.structured_content or {}).get("hint") or {}).get("retryable"):
                self.rec.problem(None, f"session {i}: {name} refused: {text_of(answer)[:300]}")
                return None
            self.retries += 1
            await anyio.sleep(self.rng.uniform(*RETRY_PAUSE_S))
        self.rec.problem("hangs", f"hang: session {i}'s {name} still refused after {MAX_SENDS} sends")
        return None

    async def session(self, i: int) -> None:
        try:
            await self._session(i)
        except Exception as exc:  # the client or its connection failed: say how, for the report
            self.rec.problem(None, f"session {i} failed: {exc!r}"[:400])

    async def _session(self, i: int) -> None:
        http, c = client(self.url, self.seen, self.bound_s * 2)
        async with http, c:
            started = time.monotonic()
            body = {"id": self.note(i), "body": f"session {i}", "status": "draft"}
            if await self._until_done(c, i, "put_note", body) is None:
                # whatever of it landed late must not hold the writer slot for the others
                await self._call(c, i, "rollback", {})
                return
            other = (i + 1) % self.sessions
            if other != i:
                read = await self._call(c, i, "get_note", {"id": self.note(other)})
                ended = time.monotonic()
                sent = self.commit_sent.get(other)
                if read is not None and not read.is_error and (sent is None or sent > ended):
                    self.rec.problem("leaks", f"leak: session {i} read session {other}'s uncommitted note")
            self.commit_sent[i] = time.monotonic()
            done = await self._until_done(c, i, "commit", {})
            if done is not None and (done.structured_content or {}).get("committed") is True:
                self.acked.add(i)
                self.latencies_ms.append((time.monotonic() - started) * 1000)
            else:
                await self._call(c, i, "rollback", {})


def run_isolation(
    trial: int, sessions: int, work: Path, *, seed: int = 0, shadowguard: str | None = None
) -> TrialRecord:
    if sessions < 2:
        raise IsolationError("the isolation trial needs at least 2 sessions")
    rec = TrialRecord("isolation", trial)
    work.mkdir(parents=True, exist_ok=True)
    db = str(work / "notes.sqlite")
    notes = NotesHttp(work, db)
    proxy = None
    began = time.perf_counter()
    try:
        url = notes.start()
        upstream: dict[str, Any] = {
            "name": "notes",
            "transport": "http",
            "url": url,
            "policy": str(NOTES_POLICY),
        }
        upstream |= {"writers": 1, "writer_wait_s": WRITER_WAIT_S}
        proxy, proxy_url = start_proxy(
            write_config(work / "proxy.yaml", [upstream]), work / "proxy.log", shadowguard
        )
        run = _Run(rec, sessions, proxy_url, random.Random(seed))  # noqa: S311 - retry jitter

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for i in range(sessions):
                    tg.start_soon(run.session, i)

        started = time.perf_counter()
        anyio.run(main)
        wall = time.perf_counter() - started
    except ProxyBenchError as exc:
        raise IsolationError(str(exc)) from exc
    finally:
        if proxy is not None:
            proxy.stop()
        notes.stop()
    present = notes_rows(db, run.prefix)
    for i in range(sessions):
        if i in run.acked and run.note(i) not in present:
            rec.problem(
                "lost_commits", f"lost commit: session {i}'s acknowledged note is not in the database"
            )
        if i not in run.commit_sent and run.note(i) in present:
            rec.problem("leaks", f"leak: session {i} never sent its commit and its note is in the database")
    rec.counters.http_5xx += len(run.seen)
    lat = run.latencies_ms
    rec.details = {
        "sessions": sessions,
        "committed": len(run.acked),
        "retries": run.retries,
        "writes_per_s": round(len(run.acked) / wall, 2) if wall else 0.0,
        "p50_ms": round(statistics.median(lat)) if lat else None,
        "p99_ms": round(_p99(lat)) if lat else None,
        "longest_call_s": round(run.longest_call_s, 2),
        "bound_s": run.bound_s,
        "writers": 1,
        "writer_wait_s": WRITER_WAIT_S,
    }
    if len(run.acked) != sessions:
        rec.problem(None, f"{sessions - len(run.acked)} of {sessions} sessions did not commit")
    rec.wall_s = round(time.perf_counter() - began, 3)
    return rec
