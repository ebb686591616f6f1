"""Kill -9 trials of ``shadowguard serve`` (``shadowguard bench chaos kills`` and ``quick``).

One proxy (``shadowguard serve``) runs in front of the notes fixture as a transactional stdio upstream
on one SQLite file, with a file-backed session ledger. A trial:

1. ``sessions`` concurrent MCP clients, each its own guard session, commit rounds: a round writes two
   new notes of its own (``t<trial>-s<session>-r<round>-a`` and ``-b``), reads a note another session
   is writing in its open round, and commits, until the kill. Each step is bounded by
   :data:`STEP_TIMEOUT_S`. The sessions start writing together once each has made a first call.
2. At a seeded random moment the proxy is killed with SIGKILL; its stdio upstream loses its pipe and
   exits, rolling back the dead proxy's transactions.
3. The proxy is started again on the same files, and each killed session that held an acknowledged,
   uncommitted write sends ``commit``: it must be refused as ``changes_lost``, never answered
   ``committed: true`` over rows that are not there.
4. The database file is read directly (:func:`check_database`).

Counted, per trial and in all (:class:`Counters`):

* **partial-commits**: a round with one of its two rows in the database;
* **lost-commits**: a round whose commit the client saw acknowledged, not in the database; or a
  ``commit`` after the restart answered ``committed: true`` while the session's rows are absent;
* **leaks**: a session read another session's row before that session had sent its commit, or a
  round whose commit was never sent has rows in the database;
* **double-writes**: a note inserted or updated more than once in committed work (every note is
  written once by its client; a table of the trial's own, filled by a trigger in the same
  transaction, counts the applied writes);
* **5xx**: HTTP answers of status 500 or more seen by a client;
* **hangs**: a step (a call, the restart, a process exit) that did not end within its bound.

Orphaned capture objects left in the upstream are counted as partial commits of the trial: on SQLite
any ``sg_*`` trigger or ``_sg_changes`` table in the file (``guard/sql_backend.py`` keeps them in
TEMP); on PostgreSQL a permanent ``_sg_changes`` table or an ``sg_*`` trigger that is not the gated
one installed once per schema (``guard/pg_capture.py``). The upstream is a SQLite file or, with
``upstream="postgresql"``, a schema of the run's own in PostgreSQL (:mod:`benchmark.chaos_db`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp.types as types
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from benchmark import chaos_db
from benchmark.fixtures import NOTES_POLICY, NOTES_SERVER
from benchmark.mcphttp import mcp_http_client
from benchmark.perf_proxy import SERVE_ANNOUNCE, ProxyBenchError
from benchmark.procs import ServerProcess as _Server

MODERN = "2026-07-28"
SESSION_META_KEY = "shadowguard/session"
STEP_TIMEOUT_S = 60.0
"""Bound of every client call and of the restart; a step past it is a hang."""
EXIT_TIMEOUT_S = 30.0
"""Bound on the killed proxy's upstream process ending after it lost its pipe."""
KILL_WINDOW_S = (0.2, 3.0)
"""The kill comes at a seeded random moment in this range (seconds) after every session made its
first call and the sessions start writing."""
RETRY_PAUSE_S = (0.05, 0.3)
LOST_RULE = "changes_lost"
INTERRUPTED_RULE = "commit_interrupted"


class KillTrialError(RuntimeError):
    """The trials could not run (bad parameters, a server that does not start); the message says why."""


@dataclass
class Counters:
    partial_commits: int = 0
    lost_commits: int = 0
    leaks: int = 0
    double_writes: int = 0
    http_5xx: int = 0
    hangs: int = 0

    def add(self, other: Counters) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def total(self) -> int:
        return sum(asdict(self).values())

    def line(self, trials: int) -> str:
        return (
            f"chaos: partial-commits {self.partial_commits} lost-commits {self.lost_commits} "
            f"leaks {self.leaks} double-writes {self.double_writes} 5xx {self.http_5xx} "
            f"hangs {self.hangs} ({trials} trials)"
        )


@dataclass
class Round:
    """One round of one session: what its client saw."""

    writes_acked: int = 0
    commit_sent_at: float | None = None
    """``time.monotonic()`` just before the commit was sent; None: never sent."""
    committed: bool = False
    """The client saw ``committed: true``."""


