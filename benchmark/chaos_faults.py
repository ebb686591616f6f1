"""Fault trials of ``bench chaos``: the upstream killed mid-session, the approval store going away.

**Upstream kill** (:func:`run_upstream_kill`): a session writes two notes through ``shadowguard serve``
to the notes fixture over HTTP; the fixture is killed with SIGKILL; the session's next write and its
``commit`` must each get an error that says what happened (never ``committed: true``), within the step
bound. The fixture is started again on the same port and file: none of the session's rows may be there
(they were never committed: a row there is a *leak*; ``committed: true`` is a *lost commit*), and a new
session must write and commit through the same proxy.

**Approval store outage** (:func:`run_store_outage`): the proxy's approval queue is a Redis the trial
starts on its own port (append-only file, fsync always), or PostgreSQL reached through a loopback TCP
relay the trial cuts. With a request pending, the store goes away: a call that needs approval and a
commit must each be refused with a transient error, and nothing may run. When the store returns the
pending request is still there, approving it lets the call run once, and commits go through. A second
proxy on the same store with a 1 s expiry shows an expired approval never runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import mcp.types as types
from mcp import Client, MCPError

from benchmark.chaos_stack import (
    STEP_TIMEOUT_S,
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
from benchmark.perf_proxy import ProxyBenchError

APPROVALS_POLICY = NOTES_POLICY.with_name("notes_approvals_policy.yaml")
TRANSIENT = "transient"
STORE_AWAY_RULE = "approvals_unavailable"
"""The rule a call or commit refused because the approval store cannot be reached names."""


class FaultTrialError(RuntimeError):
    """A fault trial could not run (a server that does not start); the message says why."""


async def _call(c: Client, session: str, name: str, args: dict[str, Any]) -> types.CallToolResult | str:
    """The call's result, or the text of the JSON-RPC error it got."""
    with anyio.fail_after(STEP_TIMEOUT_S):
        try:
            return await c.call_tool(name, args, meta=meta(session))
        except MCPError as exc:
            return f"JSON-RPC error {exc.code}: {exc}"


def _verdict(answer: types.CallToolResult | str) -> dict[str, Any]:
    return {} if isinstance(answer, str) else dict(answer.structured_content or {})


def _shown(answer: types.CallToolResult | str) -> str:
    return (answer if isinstance(answer, str) else text_of(answer))[:300]


def _failed(answer: types.CallToolResult | str) -> bool:
    return isinstance(answer, str) or answer.is_error


# -- the upstream killed mid-session ------------------------------------------------------------------


def run_upstream_kill(trial: int, work: Path, shadowguard: str | None = None) -> TrialRecord:
    rec = TrialRecord("upstream-kill", trial)
    work.mkdir(parents=True, exist_ok=True)
    db = str(work / "notes.sqlite")
    notes = NotesHttp(work, db)
    proxy = None
    began = time.perf_counter()
    try:
        url = notes.start()
        config = write_config(
            work / "proxy.yaml",
            [{"name": "notes", "transport": "http", "url": url, "policy": str(NOTES_POLICY)}],
        )
        proxy, proxy_url = start_proxy(config, work / "proxy.log", shadowguard)
        try:
            anyio.run(_upstream_kill, trial, proxy_url, notes, rec)
        except TimeoutError:
            rec.problem("hangs", f"hang: a call after the upstream's kill took over {STEP_TIMEOUT_S:.0f} s")
        prefix = f"uk{trial}-"
        left = notes_rows(db, prefix + "s-")
        if left:
            rec.problem(
                "leaks", f"leak: uncommitted rows of the killed session are in the upstream: {sorted(left)}"
            )
        if f"{prefix}after" not in notes_rows(db, prefix):
            rec.problem(None, "after the upstream's restart a new session's commit did not land")
    except ProxyBenchError as exc:
        raise FaultTrialError(str(exc)) from exc
    finally:
        if proxy is not None:
            proxy.stop()
        notes.stop()
    rec.wall_s = round(time.perf_counter() - began, 3)
    return rec


