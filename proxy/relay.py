"""The MCP relay: everything between agent and upstreams that is not a guarded tool call.

What is relayed (docs/proxy.md, "Relay", says it per era and transport):

* **resources** (``resources/list``, ``resources/templates/list``, ``resources/read``) and
  **prompts** (``prompts/list``, ``prompts/get``) and **completion** (``completion/complete``):
  reads, answered by the upstream over its shared connection, no guard session involved
  (routing and handlers: :mod:`proxy.reads`).
  Resources keep their URIs and are routed to the upstream that listed them (or whose resource
  template the URI fits); prompts take the upstream's tool ``prefix``. Two upstreams serving one
  prompt name or resource URI stop the proxy at startup (:meth:`Relay.install`).
* **subscriptions**: ``resources/subscribe`` (handshake era) and ``subscriptions/listen``
  (2026-07-28) reach upstreams that offer subscriptions; ``notifications/resources/updated`` and
  the ``list_changed`` notifications come back to the agents (on their standalone stream, or as
  listen events). An upstream's ``tools/list_changed`` first refreshes the proxy's tool catalog.
* **logging**: ``logging/setLevel`` goes to every upstream that logs; an upstream's
  ``notifications/message`` goes to the agent whose request is in flight on that connection
  (request-scoped: the 2026-07-28 per-request opt-in applies), else to the handshake-era agents
  that set a level (at or above it). The logger is named after the upstream.
* **progress**: an agent's progress token is honoured for guarded tool calls and relayed reads.
* **the upstream's requests to the client** (sampling, elicitation, roots, in either upstream
  era: a request, or an input request of a 2026-07-28 round) are sent to the agent whose request
  is in flight on that connection, and its answer goes back. Refused with a clear JSON-RPC error
  (never answered on the agent's behalf): outside an agent's request, to an agent on the
  2026-07-28 era (which forbids server-to-client requests), to an agent that did not declare the
  capability.
* **task-augmented tools** (``execution.taskSupport: "required"``) are listed, and refused when
  called: the proxy does not relay MCP tasks.

Nothing here lets a tool call past the guard: ``tools/call`` stays :class:`proxy.server.GuardProxy`'s.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import mcp.types as types
from mcp import MCPError
from mcp.client.subscriptions import SubscriptionLost
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from guard.effects import classify
from guard.errors import PreconditionFailed
from guard.models import ToolCall, ToolOutcome, Verdict
from proxy.lean_upstream import not_declared
from proxy.reads import Reads, agent_connection, offering
from proxy.rounds import ROUND_TIMEOUT_S, Rounds
from proxy.upstream_connection import UpstreamConnection
from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream, strip_reserved_meta

if TYPE_CHECKING:
    from proxy.server import GuardProxy

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]
LOG_LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
)  # fmt: skip
LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
EXECUTION_META_KEY = "shadowguard/execution"
"""Where a 2026-07-28 agent finds a tool's ``execution`` (that era's wire has no such field)."""
_EVENT_BUFFER = 1024
LISTEN_RETRY_S = 1.0

_R = TypeVar("_R", bound=BaseModel)
_agent_request: ContextVar[Ctx | None] = ContextVar("shadowguard_agent_request", default=None)


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _refusal(message: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=message)


class RelayServer(Server[Any]):
    """The SDK's low-level server, whose handshake-era capabilities say which ``list_changed``
    notifications the relay sends (:attr:`notification_options`, set by :meth:`Relay.install`)."""

    notification_options: NotificationOptions | None = None

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or self.notification_options, experimental_capabilities, extensions
        )


class Relay:
    """The relay of one :class:`~proxy.server.GuardProxy` (see the module docstring).

    It is every upstream's :class:`~proxy.upstream_connection.ConnectionPeer` (set on construction), a server
    middleware (:meth:`middleware`: it marks the agent request each upstream request is made for),
    and, once :meth:`install` ran, the handler of the relayed methods. :meth:`run` delivers the
    upstreams' notifications; it runs in the proxy's task group while the proxy serves.
    """

    def __init__(self, proxy: GuardProxy) -> None:
        self.proxy = proxy
        for upstream in proxy.upstreams:
            upstream.peer = self
        self.sole_agent = False
        """Set by a stdio proxy: its one agent also answers the upstreams' requests made outside its
        requests (e.g. ``roots/list`` after ``notifications/roots/list_changed``)."""
        self.rounds = Rounds()
        """A 2026-07-28 agent's guarded calls, parked while the upstream waits for its input."""
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._in_flight: dict[UpstreamConnection, list[Ctx]] = {}
        self._agents: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._log_levels: weakref.WeakKeyDictionary[Connection, types.LoggingLevel] = (
            weakref.WeakKeyDictionary()
        )
        self.reads = Reads(proxy.upstreams)
        self._pending: deque[tuple[Upstream, Any]] = deque()
        """Upstream notifications and listen events waiting for :meth:`run` (they may come first)."""
        self._wake: anyio.Event | None = None

    def _offering(self, what: str) -> list[Upstream]:
        return offering(self.proxy.upstreams, what)

    def _upstream(self, name: str) -> Upstream:
        return next(u for u in self.proxy.upstreams if u.name == name)

    # -- setup ------------------------------------------------------------------------------------
    async def install(self) -> None:
        """Register the relayed methods the upstreams offer, and check names and URIs do not clash.

        Runs once the upstreams are connected. Raises :class:`~proxy.upstream_types.UpstreamError`
        naming both upstreams when two serve one prompt name, resource URI or resource template.
        """
        server, reads = self.proxy.server, self.reads
        resources, prompts = self._offering("resources"), self._offering("prompts")
        if resources:
            await reads.list_resources_of(resources, strict=True)
            await reads.list_templates_of(resources, strict=True)
            server.add_request_handler(
                "resources/list", types.PaginatedRequestParams, reads.on_list_resources
            )
            server.add_request_handler(
                "resources/templates/list", types.PaginatedRequestParams, reads.on_list_templates
            )
            server.add_request_handler(
                "resources/read", types.ReadResourceRequestParams, reads.on_read_resource
            )
            if any(reads.subscribable(u) for u in resources):
                server.add_request_handler(
                    "resources/subscribe", types.SubscribeRequestParams, reads.on_subscribe
                )
                server.add_request_handler(
                    "resources/unsubscribe", types.UnsubscribeRequestParams, reads.on_unsubscribe
                )
        if prompts:
            await reads.list_prompts_of(prompts, strict=True)
            server.add_request_handler("prompts/list", types.PaginatedRequestParams, reads.on_list_prompts)
            server.add_request_handler("prompts/get", types.GetPromptRequestParams, reads.on_get_prompt)
        if self._offering("completions"):
            server.add_request_handler("completion/complete", types.CompleteRequestParams, reads.on_complete)
        if self._offering("logging"):
            server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._on_set_level)
        server.add_request_handler(
            "subscriptions/listen", types.SubscriptionsListenRequestParams, self._on_listen
        )
        server.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self._on_roots_changed
        )
        if isinstance(server, RelayServer):
            server.notification_options = NotificationOptions(
                prompts_changed=bool(prompts), resources_changed=bool(resources), tools_changed=True
            )

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Deliver the upstreams' notifications (queued since they connected) and host the parked
        calls (:class:`proxy.rounds.Rounds`) until cancelled."""
        async with anyio.create_task_group() as task_group:
            await task_group.start(self.rounds.run)
            for upstream in self.proxy.upstreams:
                wanted = self._changes_offered(upstream)
                if any(wanted.values()):
                    task_group.start_soon(self._listen_upstream, upstream, wanted)
            task_status.started()
            try:
                await self._deliver_events()
            finally:
                task_group.cancel_scope.cancel()

    @staticmethod
    def _changes_offered(upstream: Upstream) -> dict[str, bool]:
        caps = upstream.capabilities or types.ServerCapabilities()
        return {
            "tools_list_changed": bool(caps.tools and caps.tools.list_changed),
            "prompts_list_changed": bool(caps.prompts and caps.prompts.list_changed),
            "resources_list_changed": bool(caps.resources and caps.resources.list_changed),
        }

    async def _listen_upstream(self, upstream: Upstream, wanted: dict[str, bool]) -> None:
        """A 2026-07-28 upstream's ``list_changed`` come only on a ``subscriptions/listen`` stream: keep
        one open on its shared connection (again after a drop). Handshake-era upstreams just notify."""
        while True:
            try:
                connection = await upstream.shared_connection()
                if connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                    return
                listening = connection.client.listen(
                    tools_list_changed=wanted["tools_list_changed"],
                    prompts_list_changed=wanted["prompts_list_changed"],
                    resources_list_changed=wanted["resources_list_changed"],
                )
                async with listening as subscription:
                    async for event in subscription:
                        self._queue(upstream, event)
            except MCPError as exc:
                if exc.code == types.METHOD_NOT_FOUND:
                    logger.warning(
                        "upstream %r offers listChanged but serves no subscriptions/listen: its list "
                        "changes are not relayed",
                        upstream.name,
                    )
                    return
                logger.info("upstream %r: its subscriptions/listen stream failed (%s)", upstream.name, exc)
            except (UpstreamError, SubscriptionLost, TimeoutError) as exc:
                logger.info(
                    "upstream %r: its subscriptions/listen stream ended (%s); listening again",
                    upstream.name,
                    exc,
                )
            await anyio.sleep(LISTEN_RETRY_S)

    def _queue(self, upstream: Upstream, message: Any) -> None:
        if len(self._pending) >= _EVENT_BUFFER:
            logger.warning("upstream %r: %s dropped (queue full)", upstream.name, type(message).__name__)
            return
        self._pending.append((upstream, message))
        if self._wake is not None:
            self._wake.set()

    async def _deliver_events(self) -> None:
        while True:
            while self._pending:
                upstream, message = self._pending.popleft()
                try:
                    await self._deliver(upstream, message)
                except (MCPError, UpstreamError) as exc:
                    logger.warning(
                        "upstream %r: relaying %s failed: %s", upstream.name, type(message).__name__, exc
                    )
            self._wake = anyio.Event()
            if not self._pending:
                await self._wake.wait()

    # -- the middleware -----------------------------------------------------------------------------
    async def middleware(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Marks the agent request for the upstream requests made while it is handled; remembers
        handshake-era agent connections (for notifications); refuses task-augmented tools; adds
        ``execution`` to a 2026-07-28 tool list's ``_meta``."""
        if ctx.request_id is None or not isinstance(ctx.params, Mapping | None):
            return await call_next(ctx)
        if not _modern(ctx):
            self._agents.add(agent_connection(ctx))
        if ctx.method == "tools/call":
            refused = self._refuse_task_tool(ctx)
            if refused is not None:
                return refused
            if _modern(ctx) and self.rounds.is_resume(ctx.params):
                return await self.rounds.resume(ctx.params or {})
        token = _agent_request.set(ctx)
        try:
            if ctx.method == "tools/call" and _modern(ctx):
                return await self.rounds.start(ctx, lambda: call_next(ctx))
            result = await call_next(ctx)
        finally:
            _agent_request.reset(token)
        if ctx.method == "tools/list" and _modern(ctx) and isinstance(result, dict):
            self._execution_in_meta(result)
        return result

    def _refuse_task_tool(self, ctx: Ctx) -> types.CallToolResult | None:
        """A call of a tool that runs only as an MCP task: refused (audited like any refusal), not sent."""
        from proxy.server import render_outcome

        params: Mapping[str, Any] = ctx.params or {}
        name = params.get("name")
        route = self.proxy.routes.get(name) if isinstance(name, str) else None
        execution = route.tool.execution if route is not None else None
        if route is None or execution is None or execution.task_support != "required":
            return None
        arguments = params.get("arguments")
        arguments = dict(arguments) if isinstance(arguments, Mapping) else {}
        upstream = route.upstream
        effect = classify(upstream.tool_info(route.name), arguments, upstream.policy.effect_of(route.name))[0]
        message = (
            f"{route.exposed} runs only as an MCP task (execution.taskSupport: required), and the proxy "
            "does not relay tasks: a task's result would reach the agent outside the guard's transaction."
        )
        step = "Use another tool, or call this upstream without the proxy."
        task_only = PreconditionFailed(message, tool=route.exposed, rule="task_tool", next_step=step)
        call = ToolCall(tool=route.exposed, arguments=arguments)
        outcome = ToolOutcome.of(call, effect, Verdict.REFUSED, task_only)
        self.proxy.sessions.notify_call(outcome)
        return render_outcome(outcome, None, None, tool=route.exposed)

    def _execution_in_meta(self, listed: dict[str, Any]) -> None:
        """Put each listed tool's ``execution`` (no field of the 2026-07-28 wire) in its ``_meta``."""
        for tool in listed.get("tools") or ():
            route = self.proxy.routes.get(tool.get("name"))
            execution = route.tool.execution if route is not None else None
            if execution is not None:
                meta = tool.setdefault("_meta", {})
                meta[EXECUTION_META_KEY] = execution.model_dump(by_alias=True, mode="json", exclude_none=True)

    # -- ConnectionPeer -----------------------------------------------------------------------------
    def client_options(self, connection: UpstreamConnection) -> dict[str, Any]:
        """The upstream client's callbacks for ``connection`` (they declare sampling, elicitation
        and roots to the upstream)."""
        upstream = self._upstream(connection.upstream)

        async def sampling(
            context: Any, params: types.CreateMessageRequestParams
        ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
            request = types.CreateMessageRequest(params=self._clean(params))
            result: type[types.CreateMessageResult] | type[types.CreateMessageResultWithTools]
            result = types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult
            return await self._ask_agent(connection, "sampling", request, result)

        async def elicitation(
            context: Any, params: types.ElicitRequestParams
        ) -> types.ElicitResult | types.ErrorData:
            request = types.ElicitRequest(params=self._clean(params))
            return await self._ask_agent(connection, "elicitation", request, types.ElicitResult)

        async def roots(context: Any) -> types.ListRootsResult | types.ErrorData:
            return await self._ask_agent(connection, "roots", types.ListRootsRequest(), types.ListRootsResult)

        async def log(params: types.LoggingMessageNotificationParams) -> None:
            await self._relay_log(connection, params)

        async def message(message: Any) -> None:
            if isinstance(message, Exception):
                logger.warning("upstream %r: %s", connection.upstream, message)
                return
            self._queue(upstream, message)

        return {
            "sampling_callback": sampling,
            "elicitation_callback": elicitation,
            "list_roots_callback": roots,
            "logging_callback": log,
            "message_handler": message,
        }

    def forwarding(self, connection: UpstreamConnection) -> _Forwarding:
        """While ``connection`` serves the current agent request: its progress callback and the
        log-level opt-in for a 2026-07-28 upstream; the upstream's requests go to that agent."""
        return _Forwarding(self, connection)

    def _enter_forwarding(
        self, connection: UpstreamConnection, ctx: Ctx
    ) -> tuple[ProgressFnT | None, dict[str, Any]]:
        waiting = self._in_flight.setdefault(connection, [])
        waiting.append(ctx)
        try:
            return self._progress(ctx), self._log_opt_in(ctx, connection)
        except BaseException:
            self._leave_forwarding(connection, ctx)
            raise

    def _leave_forwarding(self, connection: UpstreamConnection, ctx: Ctx) -> None:
        waiting = self._in_flight[connection]
        waiting.remove(ctx)
        if not waiting:
            del self._in_flight[connection]

    @staticmethod
    def _progress(ctx: Ctx) -> ProgressFnT | None:
        meta: Mapping[str, Any] = ctx.meta or {}
        if meta.get("progress_token") is None and meta.get("progressToken") is None:
            return None

        async def relay_progress(progress: float, total: float | None, message: str | None) -> None:
            try:
                await ctx.session.report_progress(progress, total, message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                logger.debug(
                    "progress of a request the agent has been answered for (an input round): not sent"
                )

        return relay_progress

    def _log_opt_in(self, ctx: Ctx, connection: UpstreamConnection) -> dict[str, Any]:
        if connection.alive and connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return {}
        level = (
            (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
            if _modern(ctx)
            else self._log_levels.get(agent_connection(ctx))
        )
        return {LOG_LEVEL_META_KEY: level} if level in LOG_LEVELS else {}

    # -- the upstream's requests to the client ------------------------------------------------------
    @staticmethod
    def _clean(params: Any) -> Any:
        meta = strip_reserved_meta(params.meta) if params.meta else None
        return params.model_copy(update={"meta": meta or None})

    def _agent_for(self, connection: UpstreamConnection) -> Ctx | None:
        waiting = self._in_flight.get(connection)
        return waiting[-1] if waiting else None

    async def _ask_agent(
        self, connection: UpstreamConnection, capability: str, request: Any, result_type: type[_R]
    ) -> _R | types.ErrorData:
        """Relay an upstream's request to the agent it is for, or refuse it (a JSON-RPC error)."""
        ctx = self._agent_for(connection)
        what = f"upstream {connection.upstream!r} asked for {request.method}"
        if ctx is None:
            sole = next(iter(self._agents), None) if self.sole_agent and len(self._agents) == 1 else None
            if sole is not None:
                return await self._ask_sole_agent(sole, capability, request, result_type, what)
            return _refusal(
                f"{what} outside any agent request: the proxy serves several agents and relays it only "
                "while an agent's request to this upstream is in flight"
            )
        declared = ctx.session.client_capabilities
        if declared is None or getattr(declared, capability, None) is None:
            return _refusal(not_declared(what, capability))
        if _modern(ctx):
            answer = await self.rounds.ask(ctx, request)
            if answer is None:
                return _refusal(
                    f"{what} during a {ctx.method} of an agent on the 2026-07-28 protocol era, which has no "
                    "server-to-client requests; the proxy relays them as input rounds of tools/call only "
                    "(docs/proxy.md, 'Relay')"
                )
            if isinstance(answer, types.ErrorData):
                return answer
            return result_type.model_validate(answer, by_name=False)
        try:
            return await ctx.session.send_request(
                request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
            )
        except MCPError as exc:
            return exc.error

    @staticmethod
    async def _ask_sole_agent(
        agent: Connection, capability: str, request: Any, result_type: type[_R], what: str
    ) -> _R | types.ErrorData:
        """The stdio agent (the only one there is) answers on its connection's own stream."""
        declared = agent.client_capabilities
        if declared is None or getattr(declared, capability, None) is None:
            return _refusal(not_declared(what, capability))
        try:
            return await agent.send_request(
                request, result_type=result_type, opts={"timeout": ROUND_TIMEOUT_S}
            )
        except MCPError as exc:
            return exc.error

    async def _relay_log(
        self, connection: UpstreamConnection, params: types.LoggingMessageNotificationParams
    ) -> None:
        name = connection.upstream if not params.logger else f"{connection.upstream}/{params.logger}"
        relayed = types.LoggingMessageNotificationParams(level=params.level, data=params.data, logger=name)
        ctx = self._agent_for(connection)
        if ctx is not None:
            if params.level in allowed_log_levels(ctx.protocol_version, ctx.meta):
                await ctx.session.send_notification(
                    types.LoggingMessageNotification(params=relayed), related_request_id=ctx.request_id
                )
            return
        wire = relayed.model_dump(by_alias=True, mode="json", exclude_none=True)
        for agent, level in list(self._log_levels.items()):
            if LOG_LEVELS.index(params.level) >= LOG_LEVELS.index(level):
                await agent.notify("notifications/message", wire)

    # -- notifications from upstreams -----------------------------------------------------------------
    async def _deliver(self, upstream: Upstream, message: Any) -> None:
        """One notification (handshake-era upstream) or listen event (2026-07-28 upstream)."""
        if isinstance(message, types.ToolListChangedNotification | ToolsListChanged):
            if await self._refresh_tools(upstream):
                await self._broadcast("notifications/tools/list_changed", None, ToolsListChanged())
        elif isinstance(message, types.PromptListChangedNotification | PromptsListChanged):
            await self._broadcast("notifications/prompts/list_changed", None, PromptsListChanged())
        elif isinstance(message, types.ResourceListChangedNotification | ResourcesListChanged):
            await self._broadcast("notifications/resources/list_changed", None, ResourcesListChanged())
        elif isinstance(message, types.ResourceUpdatedNotification | ResourceUpdated):
            uri = (
                message.params.uri if isinstance(message, types.ResourceUpdatedNotification) else message.uri
            )
            for agent in list(self.reads.subscribers.get(uri, ())):
                await agent.notify("notifications/resources/updated", {"uri": uri})
            await self.bus.publish(ResourceUpdated(uri=uri))

    async def _broadcast(self, method: str, params: dict[str, Any] | None, event: ServerEvent) -> None:
        for agent in list(self._agents):
            await agent.notify(method, params)
        await self.bus.publish(event)

    async def _refresh_tools(self, upstream: Upstream) -> bool:
        """Relist ``upstream``'s tools and rebuild the catalog; False (logged) if that failed."""
        try:
            connection = await upstream.shared_connection()
            upstream.set_tools(await connection.list_tools())
            self.proxy.rebuild_catalog()
        except (MCPError, UpstreamError) as exc:
            logger.error("upstream %r: its tool list changed but cannot be reloaded: %s", upstream.name, exc)
            return False
        return True

    async def _on_listen(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        for uri in params.notifications.resource_subscriptions or ():
            await self.reads.subscribe_upstream(uri)
        return await self._listen(ctx, params)

    # -- logging and roots ------------------------------------------------------------------------
    async def _on_set_level(self, ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        self._log_levels[agent_connection(ctx)] = params.level
        for upstream in self._offering("logging"):
            connection = await upstream.shared_connection()
            if connection.client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                continue
            request = types.SetLevelRequest(params=types.SetLevelRequestParams(level=params.level))
            await connection.session.send_request(request, types.EmptyResult)
        return types.EmptyResult()

    async def _on_roots_changed(self, ctx: Ctx, params: types.NotificationParams) -> None:
        for upstream in self.proxy.upstreams:
            connection = await upstream.shared_connection()
            if connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await connection.session.send_notification(types.RootsListChangedNotification())


class _Forwarding:
    """:meth:`Relay.forwarding`: a class rather than an ``asynccontextmanager``, whose async generator
    costs an asyncio hook and a weak reference on every forwarded call (issue 18's profile)."""

    __slots__ = ("_connection", "_ctx", "_relay")

    def __init__(self, relay: Relay, connection: UpstreamConnection) -> None:
        self._relay, self._connection = relay, connection
        self._ctx: Ctx | None = None

    async def __aenter__(self) -> tuple[ProgressFnT | None, dict[str, Any]]:
        ctx = _agent_request.get()
        if ctx is None:
            return None, {}
        entered = self._relay._enter_forwarding(self._connection, ctx)
        self._ctx = ctx
        return entered

    async def __aexit__(self, *exc_info: object) -> None:
        if self._ctx is not None:
            self._relay._leave_forwarding(self._connection, self._ctx)
            self._ctx = None


__all__ = ["EXECUTION_META_KEY", "Relay", "RelayServer"]
