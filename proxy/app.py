"""The proxy's HTTP app (FastAPI), and the pieces ``shadowguard serve`` puts together around it.

Routes: the MCP endpoint ``/mcp`` (streamable HTTP, both protocol eras), the sessions API for
orchestrators (``/api/sessions``, proxy/sessions_api.py), the approvals API and reviewer page, and
the routers other parts contribute (``/healthz``, ``/readyz``, ``/metrics``). A handshake-era client
that ends its HTTP session (``DELETE /mcp``) ends its guard session too: rolled back, never committed.

:func:`build_proxy` builds the proxy a config describes, :func:`serving` runs it; the CLI's entry
points that bind a port and serve are in proxy/serve.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import anyio
from fastapi import APIRouter, FastAPI
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guard.approvals.stores import open_approval_store
from guard.models import CommitOutcome, ToolOutcome
from proxy import telemetry
from proxy.approvals.api import approvals_router
from proxy.approvals.auth import AgentAuth
from proxy.approvals.review import review_router
from proxy.approvals.webhook import WebhookNotifier
from proxy.audit import AuditLog
from proxy.bodylimit import BodyLimit
from proxy.config import ConfigError, ProxyConfig
from proxy.health import health_router
from proxy.held import HeldCalls, check_reviewers
from proxy.ledger import SessionLedger
from proxy.registry import SessionRegistry
from proxy.relay_lean import LeanRelay
from proxy.replica_api import ReplicaSessions
from proxy.replicas import ReplicaDirectory, ReplicaRouter, replica_directory
from proxy.server import GuardProxy, principal_of_scope
from proxy.sessions import RollbackOutcome
from proxy.sessions_api import sessions_router

MCP_PATH = "/mcp"
REVIEW_PATH = "/review"
OPENAPI_PATH = "/api/openapi.json"


class Recorder:
    """The sessions' observer: every decided call, commit and rollback goes to the audit log and metrics."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    def call(self, outcome: ToolOutcome) -> None:
        telemetry.record_call(outcome)
        self.audit.record_call(outcome, outcome.call.session_id)

    def commit(self, session_id: str, outcome: CommitOutcome) -> None:
        telemetry.record_commit(outcome)
        self.audit.record_commit(outcome, session_id)

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None:
        telemetry.record_rollback(reason, complete=outcome.rolled_back)
        self.audit.record_rollback(
            session_id,
            reason,
            changes=len(outcome.changes),
            rolled_back=outcome.rolled_back,
            undone_calls=[c.id for c in outcome.undone],
            not_undone_calls=[c.id for c in outcome.not_undone],
        )


def build_proxy(
    config: ProxyConfig, *, spare_connections: bool = True, review_url: str | None = None
) -> tuple[GuardProxy, Recorder]:
    """The proxy a config describes (policy packs are loaded and the approval store opened here;
    no upstream is connected yet). ``review_url`` is the reviewer page webhook notices link to.

    Raises :class:`~proxy.config.ConfigError` for an ``approvals.store`` URL that names no store (or a
    webhook secret that is not set), and :class:`~guard.approvals.models.ApprovalStoreUnavailable`
    when the store cannot be reached.
    """
    held = _held_calls(config, review_url)
    try:
        ledger = _ledger(config)
    except BaseException:
        held.close()
        raise
    recorder = Recorder(AuditLog(config.audit.path, config.audit.include_arguments))
    sessions = SessionRegistry(
        idle_timeout=config.sessions.idle_timeout_s,
        on_idle=config.sessions.on_idle,
        lease=config.sessions.lease_s,
        observer=recorder,
        held=held,
        ledger=ledger,
    )
    try:
        proxy = GuardProxy.from_config(config, sessions, spare_connections=spare_connections)
    except BaseException:
        recorder.audit.close()
        held.close()
        ledger.close()
        raise
    return proxy, recorder


def _ledger(config: ProxyConfig) -> SessionLedger:
    """The session ledger ``config.sessions.store`` names (a relative SQLite file was resolved against
    the config's folder); raises ConfigError for a URL it cannot use."""
    try:
        return SessionLedger(config.sessions.store)
    except ValueError as exc:
        raise ConfigError(f"sessions.store: {exc}", field="sessions.store") from exc