async def _upstream_kill(trial: int, url: str, notes: NotesHttp, rec: TrialRecord) -> None:
    seen: list[int] = []
    session, prefix = f"chaos-uk{trial}-{os.getpid()}", f"uk{trial}-s-"
    http, c = client(url, seen)
    async with http, c:
        for part in ("a", "b"):
            answer = await _call(
                c, session, "put_note", {"id": prefix + part, "body": "x", "status": "draft"}
            )
            if _failed(answer):
                rec.problem(None, f"a write before the kill failed: {_shown(answer)}")
                return
        await anyio.to_thread.run_sync(notes.kill)
        write = await _call(c, session, "put_note", {"id": prefix + "c", "body": "x", "status": "draft"})
        commit = await _call(c, session, "commit", {})
        rec.details.update(write_after_kill=_shown(write), commit_after_kill=_shown(commit))
        if not _failed(write):
            rec.problem(None, "a write to a killed upstream was answered as done")
        if _verdict(commit).get("committed") is True:
            rec.problem(
                "lost_commits", "a commit after the upstream's kill said committed over rows that are gone"
            )
        elif not _failed(commit):
            rec.problem(None, f"a commit after the upstream's kill did not fail: {_shown(commit)}")
        for answer, what in ((write, "write"), (commit, "commit")):
            if len(_shown(answer).strip()) < 20:
                rec.problem(
                    None, f"the {what} after the upstream's kill got no clear error: {_shown(answer)!r}"
                )
        await anyio.to_thread.run_sync(notes.start)
        after = f"chaos-uk{trial}-after-{os.getpid()}"
        wrote = await _call(c, after, "put_note", {"id": f"uk{trial}-after", "body": "x", "status": "draft"})
        done = await _call(c, after, "commit", {})
        rec.details["after_restart"] = _shown(done)
        if _failed(wrote) or _verdict(done).get("committed") is not True:
            rec.problem(None, f"after the upstream's restart: {_shown(wrote)} / {_shown(done)}")
    rec.counters.http_5xx += len(seen)


# -- the approval store going away --------------------------------------------------------------------


