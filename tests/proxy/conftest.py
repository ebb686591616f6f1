"""Harness for the proxy's end-to-end tests: real upstream servers and real ``shadowguard serve``
processes, configs written per test module, an agent wrapper that names its guard session, and the
proxy's app served in-process by uvicorn (``serving``, ``approvals_app``).

Helpers are fixtures (``harness``) because test modules are imported with ``--import-mode=importlib``
and cannot import each other.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import uvicorn
import yaml
from mcp import Client
from starlette.types import ASGIApp

from benchmark.fixtures import NOTES_APPROVALS_POLICY, NOTES_JOURNAL_POLICY, NOTES_POLICY, NOTES_SERVER
from benchmark.tasks import BenchData
from guard.approvals import ApprovalRequest, CheckResult, SqlApprovalStore, utcnow
from guard.models import ChangeSet, EffectClass, PolicySource, RowChange
from proxy.app import Recorder, create_app
from proxy.audit import AuditLog
from proxy.config import AuditConfig, AuthConfig, ProxyConfig
from proxy.held import HeldCalls
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy

ROOT = Path(__file__).resolve().parents[2]
RETAIL_POLICY = ROOT / "policies" / "sandbox_external_retail" / "policy.yaml"
SHADOWGUARD = str(Path(sys.executable).parent / "shadowguard")
MARKER_ENV = "SG_TEST_MARKER"
STARTUP_TIMEOUT_S = 90.0
MAX_BODY_BYTES = 256 * 1024
RETAIL_SERVE = [SHADOWGUARD, "env", "serve", "--domain", "sandbox_external_retail"]


def text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


class Process:
    """A server subprocess whose stderr goes to a file; it announces its URL there."""

    def __init__(
        self, args: list[str], log: Path, *, announce: str | None, env: Mapping[str, str] | None = None
    ):
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env={**os.environ, **(env or {})},
            cwd=str(ROOT),
        )
        self._announce = announce
        self.url: str | None = None

    def ready(self) -> Process:
        """Wait for the announced URL (servers started together are waited for together)."""
        if self.url is None and self._announce is not None:
            self.url = self._wait(self._announce)
        return self

    def _wait(self, announce: str) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.log.read_text(errors="replace").splitlines():
                if announce in line and "http://" in line:
                    return line[line.index("http://") :].strip()
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{self.proc.args} exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.proc.args} did not announce a URL:\n{self.log.read_text()}")

    def restart(self, args: list[str]) -> Process:
        """Start again (after a kill) with ``args``, and wait until it announces its URL."""
        assert self.proc.poll() is not None, "stop or kill the process first"
        self._log_file.close()
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log_file, cwd=str(ROOT)
        )
        self.url = None
        return self.ready()

    @property
    def base(self) -> str:
        assert self.url is not None
        return self.url.rsplit("/mcp", 1)[0]

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode


def notes_rows(db: Path) -> dict[str, dict[str, Any]]:
    """The committed notes, read straight from the database file."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        rows = conn.execute("SELECT id, body, status FROM notes ORDER BY id").fetchall()
    finally:
        conn.close()
    return {r[0]: {"id": r[0], "body": r[1], "status": r[2]} for r in rows}


def pids_with_marker(marker: str) -> list[int]:
    """Processes started with ``SG_TEST_MARKER=marker`` in their environment (upstreams of a test)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
        if ") Z " in stat:
            return
        time.sleep(0.02)


@dataclass
class Agent:
    """An agent's MCP client plus the guard session it names (None: the transport's own)."""

    client: Client
    session: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def _meta(self, extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
        meta = {**self.meta, **(extra or {})}
        if self.session is not None:
            meta["shadowguard/session"] = self.session
        return meta or None

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        return await self.client.call_tool(name, dict(arguments or {}), meta=self._meta(meta))

    async def ok(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        result = await self.call(name, arguments)
        assert not result.is_error, text(result)
        return text(result)

    async def json(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        return json.loads(await self.ok(name, arguments))

    async def refused(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The structured guard verdict of a call that must come back as an error."""
        result = await self.call(name, arguments)
        assert result.is_error, text(result)
        assert result.structured_content is not None, text(result)
        return dict(result.structured_content)


