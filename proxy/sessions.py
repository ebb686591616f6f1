"""Guard sessions: one per agent session, spanning every upstream the agent calls.

A :class:`ProxySession` is what an agent's session key (docs/proxy.md: ``Mcp-Session-Id``,
``_meta["shadowguard/session"]``, the principal, or the stdio connection) maps to. It holds

* one *leg* per upstream the agent has called: for a transactional upstream a connection of the
  session's own (opened on first use, reused for every later call and transaction, closed when
  the session ends) driven through :class:`guard.txext.RemoteBackend`; for any other upstream the
  shared connection, driven through :class:`guard.journal.JournalBackend`;
* on each leg, the current transaction: a :class:`guard.session.GuardSession`, begun on the first
  call after the session opened or after the last commit or rollback.

GuardSession is synchronous, so its work runs in a worker thread (``anyio.to_thread``), from which
the backends reach the upstream connections on the event loop (``anyio.from_thread``). A session's
calls run one at a time (its lock); sessions run concurrently.

Failure semantics (never a silent commit, never a claimed rollback that did not happen):

* an upstream that dies or fails a transaction request mid-session fails the call with a clear
  error; every leg's open transaction is rolled back (the dead upstream's went with its
  connection) and the dead connection is dropped, so the next call starts a new transaction on a
  new connection;
* a commit runs every leg's ``at_commit`` checks first and commits only if all pass;
* an idle session is rolled back and closed (``on_idle: rollback``, the only setting): an agent's
  work is never committed without the agent or an orchestrator asking for it;
* after pending changes were lost (an upstream failure, a failed commit) the next ``commit`` is
  refused with what happened (a rollback clears it), so that a commit never reports success over
  work that is gone; the changes made since stay pending for the commit after.

Held calls (docs/approvals.md, :mod:`proxy.held`): with an approval store, each session has one
:class:`~guard.approvals.gate.ApprovalGate` per upstream. A held call waits for a reviewer's decision
*outside* the session's lock (other calls, commit and rollback go on meanwhile) and, once it is
decided, runs again under that approval; a commit is refused while the session has pending requests;
a rollback or the session's end cancels them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
from mcp import MCPError
from pydantic import BaseModel, Field

from guard.approvals.gate import ApprovalGate
from guard.approvals.models import ApprovalState, ApprovalStoreError
from guard.backend import BackendError, NotReversibleError
from guard.checks import CheckContext, run_checks
from guard.classify import BUILTIN_RULES
from guard.effects import ToolInfo, classify
from guard.errors import ErrorClass, LockContention
from guard.inline import AsyncExecutor, inline_ok, run_inline
from guard.journal import JournalBackend
from guard.metrics import CallObserver
from guard.models import (
    ChangeSet,
    CommitOutcome,
    EffectClass,
    ErrorHint,
    ToolCall,
    ToolOutcome,
    Verdict,
    Violation,
)
from guard.retry import RetryPolicy, StoppableClock
from guard.session import GuardSession, ToolResult
from guard.txext import RemoteBackend, TransactionError
from proxy.commits import crash_point, entry_outcome, record_outcome
from proxy.held import CANCEL_REASONS, HeldCalls
from proxy.ledger import RESTARTED, CommitRecord, LedgerError, SessionLedger, applied_on, failed_on
from proxy.upstreams import (
    CALL_TIMEOUT_S,
    Upstream,
    UpstreamConnection,
    UpstreamError,
    UpstreamGoneError,
    is_connection_lost,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

SESSION_META_KEY = "shadowguard/session"
"""The ``_meta`` key naming a session: agents may send it to the proxy; the proxy sends its own
per-session id under it to transactional upstreams (their session selector on sessionless HTTP)."""

OnIdle = Literal["rollback"]
EndReason = Literal["idle", "lease", "closed", "shutdown", "read"]
"""Why a session ended: ``lease`` its client sent nothing for ``sessions.lease_s``; ``read`` the
one-call session of a read that named no session (docs/adr/008-default-sessions.md)."""
RollbackReason = Literal[
    "agent", "api", "idle", "lease", "closed", "shutdown", "read", "upstream_failed", "commit_failed"
]
"""Why a session's transactions were rolled back (a metric label: keep the set small)."""


_LOST_BECAUSE = {
    RESTARTED: "the proxy stopped before they were committed (it was restarted), and its upstream "
    "transactions were rolled back",
    "idle": "the session was idle for longer than the idle timeout and was rolled back",
    "closed": "the session's connection was closed and it was rolled back",
    "shutdown": "the proxy shut down and rolled the session back",
    "upstream_failed": "an upstream failed and the session was rolled back",
    "commit_failed": "a commit failed and the session was rolled back",
}


