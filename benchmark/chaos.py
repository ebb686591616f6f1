"""Reliability trials of ``shadowguard serve`` under load and hostile input (``shadowguard bench chaos``).

Everything runs on 127.0.0.1 as subprocesses: the notes fixture over streamable HTTP (transactional,
one SQLite file: one writer at a time) and ``shadowguard serve`` in front of it with the fixture's
policy pack.

* :func:`run_load`: ``sessions`` concurrent MCP clients, each its own guard session, write their own
  note and commit, ``rounds`` times. A write refused with a retryable error (the guard's hint says
  ``retryable``: another session held the write lock past the upstream's busy timeout) is sent again
  after a short jittered pause, up to ``retries`` times. Every write must end committed, and the
  database must hold every session's last round.
* :func:`run_wide_payload`: the issue's hostile call (``tools/call`` with 16,000 unexpected keys,
  about 250 KB) sent ``repeat`` times; the proxy process's CPU time (user + system, from
  ``/proc/<pid>/stat``) over the sends, per call.

Numbers are figures of one run on the machine at hand (the clients share it with the servers), never
assertions: the tests run small versions and check outcomes only.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp.types as types
import yaml
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from benchmark.fixtures import NOTES_POLICY, NOTES_SERVER
from benchmark.mcphttp import mcp_http_client
from benchmark.perf_proxy import SERVE_ANNOUNCE, ProxyBenchError, _p99
from benchmark.procs import ServerProcess as _Server

MODERN = "2026-07-28"
SESSION_META_KEY = "shadowguard/session"
CALL_TIMEOUT_S = 120.0
RETRY_PAUSE_S = (0.05, 0.5)
"""A retried write waits a random time in this range (seconds) first."""
WIDE_KEYS = 16_000


class ChaosError(RuntimeError):
    """A trial could not run (a server did not start) or its end state is wrong; the message says which."""


@dataclass
class LoadResult:
    """What :func:`run_load` saw: every write's latency (first send to success) and its retries."""

    sessions: int
    rounds: int
    writes: int = 0
    first_try: int = 0
    retried: int = 0
    """Writes that got a retryable error first and succeeded when sent again."""
    failed: int = 0
    """Writes that never succeeded: a non-retryable error, or retries exhausted."""
    retries: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    """Error class (or JSON-RPC error) of every failed attempt, counted."""
    wall_s: float = 0.0

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")

    @property
    def p99_ms(self) -> float:
        return _p99(self.latencies_ms) if self.latencies_ms else float("nan")

    def line(self) -> str:
        return (
            f"load: sessions {self.sessions} rounds {self.rounds} writes {self.writes} "
            f"first-try {self.first_try} retried {self.retried} failed {self.failed} "
            f"retries {self.retries} p50 {self.p50_ms:.0f} ms p99 {self.p99_ms:.0f} ms "
            f"writes/s {self.writes / self.wall_s if self.wall_s else 0:.1f}"
        )


@dataclass
class WidePayloadResult:
    keys: int
    body_bytes: int
    calls: int
    cpu_s: float
    refused: int
    answer: str

    @property
    def cpu_ms_per_call(self) -> float:
        return self.cpu_s * 1000 / self.calls if self.calls else float("nan")

    def line(self) -> str:
        return (
            f"wide-payload: keys {self.keys} body {self.body_bytes} bytes calls {self.calls} "
            f"refused {self.refused} proxy-cpu {self.cpu_ms_per_call:.1f} ms per call"
        )


def _text(result: types.CallToolResult) -> str:
    return " ".join(p.text for p in result.content if isinstance(p, types.TextContent))


def _retryable(result: types.CallToolResult) -> tuple[bool, str]:
    verdict = result.structured_content or {}
    hint = verdict.get("hint") or {}
    return bool(hint.get("retryable")), str(verdict.get("error_class") or "error")


class _Stack:
    """The notes fixture and ``shadowguard serve`` in front of it, in a work folder."""

    def __init__(self, work: Path, shadowguard: str | None, writers: int | None = None) -> None:
        self.writers = writers
        if not NOTES_SERVER.is_file():
            raise ChaosError(f"the notes fixture is not here: {NOTES_SERVER} (run from a source checkout)")
        self.work = work
        self.db = work / "notes.sqlite"
        self.executable = shadowguard or str(Path(sys.executable).parent / "shadowguard")
        self.servers: list[_Server] = []
        self.proxy: _Server | None = None
        self.url = ""

    def start(self) -> str:
        notes = _Server(
            [sys.executable, str(NOTES_SERVER), "--db", str(self.db), "--port", "0", "--transactional"],
            self.work / "notes.log",
            "notes: listening on",
            name="notes",
        )
        self.servers.append(notes)
        config = {
            "upstreams": [
                {
                    "name": "notes",
                    "transport": "http",
                    "url": notes.wait_url(),
                    "policy": str(NOTES_POLICY),
                    **({"writers": self.writers} if self.writers is not None else {}),
                }
            ],
            "http": {"host": "127.0.0.1", "port": 0},
            "approvals": {"store": f"sqlite:///{self.work / 'approvals.db'}", "wait_s": 0},
            "sessions": {"store": f"sqlite:///{self.work / 'sessions.db'}"},
            "audit": {"path": str(self.work / "audit.jsonl")},
        }
        path = self.work / "proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.proxy = _Server(
            [self.executable, "serve", "--config", str(path)],
            self.work / "proxy.log",
            SERVE_ANNOUNCE,
            "proxy",
        )
        self.servers.append(self.proxy)
        self.url = self.proxy.wait_url()
        return self.url

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


