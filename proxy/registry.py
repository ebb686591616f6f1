"""The open guard sessions by id: created on first use, ended on request, at idle timeout or shutdown.

A session ends by being rolled back, never committed (docs/proxy.md "Sessions and protocol eras").
The ids of recently ended sessions are remembered with why they ended, so that a late ``commit``
for a session that was rolled back behind the agent is refused with the reason instead of being
answered "nothing to commit".

Sessions are keyed by (principal, id): a session id names a session *of its principal* (None for
an unauthenticated caller). Another principal using the same id gets a session of its own, so
nobody can take an id away from its owner, and nothing tells a caller that another principal's
session of that id exists.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread

from guard.metrics import CallObserver
from guard.models import CommitOutcome, ToolOutcome
from proxy.held import HeldCalls
from proxy.ledger import LedgerEntry, SessionLedger
from proxy.sessions import EndReason, OnIdle, ProxySession, RollbackOutcome, SessionObserver, silent

logger = logging.getLogger(__name__)


class SessionLimitError(Exception):
    """Too many sessions are open; the message says how many and what frees one."""


_ENDED_KEPT = 10_000
ANY = "\x00any"
"""``peek_lost``'s principal for "every principal" (no real principal has a NUL character)."""
Key = tuple[str | None, str]
"""(principal, session id)."""