def _held_calls(config: ProxyConfig, review_url: str | None) -> HeldCalls:
    """The approval queue ``config.approvals`` names (a relative SQLite file was resolved by
    :meth:`ProxyConfig.load` against the config's folder), notifying ``config.webhook``."""
    settings = config.approvals
    notifier = WebhookNotifier.from_config(config.webhook, review_url=review_url)
    try:
        store = open_approval_store(settings.store)
    except ValueError as exc:
        raise ConfigError(f"approvals.store: {exc}", field="approvals.store") from exc
    return HeldCalls(
        store,
        expires_after_s=settings.expires_after_s,
        wait_s=settings.wait_s,
        poll_s=settings.poll_s,
        notifier=notifier,
        sweep_every_s=settings.sweep_s,
        decidable=any(r.role == "approver" for r in config.auth.reviewers),
    )


@asynccontextmanager
async def serving(proxy: GuardProxy, recorder: Recorder, config: ProxyConfig) -> AsyncIterator[GuardProxy]:
    """Telemetry on, upstreams connected, sessions served, the approval queue swept; on the way out
    everything is rolled back (pending approval requests are cancelled) and the store closed."""
    telemetry.setup_telemetry(config)
    held = proxy.held
    try:
        async with anyio.create_task_group() as background:
            if held is not None:
                await background.start(held.run)
            try:
                async with proxy.running():
                    check_reviewers(
                        proxy.routes,
                        held is None or held.decidable,
                        require=config.approvals.require_reviewers,
                    )
                    yield proxy
            finally:
                background.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The task group wraps whatever left its body; callers expect the error itself.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        recorder.audit.close()
        if held is not None:
            held.close()
        if proxy.sessions.ledger is not None:
            proxy.sessions.ledger.close()
        telemetry.shutdown_telemetry()


