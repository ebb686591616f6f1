"""GuardSession: one agent session's guarded pipeline over a shadow transaction.

    call  →  allowed?  →  arguments valid?  →  classify  →  before_call checks
          →  [approval rule? rehearse, roll back, hold]
          →  savepoint → execute → change set → failed? roll back, classify, retry if safe (guard.retry)
          →  after_call checks  →  keep (release) | roll back

(each arrow a step of guard.steps, run in order by :meth:`GuardSession.call`)
    commit →  at_commit checks on the net change set  →  commit | refuse with violations
              (:meth:`GuardSession.review` runs the checks alone; ``commit(reviewed)`` does not rerun them)

guard.inline runs the same steps on the event loop for calls whose guarding is small work.

Every outcome that is not ``allowed`` carries an error class and a hint (guard.errors): what failed
and what the agent can do next. Invalid arguments never reach the upstream (guard.validation).

On a backend that cannot roll back (``transactional = False``, e.g. JournalBackend) there is no
rehearsal: an irreversible or approval-matched call is held before it is forwarded.

With an :class:`~guard.approvals.gate.ApprovalGate` a held call is queued as an approval request
(the outcome names it: ``approval_id``), and a call that refers to an approval (by id, or the same
call sent again) is held again while it is pending, run once it is approved (its executed change set
must equal the rehearsed preview, or it returns to review under a new id), or refused when it was
rejected, expired, used or does not match. Without a gate a held call is only reported.

The session is transport-independent: the benchmark drives it in-process, the proxy drives it from
MCP requests. Nothing here reads a benchmark answer key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from guard.approvals.gate import ApprovalGate
from guard.approvals.models import ApprovalStoreError
from guard.backend import AsksAhead, Backend, BackendError
from guard.checks import Check, CheckContext, Phase, queries_ahead, run_checks
from guard.classifier import Classifier
from guard.effects import ToolInfo, classify
from guard.errors import ToolFailure, TransientError
from guard.metrics import CallObserver
from guard.models import AttemptRecord, ChangeSet, CommitOutcome, EffectClass, ToolCall, ToolOutcome, Verdict
from guard.policy import EMPTY, PolicyPack
from guard.retry import Attempt, RetryPolicy
from guard.steps import PIPELINE, RESERVED_PREFIX, CallState, Step
from guard.validation import ToolValidators

__all__ = ["FORWARDING", "RESERVED_PREFIX", "Executor", "GuardSession", "SessionClosedError", "ToolResult"]

logger = logging.getLogger(__name__)

FORWARDING: ContextVar[ToolCall | None] = ContextVar("shadowguard_forwarding", default=None)
"""The call a GuardSession is forwarding right now (in the thread that forwards it), so that a backend
that records forwarded calls (guard.journal) records them under the id the agent is told."""


@dataclass(frozen=True)
class ToolResult:
    """What an upstream returned for one call."""

    text: str
    is_error: bool = False
    raw: Any = field(default=None, compare=False, repr=False)
    """The upstream's own answer (e.g. an MCP ``CallToolResult``), handed back to the caller of
    :meth:`GuardSession.run` as it is; the guard reads only ``text`` and ``is_error``."""


Executor = Callable[[str, Mapping[str, Any]], ToolResult]


@dataclass(frozen=True)
class Forwarded:
    """One attempt of a call: its savepoint, the upstream's result (None: it raised), its change set."""

    savepoint: str
    result: ToolResult | None
    changes: ChangeSet
    lost: ToolFailure | None = None
    """The failure that lost the upstream's answer to a call that was applied all the same
    (``result`` then says so; see :meth:`GuardSession.forward`)."""


def answer_lost(failure: ToolFailure, changes: ChangeSet) -> ToolResult:
    """The result of a call whose answer was lost although the upstream applied it."""
    tables = ", ".join(sorted(changes.tables))
    return ToolResult(
        f"{failure.tool or 'The call'} was applied, but the upstream's answer was lost ({failure.message}). "
        f"Its {len(changes)} row change(s) ({tables}) are kept; do not send the call again. "
        "Read the records back if you need what the answer would have said."
    )


class SessionClosedError(RuntimeError):
    """The session was committed or rolled back; open a new one."""


