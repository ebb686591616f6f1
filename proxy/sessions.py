"""Guard sessions: one per agent session, spanning every upstream the agent calls.

A :class:`ProxySession` is what an agent's session key (docs/proxy.md: ``Mcp-Session-Id``,
``_meta["shadowguard/session"]``, the principal, or the stdio connection) maps to. It holds

* one *leg* per upstream the agent has called: for a transactional upstream a connection of its own
  (opened on first use, reused for later calls, closed when the session ends) driven through
  :class:`guard.txext.RemoteBackend`; else the shared one, through :class:`guard.journal.JournalBackend`;
* on each leg, the current transaction: a :class:`guard.session.GuardSession`, begun on the first
  call after the session opened or after the last commit or rollback.

A call is guarded by the leg's GuardSession: on the event loop when that is small work (a call
whose savepoint and check queries ride on it: :mod:`guard.inline`), else in a worker thread
(``anyio.to_thread``), from which the backends reach the upstream connections on the event loop
(``anyio.from_thread``). A session's calls run one at a time (its lock); sessions run concurrently.
Legs: :mod:`proxy.legs`; commit and rollback, and the failure semantics: :mod:`proxy.session_ends`;
the outcomes the session answers itself: :mod:`proxy.session_outcomes`.

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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
from mcp import MCPError

from guard.approvals.gate import ApprovalGate
from guard.approvals.models import ApprovalState, ApprovalStoreError
from guard.backend import BackendError
from guard.inline import inline_ok, run_inline
from guard.metrics import CallObserver
from guard.models import CommitOutcome, EffectClass, Verdict
from proxy.held import HeldCalls
from proxy.ledger import LedgerError, SessionLedger
from proxy.legs import (
    GuardTerms,
    Leg,
    begin_guard,
    executor,
    open_leg,
    renew_due,
    sender,
    upstream_session_key,
)
from proxy.session_ends import TransactionEnds
from proxy.session_outcomes import Attempted, no_writer_slot, unavailable
from proxy.session_types import (
    SESSION_META_KEY,
    CallResult,
    EndReason,
    OnIdle,
    RollbackOutcome,
    RollbackReason,
    SessionObserver,
    lost_message,
    silent,
)
from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream

__all__ = [
    "SESSION_META_KEY",
    "CallResult",
    "EndReason",
    "OnIdle",
    "ProxySession",
    "RollbackOutcome",
    "RollbackReason",
    "SessionObserver",
    "lost_message",
    "silent",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ProxySession(TransactionEnds):
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
        # fast_acquire: taking it uncontended costs no event-loop turn (issue 18's profile)
        self._lock = anyio.Lock(fast_acquire=True)
        self._legs: dict[str, Leg] = {}
        self._keys: dict[str, str] = {}
        """The upstream session key of each upstream the session has called, for the session's life
        (a leg between transactions gives its connection back; the next one keeps the key)."""
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
        self._asked = False  # a call of this session was bound to an approval (_cancel_pending)
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
            "upstreams": sorted(self._keys),
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
            await renew_due(self._legs.values(), self.id)

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
                result = CallResult(
                    unavailable(self._attempted(upstream, tool, arguments), exc, closed=self.closed)
                )
            else:
                if await self._writer_slot(upstream, tool, arguments):
                    self._forward_meta = dict(meta or {})
                    result = await self._guarded(leg, tool, arguments, approval_id)
                else:
                    result = CallResult(no_writer_slot(self._attempted(upstream, tool, arguments)))
            await self._release_writers()
            await self._settle_legs()
            self.last_used = self._clock()
            gate = self._gates.get(upstream.name)
            requested = gate.take_requested() if gate is not None else []
            self._asked = self._asked or bool(requested) or result.outcome.approval_id is not None
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
        if self._attempted(upstream, tool, arguments).effect() is EffectClass.READ:
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

    async def _guarded(
        self, leg: Leg, tool: str, arguments: Mapping[str, Any], approval_id: str | None
    ) -> CallResult:
        """The call through the leg's GuardSession: on the event loop when its guarding is small work
        (guard.inline: a read or write on an open transaction whose savepoint and check queries ride
        on the call), else in a worker thread. Shielded either way: a call the agent gave up on still
        ends cleanly (a worker thread runs to its end, too)."""
        guard = leg.guard
        if guard is None or not self._looked_up or not inline_ok(guard, tool, arguments, approval_id):
            result: CallResult = await self._run(self._call_sync, leg, tool, arguments, approval_id)
            return result
        with anyio.CancelScope(shield=True):
            try:
                send = sender(leg, self._meta)
                outcome, answer = await run_inline(guard, tool, arguments, send, self._offload)
            except (BackendError, UpstreamError, MCPError) as exc:
                broken: CallResult = await self._run(self._broken, leg, tool, arguments, exc)
                return broken
            except BaseException:
                await self._run(self._rollback_sync, "upstream_failed")
                raise
            if guard.kept and not self._recorded and self.ledger is not None:
                noted: CallResult | None = await self._run(self._note_open, leg, tool, arguments)
                if noted is not None:
                    return noted
        forwarded = answer.raw if answer is not None and outcome.verdict is not Verdict.REFUSED else None
        return CallResult(outcome, forwarded)

    async def _offload(self, work: Callable[[], T]) -> T:
        result: T = await anyio.to_thread.run_sync(work, limiter=self._limiter)
        return result

    def _call_sync(
        self, leg: Leg, tool: str, arguments: Mapping[str, Any], approval_id: str | None
    ) -> CallResult:
        try:
            self._look_up_loss()
            guard = leg.guard
            if guard is None:
                try:
                    terms = GuardTerms(self.id, self.principal, self.call_observer, self.stopping)
                    send = executor(sender(leg, self._meta))
                    guard = begin_guard(leg, send, self._gate(leg.upstream), terms)
                except (BackendError, UpstreamError, MCPError) as exc:
                    not_begun = self._not_begun(leg, tool, arguments, exc)
                    if not_begun is None:
                        raise
                    return not_begun
            outcome, answer = guard.run(tool, arguments, approval_id=approval_id)
            noted = self._note_open(leg, tool, arguments)
            if noted is not None:
                return noted
        except (BackendError, UpstreamError, MCPError) as exc:
            return self._broken(leg, tool, arguments, exc)
        except LedgerError as exc:  # the ledger lookup of an earlier life of this id
            return self._not_recorded(leg, tool, arguments, exc)
        except BaseException:
            self._rollback_sync("upstream_failed")
            raise
        forwarded = answer.raw if answer is not None and outcome.verdict is not Verdict.REFUSED else None
        return CallResult(outcome, forwarded)

    def _meta(self) -> Mapping[str, Any]:
        """The agent's ``_meta`` for the call being forwarded."""
        return self._forward_meta

    def _attempted(self, upstream: Upstream, tool: str, arguments: Mapping[str, Any]) -> Attempted:
        return Attempted(self.id, self.principal, upstream, tool, arguments)

    async def _leg(self, upstream: Upstream) -> Leg:
        leg = self._legs.get(upstream.name)
        if leg is None:
            key = self._keys.setdefault(upstream.name, upstream_session_key())
            leg = self._legs[upstream.name] = await open_leg(upstream, key)
        return leg

    def _gate(self, upstream: Upstream) -> ApprovalGate | None:
        """The session's gate for ``upstream``: one for the session's life (it remembers what it told)."""
        if self.held is None:
            return None
        gate = self._gates.get(upstream.name)
        if gate is None:
            gate = self._gates[upstream.name] = self.held.gate(upstream)
        return gate

    # -- commit / rollback
    async def commit(self) -> CommitOutcome:
        """Commit every leg's transaction if all their ``at_commit`` checks pass; otherwise nothing."""
        async with self._lock:
            self.last_used = self._clock()
            outcome: CommitOutcome = await self._run(self._commit_sync)
            await self._release_writers()
            await self._settle_legs()
        self.observer.commit(self.id, outcome)
        return outcome

    async def rollback(self, reason: RollbackReason = "agent") -> RollbackOutcome:
        """Discard every leg's open transaction (and any note of lost changes: starting over)."""
        async with self._lock:
            self.last_used = self._clock()
            self.lost, self.lost_outcome = None, None
            outcome: RollbackOutcome = await self._run(self._rollback_sync, reason)
            await self._release_writers()
            await self._settle_legs()
            await self._cancel_pending(reason)
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
            await self._settle_legs()  # every transaction ended above: HTTP connections given back
            for leg in self._legs.values():  # the others close with the session
                if leg.owned:
                    await leg.connection.aclose()
            self._legs.clear()
            await self._cancel_pending(reason)
        return result