class TcpRelay:
    """A loopback TCP relay to ``target`` that a trial can cut (every connection reset) and restore."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> int:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()
        return self.port

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for conn in conns:
            with suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            # close() alone does not release a socket another thread is blocked in recv() on (Linux):
            # the connection stayed up, a query in flight hung for good, and the pump could write into
            # a socket that reused the fd. shutdown() wakes the pump; close() then resets the connection.
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                near, _ = listener.accept()
            except OSError:
                return
            try:
                far = socket.create_connection(self.target, timeout=5.0)
            except OSError:
                near.close()
                continue
            far.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    near.close()
                    far.close()
                    return
                self._conns += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _Redis:
    """``redis-server`` on a free port of its own, append-only with fsync on every write."""

    def __init__(self, work: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FaultTrialError("redis-server is not installed (the approval-store trial starts its own)")
        self.binary, self.work = binary, work
        with socket.create_server(("127.0.0.1", 0)) as probe:
            self.port = probe.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    def up(self) -> int:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.work)]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return int(self.port)
            time.sleep(0.05)
        raise FaultTrialError(f"redis-server did not answer on port {self.port} within 30 s")

    def down(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


def run_store_outage(
    trial: int, work: Path, store: str, *, pg_url: str, shadowguard: str | None = None
) -> TrialRecord:
    """``store``: ``redis`` or ``postgresql`` (reached at ``pg_url``'s host and port through a relay)."""
    rec = TrialRecord(f"approval-store-{store}", trial)
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    outage: _Redis | TcpRelay
    if store == "redis":
        outage = _Redis(work)
        store_url = f"redis://127.0.0.1:{outage.up()}/0"
    elif store == "postgresql":
        target = httpx2.URL(pg_url.replace("postgresql", "http", 1))
        outage = TcpRelay((target.host or "127.0.0.1", target.port or 5432))
        store_url = pg_url.replace(f"{target.host}:{target.port}", f"127.0.0.1:{outage.up()}", 1)
    else:
        raise FaultTrialError(f"unknown approval store {store!r}: use redis or postgresql")
    token = secrets.token_hex(16)
    auth = {
        "reviewers": [
            {"name": "ed", "role": "approver", "token_sha256": hashlib.sha256(token.encode()).hexdigest()}
        ]
    }
    db = str(work / "notes.sqlite")
    notes = NotesHttp(work, db)
    proxies = []
    try:
        url = notes.start()
        upstream = [{"name": "notes", "transport": "http", "url": url, "policy": str(APPROVALS_POLICY)}]
        for name, expiry in (("proxy", 3600.0), ("expiring", 1.0)):
            approvals = {"store": store_url, "wait_s": 0, "expires_after_s": expiry, "poll_s": 0.1}
            config = write_config(
                work / f"{name}.yaml",
                upstream,
                approvals=approvals,
                auth=auth,
                sessions={"store": f"sqlite:///{work / (name + '-sessions.db')}"},
                audit={"path": str(work / f"{name}-audit.jsonl")},
            )
            proxies.append(start_proxy(config, work / f"{name}.log", shadowguard))
        outage_run = _Outage(rec, db, f"as{trial}-{store[:2]}-{os.getpid()}", token, outage)
        try:
            anyio.run(outage_run.run, proxies[0][1], proxies[1][1])
        except TimeoutError:
            rec.problem("hangs", f"hang: a call or API request took over {STEP_TIMEOUT_S:.0f} s")
    except ProxyBenchError as exc:
        raise FaultTrialError(str(exc)) from exc
    finally:
        for server, _ in proxies:
            server.stop()
        notes.stop()
        outage.down()
    rec.wall_s = round(time.perf_counter() - began, 3)
    return rec


class _Outage:
    def __init__(self, rec: TrialRecord, db: str, prefix: str, token: str, outage: _Redis | TcpRelay) -> None:
        self.rec, self.db, self.prefix, self.outage = rec, db, prefix, outage
        self.headers = {"Authorization": f"Bearer {token}"}
        self.seen: list[int] = []

    def note(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def rows(self) -> set[str]:
        return set(notes_rows(self.db, self.prefix))

    async def _api(self, http: httpx2.AsyncClient, method: str, path: str) -> httpx2.Response:
        with anyio.fail_after(STEP_TIMEOUT_S):
            answer = await http.request(
                method, path, headers=self.headers, json={"reason": None} if method == "POST" else None
            )
        if answer.status_code >= 500 and answer.status_code != 503:
            self.rec.problem(
                "http_5xx", f"{method} {path} answered {answer.status_code}: {answer.text[:200]}"
            )
        return answer

    def _fail_closed(self, answer: types.CallToolResult | str, what: str) -> None:
        verdict = _verdict(answer)
        self.rec.details[what] = _shown(answer)
        if not _failed(answer) or verdict.get("committed") is True:
            self.rec.problem(
                None, f"{what} while the approval store was away was not refused: {_shown(answer)}"
            )
        elif verdict.get("error_class") != TRANSIENT and not (verdict.get("hint") or {}).get("retryable"):
            self.rec.problem(
                None, f"{what} while the approval store was away: not a transient error: {_shown(answer)}"
            )
        elif STORE_AWAY_RULE not in json.dumps(verdict):
            # refused, but for another reason (a lock held by another session, say): the trial did
            # not test the store at all
            self.rec.problem(None, f"{what} was refused but not for the store being away: {_shown(answer)}")

    async def run(self, url: str, expiring_url: str) -> None:
        base = url.rsplit("/mcp", 1)[0]
        s, t = f"{self.prefix}-s", f"{self.prefix}-t"
        http_a, a = client(url, self.seen)
        async with http_a, a, httpx2.AsyncClient(base_url=base, timeout=STEP_TIMEOUT_S) as api:
            for name in ("x", "y"):
                await _call(a, s, "put_note", {"id": self.note(name), "body": "x", "status": "draft"})
            if _verdict(await _call(a, s, "commit", {})).get("committed") is not True:
                self.rec.problem(None, "the set-up commit failed")
                return
            held = _verdict(await _call(a, s, "delete_note", {"id": self.note("x")}))
            approval = held.get("approval_id")
            if held.get("error_class") != "approval_pending" or not approval:
                self.rec.problem(None, f"delete_note was not held for approval: {held}")
                return
            await anyio.to_thread.run_sync(self.outage.down)
            self._fail_closed(
                await _call(a, s, "delete_note", {"id": self.note("y")}), "a new irreversible call"
            )
            self._fail_closed(
                await _call(a, s, "delete_note", {"id": self.note("x")}), "the held call sent again"
            )
            # written after the irreversible calls: t's open write would hold the upstream's (SQLite)
            # write lock, and they would meet that lock instead of the missing store
            await _call(a, t, "put_note", {"id": self.note("z"), "body": "x", "status": "draft"})
            self._fail_closed(await _call(a, t, "commit", {}), "a commit")
            ready = await api.get("/readyz")
            self.rec.details["readyz_while_away"] = ready.status_code
            if self.rows() != {self.note(n) for n in ("x", "y")}:
                self.rec.problem(
                    None, f"something ran while the approval store was away: rows {sorted(self.rows())}"
                )
            await anyio.to_thread.run_sync(self.outage.up)
            await self._after_return(a, api, s, t, approval)
        await self._expired(expiring_url)
        self.rec.counters.http_5xx += len(self.seen)

    async def _after_return(self, a: Client, api: httpx2.AsyncClient, s: str, t: str, approval: str) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while (state := await self._api(api, "GET", f"/api/approvals/{approval}")).status_code == 503:
            if time.monotonic() > deadline:
                raise TimeoutError
            await anyio.sleep(0.2)
        self.rec.details["pending_after_return"] = (
            state.json().get("state") if state.status_code == 200 else state.text[:200]
        )
        if state.status_code != 200 or state.json().get("state") != "pending":
            self.rec.problem(
                None,
                f"the pending request did not survive the outage: {state.status_code} {state.text[:200]}",
            )
            return
        decided = await self._api(api, "POST", f"/api/approvals/{approval}/approve")
        if decided.status_code != 200:
            self.rec.problem(None, f"approving after the outage: {decided.status_code} {decided.text[:200]}")
            return
        done_t = await _call(a, t, "commit", {})
        for _ in range(20):  # the approved call, sent again while it meets a retryable error
            ran = await _call(a, s, "delete_note", {"id": self.note("x")})
            if not _failed(ran) or not (_verdict(ran).get("hint") or {}).get("retryable"):
                break
            await anyio.sleep(0.2)
        done_s = await _call(a, s, "commit", {})
        if (
            _failed(ran)
            or _verdict(done_s).get("committed") is not True
            or _verdict(done_t).get("committed") is not True
        ):
            self.rec.problem(
                None, f"after the store returned: {_shown(ran)} / {_shown(done_s)} / {_shown(done_t)}"
            )
        if self.rows() != {self.note("y"), self.note("z")}:
            self.rec.problem(None, f"after the store returned the rows are {sorted(self.rows())}")

    async def _expired(self, url: str) -> None:
        u = f"{self.prefix}-u"
        base = url.rsplit("/mcp", 1)[0]
        http_e, e = client(url, self.seen)
        async with http_e, e, httpx2.AsyncClient(base_url=base, timeout=STEP_TIMEOUT_S) as api:
            held = _verdict(await _call(e, u, "delete_note", {"id": self.note("y")}))
            approval = held.get("approval_id")
            if not approval:
                self.rec.problem(None, f"delete_note was not held on the expiring proxy: {held}")
                return
            await anyio.sleep(1.5)
            late = await self._api(api, "POST", f"/api/approvals/{approval}/approve")
            again = await _call(e, u, "delete_note", {"id": self.note("y")})
            done = await _call(e, u, "commit", {})
            self.rec.details.update(approve_expired=late.status_code, expired_call=_shown(again))
            if late.status_code == 200 or not _failed(again):
                self.rec.problem(
                    None, f"an expired approval was granted or ran: {late.status_code} {_shown(again)}"
                )
            if _verdict(done).get("committed") is not True:
                self.rec.problem(None, f"the commit after an expired approval: {_shown(done)}")
        if self.note("y") not in self.rows():
            self.rec.problem(None, "an expired approval's call was executed")