class _EndSessionOnDelete:
    """Ends the guard session of a handshake-era HTTP session the client closes (``DELETE /mcp``), and
    renews the lease of the session any request with an ``Mcp-Session-Id`` belongs to.

    The guard session is rolled back before the DELETE is answered, so a client that sees the
    answer knows its pending changes are gone.
    """

    def __init__(self, app: ASGIApp, proxy: GuardProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == MCP_PATH:
            session_id = _session_header(scope)
            if session_id:
                self.proxy.sessions.renew(session_id, principal_of_scope(scope))
        if scope["type"] != "http" or scope["method"] != "DELETE" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        await self.app(scope, receive, hold)
        status = next((m["status"] for m in held if m["type"] == "http.response.start"), None)
        session_id = _session_header(scope)
        if session_id and status is not None and status < 300:
            await self.proxy.sessions.end(session_id, "closed", principal=principal_of_scope(scope))
        for message in held:
            await send(message)


def _session_header(scope: Scope) -> str | None:
    """The request's first ``Mcp-Session-Id`` header, as starlette's ``Headers.get`` reads it."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key == b"mcp-session-id":
            return value.decode("latin-1")
    return None


class _App(FastAPI):
    """FastAPI with the agent-facing endpoint dispatched first: a request for ``/mcp`` goes straight
    to its own chain (body limit, agent auth, replica front, session renewal, the lean relay of a
    plain 2026-07-28 ``tools/call`` (proxy/relay_lean.py), the SDK's app) instead
    of through the API's middleware stack and router, which it does not use. Every other request, and
    the lifespan, is FastAPI's."""

    mcp_chain: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chain = self.mcp_chain
        if chain is not None and scope["type"] == "http" and scope["path"] == MCP_PATH:
            scope["app"] = self
            await chain(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _mcp_chain(
    proxy: GuardProxy, config: ProxyConfig, directory: ReplicaDirectory | None
) -> tuple[LeanRelay, ASGIApp, ReplicaRouter | None]:
    """What a request for ``/mcp`` goes through, outermost last: the SDK's app, the lean relay, the
    session renewal and DELETE, the replica front (with ``directory``), agent auth (with
    ``auth.agents``). Returns the lean relay, the chain, and the replica front (closed at shutdown)."""
    mcp_app = proxy.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=config.http.host,
        max_request_body_size=config.http.max_body_bytes,
        session_idle_timeout=config.sessions.idle_timeout_s,
    )
    lean_relay = LeanRelay(mcp_app, proxy, enabled=config.proxy.lean_relay)
    mcp: ASGIApp = _EndSessionOnDelete(lean_relay, proxy)
    replica_front = (
        ReplicaRouter(mcp, directory, max_body_bytes=config.http.max_body_bytes)
        if directory is not None
        else None
    )
    mcp = replica_front if replica_front is not None else mcp
    if config.auth.agents:
        mcp = AgentAuth(mcp, config.auth, path=MCP_PATH)
    return lean_relay, mcp, replica_front


def _lifespan(
    proxy: GuardProxy,
    config: ProxyConfig,
    recorder: Recorder | None,
    *,
    runs_proxy: bool,
    directory: ReplicaDirectory | None,
    closers: Sequence[Callable[[], Awaitable[None]]],
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the proxy (if it ``runs_proxy``), the MCP session manager, the replica
    directory; on the way out ``closers`` run, last first, then the rest stops in reverse."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if runs_proxy:
                if recorder is None:
                    raise RuntimeError("create_app(lifespan_runs_proxy=True) needs the recorder")
                await stack.enter_async_context(serving(proxy, recorder, config))
            await stack.enter_async_context(proxy.server.session_manager.run())
            if directory is not None:
                await stack.enter_async_context(directory.running())
            for close in closers:
                stack.push_async_callback(close)
            yield

    return lifespan


def create_app(
    proxy: GuardProxy,
    config: ProxyConfig,
    *,
    lifespan_runs_proxy: bool = True,
    routers: Sequence[APIRouter] = (),
    recorder: Recorder | None = None,
) -> FastAPI:
    """The FastAPI app: ``/mcp``, ``/api/sessions``, ``/api/approvals``, health and metrics, plus ``routers``.

    With ``lifespan_runs_proxy`` the app's lifespan connects the upstreams (and rolls every session
    back at shutdown); without it the caller runs the proxy (``shadowguard serve`` does, so that a
    startup failure is reported before the server binds; stdio mode does, with this app on a side
    port). The MCP session manager always runs in the app's lifespan (pitfall P4 of the SDK notes).

    With ``config.auth.agents`` set, ``/mcp`` needs an agent's bearer token and runs as that agent
    (:class:`proxy.approvals.auth.AgentAuth`). Reviewer decisions are audited in ``recorder``'s log
    (else the log of the recorder observing ``proxy.sessions``, as :func:`build_proxy` wires it).
    ``/mcp`` is a route of its own, not a catch-all mount, so that a wrong method on an API path
    gets 405 from the API rather than an answer from the MCP app. The OpenAPI schema is served at
    ``OPENAPI_PATH``.
    """
    directory = replica_directory(config)
    replica_api = ReplicaSessions(directory) if directory is not None else None
    lean_relay, mcp, replica_front = _mcp_chain(proxy, config, directory)
    closers = [c.aclose for c in (replica_front, replica_api) if c is not None]
    lifespan = _lifespan(
        proxy, config, recorder, runs_proxy=lifespan_runs_proxy, directory=directory, closers=closers
    )
    app = _App(
        title="shadowguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH
    )
    app.state.proxy = proxy
    app.state.config = config
    app.add_middleware(BodyLimit, limit=config.http.max_body_bytes)
    audit_from = recorder if recorder is not None else proxy.sessions.observer
    app.state.audit = audit_from.audit if isinstance(audit_from, Recorder) else None
    app.include_router(health_router(proxy.readiness))
    app.include_router(sessions_router(proxy, replica_api))
    app.include_router(approvals_router())
    app.include_router(review_router())
    for router in routers:
        app.include_router(router)
    app.state.lean_relay = lean_relay
    app.router.routes.append(Route(MCP_PATH, mcp))
    app.mcp_chain = BodyLimit(mcp, limit=config.http.max_body_bytes)
    return app


__all__ = [
    "MCP_PATH",
    "OPENAPI_PATH",
    "REVIEW_PATH",
    "Recorder",
    "build_proxy",
    "create_app",
    "serving",
]
