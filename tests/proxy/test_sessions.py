"""Guard sessions in-process (the proxy's MCP server driven through the SDK's in-memory client, against
real upstream servers), and ``shadowguard serve`` refusing to start on a bad setup."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.server import ServerRequestContext
from starlette.authentication import SimpleUser
from starlette.requests import Request
from typer.testing import CliRunner

from guard.models import CommitOutcome, ToolOutcome
from proxy.cli import app
from proxy.config import UpstreamConfig
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy, session_identity
from proxy.sessions import RollbackOutcome
from proxy.upstreams import Upstream
from tests.support.proxy import NOTES_POLICY, RETAIL_POLICY, Agent, ended, notes_rows, text, write_config

pytestmark = pytest.mark.anyio


class Events:
    """A session observer that keeps what it is told."""

    def __init__(self) -> None:
        self.calls: list[ToolOutcome] = []
        self.commits: list[tuple[str, CommitOutcome]] = []
        self.rollbacks: list[tuple[str, str, RollbackOutcome]] = []

    def call(self, outcome: ToolOutcome) -> None:
        self.calls.append(outcome)

    def commit(self, session_id: str, outcome: CommitOutcome) -> None:
        self.commits.append((session_id, outcome))

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None:
        self.rollbacks.append((session_id, reason, outcome))


def notes_proxy(upstreams: Any, sessions: SessionRegistry) -> GuardProxy:
    spec = UpstreamConfig(name="notes", transport="http", url=upstreams.notes.url, policy=Path(NOTES_POLICY))
    return GuardProxy([Upstream.from_settings(spec)], sessions)


async def test_idle_session_is_rolled_back_never_committed(upstreams: Any) -> None:
    events = Events()
    sessions = SessionRegistry(idle_timeout=0.3, observer=events)
    proxy = notes_proxy(upstreams, sessions)
    session, note = f"idle-{uuid.uuid4().hex[:6]}", f"idle-{uuid.uuid4().hex[:6]}"
    async with proxy.running(), Client(proxy.server, cache=None) as client:
        agent = Agent(client, session)
        await agent.ok("put_note", {"id": note, "body": "never committed"})
        assert await ended(sessions, session) == "idle"
        assert [(s, reason) for s, reason, _ in events.rollbacks] == [(session, "idle")]
        assert note not in notes_rows(upstreams.notes_db)

        late = await agent.call("commit")
        assert late.is_error and late.structured_content is not None
        assert [v["rule_id"] for v in late.structured_content["violations"]] == ["session_rolled_back"]
        assert "idle" in text(late)

        await agent.ok("put_note", {"id": f"{note}-next", "body": "a new session"})
        assert not (await agent.call("commit")).is_error
    assert f"{note}-next" in notes_rows(upstreams.notes_db)
    assert [c.committed for _, c in events.commits] == [False, True]


async def test_shutdown_rolls_every_open_session_back(upstreams: Any) -> None:
    events = Events()
    sessions = SessionRegistry(observer=events)
    spec = UpstreamConfig(
        name="retail", transport="http", url=upstreams.retail.url, policy=Path(RETAIL_POLICY)
    )
    proxy = GuardProxy([Upstream.from_settings(spec)], sessions)
    ids = [f"shutdown-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    cancel = {"order_id": "ORD-10000002", "cancellation_reason": "customer_request"}
    async with proxy.running(), Client(proxy.server, cache=None) as client:
        async with anyio.create_task_group() as tg:
            for session in ids:
                tg.start_soon(Agent(client, session).ok, "cancel_order", cancel)
        assert len(sessions) == 3
    assert sorted(s for s, reason, _ in events.rollbacks if reason == "shutdown") == sorted(ids)
    assert all(len(outcome.changes) >= 1 for *_, outcome in events.rollbacks)
    assert not events.commits


def ctx(
    meta: dict[str, Any] | None = None,
    *,
    http: bool = True,
    version: str = "2026-07-28",
    headers: dict[str, str] | None = None,
    user: str | None = None,
) -> Any:
    """A request context as the SDK builds it, for the parts session identity reads."""
    request = None
    if http:
        scope: dict[str, Any] = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        }
        if user is not None:
            scope["user"] = SimpleUser(user)
        request = Request(scope)
    return ServerRequestContext(
        session=None,  # type: ignore[arg-type]
        lifespan_context={},
        protocol_version=version,
        method="tools/call",
        meta=meta,  # type: ignore[arg-type]
        request=request,
    )


def test_session_identity_in_both_eras_and_transports() -> None:
    stdio = "stdio:abc"
    named = {"shadowguard/session": "s-1"}
    assert session_identity(ctx(named), stdio) == ("s-1", None)
    assert session_identity(ctx(named, http=False), stdio) == ("s-1", None)
    assert session_identity(ctx(http=False, version="2025-11-25"), stdio) == (stdio, None)
    legacy = ctx(version="2025-11-25", headers={"Mcp-Session-Id": "abc123"})
    assert session_identity(legacy, stdio) == ("abc123", None)
    assert session_identity(ctx(user="alice"), stdio) == ("principal:alice", "alice")
    assert session_identity(ctx(named, user="alice"), stdio) == ("s-1", "alice")
    assert session_identity(ctx(), stdio) == (None, None), "the default applies (docs/adr/008)"
    for bad in ("", 7, "x" * 257):
        with pytest.raises(MCPError):
            session_identity(ctx({"shadowguard/session": bad}), stdio)


def test_a_session_belongs_to_its_principal() -> None:
    """Sessions are keyed by (principal, id): another principal naming the same id gets a session of
    its own, neither refused (which would tell it the id is taken) nor let into alice's."""
    sessions = SessionRegistry()
    alices = sessions.open("s-1", "alice")
    assert sessions.open("s-1", "alice") is alices is sessions.get("s-1", "alice")
    mallorys = sessions.open("s-1", "mallory")
    assert mallorys is not alices and mallorys.principal == "mallory"
    assert sessions.get("s-1", "mallory") is mallorys and sessions.get("s-1") is None
    assert set(sessions.named("s-1")) == {alices, mallorys}


def serve(config: Path) -> Any:
    return CliRunner().invoke(app, ["serve", "--config", str(config)])


def test_serve_refuses_tool_name_collisions(module_tmp: Path, upstreams: Any) -> None:
    url = upstreams.journal.url
    config = write_config(
        module_tmp / "clash.yaml",
        [{"name": "a", "transport": "http", "url": url}, {"name": "b", "transport": "http", "url": url}],
    )
    result = serve(config)
    assert result.exit_code == 1
    assert (
        "tool name 'get_note' is served by upstreams 'a' and 'b': give one of them a prefix" in result.output
    )


def test_serve_refuses_an_upstream_it_cannot_start(module_tmp: Path) -> None:
    dead = {"name": "dead", "transport": "stdio", "command": "/bin/false"}
    result = serve(write_config(module_tmp / "dead.yaml", [dead]))
    assert result.exit_code == 1
    assert "error: upstream 'dead': cannot connect" in result.output


def test_serve_refuses_a_config_without_upstreams(module_tmp: Path) -> None:
    result = serve(write_config(module_tmp / "empty.yaml", []))
    assert result.exit_code == 2
    assert "no upstreams configured" in result.output
