"""What the ``bench chaos`` trials share: the trial record, and servers started on 127.0.0.1.

* :class:`TrialRecord`: one trial of any kind, with the six chaos counters and the problems found;
* :class:`NotesHttp`: the notes fixture over streamable HTTP (transactional) on one database, which a
  trial can kill with SIGKILL and start again on the same port;
* :func:`start_proxy`: ``shadowguard serve`` with a config written from the given sections;
* :func:`notes_rows`: the notes in the upstream's database, read directly (not through the proxy).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx2
import mcp.types as types
import sqlalchemy as sa
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from benchmark.chaos_kills import Counters
from benchmark.fixtures import NOTES_SERVER
from benchmark.mcphttp import mcp_http_client
from benchmark.perf_proxy import SERVE_ANNOUNCE
from benchmark.procs import ServerProcess as _Server

MODERN = "2026-07-28"
SESSION_META_KEY = "shadowguard/session"
STEP_TIMEOUT_S = 60.0
"""Bound of every client call in the trials; a call past it is a hang."""


@dataclass
class TrialRecord:
    """One trial: its kind, counters, what went wrong (each problem a sentence) and its figures."""

    kind: str
    trial: int
    counters: Counters = field(default_factory=Counters)
    problems: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def problem(self, counter: str | None, text: str) -> None:
        """Note a problem; ``counter``: the chaos counter it adds one to (None: none fits)."""
        if counter is not None:
            setattr(self.counters, counter, getattr(self.counters, counter) + 1)
        self.problems.append(text)


def executable(shadowguard: str | None) -> str:
    return shadowguard or str(Path(sys.executable).parent / "shadowguard")


def meta(session: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {SESSION_META_KEY: session})


def text_of(result: types.CallToolResult) -> str:
    return " ".join(p.text for p in result.content if isinstance(p, types.TextContent))


def client(
    url: str, seen_5xx: list[int], timeout_s: float = STEP_TIMEOUT_S
) -> tuple[httpx2.AsyncClient, Client]:
    """An MCP client (2026 era) whose HTTP answers of status 500 or more are noted in ``seen_5xx``."""
    http = mcp_http_client()

    async def on_response(response: httpx2.Response) -> None:
        if response.status_code >= 500:
            seen_5xx.append(response.status_code)

    http.event_hooks["response"].append(on_response)
    return http, Client(
        streamable_http_client(url, http_client=http), mode=MODERN, cache=None, read_timeout_seconds=timeout_s
    )


class NotesHttp:
    """The notes fixture over HTTP, transactional, on ``db`` (a SQLite file or a PostgreSQL URL)."""

    def __init__(self, work: Path, db: str, name: str = "notes") -> None:
        self.work, self.db, self.name = work, db, name
        self.port = 0
        self.starts = 0
        self.server: _Server | None = None
        self.url = ""

    def start(self) -> str:
        self.starts += 1
        args = [
            sys.executable,
            str(NOTES_SERVER),
            "--db",
            self.db,
            "--port",
            str(self.port),
            "--transactional",
        ]
        self.server = _Server(
            args, self.work / f"{self.name}-{self.starts}.log", "notes: listening on", self.name
        )
        self.url = self.server.wait_url()
        self.port = int(self.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        return self.url

    def kill(self) -> None:
        assert self.server is not None
        os.kill(self.server.proc.pid, signal.SIGKILL)
        self.server.proc.wait(timeout=30)
        self.server.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def write_config(path: Path, upstreams: list[dict[str, Any]], **sections: Any) -> Path:
    work = path.parent
    config: dict[str, Any] = {
        "upstreams": upstreams,
        "http": {"host": "127.0.0.1", "port": 0},
        "approvals": {"store": f"sqlite:///{work / 'approvals.db'}", "wait_s": 0},
        "sessions": {"store": f"sqlite:///{work / 'sessions.db'}"},
        "audit": {"path": str(work / "audit.jsonl")},
    }
    config.update(sections)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def start_proxy(config: Path, log: Path, shadowguard: str | None = None) -> tuple[_Server, str]:
    server = _Server(
        [executable(shadowguard), "serve", "--config", str(config)], log, SERVE_ANNOUNCE, "proxy"
    )
    try:
        return server, server.wait_url()
    except BaseException:
        server.stop()
        raise


def notes_rows(db: str, prefix: str) -> dict[str, str]:
    """``{id: body}`` of the notes whose id starts with ``prefix``, read directly from the database."""
    if db.startswith("postgresql"):
        engine = sa.create_engine(
            db.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.NullPool
        )
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT id, body FROM notes WHERE id LIKE :p"), {"p": prefix + "%"}
                ).all()
        finally:
            engine.dispose()
        return {r[0]: r[1] for r in rows}
    lite = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        return dict(lite.execute("SELECT id, body FROM notes WHERE id LIKE ?", (prefix + "%",)).fetchall())
    finally:
        lite.close()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
