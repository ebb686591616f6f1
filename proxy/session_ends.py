"""How a guard session's transactions end (proxy.sessions): commit across upstreams, rollback, and
what the ledger is told.

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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread
from mcp import MCPError

from guard.approvals.models import ApprovalStoreError
from guard.backend import BackendError, NotReversibleError
from guard.models import ChangeSet, CommitOutcome, ToolCall, Violation
from guard.session import GuardSession
from proxy.commits import crash_point, entry_outcome, record_outcome
from proxy.held import CANCEL_REASONS, HeldCalls
from proxy.ledger import CommitRecord, LedgerError, SessionLedger, applied_on, failed_on
from proxy.legs import LOCK_WAIT, Leg, is_gone, journaled, upstream_session_key
from proxy.session_outcomes import Attempted, lock_at_begin, not_recorded, unavailable, upstream_failed
from proxy.session_types import CallResult, RollbackOutcome, RollbackReason, SessionObserver, lost_message
from proxy.upstream_types import UpstreamError

logger = logging.getLogger(__name__)


def _guard(leg: Leg) -> GuardSession:
    guard = leg.guard
    assert guard is not None, "only legs with an open transaction are committed"
    return guard


class TransactionEnds:
    """The commit and rollback half of :class:`proxy.sessions.ProxySession` (run in a worker thread,
    under the session's lock)."""

    id: str
    principal: str | None
    observer: SessionObserver
    held: HeldCalls | None
    ledger: SessionLedger | None
    lost: str | None
    lost_outcome: CommitOutcome | None
    commit_record: dict[str, str] | None
    _legs: dict[str, Leg]
    _keys: dict[str, str]
    _limiter: anyio.CapacityLimiter | None
    _looked_up: bool
    _asked: bool
    _recorded: bool

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

    def _commit_sync(self) -> CommitOutcome:
        """Commit every leg's transaction if all their ``at_commit`` checks pass (each run once, here)."""
        self._look_up_loss()
        legs = [leg for leg in self._legs.values() if leg.guard is not None]
        if self.lost is not None:
            return self._lost_since(bool(legs))
        waiting = self._pending_approvals()
        if waiting is not None:
            return waiting
        if not legs:
            return CommitOutcome(committed=True)
        try:
            reviews = [(leg, _guard(leg).review()) for leg in legs]
        except (BackendError, UpstreamError, MCPError) as exc:
            return self._commit_failed(exc, record=None)
        changes = ChangeSet()
        for _, review in reviews:
            changes = changes.extend(review.changes)
        violations = [v for _, review in reviews for v in review.violations]
        if violations:
            return CommitOutcome(committed=False, violations=violations, changes=changes)
        try:
            record = self._note_committing(legs)
        except LedgerError as exc:
            return self._commit_failed(exc, record=None)
        return self._apply(reviews, record, changes)

    def _lost_since(self, pending: bool) -> CommitOutcome:
        """The commit refused because earlier changes were lost (told once; ``pending``: changes made
        since then are still open)."""
        lost, self.lost = self.lost, None
        since = " The changes made since then are still pending." if pending else ""
        if not pending:
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

    def _apply(
        self, reviews: list[tuple[Leg, CommitOutcome]], record: CommitRecord | None, changes: ChangeSet
    ) -> CommitOutcome:
        """Commit the legs in order, under the checks' verdict from :meth:`_commit_sync`; the ledger
        follows upstream by upstream."""
        applied: list[ToolCall] = []
        for leg, review in reviews:
            guard = _guard(leg)
            done = journaled(leg, guard)
            name = leg.upstream.name
            try:
                crash_point(f"commit:before:{name}")
                guard.commit(review)
            except (BackendError, UpstreamError, MCPError) as exc:
                gone = is_gone(exc) or not leg.connection.alive
                if gone:
                    leg.connection.lost = True
                return self._commit_failed(exc, record=failed_on(record, name, unknown=gone))
            crash_point(f"commit:after:{name}")
            leg.guard = None
            leg.remote = None
            applied += done
            record = applied_on(record, name)
            try:
                self._note_applied(record)
            except LedgerError as exc:
                # The next upstream is not asked: a commit the ledger cannot follow stops here.
                return self._commit_failed(exc, record=record)
        self._forget()
        self.commit_record = None
        return CommitOutcome(committed=True, changes=changes, applied=applied)

    def _note_committing(self, legs: list[Leg]) -> CommitRecord | None:
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

    def _rollback_sync(self, reason: RollbackReason, *, record_empty: bool = True) -> RollbackOutcome:
        """Roll back every open transaction (worker thread); report what could not be undone.

        ``record_empty=False``: a rollback that found nothing pending is not reported to the observer
        (the end of a sessionless read's transaction is no rollback anyone asked for)."""
        outcome = RollbackOutcome(rolled_back=True)
        rolled_any = False
        for leg in self._legs.values():
            guard = leg.guard
            if guard is None:
                continue
            leg.guard = None
            leg.remote = None
            rolled_any = True
            self._roll_back_leg(leg, guard, outcome)
        outcome.rolled_back = not outcome.not_reversed
        if self._recorded and self.ledger is not None:
            if reason in ("agent", "api"):
                self._forget()
            else:
                self.ledger.ended(self.id, self.principal, reason)
                self._recorded = False
        if rolled_any and (record_empty or not outcome.empty):
            self.observer.rollback(self.id, reason, outcome)
        return outcome

    def _roll_back_leg(self, leg: Leg, guard: GuardSession, outcome: RollbackOutcome) -> None:
        """Roll back one leg's transaction, adding what it discarded or left in effect to ``outcome``."""
        applied = journaled(leg, guard)
        if not leg.connection.alive:
            if applied:
                outcome.not_undone += applied
                outcome.not_reversed.append(
                    f"{leg.upstream.name}: {len(applied)} applied call(s) could not be "
                    "compensated: the connection to the upstream is gone"
                )
            return  # a transactional upstream's transaction ended with its connection
        try:
            outcome.changes = outcome.changes.extend(guard.discarded())
            guard.rollback()
            outcome.undone += applied
        except NotReversibleError as exc:
            outcome.not_reversed.append(f"{leg.upstream.name}: {exc}")
            stuck = {c.id for c in journaled(leg, guard)}
            outcome.undone += [c for c in applied if c.id not in stuck]
            outcome.not_undone += [c for c in applied if c.id in stuck]
        except (BackendError, UpstreamError, MCPError) as exc:
            # Gone, or the upstream answered but could not roll back: its transaction's state is
            # unknown, so the connection (and the upstream session with it) is dropped.
            gone = is_gone(exc) or not leg.connection.alive
            leg.connection.lost = True
            if not gone:
                logger.warning("session %s: rollback on %r failed: %s", self.id, leg.upstream.name, exc)

    def _note_open(self, leg: Leg, tool: str, arguments: Mapping[str, Any]) -> CallResult | None:
        """After a call: once the session keeps uncommitted writes, the ledger notes it (once). None
        when noted (or nothing to note); a ledger that cannot be written fails the call
        (:meth:`_not_recorded`)."""
        guard = leg.guard
        if guard is None or not guard.kept or self._recorded or self.ledger is None:
            return None
        try:
            self.ledger.opened(self.id, self.principal)
        except LedgerError as exc:
            return self._not_recorded(leg, tool, arguments, exc)
        self._recorded = True
        return None

    def _not_recorded(
        self, leg: Leg, tool: str, arguments: Mapping[str, Any], exc: LedgerError
    ) -> CallResult:
        """The ledger cannot follow the session: its writes are rolled back (they could not be told
        after a crash) and the call fails saying so."""
        logger.warning("session %s: %s", self.id, exc)
        rollback = self._rollback_sync("upstream_failed")
        attempted = Attempted(self.id, self.principal, leg.upstream, tool, arguments)
        outcome = not_recorded(attempted, exc, rollback.not_reversed)
        self.lost = outcome.result
        return CallResult(outcome)

    def _broken(self, leg: Leg, tool: str, arguments: Mapping[str, Any], exc: BaseException) -> CallResult:
        """The call could not be guarded to the end: roll the whole session back and say so."""
        gone = is_gone(exc) or not leg.connection.alive
        if gone:
            leg.connection.lost = True
        logger.warning("session %s: upstream %r failed during %s: %s", self.id, leg.upstream.name, tool, exc)
        rollback = self._rollback_sync("upstream_failed")
        attempted = Attempted(self.id, self.principal, leg.upstream, tool, arguments)
        outcome = upstream_failed(attempted, exc, gone, rollback.not_reversed)
        self.lost = outcome.result
        return CallResult(outcome)

    def _not_begun(
        self, leg: Leg, tool: str, arguments: Mapping[str, Any], exc: Exception
    ) -> CallResult | None:
        """The outcome of a call whose leg could not begin its transaction, when the session loses
        nothing by it (None: it may have, :meth:`_broken`). A leg without a transaction holds nothing
        of the session, so an upstream that is gone leaves the session as it was: the call was not
        sent (``upstream_unavailable``) and the leg is dropped, to be opened anew by the next call.
        An upstream that gave up waiting for a lock is a retryable conflict (``lock_at_begin``)."""
        attempted = Attempted(self.id, self.principal, leg.upstream, tool, arguments)
        if is_gone(exc) or not leg.connection.alive:
            leg.remote = None
            leg.connection.lost = True
            logger.warning(
                "session %s: upstream %r is gone, no transaction begun: %s", self.id, leg.upstream.name, exc
            )
            return CallResult(unavailable(attempted, exc, closed=False))
        if LOCK_WAIT.search(str(exc)):
            leg.remote = None
            return CallResult(lock_at_begin(attempted, exc))
        return None

    async def _settle_legs(self) -> None:
        """After a call, commit or rollback: a leg whose connection is lost is dropped (its connection
        closed), and one of the session's own on a 2026-07-28 HTTP connection with no transaction open
        (a commit or rollback ended it, or none began) gives the connection back to its upstream
        (``Upstream.release``): the session's next call there takes one again, and a session between
        transactions holds none. Any other connection stays with its session to its end."""
        for name, leg in list(self._legs.items()):
            if leg.connection.lost or not leg.connection.alive:
                del self._legs[name]
                # The upstream may hold a transaction under the old key until its lease lapses: the
                # next leg starts under a new one (as a leg on a new connection always did).
                self._keys[name] = upstream_session_key()
                if leg.owned:
                    await leg.connection.aclose()
            elif leg.owned and leg.guard is None and leg.connection.stateless:
                del self._legs[name]
                await leg.upstream.release(leg.connection)

    async def _cancel_pending(self, reason: str) -> None:
        """Cancel the session's pending requests (its end, or a rollback, makes them moot). The end
        of a sessionless read's session (``read``: its id was minted for that one call) asks the store
        only if the call was bound to an approval: no other can name the session."""
        if self.held is None or (reason == "read" and not self._asked):
            return
        why = CANCEL_REASONS.get(reason, f"the session ended ({reason}) before a decision")
        try:
            await anyio.to_thread.run_sync(
                self.held.cancel_pending, self.id, self.principal, why, limiter=self._limiter
            )
        except ApprovalStoreError as exc:
            # They expire on their own; the session is over either way.
            logger.warning("session %s: pending approvals not cancelled: %s", self.id, exc)
