"""A session's *leg*: one upstream's part of a guard session (proxy.sessions), its connection, the
transaction open on it, and how a call is forwarded on it.

For a transactional upstream the leg has a connection of the session's own, driven through
:class:`guard.txext.RemoteBackend`; for any other upstream it uses the shared connection, driven
through :class:`guard.journal.JournalBackend`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import mcp.types as types
from mcp import MCPError

from guard.approvals.gate import ApprovalGate
from guard.classifier import BUILTIN_RULES
from guard.inline import AsyncExecutor
from guard.journal import JournalBackend
from guard.metrics import CallObserver
from guard.models import ToolCall
from guard.retry import RetryPolicy, StoppableClock
from guard.session import Executor, GuardSession, ToolResult
from guard.txext.client import RemoteBackend, TransactionError
from proxy.lean_upstream import LeanTxSession
from proxy.session_types import SESSION_META_KEY
from proxy.upstream_connection import CALL_TIMEOUT_S, UpstreamConnection, is_connection_lost
from proxy.upstream_types import UpstreamGoneError
from proxy.upstreams import Upstream

logger = logging.getLogger(__name__)

LOCK_WAIT = next(rule.pattern for rule in BUILTIN_RULES if rule.id == "lock_contention")
"""What an upstream's lock-wait failure says (the classifier's own rule)."""


@dataclass
class Leg:
    """One upstream's part of a session: its connection and the current transaction on it."""

    upstream: Upstream
    connection: UpstreamConnection
    owned: bool
    upstream_session: str
    guard: GuardSession | None = None
    remote: RemoteBackend | None = None


async def open_leg(upstream: Upstream, upstream_session: str) -> Leg:
    """A new leg: a connection of its own on a transactional upstream, else the shared one.
    ``upstream_session``: the key the upstream keeps the session's transactions under (one per guard
    session and upstream, whichever connection the leg has: what the upstream holds for the session,
    a benchmark environment's world say, is found again by the next leg)."""
    if upstream.transactional:
        connection, owned = await upstream.session_connection(), True
    else:
        connection, owned = await upstream.shared_connection(), False
    return Leg(upstream, connection, owned, upstream_session=upstream_session)


def upstream_session_key() -> str:
    """A new random upstream session key (``shadowguard/session`` on the upstream's requests)."""
    return f"sg-{uuid.uuid4().hex}"


def is_gone(exc: BaseException) -> bool:
    """The upstream connection is closed (whatever it held for the session is gone with it)."""
    if isinstance(exc, UpstreamGoneError) or is_connection_lost(exc):
        return True
    return isinstance(exc, TransactionError) and exc.code == types.CONNECTION_CLOSED


def journaled(leg: Leg, guard: GuardSession) -> list[ToolCall]:
    """The calls a journaled leg's open transaction applied, under the names the agent calls them."""
    journal = guard.backend
    if not isinstance(journal, JournalBackend):
        return []
    prefix = leg.upstream.prefix
    return [e.call.model_copy(update={"tool": prefix + e.call.tool}) for e in journal.entries]


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))


def sender(leg: Leg, meta: Callable[[], Mapping[str, Any]]) -> AsyncExecutor:
    """Forwards one call on the leg's connection (on the event loop); the answer is the result's ``raw``.

    ``meta()`` is the agent's ``_meta`` for the call. What the upstream raises (a timeout, a refused
    request, a result the SDK refuses) is the guard's to classify and maybe retry; a closed
    connection is :class:`UpstreamGoneError`, which ends the transaction instead. On a
    transactional leg the call carries the transaction id and the operations RemoteBackend queued
    (savepoint, release: one round trip per call; RemoteBackend.send_tool_call_async); a queued
    operation that failed is the backend's error (the tool did not run).
    """

    async def send(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        async def call(wire: dict[str, Any]) -> types.CallToolResult:
            return await leg.connection.call_tool(tool, arguments, wire)

        remote = leg.remote
        result = await (call(dict(meta())) if remote is None else remote.send_tool_call_async(call, meta()))
        return ToolResult(text=text_of(result), is_error=bool(result.is_error), raw=result)

    return send


def executor(send: AsyncExecutor) -> Executor:
    """``send`` for a GuardSession in a worker thread (it runs on the event loop)."""

    def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        result: ToolResult = anyio.from_thread.run(send, tool, arguments)
        return result

    return execute


@dataclass(frozen=True)
class GuardTerms:
    """What every GuardSession of a proxy session is begun with."""

    session_id: str
    principal: str | None
    observer: CallObserver | None
    stopping: threading.Event


def begin_guard(leg: Leg, execute: Executor, gate: ApprovalGate | None, terms: GuardTerms) -> GuardSession:
    """Open the leg's next transaction (worker thread: beginning is a round trip on a participant)."""
    upstream = leg.upstream
    infos = upstream.tool_infos()
    if upstream.transactional:
        leg.remote = RemoteBackend(
            LeanTxSession(leg.connection),
            meta={SESSION_META_KEY: leg.upstream_session},
            timeout=CALL_TIMEOUT_S,
        )
        backend: RemoteBackend | JournalBackend = leg.remote
    else:
        backend = JournalBackend(
            execute, infos, upstream.policy, session_id=terms.session_id, principal=terms.principal
        )
        execute = backend.execute
    guard = GuardSession(
        backend,
        execute,
        infos,
        upstream.policy,
        session_id=terms.session_id,
        principal=terms.principal,
        observer=terms.observer,
        gate=gate,
        retry=RetryPolicy(clock=StoppableClock(terms.stopping)),
    )
    leg.guard = guard
    return guard


async def renew_due(legs: Iterable[Leg], session_id: str) -> None:
    """Renew the leases of the legs' upstream transactions that are due (guard.txext ``renew``)."""
    for leg in list(legs):
        remote = leg.remote
        if remote is None or not remote.renewal_due():
            continue
        try:
            await remote.renew()
        except (TransactionError, MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            # The transaction is gone on the upstream: the session's next call or commit meets it
            # there (no such transaction) and reports the loss.
            logger.warning("session %s: lease renewal on %r failed: %s", session_id, leg.upstream.name, exc)
