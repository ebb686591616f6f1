"""The proxy's HTTP app (FastAPI) and how ``shadowguard serve`` puts the pieces together.

Routes: the MCP endpoint ``/mcp`` (streamable HTTP, both protocol eras), the sessions API for
orchestrators, and the routers other parts contribute (``/healthz``, ``/readyz``, ``/metrics``):

* ``POST /api/sessions/{id}/commit`` -> ``{"session", "committed", "changes", "applied_calls", "violations"}``
  (200 whether committed or refused: a refusal is an answer, not an error; 404 for an unknown id)
* ``POST /api/sessions/{id}/rollback`` -> ``{"session", "rolled_back", "changes", "undone_calls",
  "not_undone_calls", "not_reversed"}``
* ``GET /api/sessions`` and ``GET /api/sessions/{id}`` -> the open sessions' status

With several replicas (docs/deploy.md) a request for a session another replica holds is answered by
that replica (proxy/replica_api.py); the list is this replica's sessions and says which replica.

With ``auth.agents`` or ``auth.orchestrators`` configured these need a bearer token: an orchestrator's
(every session) or an agent's (its own sessions; another's is 404). Without either they are open.

``{id}`` is the guard session id (docs/proxy.md): the ``_meta["shadowguard/session"]`` value, the
``Mcp-Session-Id``, ``principal:<name>``, or the stdio session's id; every tool result names it in
``_meta["shadowguard/outcome"].session``. A handshake-era client that ends its HTTP session
(``DELETE /mcp``) ends its guard session too: rolled back, never committed.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Annotated, Any

import anyio
import uvicorn
from anyio.abc import TaskStatus
from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guard.approvals.stores import open_approval_store
from guard.keepalive import SERVER_KEEP_ALIVE_S
from guard.models import CommitOutcome, ToolOutcome
from proxy import telemetry
from proxy.approvals.api import ApiError, ApprovalsRoute, ErrorBody, approvals_router
from proxy.approvals.auth import AgentAuth, SessionsCaller, api_sessions_caller
from proxy.approvals.review import review_router
from proxy.approvals.webhook import WebhookNotifier
from proxy.audit import AuditLog
from proxy.bodylimit import BodyLimit
from proxy.commits import entry_outcome
from proxy.config import ConfigError, ProxyConfig
from proxy.health import health_router
from proxy.held import HeldCalls, check_reviewers
from proxy.ledger import SessionLedger
from proxy.registry import ANY, SessionRegistry
from proxy.relay_lean import LeanRelay
from proxy.replica_api import ReplicaSessions
from proxy.replicas import ReplicaRouter, replica_directory
from proxy.server import GuardProxy, principal_of_scope
from proxy.sessions import ProxySession, RollbackOutcome

logger = logging.getLogger(__name__)

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


_Caller = Annotated[SessionsCaller, Depends(api_sessions_caller)]
_SESSION_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No token, or one that is no orchestrator's or agent's"},
    403: {"model": ErrorBody, "description": "A reviewer's token"},
}
_NO_SESSION: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No open session with this id that the caller may see"},
    410: {"model": ErrorBody, "description": "Several replicas: the session's replica died (code lost)"},
    503: {
        "model": ErrorBody,
        "description": "Several replicas: the session's replica or the directory does not answer "
        "(code unavailable; Retry-After)",
    },
}


@asynccontextmanager
async def _warn_if_sessions_open(app: FastAPI) -> AsyncIterator[None]:
    """At startup: a config that sets up reviewers but leaves /api/sessions open likely forgot it."""
    config: ProxyConfig = app.state.config
    if config.auth.reviewers and config.auth.sessions_api_open:
        logger.warning(
            "auth.reviewers is set but auth.agents and auth.orchestrators are empty, so /api/sessions "
            "takes no token: anyone who reaches this port can commit or roll back any session. "
            "Configure auth.orchestrators (docs/proxy.md, 'Commit and rollback')."
        )
    yield


def sessions_router(proxy: GuardProxy, replicas: ReplicaSessions | None = None) -> APIRouter:
    """``/api/sessions``: commit, roll back and inspect guard sessions (for orchestrators).

    With ``replicas``, a session this replica does not hold is answered by the replica that does
    (:class:`proxy.replica_api.ReplicaSessions`).

    Who may do what is :func:`proxy.approvals.auth.sessions_caller`: with ``auth.agents`` or
    ``auth.orchestrators`` configured an orchestrator acts on every session and an agent on its own
    only (another's is 404, exactly as an unknown id, and the list leaves it out); with neither, the
    API is open. Refusals have the approvals API's body ``{"error": {"code", "message"}}``.
    """
    router = APIRouter(
        prefix="/api/sessions",
        tags=["sessions"],
        route_class=ApprovalsRoute,
        lifespan=_warn_if_sessions_open,
        responses=_SESSION_ERRORS,
    )

    def visible(session_id: str, caller: SessionsCaller, principal: str | None) -> list[ProxySession]:
        found = proxy.sessions.named(session_id)
        if caller.role == "agent":
            return [s for s in found if s.principal == caller.name]
        return [s for s in found if principal is None or s.principal == principal]

    def find(session_id: str, caller: SessionsCaller, principal: str | None) -> ProxySession:
        """The one open session of this id the caller may act on; 404 when none (another principal's
        is not told apart from an unknown id), 409 when several principals' share it."""
        sessions = visible(session_id, caller, principal)
        if len(sessions) == 1:
            return sessions[0]
        if len(sessions) > 1:
            raise ApiError(
                409,
                "conflict",
                f"sessions of {len(sessions)} principals have the id {session_id!r}; "
                "name one with ?principal=",
            )
        why = ""
        if caller.role != "agent":
            ended = (
                proxy.sessions.ended_any(session_id)
                if principal is None
                else proxy.sessions.ended(session_id, principal)
            )
            why = f": it was rolled back and closed ({ended})" if ended is not None else ""
        raise ApiError(404, "not_found", f"no open session {session_id!r}{why}")

    async def elsewhere(
        request: Request, session_id: str, caller: SessionsCaller, principal: str | None
    ) -> Response | None:
        """The owner replica's answer for a session not held here (None: answer here)."""
        if replicas is None or visible(session_id, caller, principal):
            return None
        if caller.role == "agent":
            return await replicas.answer(request, session_id, [caller.name])
        return await replicas.answer(request, session_id, None if principal is None else [principal])

    async def recorded(
        session_id: str, caller: SessionsCaller, principal: str | None
    ) -> dict[str, Any] | None:
        """The commit record the ledger holds of a session no longer open (a commit that did not finish)."""
        if caller.role == "agent":
            found = await proxy.sessions.peek_lost(session_id, caller.name)
        else:
            found = await proxy.sessions.peek_lost(session_id, ANY if principal is None else principal)
        found = [(who, entry) for who, entry in found if entry.commit is not None]
        if not found:
            return None
        if len(found) > 1:
            raise ApiError(
                409,
                "conflict",
                f"the ledger holds sessions of {len(found)} principals with the id {session_id!r}; "
                "name one with ?principal=",
            )
        ((who, entry),) = found
        answer = entry_outcome(entry)
        assert answer is not None
        return {
            "id": session_id,
            "principal": who,
            "open": False,
            "state": entry.state,
            "committed": answer.committed,
            "upstreams": answer.upstreams,
            "violations": [v.model_dump(mode="json") for v in answer.violations],
        }

    @router.get("")
    async def list_sessions(caller: _Caller) -> JSONResponse:
        """The open sessions the caller may see; with several replicas, this replica's only, and
        ``replica`` names it."""
        visible = [s.describe() for s in proxy.sessions if caller.may_act_on(s.principal)]
        if replicas is None:
            return JSONResponse({"sessions": visible})
        return JSONResponse({"sessions": visible, "replica": replicas.describe()})

    @router.get("/{session_id:path}", responses=_NO_SESSION)
    async def get_session(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        """An open session's status; for one no longer open that the session ledger still holds (a
        commit that did not finish, or writes lost in a restart): ``open: false`` and what it says."""
        if (answer := await elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        if not visible(session_id, caller, principal):
            body = await recorded(session_id, caller, principal)
            if body is not None:
                return JSONResponse(body)
        return JSONResponse(find(session_id, caller, principal).describe())

    @router.post("/{session_id:path}/commit", responses=_NO_SESSION)
    async def commit(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        if (answer := await elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        session = find(session_id, caller, principal)
        with telemetry.span("shadowguard.commit", session=session_id, via="api"):
            outcome = await session.commit()
        body: dict[str, Any] = {
            "session": session_id,
            "committed": outcome.committed,
            "changes": len(outcome.changes),
            "applied_calls": len(outcome.applied),
            "violations": [v.model_dump(mode="json") for v in outcome.violations],
        }
        if outcome.upstreams is not None:
            body["upstreams"] = outcome.upstreams
        return JSONResponse(body)

    @router.post("/{session_id:path}/rollback", responses=_NO_SESSION)
    async def rollback(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        if (answer := await elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        outcome = await find(session_id, caller, principal).rollback("api")
        return JSONResponse(
            {
                "session": session_id,
                "rolled_back": outcome.rolled_back,
                "changes": len(outcome.changes),
                "undone_calls": [c.id for c in outcome.undone],
                "not_undone_calls": [c.id for c in outcome.not_undone],
                "not_reversed": outcome.not_reversed,
            }
        )

    return router


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
            session_id = Headers(scope=scope).get("mcp-session-id")
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
        session_id = Headers(scope=scope).get("mcp-session-id")
        if session_id and status is not None and status < 300:
            await self.proxy.sessions.end(session_id, "closed", principal=principal_of_scope(scope))
        for message in held:
            await send(message)


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
    mcp_app = proxy.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=config.http.host,
        max_request_body_size=config.http.max_body_bytes,
        session_idle_timeout=config.sessions.idle_timeout_s,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if lifespan_runs_proxy:
                if recorder is None:
                    raise RuntimeError("create_app(lifespan_runs_proxy=True) needs the recorder")
                await stack.enter_async_context(serving(proxy, recorder, config))
            await stack.enter_async_context(proxy.server.session_manager.run())
            if directory is not None:
                await stack.enter_async_context(directory.running())
            if replica_front is not None:
                stack.push_async_callback(replica_front.aclose)
            if replica_api is not None:
                stack.push_async_callback(replica_api.aclose)
            yield

    app = _App(
        title="shadowguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH
    )
    app.state.proxy = proxy
    app.state.config = config
    app.add_middleware(BodyLimit, limit=config.http.max_body_bytes)
    audit_from = recorder if recorder is not None else proxy.sessions.observer
    app.state.audit = audit_from.audit if isinstance(audit_from, Recorder) else None
    app.include_router(health_router(proxy.readiness))
    directory = replica_directory(config)
    replica_api = ReplicaSessions(directory) if directory is not None else None
    app.include_router(sessions_router(proxy, replica_api))
    app.include_router(approvals_router())
    app.include_router(review_router())
    for router in routers:
        app.include_router(router)
    app.state.lean_relay = LeanRelay(mcp_app, proxy, enabled=config.proxy.lean_relay)
    mcp: ASGIApp = _EndSessionOnDelete(app.state.lean_relay, proxy)
    replica_front = (
        ReplicaRouter(mcp, directory, max_body_bytes=config.http.max_body_bytes)
        if directory is not None
        else None
    )
    mcp = replica_front if replica_front is not None else mcp
    if config.auth.agents:
        mcp = AgentAuth(mcp, config.auth, path=MCP_PATH)
    app.router.routes.append(Route(MCP_PATH, mcp))
    app.mcp_chain = BodyLimit(mcp, limit=config.http.max_body_bytes)
    return app


# -- serving (the CLI's entry points) ---------------------------------------------------------------


def announce_stderr(url: str) -> None:
    print(f"shadowguard serve: listening on {url}", file=sys.stderr, flush=True)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the upstreams start so that a busy port fails fast.

    It is opened as IPPROTO_TCP explicitly: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    connections of sockets whose protocol says TCP, and with Nagle on, every response whose headers
    and body are written separately waits for the client's delayed ACK (about 40 ms a request).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _bind_side(host: str, port: int) -> socket.socket:
    """The stdio proxy's side port: the configured one, else (taken: hosts start one stdio proxy per
    window or chat, all with one config) a free one, said on stderr with the URL that follows."""
    try:
        return _bind(host, port)
    except OSError as exc:
        if port == 0 or exc.errno != errno.EADDRINUSE:
            raise
    print(
        f"shadowguard serve: port {port} is in use (another instance with this config?); "
        "the HTTP side app takes a free port instead",
        file=sys.stderr,
        flush=True,
    )
    return _bind(host, 0)


def _url(host: str, sock: socket.socket, path: str = MCP_PATH) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}{path}"


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the proxy stops it on SIGINT/SIGTERM, then rolls the
    open sessions back and stops its upstreams (uvicorn would re-raise the signal and kill the
    process before that)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


SHUTDOWN_GRACE_S = 5
"""After SIGINT/SIGTERM, requests still running after this long are cancelled (then every session is
rolled back): a stop never waits for a slow upstream or a long retry."""


def _uvicorn(app: ASGIApp) -> uvicorn.Server:
    return _Uvicorn(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            http="httptools",  # the C parser: h11's pure-Python parsing was a fifth of a read's proxy CPU
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        )
    )


async def _on_signal(
    stop: Callable[[], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            stop()
            return


async def run_http(config: ProxyConfig, *, announce: Callable[[str], None] = announce_stderr) -> None:
    """``shadowguard serve``: connect the upstreams, then serve HTTP until SIGINT/SIGTERM."""
    sock = _bind(config.http.host, config.http.port)
    try:
        proxy, recorder = build_proxy(config, review_url=_url(config.http.host, sock, REVIEW_PATH))
        async with serving(proxy, recorder, config), anyio.create_task_group() as tg:
            server = _uvicorn(create_app(proxy, config, lifespan_runs_proxy=False))

            def stop() -> None:
                server.should_exit = True
                proxy.sessions.stop_retrying()

            await tg.start(_on_signal, stop)
            announce(_url(config.http.host, sock))
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    finally:
        sock.close()


async def run_stdio(
    config: ProxyConfig, *, side_http: bool, announce: Callable[[str], None] = announce_stderr
) -> None:
    """``shadowguard serve --stdio``: one agent on stdin/stdout (until it closes them, or SIGINT/SIGTERM);
    the HTTP app on a side port if asked (:func:`_bind_side`)."""
    sock = _bind_side(config.http.host, config.http.port) if side_http else None
    try:
        review = _url(config.http.host, sock, REVIEW_PATH) if sock is not None else None
        proxy, recorder = build_proxy(config, spare_connections=False, review_url=review)
        async with serving(proxy, recorder, config), anyio.create_task_group() as tg:
            server: uvicorn.Server | None = None
            if sock is not None:
                server = _uvicorn(create_app(proxy, config, lifespan_runs_proxy=False))
                tg.start_soon(_serve_side, server, sock)
                announce(_url(config.http.host, sock))
            with anyio.CancelScope() as agent:

                def stop() -> None:
                    proxy.sessions.stop_retrying()
                    agent.cancel()

                await tg.start(_on_signal, stop)
                await proxy.serve_stdio(config.http.max_body_bytes)
            if server is not None:
                server.should_exit = True
            tg.cancel_scope.cancel()
    finally:
        if sock is not None:
            sock.close()


async def _serve_side(server: uvicorn.Server, sock: socket.socket) -> None:
    with anyio.CancelScope(shield=True):
        await server.serve(sockets=[sock])


__all__ = [
    "MCP_PATH",
    "OPENAPI_PATH",
    "Recorder",
    "build_proxy",
    "create_app",
    "run_http",
    "run_stdio",
    "serving",
    "sessions_router",
]
