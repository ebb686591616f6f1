"""One live MCP client connection to an upstream, owned by a task of its own.

The SDK's client is an async context manager, which AnyIO requires to be entered and left by one
task, so each connection runs in a task of its own; :meth:`UpstreamConnection.aclose` asks that task
to leave. A connection whose upstream died answers every request with ``-32000`` (connection
closed); :class:`~proxy.upstream_types.UpstreamGoneError` is how the proxy reports it, and the next
session reconnects. Which connections exist, and who shares them, is :class:`proxy.upstreams.Upstream`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from proxy.lean_upstream import LeanUpstream
from proxy.upstream_types import UpstreamError, UpstreamGoneError

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0
"""Longest wait for an upstream to answer its handshake (a stdio server may import a lot first)."""
CALL_TIMEOUT_S = 120.0
"""Longest wait for one upstream request; past it the request fails with ``-32001``."""


class ConnectionPeer(Protocol):
    """What stands for the agents on an upstream connection (``proxy.relay.Relay`` is one).

    ``client_options`` are extra keyword arguments of the connection's ``mcp.Client``: the callbacks
    that answer the upstream's own requests (sampling, elicitation, roots) and take its log
    messages and notifications, which also declare those capabilities to the upstream.
    ``forwarding`` is entered around every request the connection forwards for an agent: it yields
    the progress callback to pass upstream (None: the agent asked for no progress) and ``_meta``
    entries to add to the request.
    """

    def client_options(self, connection: UpstreamConnection) -> dict[str, Any]: ...

    def forwarding(
        self, connection: UpstreamConnection
    ) -> AbstractAsyncContextManager[tuple[ProgressFnT | None, dict[str, Any]]]: ...


class _NoForwarding:
    """:meth:`UpstreamConnection.forwarding` of a connection without a peer: nothing to relay."""

    async def __aenter__(self) -> tuple[ProgressFnT | None, dict[str, Any]]:
        return None, {}

    async def __aexit__(self, *exc_info: object) -> None:
        return None


def is_connection_lost(exc: BaseException) -> bool:
    """True for the SDK's error for a request on a closed connection (the upstream went away)."""
    return isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED


