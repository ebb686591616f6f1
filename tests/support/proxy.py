"""What the proxy tests build: configs and upstream entries, recorded call outcomes, an agent that
names its guard session, a held refund, and the proxy's app served with an approval store
(``approvals_app``)."""

from __future__ import annotations

import json
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import yaml
from mcp import Client
from mcp.client.session import ElicitationFnT

from benchmark.fixtures import NOTES_APPROVALS_POLICY as NOTES_APPROVALS_POLICY
from benchmark.fixtures import NOTES_JOURNAL_POLICY as NOTES_JOURNAL_POLICY
from benchmark.fixtures import NOTES_POLICY as NOTES_POLICY
from benchmark.fixtures import NOTES_SERVER
from benchmark.tasks import BenchData
from guard.approvals import ApprovalRequest, CheckResult, SqlApprovalStore, utcnow
from guard.models import (
    ChangeSet,
    EffectClass,
    PolicySource,
    RowChange,
    ToolCall,
    ToolOutcome,
    Verdict,
    Violation,
)
from proxy.app import Recorder, create_app
from proxy.audit import AuditLog
from proxy.config import AuditConfig, AuthConfig, ProxyConfig
from proxy.held import HeldCalls
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from tests.support.processes import MARKER_ENV, ROOT, SHADOWGUARD, serving

RETAIL_POLICY = ROOT / "policies" / "sandbox_external_retail" / "policy.yaml"
MAX_BODY_BYTES = 256 * 1024
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-client", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
"""The ``_meta`` a raw JSON-RPC request of the 2026-07-28 era carries (no initialize handshake)."""


def request_meta(items: Mapping[str, Any]) -> types.RequestParamsMeta:
    """``items`` as a request's ``_meta`` (the SDK types it as an open TypedDict)."""
    return cast(types.RequestParamsMeta, dict(items))


def outcome_meta(result: types.CallToolResult) -> dict[str, Any]:
    """The guard's outcome stamped on a call's result (``_meta["shadowguard/outcome"]``)."""
    return dict((result.meta or {})["shadowguard/outcome"])


def text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


def notes_rows(db: Path) -> dict[str, dict[str, Any]]:
    """The committed notes, read straight from the database file."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        rows = conn.execute("SELECT id, body, status FROM notes ORDER BY id").fetchall()
    finally:
        conn.close()
    return {r[0]: {"id": r[0], "body": r[1], "status": r[2]} for r in rows}


@dataclass
class Agent:
    """An agent's MCP client plus the guard session it names (None: the transport's own)."""

    client: Client
    session: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def _meta(self, extra: Mapping[str, Any] | None) -> types.RequestParamsMeta | None:
        meta = {**self.meta, **(extra or {})}
        if self.session is not None:
            meta["shadowguard/session"] = self.session
        return request_meta(meta) if meta else None

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

    async def commit(self) -> dict[str, Any]:
        """Commits the guard session; the commit must succeed. Returns its structured result
        (``committed``, ``changes``, ``applied_calls``, ``violations``)."""
        result = await self.call("commit")
        assert not result.is_error, text(result)
        assert result.structured_content is not None, text(result)
        return dict(result.structured_content)

    async def refused(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The structured guard verdict of a call that must come back as an error."""
        result = await self.call(name, arguments)
        assert result.is_error, text(result)
        assert result.structured_content is not None, text(result)
        return dict(result.structured_content)


async def ended(sessions: SessionRegistry, session: str, *, within_s: float = 60.0) -> str | None:
    """Waits until ``sessions`` no longer holds ``session`` (failing after ``within_s``, a bound for a
    loaded machine, not a timing assertion) and returns why it ended (``idle``, ``lease``, ...)."""
    with anyio.fail_after(within_s):
        while sessions.get(session) is not None:
            await anyio.sleep(0.05)
    return sessions.ended(session)


@asynccontextmanager
async def agent_on(
    url: str, mode: str, *, elicitation_callback: ElicitationFnT | None = None
) -> AsyncIterator[Agent]:
    """An agent connected to the MCP endpoint ``url`` in protocol era ``mode``, naming a guard session
    of its own in the 2026-07-28 era (:func:`era_agent_session`); ``elicitation_callback`` answers
    the questions the server asks it."""
    async with Client(
        url, mode=mode, cache=None, read_timeout_seconds=90, elicitation_callback=elicitation_callback
    ) as client:
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


def direct_write(db: Path, note: str = "n1", *, timeout: float = 2.0) -> str | None:
    """Another writer on an upstream's notes database (not through the proxy), waiting up to
    ``timeout`` for SQLite's write lock: None when it wrote, else SQLite's error."""
    conn = sqlite3.connect(str(db), timeout=timeout)
    try:
        conn.execute("UPDATE notes SET body = ? WHERE id = ?", (f"direct {uuid.uuid4().hex[:6]}", note))
        conn.commit()
    except sqlite3.OperationalError as exc:
        return str(exc)
    finally:
        conn.close()
    return None


def http_proxy_config(path: Path, upstream: dict[str, Any]) -> Path:
    """A config at ``path`` for ``shadowguard serve`` over HTTP on a free port in front of ``upstream``,
    audited beside the config, with held calls answered at once (``approval_pending``)."""
    return write_config(
        path,
        [upstream],
        http={"host": "127.0.0.1", "port": 0},
        audit={"path": str(path.parent / "audit.jsonl")},
        approvals={"wait_s": 0},
    )


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


def journal_upstream(url: str) -> dict[str, Any]:
    return {
        "name": "journal",
        "transport": "http",
        "url": url,
        "prefix": "j_",
        "policy": str(NOTES_JOURNAL_POLICY),
    }


def notes_http_upstream(url: str, policy: Path | None = NOTES_POLICY) -> dict[str, Any]:
    """The notes fixture served at ``url`` as an HTTP upstream named ``notes``, guarded by ``policy``
    (None: no pack)."""
    upstream: dict[str, Any] = {"name": "notes", "transport": "http", "url": url}
    if policy is not None:
        upstream["policy"] = str(policy)
    return upstream


def retail_http_upstream(url: str) -> dict[str, Any]:
    return {"name": "retail", "transport": "http", "url": url, "policy": str(RETAIL_POLICY)}


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


def violation(rule_id: str, message: str = "no", **fields: Any) -> Violation:
    """A violation of ``rule_id`` citing the demo terms (§3.1, "never below zero"); ``fields`` are more
    Violation fields (``rows``)."""
    return Violation(
        rule_id=rule_id,
        message=message,
        source=PolicySource(ref="terms §3.1", quote="never below zero"),
        **fields,
    )


def tool_outcome(
    tool: str,
    verdict: Verdict,
    *,
    rules: tuple[str, ...] = (),
    call: Mapping[str, Any] | None = None,
    **fields: Any,
) -> ToolOutcome:
    """The outcome the guard records for a call of ``tool``: ``call`` holds the other ToolCall fields
    (default: arguments ``{"amount": 5}``), each of ``rules`` becomes a ``violation``, the effect is
    ``write`` unless ``fields`` (more ToolOutcome fields) name one."""
    return ToolOutcome(
        call=ToolCall(tool=tool, **(call if call is not None else {"arguments": {"amount": 5}})),
        effect=fields.pop("effect", EffectClass.WRITE),
        verdict=verdict,
        violations=fields.pop("violations", [violation(r) for r in rules]),
        **fields,
    )
