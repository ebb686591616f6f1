"""Upstream MCP servers: what the config names, and how sessions reach them.

An upstream is a real MCP server the proxy relays to, over stdio (a subprocess per connection) or
streamable HTTP. At startup the proxy opens one connection per upstream, lists its tools and reads
its capabilities; an upstream that advertises the transaction extension (``guard.txext``) is
*transactional*: every guard session then gets a connection of its own, opened on first use and
reused for all of that session's calls and transactions, because the participant's transaction
belongs to the connection's session. Non-transactional upstreams serve every session through the
one shared connection (writes are journaled by ``guard.journal.JournalBackend``).

One connection is :class:`proxy.upstream_connection.UpstreamConnection`; the agent-visible catalog
built from every upstream's tools is :mod:`proxy.catalog`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from mcp import MCPError, StdioServerParameters

from guard.effects import ToolInfo, detected_sql_argument
from guard.policy import EMPTY, PolicyError, PolicyPack, load_policy
from guard.session import RESERVED_PREFIX
from guard.txext.protocol import advertised_writers, advertises
from proxy.lean_upstream import LeanUpstream
from proxy.upstream_connection import ConnectionPeer, UpstreamConnection
from proxy.upstream_http import upstream_http_client
from proxy.upstream_types import UpstreamError, UpstreamSettings

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
"""The SDK's own HTTP timeouts (connect, write, pool; read, for streams held open)."""
IDLE_CONNECTIONS = 64
"""Connections a transactional upstream keeps ready for its next guard sessions: the spare, and the
2026-07-28 HTTP connections sessions gave back (``Upstream.release``), each a client object (the sockets
are the shared HTTP client's)."""


RESERVED_META_PREFIXES = ("io.modelcontextprotocol/", "shadowguard/")
"""``_meta`` keys the proxy never relays: the SDK's per-request envelope (it re-stamps its own, and an
upstream's ``serverInfo`` must not leak to agents) and the guard's own keys (an agent must not name
a transaction or an upstream session; an upstream must not speak for the guard)."""
_RESERVED_META_KEYS = frozenset({"progress_token", "progressToken"})

Transport = Literal["stdio", "http"]
Transactional = Literal["auto", "true", "false"] | bool


def strip_reserved_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``meta`` without the keys the proxy must not relay (see RESERVED_META_PREFIXES)."""
    return {
        key: value
        for key, value in (meta or {}).items()
        if key not in _RESERVED_META_KEYS and not key.startswith(RESERVED_META_PREFIXES)
    }


def process_env(spec: UpstreamSettings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a stdio upstream gets besides the SDK's minimal set: ``pass_env`` names taken
    from ``environ`` (the proxy's environment), then the literal ``env`` values over them.

    Raises :class:`UpstreamError` naming every passed variable that is not set.
    """
    source = os.environ if environ is None else environ
    missing = [name for name in spec.pass_env if name not in source]
    if missing:
        raise UpstreamError(
            f"upstream {spec.name!r}: pass_env names {', '.join(missing)}, which the proxy's environment "
            "does not set"
        )
    return {**{name: source[name] for name in spec.pass_env}, **dict(spec.env or {})}


def _target(spec: UpstreamSettings) -> StdioServerParameters | str:
    if spec.transport == "stdio":
        if not spec.command:
            raise UpstreamError(f"upstream {spec.name!r}: transport stdio needs a command")
        env = process_env(spec)
        return StdioServerParameters(command=spec.command, args=list(spec.args or ()), env=env or None)
    if spec.transport == "http":
        if not spec.url:
            raise UpstreamError(f"upstream {spec.name!r}: transport http needs a url")
        return spec.url
    raise UpstreamError(f"upstream {spec.name!r}: unknown transport {spec.transport!r} (stdio or http)")


def _transactional_setting(value: Any) -> bool | None:
    """True/False when the config forces it, None for ``auto`` (decide from the capabilities)."""
    if isinstance(value, bool):
        return value
    text = str(getattr(value, "value", value)).lower()
    if text == "auto":
        return None
    if text in ("true", "false"):
        return text == "true"
    raise UpstreamError(f"transactional must be auto, true or false, not {value!r}")