@asynccontextmanager
async def agent_on(url: str, mode: str) -> AsyncIterator[Agent]:
    """An agent connected to the MCP endpoint ``url`` in protocol era ``mode``, naming a guard session
    of its own in the 2026-07-28 era (:func:`era_agent_session`)."""
    async with Client(url, mode=mode, cache=None, read_timeout_seconds=90) as client:
        yield Agent(client, era_agent_session(mode))


def initialize_request() -> dict[str, Any]:
    """A raw JSON-RPC ``initialize`` request of the 2025-11-25 era (POST it to ``/mcp``)."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }


def era_agent_session(mode: str) -> str | None:
    """The 2026-07-28 era is sessionless: the agent names its session in ``_meta``."""
    return None if mode == "legacy" else f"agent-{uuid.uuid4().hex[:12]}"


def write_config(path: Path, upstreams: list[dict[str, Any]], **sections: Any) -> Path:
    path.write_text(yaml.safe_dump({"upstreams": upstreams, **sections}, sort_keys=False))
    return path


def notes_upstream(db: Path, marker: str, *, name: str = "notes", **extra: Any) -> dict[str, Any]:
    """The notes fixture as a transactional stdio upstream."""
    return {
        "name": name,
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(NOTES_SERVER), "--db", str(db), "--transactional"],
        "env": {MARKER_ENV: marker},
        "policy": str(NOTES_POLICY),
        **extra,
    }


def retail_upstream(bench: BenchData, marker: str) -> dict[str, Any]:
    """The retail benchmark domain as a transactional stdio upstream, with its policy pack."""
    return {
        "name": "retail",
        "transport": "stdio",
        "command": SHADOWGUARD,
        "args": [
            "env",
            "serve",
            "--domain",
            "sandbox_external_retail",
            "--stdio",
            "--data",
            str(bench.tasks_root),
        ],
        "env": {MARKER_ENV: marker},
        "policy": str(RETAIL_POLICY),
    }


def shadowguard_serve(config: Path) -> Process:
    """``shadowguard serve --config config`` (its log beside the config); ``ready()`` gives its URL."""
    return Process(
        [SHADOWGUARD, "serve", "--config", str(config)],
        config.with_suffix(".log"),
        announce="shadowguard serve: listening on",
    )


@contextmanager
def shadowguard_serving(configs: Mapping[str, Path]) -> Iterator[dict[str, Process]]:
    """:func:`shadowguard_serve` for each config by name, started together and ready; on exit every
    one is stopped, and each must have exited 0 (else its log is shown)."""
    processes: dict[str, Process] = {}
    try:
        for name, config in configs.items():
            processes[name] = shadowguard_serve(config)
        for process in processes.values():
            process.ready()
        yield processes
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
        failed = [
            f"{name} exited {code}:\n{processes[name].log.read_text()}"
            for name, code in codes.items()
            if code
        ]
        assert not failed, "\n".join(failed)


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """``app`` behind a real uvicorn server (lifespan on) on a free loopback port, in a thread of this
    process: yields its base URL. On exit the server shuts down, its lifespan with it, and must stop."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("the test server did not start")
                time.sleep(0.01)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        assert not thread.is_alive(), "the test server did not stop"


def refund_request(clock: Callable[[], datetime] = utcnow, **changes: Any) -> ApprovalRequest:
    """A refund of ORD-7 by ``agent-1`` held for approval: a rehearsed two-row preview (the order
    updated, a refund inserted), one passed check, expiring an hour after ``clock()``. ``changes``
    replace fields."""
    fields: dict[str, Any] = {
        "principal": "agent-1",
        "session_id": "sess-1",
        "upstream": "retail",
        "tool": "refund_order",
        "arguments": {"order_id": "ORD-7", "amount": 250.0},
        "effect": EffectClass.IRREVERSIBLE,
        "rule_id": "refund-over-100",
        "rule_source": PolicySource(ref="policy.md#refunds", quote="Refunds over $100 need a manager."),
        "preview": ChangeSet(
            changes=[
                RowChange(
                    table="orders",
                    key="ORD-7",
                    op="update",
                    before={"id": "ORD-7", "status": "delivered", "total": 250.0},
                    after={"id": "ORD-7", "status": "refunded", "total": 250.0},
                ),
                RowChange(
                    table="refunds",
                    key="R-1",
                    op="insert",
                    after={"id": "R-1", "order": "ORD-7", "amount": 250.0},
                ),
            ]
        ),
        "checks": [CheckResult(rule_id="refund-max", passed=True, message="within the order total")],
        "policy_version": "sha256:" + "2" * 64,
        "expires_at": clock() + timedelta(hours=1),
    }
    fields.update(changes)
    return ApprovalRequest(**fields)