def lost_message(reason: str) -> str:
    """Why a session's uncommitted changes are gone, for a ledger ``reason`` (proxy.ledger)."""
    why = _LOST_BECAUSE.get(reason, f"the session was rolled back ({reason})")
    return f"This session's uncommitted changes were lost: {why}."


class RollbackOutcome(BaseModel):
    """The result of rolling a session back. ``not_reversed`` names what stayed in effect, if anything."""

    rolled_back: bool
    not_reversed: list[str] = Field(default_factory=list)
    changes: ChangeSet = Field(default_factory=ChangeSet)
    """The net changes that were discarded (as far as the backends could tell)."""
    undone: list[ToolCall] = Field(default_factory=list)
    """Calls a journaled upstream had applied, undone by their compensating calls."""
    not_undone: list[ToolCall] = Field(default_factory=list)
    """Calls a journaled upstream had applied that stay in effect (no compensation, or it failed)."""

    @property
    def empty(self) -> bool:
        """Nothing was pending: no row discarded, no call undone or left in effect."""
        return not (self.changes or self.undone or self.not_undone or self.not_reversed)


class SessionObserver(Protocol):
    """Where a session reports what happened (the proxy wires audit log and metrics to it)."""

    def call(self, outcome: ToolOutcome) -> None: ...

    def commit(self, session_id: str, outcome: CommitOutcome) -> None: ...

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None: ...


class _Silent:
    """Observes nothing (a session without an audit log or metrics, e.g. in tests)."""

    def call(self, outcome: ToolOutcome) -> None:
        return None

    def commit(self, session_id: str, outcome: CommitOutcome) -> None:
        return None

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None:
        return None


silent: SessionObserver = _Silent()


@dataclass
class CallResult:
    """A guarded call: the guard's outcome and, when the call was forwarded, the upstream's answer."""

    outcome: ToolOutcome
    upstream_result: types.CallToolResult | None = None


@dataclass
class _Leg:
    """One upstream's part of a session: its connection and the current transaction on it."""

    upstream: Upstream
    connection: UpstreamConnection
    owned: bool
    upstream_session: str
    guard: GuardSession | None = None
    remote: RemoteBackend | None = None


_LOCK_WAIT = next(rule.pattern for rule in BUILTIN_RULES if rule.id == "lock_contention")
"""What an upstream's lock-wait failure says (the classifier's own rule)."""


def _is_gone(exc: BaseException) -> bool:
    """The upstream connection is closed (whatever it held for the session is gone with it)."""
    if isinstance(exc, UpstreamGoneError) or is_connection_lost(exc):
        return True
    return isinstance(exc, TransactionError) and exc.code == types.CONNECTION_CLOSED


def _journaled(leg: _Leg, guard: GuardSession) -> list[ToolCall]:
    """The calls a journaled leg's open transaction applied, under the names the agent calls them."""
    journal = guard.backend
    if not isinstance(journal, JournalBackend):
        return []
    prefix = leg.upstream.prefix
    return [e.call.model_copy(update={"tool": prefix + e.call.tool}) for e in journal.entries]


def _text(result: types.CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))