@dataclass
class SessionLog:
    trial: int
    index: int
    session: str
    rounds: list[Round] = field(default_factory=list)

    def note(self, round_no: int, part: str) -> str:
        return note_id(self.trial, self.index, round_no, part)

    def open_round(self) -> int:
        return len(self.rounds) - 1


@dataclass
class TrialResult:
    trial: int
    kill_after_s: float
    sessions: int
    rounds_committed: int = 0
    rounds_open_at_kill: int = 0
    refused_as_lost: int = 0
    lost_but_present: int = 0
    """Commits after the restart refused as lost whose rows had landed (the kill came between the
    upstream's commit and the ledger's update): the agent is told too little, nothing is lost."""
    committed_before_kill: int = 0
    """Commits after the restart answered ``committed: true`` with the session's rows there: its
    commit landed before the kill, the client did not see the answer."""
    interrupted: int = 0
    """Commits after the restart answered ``commit_interrupted`` (the kill came mid-commit): the
    record's per-upstream state must agree with the rows (``applied`` present, ``not_applied`` absent;
    ``unknown`` either, the database check catches a half)."""
    counters: Counters = field(default_factory=Counters)
    problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def record(self) -> dict[str, Any]:
        return asdict(self)


def note_id(trial: int, session: int, round_no: int, part: str) -> str:
    return f"t{trial}-s{session}-r{round_no}-{part}"


def _text(result: types.CallToolResult) -> str:
    return " ".join(p.text for p in result.content if isinstance(p, types.TextContent))


def _retryable(result: types.CallToolResult) -> bool:
    hint = (result.structured_content or {}).get("hint") or {}
    return bool(hint.get("retryable"))


def check_database(db: Path | str, logs: list[SessionLog], counters: Counters, problems: list[str]) -> int:
    """Compare the upstream database with what the clients saw (module docstring); add to ``counters``
    and say why in ``problems``. Returns the number of rounds found committed."""
    prefix = f"t{logs[0].trial}-" if logs else "t-"
    present, applied, orphans = chaos_db.read_state(str(db), prefix)
    committed = 0
    for log in logs:
        for round_no, state in enumerate(log.rounds):
            rows = sum(log.note(round_no, part) in present for part in ("a", "b"))
            where = f"session {log.index} round {round_no}"
            if rows == 1:
                counters.partial_commits += 1
                problems.append(f"partial commit: {where} has one of its two rows")
            if state.committed and rows == 0:
                counters.lost_commits += 1
                problems.append(f"lost commit: {where} was acknowledged and is not in the database")
            if state.commit_sent_at is None and rows:
                counters.leaks += 1
                problems.append(f"leak: {where} never sent its commit and has rows in the database")
            committed += rows == 2
    for note, count in applied.items():
        if count > 1:
            counters.double_writes += 1
            problems.append(f"double write: {note} was applied {count} times")
    if orphans:
        counters.partial_commits += 1
        problems.append(f"orphaned capture objects in the upstream: {', '.join(sorted(orphans))}")
    return committed