@dataclass
class ApprovalsApp:
    """The proxy's app served by :func:`approvals_app`."""

    base: str
    store: SqlApprovalStore
    proxy: GuardProxy
    audit_path: Path
    """The JSON-lines audit log reviewer decisions go to (none is written when served unaudited)."""
    clock: Callable[[], datetime]
    """The store's clock."""

    def seed(self, **changes: Any) -> str:
        """Queues a :func:`refund_request` (``changes`` replace fields); returns its id."""
        return self.store.create(refund_request(self.clock, **changes)).id


@contextmanager
def approvals_app(
    folder: Path,
    auth: AuthConfig,
    *,
    store_url: str | None = None,
    clock: Callable[[], datetime] = utcnow,
    audited: bool = True,
) -> Iterator[ApprovalsApp]:
    """The proxy's app (``create_app``) with no upstreams and ``auth``, served by :func:`serving`:
    held calls on a SQL approval store (``store_url``, else ``folder/approvals.db``) on ``clock``,
    reviewer decisions audited to ``folder/audit.jsonl`` (``audited=False``: no audit log at all).

    The store is closed on exit; dropping its tables is the caller's (``approval_store_url`` does).
    """
    audit_path = folder / "audit.jsonl"
    with ExitStack() as cleanup:
        store = SqlApprovalStore(store_url or f"sqlite:///{folder / 'approvals.db'}", clock=clock)
        cleanup.callback(store.close)
        recorder = Recorder(cleanup.enter_context(AuditLog(audit_path))) if audited else None
        held = HeldCalls(store, expires_after_s=3600, wait_s=0, poll_s=0.25)
        proxy = GuardProxy([], SessionRegistry(observer=recorder, held=held))
        config = ProxyConfig(auth=auth, audit=AuditConfig(path=audit_path if audited else None))
        app = create_app(proxy, config, lifespan_runs_proxy=False, recorder=recorder)
        yield ApprovalsApp(cleanup.enter_context(serving(app)), store, proxy, audit_path, clock)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="session")
def proxy_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy")


@dataclass
class Upstreams:
    """The upstream servers the HTTP proxy relays to (started together, once per test run)."""

    notes: Process
    """The notes fixture over HTTP with the transaction extension (``notes_db``)."""
    journal: Process
    """The notes fixture over HTTP without it: the proxy journals its writes (``journal_db``)."""
    retail: Process
    """The retail domain: ``shadowguard env serve --port 0``."""
    notes_db: Path
    journal_db: Path


def notes_http_args(db: Path, port: int = 0, *, transactional: bool) -> list[str]:
    return [
        sys.executable,
        str(NOTES_SERVER),
        "--db",
        str(db),
        "--port",
        str(port),
        *(["--transactional"] if transactional else []),
    ]


def notes_http(db: Path, *, transactional: bool = True) -> Process:
    """The notes fixture over HTTP on a free port, on ``db`` (its log beside it); ``ready()``: its URL."""
    return Process(
        notes_http_args(db, transactional=transactional),
        db.with_suffix(".log"),
        announce="notes: listening on",
    )