def _work_dir(out: Path | None) -> tuple[Path, Callable[[], None]]:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        return out, lambda: None
    tmp = tempfile.TemporaryDirectory(prefix="shadowguard-chaos-")
    return Path(tmp.name), tmp.cleanup


async def _session_writes(
    url: str, index: int, rounds: int, retries: int, result: LoadResult, rng: random.Random
) -> None:
    meta = cast(types.RequestParamsMeta, {SESSION_META_KEY: f"load-{index}-{os.getpid()}"})
    note = f"load-{index}"
    async with (
        mcp_http_client() as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=MODERN,
            cache=None,
            read_timeout_seconds=CALL_TIMEOUT_S,
        ) as client,
    ):
        for round_no in range(rounds):
            arguments = {"id": note, "body": f"round {round_no}", "status": "published"}
            started = time.perf_counter()
            result.writes += 1
            for attempt in range(retries + 1):
                try:
                    answer = await client.call_tool("put_note", arguments, meta=meta)
                except MCPError as exc:
                    retryable, why = False, f"jsonrpc {exc.code}"
                else:
                    if not answer.is_error:
                        committed = await client.call_tool("commit", {}, meta=meta)
                        if committed.is_error:
                            raise ChaosError(f"session {index}: commit refused: {_text(committed)[:300]}")
                        result.latencies_ms.append((time.perf_counter() - started) * 1000)
                        if attempt:
                            result.retried += 1
                        else:
                            result.first_try += 1
                        break
                    retryable, why = _retryable(answer)
                result.errors[why] = result.errors.get(why, 0) + 1
                if not retryable or attempt == retries:
                    result.failed += 1
                    break
                result.retries += 1
                await anyio.sleep(rng.uniform(*RETRY_PAUSE_S))


def run_load(
    sessions: int,
    rounds: int = 2,
    *,
    retries: int = 20,
    out: Path | None = None,
    shadowguard: str | None = None,
    seed: int = 0,
    writers: int | None = None,
) -> LoadResult:
    """``sessions`` concurrent guard sessions × ``rounds`` committed writes of their own note through
    one SQLite upstream (``writers``: the upstream's writer slots, docs/proxy.md; None: unlimited);
    raises :class:`ChaosError` when the database does not end as written."""
    if sessions < 1 or rounds < 1 or retries < 0:
        raise ChaosError("sessions and rounds must be at least 1, retries at least 0")
    work, cleanup = _work_dir(out)
    stack = _Stack(work, shadowguard, writers)
    result = LoadResult(sessions=sessions, rounds=rounds)
    rng = random.Random(seed)  # noqa: S311 - jitter of retry pauses, not a secret
    try:
        url = stack.start()

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for i in range(sessions):
                    tg.start_soon(_session_writes, url, i, rounds, retries, result, rng)

        started = time.perf_counter()
        try:
            anyio.run(main)
        except BaseExceptionGroup as group:
            raise ChaosError(f"a session failed: {group.exceptions[0]!r}") from group
        result.wall_s = time.perf_counter() - started
    except ProxyBenchError as exc:
        raise ChaosError(str(exc)) from exc
    finally:
        stack.stop()
    try:
        _check_rows(stack.db, sessions, rounds, result)
    finally:
        cleanup()
    return result


def _check_rows(db: Path, sessions: int, rounds: int, result: LoadResult) -> None:
    import sqlite3

    conn = sqlite3.connect(str(db))
    try:
        rows = dict(conn.execute("SELECT id, body FROM notes WHERE id LIKE 'load-%'").fetchall())
    finally:
        conn.close()
    if result.failed:
        return
    wrong = [i for i in range(sessions) if rows.get(f"load-{i}") != f"round {rounds - 1}"]
    if wrong:
        raise ChaosError(
            f"{len(wrong)} session(s) do not hold their last committed round, e.g. load-{wrong[0]}"
        )


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def run_wide_payload(
    *, keys: int = WIDE_KEYS, repeat: int = 10, out: Path | None = None, shadowguard: str | None = None
) -> WidePayloadResult:
    """The issue's hostile ``tools/call`` (``keys`` unexpected arguments) ``repeat`` times; the
    proxy's CPU time per call. Each is answered before the next is sent."""
    work, cleanup = _work_dir(out)
    stack = _Stack(work, shadowguard)
    arguments: dict[str, Any] = {"id": "n1", "body": "x", **{f"k{i:05d}": "v" * 4 for i in range(keys)}}
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "put_note",
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientInfo": {"name": "chaos", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                    SESSION_META_KEY: "wide-payload",
                },
            },
        }
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "put_note",
    }
    refused, answer = 0, ""
    try:
        url = stack.start()
        assert stack.proxy is not None
        pid = stack.proxy.proc.pid
        with httpx2.Client(timeout=CALL_TIMEOUT_S) as http:
            http.post(url, content=body, headers=headers)  # warm-up: imports and first-use caches
            before = _cpu_s(pid)
            for _ in range(repeat):
                response = http.post(url, content=body, headers=headers)
                answer = response.text
                if '"invalid_arguments"' in answer:
                    refused += 1
            cpu = _cpu_s(pid) - before
    except ProxyBenchError as exc:
        raise ChaosError(str(exc)) from exc
    finally:
        stack.stop()
        cleanup()
    return WidePayloadResult(keys, len(body), repeat, cpu, refused, answer[:400])
