"""The agent-facing MCP server: the upstreams' tools, guarded, plus ``commit`` and ``rollback``.

Built on the SDK's low-level ``Server`` because it relays tools exactly: every visible upstream
tool is listed with the upstream's own input schema, output schema and annotations (only the name
changes when the upstream has a prefix). Reserved (``__reserved__*``) tools and tools the
upstream's policy pack does not allow are neither listed nor callable.

``tools/call`` resolves the agent's session (see :func:`session_identity`) and hands the call to
that session's guard (:class:`proxy.sessions.ProxySession`, which runs
:class:`guard.session.GuardSession` in a worker thread: argument validation, checks, retries). The
outcome is rendered for the agent:

* allowed: the upstream's answer as it gave it (content, structured content, ``isError``), with
  reserved ``_meta`` keys stripped;
* refused, rolled back, held, failed: ``isError: true``, a text that says what happened and what to
  do, and ``structuredContent`` with the verdict, the violations (rule id, message, hint, policy
  source) and the guard's error hint; a failed call keeps the upstream's own content first.

Every result carries ``_meta["shadowguard/outcome"]`` (verdict, call id, session id) so that an
agent or its orchestrator can name the session to ``POST /api/sessions/{id}/commit``; a call bound to
an approval request adds ``approval_id``, ``approval_state`` and ``approval_expires_at`` there and in
the verdict. An agent may name the approval a call runs under in ``_meta["shadowguard/approval"]``
(docs/approvals.md); sending the same call again finds it too. A 2026-07-28 client that declared the
elicitation capability gets a still-pending call as an input request instead ("awaiting reviewer
approval ...; accept to check again"); its answer is never an approval: the retried call only looks
at the approval store again. The round's ``requestState`` (the request id) is sealed by the SDK's
:class:`~mcp.server.request_state.RequestStateBoundary` (a per-process key: retries must reach the
same replica, as every call of a session does).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping, MutableMapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers

from guard.approvals.models import ApprovalStore
from guard.errors import InvalidArguments
from guard.limits import DEFAULT_LIMITS, ArgumentLimits, check_arguments
from guard.models import CommitOutcome, EffectClass, ToolCall, ToolOutcome, Verdict, Violation
from guard.session import RESERVED_PREFIX
from guard.steps import unknown_tool
from proxy import telemetry
from proxy.catalog import ToolRoute, build_catalog
from proxy.commits import entry_outcome
from proxy.config import ConfigError, ProxyConfig
from proxy.dropin import commit_description, default_session, rollback_description, upstream_label
from proxy.held import APPROVAL_META_KEY, HeldCalls
from proxy.lean_upstream import relaying_for
from proxy.ledger import LedgerEntry
from proxy.registry import SessionLimitError, SessionRegistry
from proxy.relay import Relay, RelayServer
from proxy.render import (
    APPROVAL_STATE_PREFIX,
    MAX_INPUT_ROUNDS,
    OUTCOME_META_KEY,
    no_session_named,
    render_commit,
    render_input_required,
    render_outcome,
    render_rollback,
)
from proxy.sessions import SESSION_META_KEY, ProxySession, lost_message
from proxy.stdio import stdio_streams
from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream, strip_reserved_meta

logger = logging.getLogger(__name__)

APPROVAL_STORE_READY = "approval store"
"""The ``/readyz`` entry of the approval queue (no upstream can have this name: it has a space)."""
PRINCIPAL_PREFIX = "principal:"
"""The session of an authenticated principal that names none is ``principal:<name>``; no other
caller may name it (it would squat on the principal's sessionless calls)."""
MAX_SESSION_ID = 256
MAX_APPROVAL_ID = 128
ROLLBACK_TOOL = "rollback"

Ctx = ServerRequestContext[Any, Any]
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _unicode(text: str) -> bool:
    """No lone surrogates: the id is written to the audit log and answered in JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """What the guard reads of an agent's ``tools/call`` besides its params, whichever front took it
    (the SDK's handler, :meth:`of`, or the lean relay, :mod:`proxy.relay_lean`).

    ``meta``: the request's ``_meta`` (empty when none); ``modern``: the 2026-07-28 era;
    ``scope``: the HTTP request's ASGI scope (None on stdio); ``client_capabilities``: what the
    agent's client declared (None: nothing)."""

    meta: Mapping[str, Any]
    modern: bool
    scope: MutableMapping[str, Any] | None
    client_capabilities: types.ClientCapabilities | None

    @classmethod
    def of(cls, ctx: Ctx) -> AgentRequest:
        """The request an SDK handler context describes."""
        return cls(
            meta=ctx.meta or {},
            modern=ctx.protocol_version in MODERN_PROTOCOL_VERSIONS,
            scope=None if ctx.request is None else ctx.request.scope,
            client_capabilities=ctx.session.client_capabilities if ctx.session is not None else None,
        )


def principal_of(ctx: Ctx) -> str | None:
    """The authenticated caller of an HTTP request (set by an auth middleware), else None."""
    request = ctx.request
    return None if request is None else principal_of_scope(request.scope)


def principal_of_scope(scope: Mapping[str, Any]) -> str | None:
    """The authenticated caller of an HTTP request's ASGI scope, else None."""
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    if isinstance(client_id, str) and client_id:
        return client_id
    name = getattr(user, "display_name", None)
    return name if isinstance(name, str) and name else None


def session_identity(ctx: Ctx | AgentRequest, stdio_session: str) -> tuple[str | None, str | None]:
    """(session id, principal) of a request; see docs/proxy.md "Sessions and protocol eras".

    In order: ``_meta["shadowguard/session"]`` (any era, any transport); on stdio the connection
    (one per proxy process); in the handshake era over HTTP the ``Mcp-Session-Id``; in the
    sessionless 2026-07-28 era over HTTP the authenticated principal. Otherwise the request names no
    session: ``(None, None)``, and the proxy applies the default (docs/adr/008-default-sessions.md).
    A malformed ``_meta["shadowguard/session"]`` is refused with ``-32602``.
    """
    request = ctx if isinstance(ctx, AgentRequest) else AgentRequest.of(ctx)
    principal = None if request.scope is None else principal_of_scope(request.scope)
    meta = request.meta
    if SESSION_META_KEY in meta:
        value = meta[SESSION_META_KEY]
        if not isinstance(value, str) or not value or len(value) > MAX_SESSION_ID or not _unicode(value):
            raise _invalid(
                f"_meta[{SESSION_META_KEY!r}] must be a non-empty string of valid Unicode "
                f"of at most {MAX_SESSION_ID} characters"
            )
        if value.startswith(PRINCIPAL_PREFIX) and value != f"{PRINCIPAL_PREFIX}{principal}":
            raise _invalid(
                f"_meta[{SESSION_META_KEY!r}]: ids starting with {PRINCIPAL_PREFIX!r} are reserved for the "
                "sessions of authenticated principals (a caller's own is used when it sends no id); "
                "choose another id"
            )
        return value, principal
    if request.scope is None:
        return stdio_session, principal
    header = None if request.modern else Headers(scope=request.scope).get("mcp-session-id")
    if header:
        return str(header), principal
    if principal is not None:
        return f"{PRINCIPAL_PREFIX}{principal}", principal
    return None, None


def approval_of(meta: Mapping[str, Any]) -> str | None:
    """The approval id the agent runs a call under (``_meta["shadowguard/approval"]``), if it names one."""
    if APPROVAL_META_KEY not in meta:
        return None
    value = meta[APPROVAL_META_KEY]
    if not isinstance(value, str) or not value or len(value) > MAX_APPROVAL_ID or not _unicode(value):
        raise _invalid(
            f"_meta[{APPROVAL_META_KEY!r}] must be an approval request id: a non-empty string "
            f"of at most {MAX_APPROVAL_ID} characters"
        )
    return value


def _approval_in_state(state: str | None) -> tuple[str | None, int]:
    """(request id, rounds asked so far) a retried round carries in its (verified, unsealed)
    ``requestState``: ``approval:<id>:<rounds>``."""
    if state is None or not state.startswith(APPROVAL_STATE_PREFIX):
        return None, 0
    approval_id, _, rounds = state.removeprefix(APPROVAL_STATE_PREFIX).rpartition(":")
    if not approval_id or not rounds.isdigit():
        return None, 0
    return approval_id, int(rounds)


def _asks_input(request: AgentRequest, outcome: ToolOutcome) -> bool:
    """A held call for a client that can answer an input request (2026-07-28, elicitation declared)."""
    if outcome.verdict is not Verdict.HELD or outcome.approval_id is None:
        return False
    if not request.modern:
        return False
    capabilities = request.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def _unknown_tool(tool: str, arguments: Mapping[str, Any]) -> ToolOutcome:
    """Refused without a session: the name is not one of the listed tools (reserved, hidden, unknown)."""
    return unknown_tool(ToolCall(tool=tool, arguments=dict(arguments)))


def _refused_arguments(
    tool: str,
    arguments: Mapping[str, Any],
    session_id: str | None,
    principal: str | None,
    failure: InvalidArguments,
) -> ToolOutcome:
    """Refused before a session or a worker thread is involved: the arguments pass a limit (their
    digest is still computed for the audit record: bounded by the transport's body limit)."""
    call = ToolCall(session_id=session_id, principal=principal, tool=tool, arguments=dict(arguments))
    return ToolOutcome.of(call, EffectClass.WRITE, Verdict.REFUSED, failure, violations=[])


# -- the proxy --------------------------------------------------------------------------------------


class GuardProxy:
    """The agent-facing server over a set of upstreams and the guard sessions (one per agent session).

    Use :meth:`running` around serving: it connects the upstreams, builds the tool catalog and
    runs the idle-session reaper; leaving it rolls back every open session and closes the
    connections.
    """

    def __init__(
        self,
        upstreams: Sequence[Upstream],
        sessions: SessionRegistry,
        *,
        commit_tool: str | None = "commit",
        rollback_tool: str | None = ROLLBACK_TOOL,
        name: str = "shadowguard",
        instructions: str | None = None,
        limits: ArgumentLimits = DEFAULT_LIMITS,
    ) -> None:
        self.upstreams = list(upstreams)
        self.limits = limits
        self.sessions = sessions
        if commit_tool is not None and commit_tool == rollback_tool:
            raise ConfigError(
                f"commit_tool.name: {commit_tool!r} is the name of the proxy's rollback tool",
                field="commit_tool.name",
            )
        self.commit_tool = commit_tool
        self.rollback_tool = rollback_tool if commit_tool is not None else None
        self.routes: dict[str, ToolRoute] = {}
        self._own_tools = self._proxy_tools()
        self.stdio_session = f"stdio:{uuid.uuid4().hex}"
        self._running = False
        self.server: Server[Any] = RelayServer(
            name,
            version=_version(),
            instructions=instructions,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.relay = Relay(self)
        """Resources, prompts, completion, logging, notifications and the upstreams' requests to
        the agent (proxy/relay.py); registered once the upstreams are connected."""
        self.server.middleware.append(self.relay.middleware)
        self.server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=name)
        )

    @classmethod
    def from_config(
        cls, config: ProxyConfig, sessions: SessionRegistry, *, spare_connections: bool = True
    ) -> GuardProxy:
        """``spare_connections``: keep a connection ready for the next session of each transactional
        upstream (HTTP serves many agents; a stdio proxy serves one and does without)."""
        commit = config.commit_tool.name if config.commit_tool.enabled else None
        upstreams = [Upstream.from_settings(u, keep_spare=spare_connections) for u in config.upstreams]
        for upstream in upstreams:
            upstream.lean_relay = config.proxy.lean_relay
        return cls(upstreams, sessions, commit_tool=commit, limits=config.limits.arguments())

    def _proxy_tools(self) -> dict[str, types.Tool]:
        """The commit and rollback tools, described for the upstreams as they are (call again once the
        upstreams are started: whether each transacts is known only then)."""
        held = [upstream_label(u) for u in self.upstreams if u.transactional]
        applied = [upstream_label(u) for u in self.upstreams if not u.transactional]
        tools: dict[str, types.Tool] = {}
        if self.commit_tool is not None:
            tools[self.commit_tool] = types.Tool(
                name=self.commit_tool,
                description=commit_description(held, applied),
                input_schema=dict(_EMPTY_SCHEMA),
                annotations=types.ToolAnnotations(
                    read_only_hint=False, destructive_hint=False, idempotent_hint=True
                ),
            )
        if self.rollback_tool is not None:
            tools[self.rollback_tool] = types.Tool(
                name=self.rollback_tool,
                description=rollback_description(held, applied),
                input_schema=dict(_EMPTY_SCHEMA),
                annotations=types.ToolAnnotations(
                    read_only_hint=False, destructive_hint=True, idempotent_hint=True
                ),
            )
        return tools

    # -- lifecycle
    @asynccontextmanager
    async def running(self) -> AsyncIterator[GuardProxy]:
        """Connect the upstreams and serve sessions until the block ends (then roll back all)."""
        if self._running:
            raise RuntimeError("the proxy is already running")
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await self._start_upstreams(tg)
                    self._own_tools = self._proxy_tools()
                    self.rebuild_catalog()
                    await self.relay.install()
                    await tg.start(self.relay.run)
                    await tg.start(self.sessions.run_reaper)
                    self._running = True
                    yield self
                finally:
                    self._running = False
                    with anyio.CancelScope(shield=True):
                        await self.sessions.close_all("shutdown")
                        async with anyio.create_task_group() as closing:
                            for upstream in self.upstreams:
                                closing.start_soon(upstream.aclose)
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The task group wraps whatever left its body; callers expect the error itself.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _start_upstreams(self, task_group: anyio.abc.TaskGroup) -> None:
        """Connect every upstream at once; any that fails fails the start, all failures named."""
        errors: list[UpstreamError] = []

        async def start(upstream: Upstream) -> None:
            try:
                await upstream.start(task_group)
            except UpstreamError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as starting:
            for upstream in self.upstreams:
                starting.start_soon(start, upstream)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise UpstreamError("; ".join(str(e) for e in errors)) from errors[0]

    def rebuild_catalog(self) -> None:
        """The agent-visible tools from the upstreams' current tool lists (UpstreamError on a clash)."""
        self.routes = build_catalog(self.upstreams, reserved=list(self._own_tools))

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def held(self) -> HeldCalls | None:
        """Where held calls wait for reviewers (the sessions' approval queue); None: no queue."""
        return self.sessions.held

    @property
    def approvals(self) -> ApprovalStore | None:
        """The approval store the reviewer API and page read and decide in (None: no queue)."""
        held = self.sessions.held
        return held.store if held is not None else None

    async def readiness(self) -> dict[str, bool]:
        """Upstream name -> ready (connected, tool list loaded), and with an approval queue
        ``"approval store"`` -> it answers a read; for ``/readyz``."""
        ready = {u.name: self._running and u.ready for u in self.upstreams}
        held = self.held
        if held is not None and ready:
            ready[APPROVAL_STORE_READY] = await held.reachable()
        return ready

    async def serve_stdio(self, max_line_bytes: int | None = None) -> None:
        """Serve one agent on stdin/stdout (either era) until stdin closes; its session ends with it.
        A line longer than ``max_line_bytes`` is refused with ``-32600`` (proxy.stdio)."""
        self.relay.sole_agent = True
        try:
            async with stdio_streams(max_line_bytes) as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
        finally:
            with anyio.CancelScope(shield=True):
                await self.sessions.end(self.stdio_session, "closed")

    # -- tools/list
    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        own = self._own_tools.get(name)
        if own is not None:
            return own.input_schema
        route = self.routes.get(name)
        return None if route is None else route.tool.input_schema

    def agent_tools(self) -> list[types.Tool]:
        return [*(route.agent_tool() for route in self.routes.values()), *self._own_tools.values()]

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.agent_tools())

    # -- tools/call
    async def _call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        return await self.call_tool(AgentRequest.of(ctx), params)

    async def call_tool(
        self, request: AgentRequest, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """An agent's ``tools/call``, guarded and rendered: the one path of every front (the SDK's
        handler and the lean relay). Raises :class:`~mcp.MCPError` (``-32602``) for a malformed
        ``_meta`` session or approval id, (``-32600``) when the session limit is reached."""
        name = params.name
        arguments: dict[str, Any] = dict(params.arguments or {})
        if name == self.commit_tool or name == self.rollback_tool:
            return await self._end_transaction(request, name)
        route = self.routes.get(name)
        if route is None or name.startswith(RESERVED_PREFIX):
            refused = _unknown_tool(name, arguments)
            self.sessions.notify_call(refused)
            return render_outcome(refused, None, None)
        session_id, principal = session_identity(request, self.stdio_session)
        too_big = check_arguments(name, arguments, self.limits)
        if too_big is not None:
            refused = _refused_arguments(name, arguments, session_id, principal, too_big)
            self.sessions.notify_call(refused)
            return render_outcome(refused, None, session_id, tool=route.exposed)
        stamp_extra: dict[str, Any] = {}
        one_call = False
        if session_id is None:
            session_id, stamp_extra = default_session(route, arguments)
            one_call = stamp_extra.get("sessionless") is True
        try:
            session = self.sessions.open(session_id, principal, leased=session_id != self.stdio_session)
        except SessionLimitError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from exc
        in_state, rounds = _approval_in_state(params.request_state)
        approval_id = approval_of(request.meta) or in_state
        meta = strip_reserved_meta(request.meta)
        try:
            with (
                telemetry.span(
                    "shadowguard.tool_call", tool=name, upstream=route.upstream.name, session=session_id
                ),
                relaying_for(request.client_capabilities),
            ):
                result = await session.call(
                    route.upstream, route.name, arguments, meta, approval_id=approval_id
                )
        finally:
            if one_call:
                with anyio.CancelScope(shield=True):
                    await self.sessions.end(session_id, "read", principal=principal, record_empty=False)
        shown = None if one_call else session_id
        if _asks_input(request, result.outcome) and not one_call and rounds < MAX_INPUT_ROUNDS:
            return render_input_required(result.outcome, shown, route.exposed, rounds + 1)
        applied_by = None if route.upstream.transactional else route.upstream.name
        return render_outcome(
            result.outcome,
            result.upstream_result,
            shown,
            tool=route.exposed,
            applied_by=applied_by,
            stamp_extra=stamp_extra,
        )

    async def _end_transaction(self, request: AgentRequest, name: str) -> types.CallToolResult:
        """The commit or rollback tool, on the session the request names."""
        session_id, principal = session_identity(request, self.stdio_session)
        if session_id is None:
            return no_session_named(name)
        session = self._existing(session_id, principal)
        if name == self.commit_tool:
            with telemetry.span("shadowguard.commit", session=session_id):
                if session is not None:
                    outcome = await session.commit()
                else:
                    lost = await self.sessions.take_lost(session_id, principal)
                    outcome = self._commit_without_session(session_id, principal, lost)
                    self.sessions.notify_commit(session_id, outcome)
            return render_commit(outcome, session_id)
        if session is None:
            await self.sessions.take_lost(session_id, principal)
            return render_rollback(None, session_id)
        pending = session.in_transaction
        rollback = await session.rollback("agent")
        return render_rollback(rollback if pending else None, session_id)

    def _commit_without_session(
        self, session_id: str, principal: str | None, entry: LedgerEntry | None
    ) -> CommitOutcome:
        """Nothing is open under this id: fine, unless the session was rolled back behind the agent
        (``entry``: the ledger's, e.g. the proxy restarted since the session wrote), or a commit of
        it did not finish (its commit record says what applied)."""
        recorded = entry_outcome(entry) if entry is not None else None
        if recorded is not None:
            return recorded
        lost = entry.state if entry is not None else None
        ended = self.sessions.ended(session_id, principal)
        if lost is not None and ended not in ("idle", "closed"):
            return CommitOutcome(
                committed=False,
                violations=[
                    Violation(
                        rule_id="changes_lost",
                        message=f"Not committed: {lost_message(lost)}",
                        hint="Redo the changes if they are still needed, then commit.",
                    )
                ],
            )
        if ended is None or ended in ("shutdown", "read"):
            return CommitOutcome(committed=True)
        why = {
            "idle": "it was idle for longer than the idle timeout",
            "lease": "its client sent no request within the session lease (sessions.lease_s)",
            "closed": "its connection was closed",
        }[ended]
        return CommitOutcome(
            committed=False,
            violations=[
                Violation(
                    rule_id="session_rolled_back",
                    message=f"Nothing to commit: this session was rolled back because {why}.",
                    hint="Redo the changes, then commit.",
                )
            ],
        )

    def _existing(self, session_id: str, principal: str | None) -> ProxySession | None:
        """The caller's open session with this id; another principal's is answered as no session at all."""
        return self.sessions.get(session_id, principal)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shadowguard")
    except PackageNotFoundError:
        return "0"


__all__ = [
    "MAX_INPUT_ROUNDS",
    "OUTCOME_META_KEY",
    "AgentRequest",
    "GuardProxy",
    "UpstreamError",
    "approval_of",
    "principal_of",
    "principal_of_scope",
    "render_commit",
    "render_input_required",
    "render_outcome",
    "render_rollback",
    "session_identity",
]