def prepare_database(db: Path | str) -> None:
    """Create the notes table (the fixture's schema) and the write-counting trigger table."""
    chaos_db.prepare(str(db))


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class _Proxy:
    """``shadowguard serve`` on the trial files; killed with SIGKILL and started again."""

    def __init__(self, work: Path, shadowguard: str | None, db: str) -> None:
        self.work = work
        self.db = db
        self.executable = shadowguard or str(Path(sys.executable).parent / "shadowguard")
        self.config = work / "proxy.yaml"
        self.server: _Server | None = None
        self.starts = 0
        config = {
            "upstreams": [
                {
                    "name": "notes",
                    "transport": "stdio",
                    "command": sys.executable,
                    "args": [str(NOTES_SERVER), "--db", self.db, "--transactional"],
                    "policy": str(NOTES_POLICY),
                    # No `writers`: the fixture advertises one writer slot on SQLite, none on
                    # PostgreSQL, where sessions write side by side (guard/pg_capture.py).
                }
            ],
            "http": {"host": "127.0.0.1", "port": 0},
            "approvals": {"store": f"sqlite:///{work / 'approvals.db'}", "wait_s": 0},
            "sessions": {"store": f"sqlite:///{work / 'sessions.db'}"},
            "audit": {"path": str(work / "audit.jsonl")},
        }
        self.config.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    def start(self) -> str:
        self.starts += 1
        self.server = _Server(
            [self.executable, "serve", "--config", str(self.config)],
            self.work / f"proxy-{self.starts}.log",
            SERVE_ANNOUNCE,
            "proxy",
        )
        return self.server.wait_url()

    def kill(self) -> bool:
        """SIGKILL the proxy; True when it and its upstream processes ended within their bound."""
        assert self.server is not None
        proc = self.server.proc
        children = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=EXIT_TIMEOUT_S)
        self.server.stop()
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while any(_alive(c) for c in children):
            if time.monotonic() > deadline:
                for child in children:
                    if _alive(child):
                        os.kill(child, signal.SIGKILL)
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _client(url: str, seen_5xx: list[int]) -> tuple[httpx2.AsyncClient, Client]:
    http = mcp_http_client()

    async def on_response(response: httpx2.Response) -> None:
        if response.status_code >= 500:
            seen_5xx.append(response.status_code)

    http.event_hooks["response"].append(on_response)
    client = Client(
        streamable_http_client(url, http_client=http),
        mode=MODERN,
        cache=None,
        read_timeout_seconds=STEP_TIMEOUT_S,
    )
    return http, client