@dataclass
class SessionRegistry:
    """The open sessions by id (see the module docstring)."""

    idle_timeout: float | None = 900.0
    on_idle: OnIdle = "rollback"
    lease: float | None = None
    """Sessions opened with ``leased=True`` (HTTP: the proxy cannot see their client go) end, rolled
    back, when no request of theirs came for this long; None: only the idle timeout applies."""
    max_sessions: int = 10_000
    renew_every: float = 1.0
    """How often sessions look for upstream transaction leases due for renewal (each is renewed at a
    third of its lease; guard.txext.RemoteBackend.renewal_due)."""
    observer: SessionObserver | None = None
    call_observer: CallObserver | None = None
    limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(200))
    clock: Callable[[], float] = time.monotonic
    held: HeldCalls | None = None
    """The approval queue the sessions hold calls in (None: held calls are only reported)."""
    ledger: SessionLedger | None = None
    """Where sessions holding uncommitted writes are noted durably (None: nowhere; a commit after a
    crash then cannot tell lost work from none)."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set by :meth:`stop_retrying` when the proxy stops: calls still retrying give up at once."""
    _sessions: dict[Key, ProxySession] = field(default_factory=dict)
    _ended: OrderedDict[Key, EndReason] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[ProxySession]:
        return iter(list(self._sessions.values()))

    def get(self, session_id: str, principal: str | None = None) -> ProxySession | None:
        """``principal``'s open session of this id (another principal's is not it)."""
        return self._sessions.get((principal, session_id))

    def named(self, session_id: str) -> list[ProxySession]:
        """Every principal's open session of this id (for orchestrators)."""
        return [s for (_, sid), s in self._sessions.items() if sid == session_id]

    def ended(self, session_id: str, principal: str | None = None) -> EndReason | None:
        """Why a recently ended session ended (None: not ended, or long forgotten)."""
        return self._ended.get((principal, session_id))

    def ended_any(self, session_id: str) -> EndReason | None:
        """Why the last recently ended session of this id ended, whoever's it was (orchestrators)."""
        reasons = [why for (_, sid), why in self._ended.items() if sid == session_id]
        return reasons[-1] if reasons else None

    async def take_lost(self, session_id: str, principal: str | None) -> LedgerEntry | None:
        """For an id with no open session: why its uncommitted writes were lost or what its
        interrupted commit did, if the ledger says so (told once), else None."""
        if self.ledger is None:
            return None
        lost: LedgerEntry | None = await anyio.to_thread.run_sync(
            self.ledger.take, session_id, principal, limiter=self.limiter
        )
        return lost

    async def peek_lost(self, session_id: str, principal: str | None) -> list[tuple[str | None, LedgerEntry]]:
        """What the ledger holds of a session no longer open, left in place (orchestrators reading
        it): ``principal``'s entry, or with ``principal=ANY`` every principal's."""
        ledger = self.ledger
        if ledger is None:
            return []

        def look() -> list[tuple[str | None, LedgerEntry]]:
            assert ledger is not None
            if principal is ANY:
                return ledger.entries(session_id)
            entry = ledger.peek(session_id, principal)
            return [] if entry is None else [(principal, entry)]

        found: list[tuple[str | None, LedgerEntry]] = await anyio.to_thread.run_sync(
            look, limiter=self.limiter
        )
        return found

    def notify_call(self, outcome: ToolOutcome) -> None:
        """Report a call decided outside any session (refused before it reached one)."""
        (self.observer or silent).call(outcome)

    def notify_commit(self, session_id: str, outcome: CommitOutcome) -> None:
        """Report a commit answered outside any session."""
        (self.observer or silent).commit(session_id, outcome)

    def open(self, session_id: str, principal: str | None = None, *, leased: bool = False) -> ProxySession:
        """``principal``'s session with this id, created if there is none.

        ``leased``: the session ends when :attr:`lease` passes without a request of it (set once, when
        the session is created)."""
        key = (principal, session_id)
        session = self._sessions.get(key)
        if session is not None and not session.closed:
            return session
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitError(
                f"too many open sessions ({self.max_sessions}); commit or roll back finished ones"
            )
        session = ProxySession(
            session_id,
            principal=principal,
            limiter=self.limiter,
            observer=self.observer,
            call_observer=self.call_observer,
            clock=self.clock,
            held=self.held,
            ledger=self.ledger,
            stopping=self.stopping,
        )
        session.leased = leased
        self._sessions[key] = session
        self._ended.pop(key, None)
        return session

    def renew(self, session_id: str, principal: str | None = None) -> None:
        """A request of the session came (any request, not only a tool call): its lease starts again."""
        session = self._sessions.get((principal, session_id))
        if session is not None:
            session.touch()

    async def end(
        self,
        session_id: str,
        reason: EndReason,
        *,
        principal: str | None = None,
        record_empty: bool = True,
    ) -> RollbackOutcome | None:
        """Roll a session back, close it and forget it; None when there is no such session.

        The session stays listed until its rollback is done, so that "gone" means "rolled back".
        ``record_empty=False``: a rollback that found nothing pending is not reported.
        """
        key = (principal, session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        try:
            return await session.close(reason, record_empty=record_empty)
        finally:
            if self._sessions.get(key) is session:
                del self._sessions[key]
            self._ended[key] = reason
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    def _expired(self, session: ProxySession) -> EndReason | None:
        if session.busy:
            return None
        idle = session.idle_for()
        if self.idle_timeout is not None and idle >= self.idle_timeout:
            return "idle"
        if self.lease is not None and session.leased and idle >= self.lease:
            return "lease"
        return None

    async def reap_idle(self) -> list[str]:
        """End sessions idle past the timeout, or past their lease (never one with a call in flight);
        returns their ids."""
        due = [(s, why) for s in list(self._sessions.values()) if (why := self._expired(s)) is not None]
        for session, why in due:
            logger.info("session %s: no request within its %s: rolled back", session.id, why)
            await self.end(session.id, why, principal=session.principal)
        return [session.id for session, _ in due]

    async def run_reaper(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Until cancelled: end idle sessions, and renew the upstream transactions' leases."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew_leases)
            task_status.started()
            limits = [t for t in (self.idle_timeout, self.lease) if t is not None]
            if not limits:
                return
            period = min(max(min(limits) / 4, 0.05), 30.0)
            while True:
                await anyio.sleep(period)
                await self.reap_idle()

    async def _renew_leases(self) -> None:
        """Every :attr:`renew_every` seconds, each session renews the leases that are due
        (docs/adr/011: a participant rolls back a transaction no request named for its lease)."""
        while True:
            await anyio.sleep(self.renew_every)
            for session in list(self._sessions.values()):
                await session.renew_leases()

    def stop_retrying(self) -> None:
        """The proxy is stopping: a call waiting to be retried is not retried (it fails at once)."""
        self.stopping.set()

    async def close_all(self, reason: EndReason = "shutdown") -> None:
        """Roll back and close every session at once (never a commit)."""
        if reason == "shutdown":
            self.stop_retrying()
        async with anyio.create_task_group() as tg:
            for principal, session_id in list(self._sessions):
                tg.start_soon(functools.partial(self.end, session_id, reason, principal=principal))