class UpstreamConnection:
    """One initialised MCP client connection to an upstream, owned by its own task.

    Open it with :meth:`open`; use :attr:`session` (an ``mcp.ClientSession``) from the event loop;
    close it with :meth:`aclose` (idempotent). :attr:`lost` turns True once a request found the
    connection closed, so owners can drop it instead of reusing it.
    """

    def __init__(
        self,
        upstream: str,
        target: StdioServerParameters | str,
        http: httpx2.AsyncClient | None = None,
        peer: ConnectionPeer | None = None,
        lean: LeanUpstream | None = None,
    ) -> None:
        self.upstream = upstream
        self.lean = lean
        self._target = target
        self._http = http
        self.peer = peer
        self._client: Client | None = None
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self.lost = False

    @classmethod
    async def open(
        cls,
        task_group: anyio.abc.TaskGroup,
        upstream: str,
        target: StdioServerParameters | str,
        *,
        http: httpx2.AsyncClient | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        peer: ConnectionPeer | None = None,
        lean: LeanUpstream | None = None,
    ) -> UpstreamConnection:
        """Start the connection's task in ``task_group`` and return once the handshake is done.

        ``http`` is the HTTP client to reach a streamable-HTTP upstream with (shared by its
        connections: a new client builds a TLS context, tens of milliseconds per session).
        ``peer`` answers the upstream's requests to the client and relays its notifications.
        Raises :class:`UpstreamError` (naming the upstream and the cause) if it cannot connect.
        """
        conn = cls(upstream, target, http, peer, lean)
        try:
            with anyio.fail_after(connect_timeout):
                await task_group.start(conn._run)
        except TimeoutError as exc:
            raise UpstreamError(
                f"upstream {upstream!r}: cannot connect: no answer within {connect_timeout:g} s"
            ) from exc
        except Exception as exc:
            raise UpstreamError(f"upstream {upstream!r}: cannot connect: {_describe(exc)}") from exc
        return conn

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            server: Any = self._target
            if isinstance(self._target, str) and self._http is not None:
                server = streamable_http_client(self._target, http_client=self._http)
            options = self.peer.client_options(self) if self.peer is not None else {}
            client = Client(server, mode="auto", cache=None, read_timeout_seconds=CALL_TIMEOUT_S, **options)
            async with client:
                self._client = client
                started = True
                task_status.started()
                try:
                    await self._stop.wait()
                finally:
                    self._client = None
        except Exception as exc:
            if not started:
                raise
            # The upstream went away and its client failed to close cleanly: the connection is
            # already unusable, and the proxy must keep serving, so the error ends here, logged.
            logger.warning("upstream %r: connection closed with an error: %s", self.upstream, _describe(exc))
        finally:
            self.lost = True
            self._stopped.set()

    @property
    def client(self) -> Client:
        if self._client is None:
            raise UpstreamGoneError(f"upstream {self.upstream!r}: the connection is closed")
        return self._client

    @property
    def session(self) -> Any:
        """The ``mcp.ClientSession`` of this connection (typed loosely: the SDK's generic session)."""
        return self.client.session

    @property
    def capabilities(self) -> types.ServerCapabilities | None:
        return self.client.server_capabilities

    @property
    def alive(self) -> bool:
        return self._client is not None and not self.lost

    @property
    def stateless(self) -> bool:
        """A 2026-07-28 connection over HTTP: each request is a POST of its own, so nothing of the
        connection lives on the upstream to be lost while it waits (a handshake-era HTTP session or
        a stdio process can be); the next request finds out whether the upstream answers."""
        client = self._client
        return (
            isinstance(self._target, str)
            and client is not None
            and client.protocol_version in MODERN_PROTOCOL_VERSIONS
        )

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the upstream lists, following pagination cursors."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            try:
                page = await self.client.list_tools(cursor=cursor)
            except MCPError as exc:
                self.note(exc)
                raise
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        """One ``tools/call``; a closed connection raises :class:`UpstreamGoneError`.

        The agent's progress token and the upstream's input requests (2026-07-28 rounds, answered
        through the connection's peer) are relayed while the call runs. A plain call to a 2026-07-28
        HTTP upstream is sent by :attr:`lean` (proxy/lean_upstream.py), the rest by the SDK client.
        """
        try:
            async with self.forwarding() as (progress, extra):
                forwarded = cast("types.RequestParamsMeta", {**dict(meta or {}), **extra})
                if self.lean is not None and self.lean.takes(self, name, progress, extra):
                    result = await self.lean.call_tool(self, name, arguments, forwarded, CALL_TIMEOUT_S)
                else:
                    result = await self.client.call_tool(
                        name, dict(arguments), CALL_TIMEOUT_S, progress, meta=forwarded
                    )
        except MCPError as exc:
            self.note(exc)
            raise
        if not isinstance(result, types.CallToolResult):
            raise UpstreamError(
                f"upstream {self.upstream!r} answered tools/call {name!r} with {type(result).__name__}, "
                "which the proxy does not relay"
            )
        return result

    def forwarding(self) -> AbstractAsyncContextManager[tuple[ProgressFnT | None, dict[str, Any]]]:
        """Entered around a request forwarded for an agent (see :class:`ConnectionPeer`)."""
        return self.peer.forwarding(self) if self.peer is not None else _NoForwarding()

    async def answers(self, timeout: float = 5.0) -> bool:
        """The upstream answers a ping (a connection that waited unused may have lost its upstream)."""
        if not self.alive:
            return False
        with anyio.move_on_after(timeout):
            try:
                await self.session.send_ping()
            except MCPError as exc:
                if exc.code not in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                    return True  # an answer all the same (the 2026-07-28 era has no ping: -32601)
                logger.info("upstream %r: a waiting connection is gone: %s", self.upstream, exc.message)
                self.lost = True
                return False
            return True
        self.lost = True
        return False

    def note(self, exc: MCPError) -> None:
        """Raise :class:`UpstreamGoneError` for an error that says the connection is closed."""
        if is_connection_lost(exc):
            self.lost = True
            raise UpstreamGoneError(f"upstream {self.upstream!r}: connection closed ({exc.message})") from exc

    async def aclose(self) -> None:
        self._stop.set()
        await self._stopped.wait()


def _describe(exc: BaseException) -> str:
    """``Type: message`` of the error itself, looking inside the task groups that wrap it."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = [
    "CALL_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "ConnectionPeer",
    "UpstreamConnection",
    "is_connection_lost",
]