@pytest.fixture(scope="session")
def upstreams(proxy_tmp: Path, bench: BenchData) -> Iterator[Upstreams]:
    notes_db, journal_db = proxy_tmp / "notes-http.sqlite", proxy_tmp / "journal.sqlite"
    notes = notes_http(notes_db)
    journal = notes_http(journal_db, transactional=False)
    retail = Process(
        [*RETAIL_SERVE, "--port", "0", "--data", str(bench.tasks_root)],
        proxy_tmp / "retail.log",
        announce="env serve: listening on",
    )
    try:
        yield Upstreams(notes.ready(), journal.ready(), retail.ready(), notes_db, journal_db)
    finally:
        for process in (notes, journal, retail):
            process.stop()


@pytest.fixture(scope="session")
def notes_db(proxy_tmp: Path) -> Path:
    """The database of the notes fixture when a stdio proxy starts it as a stdio upstream."""
    return proxy_tmp / "notes-stdio.sqlite"


@pytest.fixture(scope="session")
def marker() -> str:
    """Marks the upstream processes the proxies of this test run start (see pids_with_marker)."""
    return uuid.uuid4().hex


def journal_upstream(url: str) -> dict[str, Any]:
    return {
        "name": "journal",
        "transport": "http",
        "url": url,
        "prefix": "j_",
        "policy": str(NOTES_JOURNAL_POLICY),
    }


def retail_http_upstream(url: str) -> dict[str, Any]:
    return {"name": "retail", "transport": "http", "url": url, "policy": str(RETAIL_POLICY)}


@pytest.fixture(scope="session")
def http_proxy(proxy_tmp: Path, upstreams: Upstreams) -> Iterator[Process]:
    """``shadowguard serve`` over HTTP with three upstreams, all over HTTP: the notes fixture
    (transactional, its policy pack), the notes fixture without transactions (journaled, prefix
    ``j_``) and the retail domain (transactional, its policy pack)."""
    assert upstreams.notes.url is not None and upstreams.journal.url is not None
    assert upstreams.retail.url is not None
    config = write_config(
        proxy_tmp / "proxy.yaml",
        [
            {"name": "notes", "transport": "http", "url": upstreams.notes.url, "policy": str(NOTES_POLICY)},
            journal_upstream(upstreams.journal.url),
            retail_http_upstream(upstreams.retail.url),
        ],
        http={"host": "127.0.0.1", "port": 0, "max_body_bytes": MAX_BODY_BYTES},
        audit={"path": str(proxy_tmp / "audit.jsonl")},
        approvals={"wait_s": 0},  # a held call answers approval_pending at once (test_approvals_flow waits)
    )
    process = shadowguard_serve(config).ready()
    process.audit = proxy_tmp / "audit.jsonl"  # type: ignore[attr-defined]
    yield process
    assert process.stop() == 0, process.log.read_text()


@dataclass
class Harness:
    """What the proxy test modules share (see the module docstring)."""

    text = staticmethod(text)
    notes_rows = staticmethod(notes_rows)
    pids_with_marker = staticmethod(pids_with_marker)
    kill = staticmethod(kill)
    write_config = staticmethod(write_config)
    journal_upstream = staticmethod(journal_upstream)
    retail_http_upstream = staticmethod(retail_http_upstream)
    notes_http_args = staticmethod(notes_http_args)
    notes_upstream = staticmethod(notes_upstream)
    notes_http = staticmethod(notes_http)
    shadowguard_serve = staticmethod(shadowguard_serve)
    shadowguard_serving = staticmethod(shadowguard_serving)
    serving = staticmethod(serving)
    approvals_app = staticmethod(approvals_app)
    refund_request = staticmethod(refund_request)
    retail_upstream = staticmethod(retail_upstream)
    era_agent_session = staticmethod(era_agent_session)
    agent_on = staticmethod(agent_on)
    initialize_request = staticmethod(initialize_request)
    Agent = Agent
    Process = Process
    shadowguard = SHADOWGUARD
    notes_server = NOTES_SERVER
    notes_journal_policy = NOTES_JOURNAL_POLICY
    notes_policy = NOTES_POLICY
    notes_approvals_policy = NOTES_APPROVALS_POLICY
    marker_env = MARKER_ENV
    max_body_bytes = MAX_BODY_BYTES
    retail_policy = RETAIL_POLICY
    retail_serve = RETAIL_SERVE


@pytest.fixture(scope="session")
def harness() -> Harness:
    return Harness()