class _Trial:
    """The sessions of one trial, writing until the proxy is killed under them."""

    def __init__(self, trial: int, sessions: int, url: str, rng: random.Random) -> None:
        self.logs = [SessionLog(trial, i, f"chaos-t{trial}-s{i}-{os.getpid()}") for i in range(sessions)]
        self.url = url
        self.rng = rng
        self.counters = Counters()
        self.problems: list[str] = []
        self.seen_5xx: list[int] = []
        self.killed = False
        self.ready = 0
        self.all_ready = anyio.Event()
        """Every session has made its first call (its upstream connection is up)."""
        self.go = anyio.Event()

    async def _step(self, client: Client, log: SessionLog, name: str, args: dict[str, Any]) -> Any:
        meta = cast(types.RequestParamsMeta, {SESSION_META_KEY: log.session})
        with anyio.fail_after(STEP_TIMEOUT_S):
            return await client.call_tool(name, args, meta=meta)

    async def _write(self, client: Client, log: SessionLog, round_no: int, part: str) -> None:
        arguments = {"id": log.note(round_no, part), "body": f"round {round_no}", "status": "published"}
        while True:
            answer = await self._step(client, log, "put_note", arguments)
            if not answer.is_error:
                log.rounds[round_no].writes_acked += 1
                return
            if not _retryable(answer):
                raise KillTrialError(f"session {log.index}: put_note refused: {_text(answer)[:300]}")
            await anyio.sleep(self.rng.uniform(*RETRY_PAUSE_S))

    async def _probe(self, client: Client, log: SessionLog) -> None:
        """Read the open round's first row of the next session: visible only once it sent its commit."""
        other = self.logs[(log.index + 1) % len(self.logs)]
        round_no = other.open_round()
        if other is log or round_no < 0:
            return
        answer = await self._step(client, log, "get_note", {"id": other.note(round_no, "a")})
        ended = time.monotonic()
        sent = other.rounds[round_no].commit_sent_at
        if not answer.is_error and (sent is None or sent > ended):
            self.counters.leaks += 1
            self.problems.append(f"leak: session {log.index} read session {other.index}'s uncommitted row")

    async def _session(self, log: SessionLog) -> None:
        http, client = _client(self.url, self.seen_5xx)
        try:
            async with http, client:
                await self._step(client, log, "get_note", {"id": f"t{log.trial}-warm-up"})
                self.ready += 1
                if self.ready == len(self.logs):
                    self.all_ready.set()
                await self.go.wait()
                while True:
                    log.rounds.append(Round())
                    round_no = log.open_round()
                    await self._write(client, log, round_no, "a")
                    await self._probe(client, log)
                    await self._write(client, log, round_no, "b")
                    log.rounds[round_no].commit_sent_at = time.monotonic()
                    answer = await self._step(client, log, "commit", {})
                    while answer.is_error and _retryable(answer):
                        await anyio.sleep(self.rng.uniform(*RETRY_PAUSE_S))
                        answer = await self._step(client, log, "commit", {})
                    verdict = answer.structured_content or {}
                    if answer.is_error or verdict.get("committed") is not True:
                        raise KillTrialError(f"session {log.index}: commit refused: {_text(answer)[:300]}")
                    log.rounds[round_no].committed = True
        except TimeoutError:
            self.counters.hangs += 1
            self.problems.append(f"hang: session {log.index} waited over {STEP_TIMEOUT_S:.0f} s")
        except KillTrialError as exc:
            self.problems.append(str(exc))
        except (Exception, BaseExceptionGroup) as exc:  # the proxy died under the call
            if isinstance(exc, BaseExceptionGroup) and exc.subgroup(TimeoutError) is not None:
                self.counters.hangs += 1
                self.problems.append(f"hang: session {log.index} waited over {STEP_TIMEOUT_S:.0f} s")
            elif not self.killed:
                self.problems.append(f"session {log.index} failed before the kill: {exc!r}"[:400])

    async def run(self, kill_after_s: float, kill: Callable[[], bool]) -> None:
        async with anyio.create_task_group() as tg:
            for log in self.logs:
                tg.start_soon(self._session, log)
            with anyio.move_on_after(STEP_TIMEOUT_S) as waiting:
                await self.all_ready.wait()
            if waiting.cancelled_caught:
                self.counters.hangs += 1
                self.problems.append(f"hang: {len(self.logs) - self.ready} session(s) not connected in time")
            self.go.set()
            await anyio.sleep(kill_after_s)
            self.killed = True
            if not await anyio.to_thread.run_sync(kill):
                self.counters.hangs += 1
                self.problems.append(f"hang: the upstream did not exit within {EXIT_TIMEOUT_S:.0f} s")
            tg.cancel_scope.deadline = anyio.current_time() + STEP_TIMEOUT_S

    async def commit_lost(self, url: str, db: str, result: TrialResult) -> None:
        """After the restart: a commit under each session with an acknowledged, uncommitted write."""
        http, client = _client(url, self.seen_5xx)
        async with http, client:
            for log in self.logs:
                if not log.rounds:
                    continue
                state = log.rounds[-1]
                if state.committed or state.writes_acked == 0:
                    continue
                result.rounds_open_at_kill += 1
                answer = await self._step(client, log, "commit", {})
                verdict = answer.structured_content or {}
                rules = [v.get("rule_id") for v in verdict.get("violations") or []]
                present = _present(db, [log.note(log.open_round(), p) for p in ("a", "b")])
                if answer.is_error and INTERRUPTED_RULE in rules:
                    result.interrupted += 1
                    self._check_record(log, verdict, present)
                elif answer.is_error and LOST_RULE in rules:
                    result.refused_as_lost += 1
                    if present:
                        result.lost_but_present += 1
                elif verdict.get("committed") is True and present == 2:
                    result.committed_before_kill += 1
                elif verdict.get("committed") is True and not present:
                    self.counters.lost_commits += 1
                    self.problems.append(
                        f"lost commit: session {log.index}'s commit after the restart said committed "
                        "over rows that are gone"
                    )
                elif verdict.get("committed") is not True:
                    self.problems.append(
                        f"session {log.index}: commit after the restart answered {_text(answer)[:200]}"
                    )

    def _check_record(self, log: SessionLog, verdict: dict[str, Any], present: int) -> None:
        """A ``commit_interrupted`` answer names each upstream applied / unknown / not_applied: it
        must not contradict the rows the upstream holds (docs/adr/011)."""
        upstreams = verdict.get("upstreams") or {}
        states = set(upstreams.values())
        if "applied" in states and present != 2:
            self.counters.lost_commits += 1
            self.problems.append(
                f"lost commit: session {log.index}'s commit record says applied over rows that are gone"
            )
        if states == {"not_applied"} and present:
            self.problems.append(
                f"session {log.index}: commit record says not applied but {present} rows are present"
            )