class Upstream:
    """One configured upstream: its policy pack, tool catalog, and how sessions reach it."""

    def __init__(
        self,
        spec: UpstreamSettings,
        policy: PolicyPack = EMPTY,
        target: StdioServerParameters | str | None = None,
        *,
        keep_spare: bool = True,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.keep_spare = keep_spare
        """Keep one connection opened ahead for the next guard session of a transactional upstream
        (a stdio upstream's process start is then off the agent's first call)."""
        self._refilling = False
        self._closed = False
        self.tools: dict[str, types.Tool] = {}
        """Every tool the upstream listed, by its own name (before prefixing or filtering)."""
        self.transactional = False
        self._target = target if target is not None else _target(spec)
        self._infos: dict[str, ToolInfo] = {}
        self._shared: UpstreamConnection | None = None
        self._idle: list[UpstreamConnection] = []
        """Connections ready for the next guard sessions of a transactional upstream (the spare, and
        those sessions gave back: :meth:`release`)."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self._http: httpx2.AsyncClient | None = None
        self._reconnect = anyio.Lock()
        limit: int | None = getattr(spec, "writers", None)
        self.writers = anyio.Semaphore(limit) if limit is not None else None
        """Writer slots (config ``writers``): held by a session from its first kept write to the end
        of its transaction; None: no limit."""
        self.writer_wait_s: float = getattr(spec, "writer_wait_s", 10.0)
        self.peer: ConnectionPeer | None = None
        """Stands for the agents on this upstream's connections (set before :meth:`start`)."""
        self.capabilities: types.ServerCapabilities | None = None
        """What the upstream offers (read at :meth:`start`)."""
        self.lean_relay = True
        """Send plain 2026-07-28 HTTP calls without the SDK client (config ``proxy.lean_relay``)."""
        self._lean: LeanUpstream | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def _adopt_writers(self, capabilities: types.ServerCapabilities | None) -> None:
        """Writer slots a transactional upstream advertises (a SQLite participant: 1), unless the
        config sets ``writers``: sessions then queue in the proxy for the database's one writer instead
        of colliding in it, where SQLite refuses a transaction that has read the write lock at once,
        whatever its busy timeout (issue 15)."""
        advertised = advertised_writers(capabilities) if self.transactional else None
        if self.writers is None and advertised is not None:
            self.writers = anyio.Semaphore(advertised)
            logger.info("upstream %r: %d writer slot(s), as it advertises", self.name, advertised)

    @property
    def prefix(self) -> str:
        return self.spec.prefix or ""

    @classmethod
    def from_settings(cls, spec: UpstreamSettings, *, keep_spare: bool = True) -> Upstream:
        """Validate the entry and load its policy pack (a bad pack fails here, naming file and line)."""
        target = _target(spec)
        policy = load_policy(spec.policy) if spec.policy else EMPTY
        return cls(spec, policy, target, keep_spare=keep_spare)

    def set_tools(self, tools: Sequence[types.Tool]) -> None:
        """Replace the tool catalog (at start, and when the upstream says its list changed).

        In place: the guard sessions open on the upstream read the same mappings.
        """
        self.tools.clear()
        self.tools.update({tool.name: tool for tool in tools})
        self._infos.clear()
        self._infos.update({tool.name: self._tool_info(tool) for tool in tools})

    def tool_info(self, name: str) -> ToolInfo:
        return self._infos[name]

    def _tool_info(self, tool: types.Tool) -> ToolInfo:
        return _tool_info(tool, self.spec.sql_tools.get(tool.name), detect_sql=self.spec.detect_sql_tools)

    def tool_infos(self) -> dict[str, ToolInfo]:
        """What the guard knows of each tool (schema, annotations), by the upstream's own names."""
        return self._infos

    def visible(self, name: str) -> bool:
        """An agent may see and call the tool: not reserved, and allowed by the policy pack."""
        return not name.startswith(RESERVED_PREFIX) and self.policy.allows(name)

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Connect, read the tool list and capabilities, and decide whether the upstream transacts.

        The policy pack is compiled again against the listed tools' input schemas: a v2 pack's ``args``
        get their types, and a rule naming an argument a tool does not have fails here, at start-up.

        The startup connection of a transactional upstream is kept as a spare: the first guard
        session takes it instead of starting a new one (for stdio, a new process).
        """
        self._task_group = task_group
        forced = _transactional_setting(self.spec.transactional)
        if isinstance(self._target, str) and self._http is None:
            self._http = upstream_http_client(httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S))
            if self.lean_relay:
                self._lean = LeanUpstream(self.name, self._target, self._http, self.tools)
        conn = await self._open(prime=False)
        try:
            tools = await conn.list_tools()
        except (MCPError, UpstreamError) as exc:
            await conn.aclose()
            raise UpstreamError(f"upstream {self.name!r}: cannot list its tools: {exc}") from exc
        try:
            self._adopt(tools, conn.capabilities, forced)
        except UpstreamError:
            await conn.aclose()
            raise
        if self.transactional:
            self._idle.append(conn)
        else:
            self._shared = conn
        logger.info(
            "upstream %r: %d tools, %s",
            self.name,
            len(self.tools),
            "transactional" if self.transactional else "journaled",
        )

    def _adopt(
        self, tools: list[types.Tool], capabilities: types.ServerCapabilities | None, forced: bool | None
    ) -> None:
        """Take what the startup connection listed and advertised: the tools, the policy pack compiled
        against their schemas, whether the upstream transacts (``forced``: the config's say), its
        writer slots. Raises :class:`UpstreamError` for a pack or ``sql_tools`` that does not fit the
        tools, or ``transactional: true`` for an upstream that does not advertise the extension."""
        self.set_tools(tools)
        self.capabilities = capabilities
        if self.spec.policy:
            try:
                self.policy = load_policy(
                    self.spec.policy, tool_schemas={t.name: t.input_schema for t in tools}
                )
            except PolicyError as exc:
                raise UpstreamError(
                    f"upstream {self.name!r}: its policy pack does not fit its tools: {exc}"
                ) from exc
        unknown = sorted(set(self.spec.sql_tools) - set(self.tools))
        if unknown:
            raise UpstreamError(
                f"upstream {self.name!r}: sql_tools names {', '.join(map(repr, unknown))}, which it does "
                f"not list (its tools: {', '.join(sorted(self.tools))})"
            )
        speaks = advertises(capabilities)
        if forced is True and not speaks:
            raise UpstreamError(
                f"upstream {self.name!r}: the config says transactional: true, but it does not advertise "
                "the shadowguard/tx extension (docs/transaction-extension.md); set transactional: auto "
                "(or false) to drive it through the journal"
            )
        self.transactional = speaks if forced is None else forced
        self._adopt_writers(capabilities)

    async def _open(self, *, prime: bool = True) -> UpstreamConnection:
        """A new connection; ``prime`` lists the tools on it at once, so that the client knows each
        tool's output schema and ``x-mcp-header`` arguments before its first call (the SDK would
        otherwise list them after that call, and send it without the headers)."""
        if self._task_group is None or self._target is None:
            raise UpstreamError(f"upstream {self.name!r} is not started")
        conn = await UpstreamConnection.open(
            self._task_group, self.name, self._target, http=self._http, peer=self.peer, lean=self._lean
        )
        if prime:
            try:
                await conn.list_tools()
            except (MCPError, UpstreamError) as exc:
                await conn.aclose()
                raise UpstreamError(f"upstream {self.name!r}: cannot list its tools: {exc}") from exc
        return conn

    async def session_connection(self) -> UpstreamConnection:
        """A connection of its own for one guard session (transactional upstreams).

        An idle one (the spare, or one a session that ended gave back: :meth:`release`) is handed
        out if it still answers a ping (its upstream may have died while it waited); when that was
        the last, the next spare is prepared in the background. A stateless one (2026-07-28 over
        HTTP) is not pinged, a round trip on every session's first call: the transaction's
        ``begin`` is its first request, and one that finds the upstream gone is the call's
        ``upstream_unavailable``, the session untouched (``ProxySession._not_begun``).
        """
        spare = self._idle.pop() if self._idle else None
        if not self._idle and self.keep_spare and self._task_group is not None and not self._refilling:
            self._refilling = True
            self._task_group.start_soon(self._refill)
        if spare is not None and spare.alive and spare.stateless:
            return spare
        if spare is not None and await spare.answers():
            return spare
        if spare is not None:
            await spare.aclose()
        return await self._open()

    async def _refill(self) -> None:
        try:
            conn = await self._open()
        except UpstreamError as exc:
            # No spare this time: the next session connects on its own (and reports the error).
            logger.warning("upstream %r: cannot prepare a spare connection: %s", self.name, exc)
            return
        finally:
            self._refilling = False
        await self.release(conn)

    async def release(self, conn: UpstreamConnection) -> None:
        """A connection for the next sessions (a new spare, or a session's 2026-07-28 HTTP connection
        with no transaction open on it, ``ProxySession._settle_legs``): kept while it is alive and
        there is room, else closed. Such a connection holds nothing of its session (the upstream keeps
        that under the session's key), and a session that takes it costs the upstream no handshake and
        tool list (issue 18: every session paid them, a sessionless read included). A stdio or
        handshake-era connection may hold what its session did (a stdio process's own database): it is
        never given back, and closes with its session."""
        if conn.alive and not self._closed and len(self._idle) < IDLE_CONNECTIONS:
            self._idle.append(conn)
        else:
            await conn.aclose()

    async def shared_connection(self) -> UpstreamConnection:
        """The connection all sessions share (non-transactional upstreams), reopened if it died."""
        async with self._reconnect:
            if self._shared is None or not self._shared.alive:
                old, self._shared = self._shared, None
                if old is not None:
                    await old.aclose()
                self._shared = await self._open()
            return self._shared

    @property
    def ready(self) -> bool:
        """Started, and (for a journaled upstream) its shared connection is up."""
        if self._task_group is None:
            return False
        return self.transactional or (self._shared is not None and self._shared.alive)

    async def aclose(self) -> None:
        """Close the shared and spare connections (sessions close their own first) and the HTTP client."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in (self._shared, *idle):
            if conn is not None:
                await conn.aclose()
        self._shared = None
        if self._lean is not None:
            await self._lean.aclose()
            self._lean = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _tool_info(tool: types.Tool, sql: Any = None, *, detect_sql: bool = False) -> ToolInfo:
    """What the guard knows of ``tool``; ``sql`` is its ``sql_tools`` entry (argument, dialect)."""
    hints = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    if sql is not None:
        return ToolInfo(
            name=tool.name,
            input_schema=tool.input_schema,
            annotations=hints,
            sql_dialect=sql.dialect or "",
            sql_argument=sql.argument,
        )
    about = f"{tool.name} {tool.description or ''}"
    detected = detected_sql_argument(tool.input_schema, about) if detect_sql else None
    return ToolInfo(
        name=tool.name,
        input_schema=tool.input_schema,
        annotations=hints,
        sql_dialect="" if detected is not None else None,
        sql_argument=detected,
    )