class ProxySession:
    """One agent session's guarded transactions across upstreams (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        *,
        principal: str | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        observer: SessionObserver | None = None,
        call_observer: CallObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        held: HeldCalls | None = None,
        ledger: SessionLedger | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.id = session_id
        self.principal = principal
        self.observer: SessionObserver = observer or silent
        self.call_observer = call_observer
        """Passed to each GuardSession: told about every failed attempt and retry (guard.metrics)."""
        self._limiter = limiter
        self._clock = clock
        self._lock = anyio.Lock()
        self._legs: dict[str, _Leg] = {}
        self._forward_meta: dict[str, Any] = {}
        self.last_used = clock()
        self.leased = False
        """Ends when no request of it came for the registry's lease (an HTTP client may vanish unseen)."""
        self.calls = 0
        self.closed = False
        self.lost: str | None = None
        """Why earlier changes were lost; reported by (and cleared at) the next commit or rollback."""
        self.lost_outcome: CommitOutcome | None = None
        """The answer the next commit gives instead of a plain loss: a commit record's (an earlier
        commit of this id that did not finish, found in the ledger)."""
        self.commit_record: dict[str, str] | None = None
        """Per upstream, what the last commit that did not finish did (for orchestrators)."""
        self.held = held
        """The approval store and settings; None: held calls are only reported (no queue)."""
        self._gates: dict[str, ApprovalGate] = {}
        self._waiting = 0
        self.ledger = ledger
        """Where the session is noted while it holds uncommitted writes (None: nowhere)."""
        self.stopping = stopping if stopping is not None else threading.Event()
        """Set when the proxy stops: the guard's retry waits end at once (guard.retry.StoppableClock)."""
        self._looked_up = ledger is None
        self._recorded = False
        self._writing: set[str] = set()
        """Upstreams whose writer slot (``Upstream.writers``) this session holds."""

    # -- state
    @property
    def busy(self) -> bool:
        """A call is running or waiting for a reviewer (an idle reaper leaves the session alone)."""
        return self._lock.locked() or self._waiting > 0

    @property
    def in_transaction(self) -> bool:
        return any(leg.guard is not None for leg in self._legs.values())

    def idle_for(self) -> float:
        return self._clock() - self.last_used

    def touch(self) -> None:
        """A request of this session arrived (renews its lease)."""
        self.last_used = self._clock()

    def describe(self) -> dict[str, Any]:
        """A JSON-able status for orchestrators."""
        return {
            "id": self.id,
            "principal": self.principal,
            "in_transaction": self.in_transaction,
            "upstreams": sorted(self._legs),
            "calls": self.calls,
            "idle_s": round(self.idle_for(), 3),
            "closed": self.closed,
            **({"commit": self.commit_record} if self.commit_record is not None else {}),
        }

    async def renew_leases(self) -> None:
        """Renew the leases of this session's upstream transactions that are due (guard.txext
        ``renew``): a quiet agent's transactions outlive the participants' leases, a dead proxy's do
        not. Skipped while a call runs (its own requests renew them)."""
        if self._lock.locked():
            return
        async with self._lock:
            for leg in list(self._legs.values()):
                remote = leg.remote
                if remote is None or not remote.renewal_due():
                    continue
                try:
                    await remote.renew()
                except (
                    TransactionError,
                    MCPError,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                ) as exc:
                    # The transaction is gone on the upstream: the session's next call or commit meets
                    # it there (no such transaction) and reports the loss.
                    logger.warning(
                        "session %s: lease renewal on %r failed: %s", self.id, leg.upstream.name, exc
                    )

    async def _run(self, func: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(func, *args, limiter=self._limiter)

    # -- calls
    async def call(
        self,
        upstream: Upstream,
        tool: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        *,
        approval_id: str | None = None,
    ) -> CallResult:
        """Guard and forward one call; ``meta`` is the agent's ``_meta`` without reserved keys.

        ``approval_id``: the approval the agent runs the call under. A held call waits up to
        ``approvals.wait_s`` for a decision (without the session's lock) and, once decided, is run
        again under it: executed if approved, refused with the reason if rejected or expired. Still
        pending at the end of the wait: the held outcome is returned.
        """
        result = await self._call_once(upstream, tool, arguments, meta, approval_id)
        held = self.held
        if held is None or held.wait_s <= 0:
            return result
        deadline = anyio.current_time() + held.wait_s
        while result.outcome.verdict is Verdict.HELD and result.outcome.approval_id is not None:
            waited_for = result.outcome.approval_id
            self._waiting += 1
            try:
                decided = await held.wait(waited_for, deadline)
            except ApprovalStoreError as exc:
                logger.warning("session %s: waiting for approval %s: %s", self.id, waited_for, exc)
                return result
            finally:
                self._waiting -= 1
                self.last_used = self._clock()
            if decided.state is ApprovalState.PENDING:
                return result
            result = await self._call_once(upstream, tool, arguments, meta, decided.id)
        return result

    async def _call_once(
        self,
        upstream: Upstream,
        tool: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any] | None,
        approval_id: str | None,
    ) -> CallResult:
        async with self._lock:
            self.last_used = self._clock()
            self.calls += 1
            try:
                if self.closed:
                    raise UpstreamError(
                        "this session was rolled back and closed while the call waited; nothing was sent. "
                        "Send the call again to start a new session"
                    )
                leg = await self._leg(upstream)
            except UpstreamError as exc:
                result = CallResult(self._unavailable(upstream, tool, arguments, exc))
            else:
                if await self._writer_slot(upstream, tool, arguments):
                    self._forward_meta = dict(meta or {})
                    result = await self._guarded(leg, tool, arguments, approval_id)
                else:
                    result = CallResult(self._no_writer_slot(upstream, tool, arguments))
            await self._release_writers()
            await self._drop_lost_connections()
            self.last_used = self._clock()
            gate = self._gates.get(upstream.name)
            requested = gate.take_requested() if gate is not None else []
        if self.held is not None and not self.held.decidable and result.outcome.verdict is Verdict.HELD:
            result = CallResult(await self._run(self.held.refuse_unapprovable, result.outcome))
            requested = []
        self.observer.call(result.outcome)
        if self.held is not None and requested:
            await self.held.notify(requested)
        return result

    async def _writer_slot(self, upstream: Upstream, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Hold one of the upstream's writer slots before a call that may write (False: none came free
        within ``writer_wait_s``). A read needs none; a session keeps its slot while it holds writes."""
        slots = upstream.writers
        if slots is None or upstream.name in self._writing:
            return True
        if self._effect(upstream, tool, arguments) is EffectClass.READ:
            return True
        with anyio.move_on_after(upstream.writer_wait_s):
            await slots.acquire()
            self._writing.add(upstream.name)
            return True
        return False

    async def _release_writers(self) -> None:
        """Give back the writer slots of upstreams where this session holds no uncommitted write."""
        for name in list(self._writing):
            leg = self._legs.get(name)
            if leg is None or leg.guard is None or not leg.guard.kept:
                self._writing.discard(name)
                if leg is not None and leg.upstream.writers is not None:
                    leg.upstream.writers.release()

    def _lock_at_begin(
        self, leg: _Leg, tool: str, arguments: Mapping[str, Any], exc: BaseException
    ) -> ToolOutcome:
        """The leg's transaction could not begin: the upstream gave up waiting for a lock another
        session holds (on PostgreSQL, the capture triggers' DDL). Nothing was begun or kept, so this
        is a retryable conflict for this call only, not a loss of the session (issue 15)."""
        leg.remote = None
        failure = LockContention(
            f"the upstream {leg.upstream.name!r} could not begin this session's transaction: {exc}",
            tool=tool,
            rule="lock_contention",
            source="upstream",
        )
        return ToolOutcome(
            call=self._tool_call(tool, arguments),
            effect=self._effect(leg.upstream, tool, arguments),
            verdict=Verdict.FAILED,
            error_class=failure.error_class.value,
            result=failure.message,
            hint=failure.hint(),
        )

    def _no_writer_slot(self, upstream: Upstream, tool: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        failure = LockContention(
            f"every writer slot of the upstream {upstream.name!r} stayed "
            f"taken by other sessions with uncommitted writes for {upstream.writer_wait_s:g} s",
            tool=tool,
            rule="writer_slots",
            source="guard",
        )
        return ToolOutcome(
            call=self._tool_call(tool, arguments),
            effect=self._effect(upstream, tool, arguments),
            verdict=Verdict.FAILED,
            error_class=failure.error_class.value,
            result=failure.message,
            hint=failure.hint(),
        )

    async def _leg(self, upstream: Upstream) -> _Leg:
        leg = self._legs.get(upstream.name)
        if leg is not None:
            return leg
        if upstream.transactional:
            connection, owned = await upstream.session_connection(), True
        else:
            connection, owned = await upstream.shared_connection(), False
        leg = _Leg(upstream, connection, owned, upstream_session=f"sg-{uuid.uuid4().hex}")
        self._legs[upstream.name] = leg
        return leg

    async def _guarded(
        self, leg: _Leg, tool: str, arguments: Mapping[str, Any], approval_id: str | None
    ) -> CallResult:
        """The call through the leg's GuardSession: on the event loop when its guarding is small work
        (guard.inline: a read on an open transaction whose savepoint rides on the call), else in a
        worker thread. Shielded either way: a call the agent gave up on still ends cleanly (a worker
        thread runs to its end, too)."""
        guard = leg.guard
        if guard is None or not self._looked_up or not inline_ok(guard, tool, arguments, approval_id):
            result: CallResult = await self._run(self._call_sync, leg, tool, arguments, approval_id)
            return result
        with anyio.CancelScope(shield=True):
            try:
                outcome, answer = await run_inline(guard, tool, arguments, self._sender(leg), self._offload)
            except (BackendError, UpstreamError, MCPError) as exc:
                return CallResult(await self._run(self._broken, leg, tool, arguments, exc))
            except BaseException:
                await self._run(self._rollback_sync, "upstream_failed")
                raise
        forwarded = answer.raw if answer is not None and outcome.verdict is not Verdict.REFUSED else None
        return CallResult(outcome, forwarded)

    async def _offload(self, work: Callable[[], T]) -> T:
        result: T = await anyio.to_thread.run_sync(work, limiter=self._limiter)
        return result

    def _call_sync(
        self, leg: _Leg, tool: str, arguments: Mapping[str, Any], approval_id: str | None
    ) -> CallResult:
        try:
            self._look_up_loss()
            guard = leg.guard
            if guard is None:
                try:
                    guard = self._begin(leg)
                except (BackendError, UpstreamError, MCPError) as exc:
                    if _is_gone(exc) or not _LOCK_WAIT.search(str(exc)):
                        raise
                    return CallResult(self._lock_at_begin(leg, tool, arguments, exc))
            outcome, answer = guard.run(tool, arguments, approval_id=approval_id)
            if guard.kept and not self._recorded and self.ledger is not None:
                self.ledger.opened(self.id, self.principal)
                self._recorded = True
        except (BackendError, UpstreamError, MCPError) as exc:
            return CallResult(self._broken(leg, tool, arguments, exc))
        except LedgerError as exc:
            return CallResult(self._unrecorded(leg, tool, arguments, exc))
        except BaseException:
            self._rollback_sync("upstream_failed")
            raise
        forwarded = answer.raw if answer is not None and outcome.verdict is not Verdict.REFUSED else None
        return CallResult(outcome, forwarded)

    def _look_up_loss(self) -> None:
        """On the session's first call: were writes of an earlier life of this id lost (the ledger)?"""
        if self._looked_up or self.ledger is None:
            return
        entry = self.ledger.take(self.id, self.principal)
        self._looked_up = True
        if entry is None:
            return
        answer = entry_outcome(entry)
        if answer is None:
            self.lost = lost_message(entry.state)
        elif not answer.committed:
            self.lost, self.lost_outcome = answer.violations[0].message, answer
            self.commit_record = answer.upstreams

    def _unrecorded(
        self, leg: _Leg, tool: str, arguments: Mapping[str, Any], exc: LedgerError
    ) -> ToolOutcome:
        """A kept write the ledger could not note: undone, since a crash would then go unreported."""
        logger.warning("session %s: %s", self.id, exc)
        rollback = self._rollback_sync("upstream_failed")
        message = (
            f"The proxy could not note that this session holds uncommitted changes ({exc}), so "
            f"{tool} and every uncommitted change of this session were rolled back; nothing was committed."
        )
        if rollback.not_reversed:
            message += " Not undone: " + "; ".join(rollback.not_reversed) + "."
        self.lost = message
        step = "Try again later: the next call opens a new transaction. Redo the lost changes."
        return ToolOutcome(
            call=self._tool_call(tool, arguments),
            effect=self._effect(leg.upstream, tool, arguments),
            verdict=Verdict.FAILED,
            error_class=ErrorClass.TRANSIENT.value,
            result=message,
            violations=[Violation(rule_id="session_not_recorded", message=message, hint=step)],
            hint=ErrorHint(
                error_class=ErrorClass.TRANSIENT.value, message=message, next_step=step, retryable=True
            ),
        )

    def _begin(self, leg: _Leg) -> GuardSession:
        """Open the leg's next transaction (worker thread)."""
        upstream = leg.upstream
        infos = upstream.tool_infos()
        execute = self._executor(leg)
        gate = self._gate(upstream)
        if upstream.transactional:
            leg.remote = RemoteBackend(
                leg.connection.session, meta={SESSION_META_KEY: leg.upstream_session}, timeout=CALL_TIMEOUT_S
            )
            guard = GuardSession(
                leg.remote,
                execute,
                infos,
                upstream.policy,
                session_id=self.id,
                principal=self.principal,
                observer=self.call_observer,
                gate=gate,
                retry=RetryPolicy(clock=StoppableClock(self.stopping)),
            )
        else:
            journal = JournalBackend(
                execute, infos, upstream.policy, session_id=self.id, principal=self.principal
            )
            guard = GuardSession(
                journal,
                journal.execute,
                infos,
                upstream.policy,
                session_id=self.id,
                principal=self.principal,
                observer=self.call_observer,
                gate=gate,
                retry=RetryPolicy(clock=StoppableClock(self.stopping)),
            )
        leg.guard = guard
        return guard

    def _gate(self, upstream: Upstream) -> ApprovalGate | None:
        """The session's gate for ``upstream``: one for the session's life (it remembers what it told)."""
        if self.held is None:
            return None
        gate = self._gates.get(upstream.name)
        if gate is None:
            gate = self._gates[upstream.name] = self.held.gate(upstream)
        return gate

    def _executor(self, leg: _Leg) -> Callable[[str, Mapping[str, Any]], ToolResult]:
        """Forwards one call on the leg's connection (worker thread); the answer is the result's ``raw``.

        What the upstream raises (a timeout, a refused request, a result the SDK refuses) is the
        guard's to classify and maybe retry; a closed connection is :class:`UpstreamGoneError`,
        which ends the transaction instead. On a transactional leg the call carries the
        transaction id and the operations RemoteBackend queued (savepoint, release: one round trip
        per call); a queued operation that failed is the backend's error (the tool did not run).
        """

        send = self._sender(leg)

        def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            result: ToolResult = anyio.from_thread.run(send, tool, arguments)
            return result

        return execute

    def _sender(self, leg: _Leg) -> AsyncExecutor:
        """:meth:`_executor` on the event loop (guard.inline awaits it; the executor runs it there)."""

        async def send(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            meta = dict(self._forward_meta)
            remote = leg.remote
            if remote is not None:
                if remote.tx is None:
                    raise BackendError("no open transaction on the upstream")
                meta.update(remote.tool_call_meta())
            try:
                result = await leg.connection.call_tool(tool, arguments, meta)
            except MCPError as exc:
                failed = remote.tool_call_failed(exc) if remote is not None else None
                if failed is not None:
                    raise failed from exc
                raise
            if remote is not None:
                remote.tool_call_done(result)
            return ToolResult(text=_text(result), is_error=bool(result.is_error), raw=result)

        return send

    def _effect(self, upstream: Upstream, tool: str, arguments: Mapping[str, Any]) -> EffectClass:
        info = upstream.tool_info(tool) if tool in upstream.tools else ToolInfo(name=tool)
        return classify(info, arguments, upstream.policy.effect_of(tool))[0]

    def _tool_call(self, tool: str, arguments: Mapping[str, Any]) -> ToolCall:
        return ToolCall(session_id=self.id, principal=self.principal, tool=tool, arguments=dict(arguments))

    def _unavailable(
        self, upstream: Upstream, tool: str, arguments: Mapping[str, Any], exc: Exception
    ) -> ToolOutcome:
        message = (
            f"{exc}."
            if self.closed
            else f"The upstream {upstream.name!r} is unavailable: {exc}. The call was not sent."
        )
        step = "Nothing changed. Try the call again later."
        return ToolOutcome(
            call=self._tool_call(tool, arguments),
            effect=self._effect(upstream, tool, arguments),
            verdict=Verdict.FAILED,
            error_class=ErrorClass.TRANSIENT.value,
            result=message,
            violations=[Violation(rule_id="upstream_unavailable", message=message, hint=step)],
            hint=ErrorHint(
                error_class=ErrorClass.TRANSIENT.value, message=message, next_step=step, retryable=True
            ),
        )

    def _broken(self, leg: _Leg, tool: str, arguments: Mapping[str, Any], exc: BaseException) -> ToolOutcome:
        """The call could not be guarded to the end: roll the whole session back and say so."""
        gone = _is_gone(exc) or not leg.connection.alive
        if gone:
            leg.connection.lost = True
        logger.warning("session %s: upstream %r failed during %s: %s", self.id, leg.upstream.name, tool, exc)
        rollback = self._rollback_sync("upstream_failed")
        if isinstance(exc, NotReversibleError) and not gone:
            what = f"The call to {tool} broke a rule and could not be undone: {exc}."
        elif gone:
            what = f"The upstream {leg.upstream.name!r} went away during {tool} ({exc})."
        else:
            what = f"The upstream {leg.upstream.name!r} failed during {tool}: {exc}."
        if rollback.not_reversed:
            after = (
                " The session was rolled back except for: "
                + "; ".join(rollback.not_reversed)
                + ". Those changes remain in effect."
            )
        else:
            after = " All uncommitted changes of this session were rolled back; nothing was committed."
        message = what + after
        self.lost = message
        step = "Start over: the next call opens a new transaction. Redo the lost changes."
        error_class = ErrorClass.TRANSIENT if gone else ErrorClass.INTERNAL
        return ToolOutcome(
            call=self._tool_call(tool, arguments),
            effect=self._effect(leg.upstream, tool, arguments),
            verdict=Verdict.FAILED,
            error_class=error_class.value,
            result=message,
            violations=[Violation(rule_id="upstream_failed", message=message, hint=step)],
            hint=ErrorHint(error_class=error_class.value, message=message, next_step=step, retryable=gone),
        )

    async def _drop_lost_connections(self) -> None:
        for name, leg in list(self._legs.items()):
            if leg.connection.lost or not leg.connection.alive:
                del self._legs[name]
                if leg.owned:
                    await leg.connection.aclose()

    # -- commit / rollback
    async def commit(self) -> CommitOutcome:
        """Commit every leg's transaction if all their ``at_commit`` checks pass; otherwise nothing."""
        async with self._lock:
            self.last_used = self._clock()
            outcome: CommitOutcome = await self._run(self._commit_sync)
            await self._release_writers()
            await self._drop_lost_connections()
        self.observer.commit(self.id, outcome)
        return outcome

    def _commit_sync(self) -> CommitOutcome:
        self._look_up_loss()
        legs = [leg for leg in self._legs.values() if leg.guard is not None]
        if self.lost is not None:
            lost, self.lost = self.lost, None
            since = " The changes made since then are still pending." if legs else ""
            if not legs:
                self._forget()
            if self.lost_outcome is not None:
                told, self.lost_outcome = self.lost_outcome, None
                return told.model_copy(
                    update={
                        "violations": [
                            v.model_copy(update={"message": v.message + since}) for v in told.violations
                        ]
                    }
                )
            return CommitOutcome(
                committed=False,
                violations=[
                    Violation(
                        rule_id="changes_lost",
                        message=f"Not committed: earlier changes of this session were lost. {lost}{since}",
                        hint="Redo what was lost if it is still needed, then call commit again.",
                    )
                ],
            )
        waiting = self._pending_approvals()
        if waiting is not None:
            return waiting
        if not legs:
            return CommitOutcome(committed=True)
        changes = ChangeSet()
        violations: list[Violation] = []
        try:
            for leg in legs:
                guard = leg.guard
                assert guard is not None
                pending = guard.pending_changes()
                changes = changes.extend(pending)
                ctx = CheckContext(phase="at_commit", query=guard.backend.query, changes=pending)
                violations += run_checks(guard.checks, ctx)
        except (BackendError, UpstreamError, MCPError) as exc:
            return self._commit_failed(exc, record=None)
        if violations:
            return CommitOutcome(committed=False, violations=violations, changes=changes)
        try:
            record = self._note_committing(legs)
        except LedgerError as exc:
            return self._commit_failed(exc, record=None)
        applied: list[ToolCall] = []
        for leg in legs:
            guard = leg.guard
            assert guard is not None
            journaled = _journaled(leg, guard)
            name = leg.upstream.name
            try:
                crash_point(f"commit:before:{name}")
                result = guard.commit()
            except (BackendError, UpstreamError, MCPError) as exc:
                gone = _is_gone(exc) or not leg.connection.alive
                if gone:
                    leg.connection.lost = True
                return self._commit_failed(exc, record=failed_on(record, name, unknown=gone))
            if not result.committed:
                return self._commit_failed(
                    BackendError("commit checks changed their verdict"), record=failed_on(record, name)
                )
            crash_point(f"commit:after:{name}")
            leg.guard = None
            leg.remote = None
            applied += journaled
            record = applied_on(record, name)
            try:
                self._note_applied(record)
            except LedgerError as exc:
                # The next upstream is not asked: a commit the ledger cannot follow stops here.
                return self._commit_failed(exc, record=record)
        self._forget()
        self.commit_record = None
        return CommitOutcome(committed=True, changes=changes, applied=applied)

    def _note_committing(self, legs: list[_Leg]) -> CommitRecord | None:
        """Before the first upstream commits: the commit's record (the upstreams holding kept writes,
        in commit order; journaled ones applied their calls already), noted in the ledger if there is
        one. None: nothing was kept, so no commit can be partial."""
        kept = [leg for leg in legs if leg.guard is not None and leg.guard.kept]
        if not kept:
            return None
        record = CommitRecord(
            upstreams=tuple(leg.upstream.name for leg in kept),
            applied=tuple(leg.upstream.name for leg in kept if not leg.upstream.transactional),
        )
        if self.ledger is not None:
            self.ledger.committing(self.id, self.principal, record)
            self._recorded = True
        return record

    def _note_applied(self, record: CommitRecord | None) -> None:
        """An upstream answered that it committed: noted, unless all did (the row goes next)."""
        if record is not None and not record.complete and self.ledger is not None:
            self.ledger.applied(self.id, self.principal, record)

    def _forget(self) -> None:
        """The session holds no uncommitted writes the agent does not know the fate of."""
        if self.ledger is not None:
            self.ledger.forget(self.id, self.principal)
        self._recorded = False

    def _pending_approvals(self) -> CommitOutcome | None:
        """A refusal while the session has requests waiting for a reviewer (worker thread), else None."""
        if self.held is None:
            return None
        try:
            pending = self.held.pending(self.id, self.principal)
        except ApprovalStoreError as exc:
            message = (
                f"Not committed: the approval queue cannot be read ({exc}), so calls held for a "
                "reviewer cannot be ruled out."
            )
            step = "Try the commit again later."
            return CommitOutcome(
                committed=False,
                violations=[Violation(rule_id="approvals_unavailable", message=message, hint=step)],
            )
        if not pending:
            return None
        ids = ", ".join(a.id for a in pending)
        return CommitOutcome(
            committed=False,
            violations=[
                Violation(
                    rule_id="approval_pending",
                    message=(
                        f"Not committed: {len(pending)} call(s) of this session wait for a reviewer "
                        f"(request {ids}); a commit now would leave them out."
                    ),
                    hint=(
                        "Wait for the decision and send the held call again (it runs once approved), "
                        "then commit; or roll back, which cancels the requests."
                    ),
                )
            ],
        )

    def _commit_failed(self, exc: BaseException, record: CommitRecord | None) -> CommitOutcome:
        """The commit stopped at an upstream: the rest are rolled back; a commit that applied (or may
        have applied) somewhere is kept in the ledger as a ``partial_commit`` record and answered
        with it, upstream by upstream."""
        logger.warning("session %s: commit failed: %s", self.id, exc)
        rollback = self._rollback_sync("commit_failed")
        not_undone = " Not undone: " + "; ".join(rollback.not_reversed) + "." if rollback.not_reversed else ""
        step = "Start over: the next call opens a new transaction."
        if record is not None and (record.applied or record.unknown):
            outcome = record_outcome(record, interrupted=False, failure=str(exc))
            if self.ledger is not None:
                try:
                    self.ledger.partial(self.id, self.principal, record)
                except LedgerError as ledger_exc:
                    logger.warning("session %s: %s", self.id, ledger_exc)
            self.commit_record = outcome.upstreams
            violation = outcome.violations[0]
            violation = violation.model_copy(update={"message": violation.message + not_undone})
            self.lost = violation.message
            return outcome.model_copy(update={"violations": [violation]})
        message = f"The commit failed ({exc}); nothing was committed and the session was rolled back."
        self.lost = message + not_undone
        return CommitOutcome(
            committed=False,
            violations=[Violation(rule_id="commit_failed", message=self.lost, hint=step)],
        )

    async def rollback(self, reason: RollbackReason = "agent") -> RollbackOutcome:
        """Discard every leg's open transaction (and any note of lost changes: starting over)."""
        async with self._lock:
            self.last_used = self._clock()
            self.lost, self.lost_outcome = None, None
            outcome: RollbackOutcome = await self._run(self._rollback_sync, reason)
            await self._release_writers()
            await self._drop_lost_connections()
            await self._cancel_pending(reason)
        return outcome

    async def _cancel_pending(self, reason: str) -> None:
        """Cancel the session's pending requests (its end, or a rollback, makes them moot)."""
        if self.held is None:
            return
        why = CANCEL_REASONS.get(reason, f"the session ended ({reason}) before a decision")
        try:
            await self._run(self.held.cancel_pending, self.id, self.principal, why)
        except ApprovalStoreError as exc:
            # They expire on their own; the session is over either way.
            logger.warning("session %s: pending approvals not cancelled: %s", self.id, exc)

    def _rollback_sync(self, reason: RollbackReason, *, record_empty: bool = True) -> RollbackOutcome:
        """Roll back every open transaction (worker thread); report what could not be undone.

        ``record_empty=False``: a rollback that found nothing pending is not reported to the observer
        (the end of a sessionless read's transaction is no rollback anyone asked for)."""
        not_reversed: list[str] = []
        changes = ChangeSet()
        undone: list[ToolCall] = []
        not_undone: list[ToolCall] = []
        rolled_any = False
        for leg in self._legs.values():
            guard = leg.guard
            if guard is None:
                continue
            leg.guard = None
            leg.remote = None
            rolled_any = True
            journaled = _journaled(leg, guard)
            if not leg.connection.alive:
                if journaled:
                    not_undone += journaled
                    not_reversed.append(
                        f"{leg.upstream.name}: {len(journaled)} applied call(s) could not be "
                        "compensated: the connection to the upstream is gone"
                    )
                continue  # a transactional upstream's transaction ended with its connection
            try:
                changes = changes.extend(guard.pending_changes())
                guard.rollback()
                undone += journaled
            except NotReversibleError as exc:
                not_reversed.append(f"{leg.upstream.name}: {exc}")
                stuck = {c.id for c in _journaled(leg, guard)}
                undone += [c for c in journaled if c.id not in stuck]
                not_undone += [c for c in journaled if c.id in stuck]
            except (BackendError, UpstreamError, MCPError) as exc:
                if _is_gone(exc) or not leg.connection.alive:
                    leg.connection.lost = True
                    continue
                # The upstream answered but could not roll back: its transaction's state is
                # unknown, so the connection (and the upstream session with it) is dropped.
                leg.connection.lost = True
                logger.warning("session %s: rollback on %r failed: %s", self.id, leg.upstream.name, exc)
        outcome = RollbackOutcome(
            rolled_back=not not_reversed,
            not_reversed=not_reversed,
            changes=changes,
            undone=undone,
            not_undone=not_undone,
        )
        if self._recorded and self.ledger is not None:
            if reason in ("agent", "api"):
                self._forget()
            else:
                self.ledger.ended(self.id, self.principal, reason)
                self._recorded = False
        if rolled_any and (record_empty or not outcome.empty):
            self.observer.rollback(self.id, reason, outcome)
        return outcome

    async def close(self, reason: EndReason, *, record_empty: bool = True) -> RollbackOutcome:
        """End the session: roll back whatever is pending (never a commit), close its own connections.

        ``record_empty``: see :meth:`_rollback_sync`."""
        async with self._lock:
            result: RollbackOutcome = await self._run(
                lambda: self._rollback_sync(reason, record_empty=record_empty)
            )
            await self._release_writers()
            self.closed = True
            for leg in self._legs.values():
                if leg.owned:
                    await leg.connection.aclose()
            self._legs.clear()
            await self._cancel_pending(reason)
        return result