def _present(db: str, notes: list[str]) -> int:
    return chaos_db.present_count(db, notes)


@dataclass
class KillsResult:
    trials: list[TrialResult]
    counters: Counters
    wall_s: float

    def line(self) -> str:
        return self.counters.line(len(self.trials))

    def problems(self) -> int:
        """Trials with anything wrong: a counter above 0, or a session that failed otherwise."""
        return sum(1 for t in self.trials if t.problems or t.counters.total())


def run_kills(
    trials: int,
    sessions: int,
    *,
    out: Path,
    upstream: str = "sqlite",
    seed: int = 0,
    shadowguard: str | None = None,
    progress: Callable[[TrialResult], None] | None = None,
    kill_window_s: tuple[float, float] = KILL_WINDOW_S,
    pg_url: str = "postgresql://127.0.0.1:5432/test",
) -> KillsResult:
    """``trials`` kill -9 trials of ``sessions`` sessions each (module docstring), the kill at a
    seeded random moment in ``kill_window_s``; every trial is a JSON line in ``out/kills.jsonl``.
    ``upstream``: ``sqlite`` (a file in ``out``) or ``postgresql`` (a schema of the run's own in the
    database at ``pg_url``, dropped at the end). Raises :class:`KillTrialError` when the trials cannot run."""
    if trials < 1 or sessions < 1:
        raise KillTrialError("trials and sessions must be at least 1")
    if not 0 <= kill_window_s[0] <= kill_window_s[1]:
        raise KillTrialError(f"the kill window {kill_window_s} is not an interval of seconds")
    if upstream not in ("sqlite", "postgresql"):
        raise KillTrialError(f"unknown upstream {upstream!r}: use sqlite or postgresql")
    out.mkdir(parents=True, exist_ok=True)
    db = chaos_db.pg_run_url(pg_url)[0] if upstream == "postgresql" else str(out / "notes.sqlite")
    try:
        prepare_database(db)
    except Exception as exc:
        raise KillTrialError(f"cannot prepare the {upstream} upstream: {exc}") from exc
    proxy = _Proxy(out, shadowguard, db)
    rng = random.Random(seed)  # noqa: S311 - kill moments and retry jitter, not secrets
    total = Counters()
    results: list[TrialResult] = []
    report = out / "kills.jsonl"
    started = time.perf_counter()
    try:
        url = proxy.start()
        with report.open("w", encoding="utf-8") as lines:
            for number in range(trials):
                result, url = _one_trial(number, sessions, url, proxy, rng, kill_window_s)
                total.add(result.counters)
                results.append(result)
                lines.write(json.dumps(result.record()) + "\n")
                lines.flush()
                if progress is not None:
                    progress(result)
    except ProxyBenchError as exc:
        raise KillTrialError(str(exc)) from exc
    finally:
        proxy.stop()
        chaos_db.drop(db)
    return KillsResult(results, total, time.perf_counter() - started)


def _one_trial(
    number: int, sessions: int, url: str, proxy: _Proxy, rng: random.Random, window: tuple[float, float]
) -> tuple[TrialResult, str]:
    kill_after = rng.uniform(*window)
    result = TrialResult(number, round(kill_after, 3), sessions)
    trial = _Trial(number, sessions, url, rng)
    began = time.perf_counter()

    async def main() -> None:
        await trial.run(kill_after, proxy.kill)

    anyio.run(main)
    restarted = time.monotonic()
    new_url = proxy.start()
    if time.monotonic() - restarted > STEP_TIMEOUT_S:
        trial.counters.hangs += 1
        trial.problems.append(f"hang: the restart took over {STEP_TIMEOUT_S:.0f} s")

    async def after() -> None:
        try:
            await trial.commit_lost(new_url, proxy.db, result)
        except TimeoutError:
            trial.counters.hangs += 1
            trial.problems.append("hang: a commit after the restart")

    anyio.run(after)
    result.rounds_committed = check_database(proxy.db, trial.logs, trial.counters, trial.problems)
    trial.counters.http_5xx += len(trial.seen_5xx)
    result.counters = trial.counters
    result.problems = trial.problems
    result.wall_s = round(time.perf_counter() - began, 3)
    return result, new_url