class GuardSession:
    """The per-session pipeline. ``extra_checks`` are added to the pack's (e.g. the oracle judge).

    ``retry`` (default: :class:`~guard.retry.RetryPolicy` on the system clock), ``classifier``
    (default: the pack's error rules before the built-in ones), ``observer`` (metrics) and ``gate``
    (approvals; needs a ``session_id``) are optional.
    """

    def __init__(
        self,
        backend: Backend,
        execute: Executor,
        tools: Mapping[str, ToolInfo],
        policy: PolicyPack = EMPTY,
        *,
        session_id: str | None = None,
        principal: str | None = None,
        extra_checks: Sequence[Check] = (),
        retry: RetryPolicy | None = None,
        classifier: Classifier | None = None,
        observer: CallObserver | None = None,
        gate: ApprovalGate | None = None,
    ) -> None:
        if gate is not None and session_id is None:
            raise ValueError("a GuardSession with an approval gate needs a session_id")
        self.backend = backend
        self.execute = execute
        self.tools = tools
        self.policy = policy
        self.session_id = session_id
        self.principal = principal
        self.checks: list[Check] = [*policy.checks, *extra_checks]
        self.retry = retry if retry is not None else RetryPolicy()
        self.classifier = classifier if classifier is not None else Classifier.for_policy(policy)
        self.validators = ToolValidators(policy.model.errors.validation)
        self.observer = observer
        self.gate = gate
        self.outcomes: list[ToolOutcome] = []
        self.closed = False
        self.kept = False
        """A call kept something in this transaction (an allowed write, or an allowed call that
        changed rows): from then on the transaction is the session's work and is never restarted."""
        self._dirty = False
        self._settled = True
        """Every call that opened an attempt has been settled (:meth:`_settle` ran to its end): with
        nothing ``kept``, the transaction then holds no change of the session's (:meth:`discarded`)."""
        self._ahead = backend if isinstance(backend, AsksAhead) else None
        self.pipeline: tuple[Step, ...] = PIPELINE
        """The call's steps (guard.steps), in order."""
        backend.begin()

    # -- calls ----------------------------------------------------------------------------------
    def call(
        self, tool: str, arguments: Mapping[str, Any] | None = None, *, approval_id: str | None = None
    ) -> ToolOutcome:
        """Guard one call. ``approval_id`` names the approval the caller runs it under (needs a gate)."""
        return self.run(tool, arguments, approval_id=approval_id)[0]

    def run(
        self, tool: str, arguments: Mapping[str, Any] | None = None, *, approval_id: str | None = None
    ) -> tuple[ToolOutcome, ToolResult | None]:
        """:meth:`call`, and what the upstream answered to the call's last attempt (``None``: it was
        not forwarded, or the executor raised)."""
        state = self.begin_call(tool, arguments, approval_id)
        try:
            outcome = self._call(state)
        except ApprovalStoreError as exc:
            # Raised before anything ran or after it was undone: no savepoint is open here.
            outcome = self._queue_unavailable(state.call, exc)
        return self.end_call(state, outcome)

    def begin_call(
        self, tool: str, arguments: Mapping[str, Any] | None, approval_id: str | None
    ) -> CallState:
        """The state a call's steps start from (:meth:`run`, or guard.inline's pipeline)."""
        if self.closed:
            raise SessionClosedError("session is closed")
        call = ToolCall(
            session_id=self.session_id, principal=self.principal, tool=tool, arguments=dict(arguments or {})
        )
        return CallState(call, approval_id, started=time.perf_counter())

    def end_call(self, state: CallState, outcome: ToolOutcome) -> tuple[ToolOutcome, ToolResult | None]:
        """After the steps: settle the transaction (:meth:`_settle`), time, record and report the call."""
        self._settle(outcome)
        outcome.duration_ms = (time.perf_counter() - state.started) * 1000
        self.outcomes.append(outcome)
        if self.observer is not None:
            self.observer.outcome(outcome)
        return outcome, state.forwarded.result if state.forwarded is not None else None

    def ends_blocking(self, outcome: ToolOutcome) -> bool:
        """:meth:`end_call` would talk to the backend: the call ran, was undone and nothing was
        kept, so the transaction restarts (:meth:`_settle`)."""
        return (
            outcome.verdict is not Verdict.ALLOWED
            and self._dirty
            and not self.kept
            and self.backend.transactional
        )

    def _settle(self, outcome: ToolOutcome) -> None:
        """After a call: remember whether it kept anything; if nothing was ever kept but the call
        ran and was undone (held, rolled back by a rule, failed), start a fresh transaction.

        Rolling back to a savepoint does not release what the transaction holds in the database
        (SQLite keeps its write lock until the transaction ends; PostgreSQL its row locks), so a
        session whose kept changes are empty must not go on holding them (docs/adr/009).
        """
        if outcome.verdict is Verdict.ALLOWED and (outcome.effect is not EffectClass.READ or outcome.changes):
            self.kept = True
        elif outcome.verdict is not Verdict.ALLOWED and self._dirty and not self.kept:
            self._restart()
        self._settled = True

    def _restart(self) -> None:
        """A new transaction in place of one that holds nothing of the session's (see :meth:`_settle`)."""
        if not self.backend.transactional:
            return
        self.backend.rollback()
        self.backend.begin()
        self._dirty = False

    def _queue_unavailable(self, call: ToolCall, exc: ApprovalStoreError) -> ToolOutcome:
        info = self.tools.get(call.tool)
        effect = (
            classify(info, call.arguments, self.policy.effect_of(call.tool))[0] if info else EffectClass.READ
        )
        unavailable = TransientError(
            f"The approval queue is unavailable ({exc}); {call.tool} was not done.",
            tool=call.tool,
            rule="approvals_unavailable",
            next_step="Nothing changed. Try the call again later.",
        )
        return ToolOutcome.of(call, effect, Verdict.FAILED, unavailable)

    def context(self, phase: Phase, call: ToolCall | None, changes: ChangeSet) -> CheckContext:
        """What a check of ``phase`` sees: the shadow state, the change set, the call."""
        return CheckContext(phase=phase, query=self.backend.query, changes=changes, call=call)

    def _call(self, state: CallState) -> ToolOutcome:
        for step in self.pipeline:
            outcome = step(self, state)
            if outcome is not None:
                return outcome
        raise AssertionError("the last step of a GuardSession's pipeline returns the outcome")

    def needs_person(self, rule_matched: bool, effect: EffectClass) -> bool:
        """An approval rule matched, or an irreversible call on a backend that cannot roll back."""
        return rule_matched or (not self.backend.transactional and effect is EffectClass.IRREVERSIBLE)

    def forward(self, call: ToolCall, *, keep_applied: bool = False) -> Attempt[Forwarded]:
        """One attempt in its own savepoint; a failed attempt is rolled back to it before it returns.

        What the executor raises is classified (a transport error is a failure like any other),
        except the backend's own errors, which propagate after the savepoint is rolled back.

        ``keep_applied`` (for calls that may not be sent twice): when the upstream's answer was lost
        (the executor raised) but the change set shows the call was applied, the attempt is not
        undone; it succeeds with a result saying so (:func:`answer_lost`). Undoing its rows would
        not undo what such a call did outside the database, and the shadow state would then hide an
        effect that exists.
        """
        savepoint = self.open_attempt(call)
        result: ToolResult | None = None
        failure: ToolFailure | None
        try:
            token = FORWARDING.set(call)
            try:
                result = self.execute(call.tool, call.arguments)
            except BackendError:
                raise
            except Exception as exc:
                failure = self.judge(call, None, exc)
            else:
                failure = self.judge(call, result, None)
            finally:
                FORWARDING.reset(token)
            changes = self.backend.changes(savepoint)
        except BaseException:
            # The upstream may have written before it failed; its outcome is unknown, so undo it.
            self.backend.rollback_to(savepoint)
            raise
        return self.close_attempt(savepoint, result, failure, changes, keep_applied=keep_applied)

    def open_attempt(self, call: ToolCall) -> str:
        """An attempt's savepoint (from now on the transaction may hold something of the session's);
        the queries of the call's after-call checks are asked for ahead (guard.backend.AsksAhead)."""
        self.ask_ahead("after_call", call)
        self._settled = False
        savepoint = self.backend.savepoint()
        self._dirty = True
        return savepoint

    def judge(self, call: ToolCall, result: ToolResult | None, exc: Exception | None) -> ToolFailure | None:
        """An attempt's failure, from what the executor raised or answered (None: it did not fail)."""
        if exc is not None:
            failure = self.classifier.exception(call.tool, exc)
            if not failure.classified:
                logger.warning("unclassified failure of %s", call.tool, exc_info=exc)
            return failure
        assert result is not None
        return self.classifier.result(call.tool, result.text, result.is_error)

    def close_attempt(
        self,
        savepoint: str,
        result: ToolResult | None,
        failure: ToolFailure | None,
        changes: ChangeSet,
        *,
        keep_applied: bool = False,
    ) -> Attempt[Forwarded]:
        """The attempt as the retry loop sees it; a failed one is undone first (talks to the backend),
        unless ``keep_applied`` and its change set shows it was applied (see :meth:`forward`)."""
        if failure is not None and keep_applied and result is None and changes and not failure.safe_to_retry:
            lost = answer_lost(failure, changes)
            return Attempt(Forwarded(savepoint, lost, changes, lost=failure))
        if failure is not None:
            if failure.restart_transaction and not self.kept and self.backend.transactional:
                # The transaction's read snapshot may predate another writer's commit: SQLite
                # then refuses it the write lock for good, so the retry needs a new one (ending
                # the transaction undoes the attempt too).
                self._restart()
            else:
                self.backend.rollback_to(savepoint)
        return Attempt(
            Forwarded(savepoint, result, changes),
            failure=failure,
            rolled_back=failure is not None and self.backend.transactional,
        )

    def record(self, call: ToolCall, attempt: Attempt[Forwarded]) -> AttemptRecord:
        """A failed attempt, as the outcome lists it (and the observer is told)."""
        assert attempt.failure is not None and attempt.decision is not None
        record = AttemptRecord(
            error_class=attempt.failure.error_class.value,
            message=attempt.failure.message,
            changes=attempt.value.changes,
            rolled_back=attempt.rolled_back,
            retried=attempt.decision.retry,
            reason=attempt.decision.reason.value,
            delay_s=attempt.decision.delay if attempt.decision.retry else 0.0,
        )
        if self.observer is not None:
            self.observer.attempt_failed(call, record, attempt.failure.source)
        return record

    # -- commit / rollback ----------------------------------------------------------------------
    def pending_changes(self) -> ChangeSet:
        """The net change set of the session so far."""
        return self.backend.changes().net()

    def discarded(self) -> ChangeSet:
        """What a rollback now would discard: :meth:`pending_changes`, but without asking the backend
        when every call has been settled and none kept anything. Each attempt's change set is known
        (its savepoint or watch reports it), and a settled call that kept nothing either changed
        nothing (an allowed read) or was undone with the whole transaction (:meth:`_settle`); a call
        interrupted before it was settled leaves the question to the backend."""
        if self._settled and not self.kept and self.backend.transactional:
            return ChangeSet()
        return self.pending_changes()

    def ask_ahead(self, phase: Phase, call: ToolCall | None) -> None:
        """Ask the backend, when it can, for the queries ``phase``'s SQL checks will run for ``call``
        on its next request (they then need no round trip of their own)."""
        if self._ahead is not None and self._ahead.answering:
            self._ahead.expect(queries_ahead(self.checks, phase, call))

    def review(self) -> CommitOutcome:
        """The ``at_commit`` checks on the net change set, without committing: their ``violations``
        (none: a commit may go ahead) and the ``changes`` a commit would apply."""
        if self.closed:
            raise SessionClosedError("session is closed")
        self.ask_ahead("at_commit", None)
        changes = self.pending_changes()
        violations = run_checks(self.checks, self.context("at_commit", None, changes))
        return CommitOutcome(committed=False, violations=violations, changes=changes)

    def commit(self, reviewed: CommitOutcome | None = None) -> CommitOutcome:
        """Commit if the ``at_commit`` checks pass. ``reviewed``: their verdict from :meth:`review`,
        which is then not run again (nothing may have run on the session since)."""
        review = reviewed if reviewed is not None else self.review()
        if self.closed:
            raise SessionClosedError("session is closed")
        if review.violations:
            return review
        self.backend.commit()
        self.closed = True
        return CommitOutcome(committed=True, changes=review.changes)

    def rollback(self) -> None:
        if self.closed:
            raise SessionClosedError("session is closed")
        self.backend.rollback()
        self.closed = True
