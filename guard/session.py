"""GuardSession: one agent session's guarded pipeline over a shadow transaction.

    call  →  allowed?  →  arguments valid?  →  classify  →  before_call checks
          →  [approval rule? rehearse, roll back, hold]
          →  savepoint → execute → change set → failed? roll back, classify, retry if safe (guard.retry)
          →  after_call checks  →  keep (release) | roll back
    commit →  at_commit checks on the net change set  →  commit | refuse with violations

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
from dataclasses import dataclass
from typing import Any

from guard.approvals.gate import USED, ApprovalGate, Resolution, same_changes
from guard.approvals.models import Approval, ApprovalStoreError, CheckResult
from guard.backend import Backend, BackendError
from guard.checks import Check, CheckContext, Phase, PythonCheck, SqlCheck, run_checks
from guard.classify import Classifier
from guard.effects import ToolInfo, classify
from guard.errors import ApprovalPending, ErrorClass, NotFound, PolicyViolation, ToolFailure
from guard.metrics import CallObserver
from guard.models import (
    AttemptRecord,
    ChangeSet,
    CommitOutcome,
    EffectClass,
    ErrorHint,
    PolicySource,
    ToolCall,
    ToolOutcome,
    Verdict,
    Violation,
)
from guard.policy import EMPTY, PolicyPack
from guard.retry import Attempt, RetryPolicy
from guard.validation import ToolValidators

logger = logging.getLogger(__name__)

RESERVED_PREFIX = "__reserved__"
FORWARDING: ContextVar[ToolCall | None] = ContextVar("shadowguard_forwarding", default=None)
"""The call a GuardSession is forwarding right now (in the thread that forwards it), so that a backend
that records forwarded calls (guard.journal) records them under the id the agent is told."""


@dataclass(frozen=True)
class ToolResult:
    """What an upstream returned for one call."""

    text: str
    is_error: bool = False


Executor = Callable[[str, Mapping[str, Any]], ToolResult]


@dataclass(frozen=True)
class _Forwarded:
    savepoint: str
    result: ToolResult | None
    changes: ChangeSet


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
        backend.begin()

    # -- calls ----------------------------------------------------------------------------------
    def call(
        self, tool: str, arguments: Mapping[str, Any] | None = None, *, approval_id: str | None = None
    ) -> ToolOutcome:
        """Guard one call. ``approval_id`` names the approval the caller runs it under (needs a gate)."""
        if self.closed:
            raise SessionClosedError("session is closed")
        started = time.perf_counter()
        call = ToolCall(
            session_id=self.session_id, principal=self.principal, tool=tool, arguments=dict(arguments or {})
        )
        try:
            outcome = self._call(call, approval_id)
        except ApprovalStoreError as exc:
            # Raised before anything ran or after it was undone: no savepoint is open here.
            outcome = self._queue_unavailable(call, exc)
        self._settle(outcome)
        outcome.duration_ms = (time.perf_counter() - started) * 1000
        self.outcomes.append(outcome)
        if self.observer is not None:
            self.observer.outcome(outcome)
        return outcome

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
        message = f"The approval queue is unavailable ({exc}); {call.tool} was not done."
        step = "Nothing changed. Try the call again later."
        return ToolOutcome(
            call=call,
            effect=effect,
            verdict=Verdict.FAILED,
            error_class=ErrorClass.TRANSIENT.value,
            violations=[Violation(rule_id="approvals_unavailable", message=message, hint=step)],
            hint=ErrorHint(
                error_class=ErrorClass.TRANSIENT.value, message=message, next_step=step, retryable=True
            ),
        )

    def _refuse(
        self,
        call: ToolCall,
        failure: ToolFailure,
        *,
        effect: EffectClass = EffectClass.READ,
        violations: Sequence[Violation] | None = None,
    ) -> ToolOutcome:
        """Refused before anything ran; the agent is told ``failure``. ``violations`` default to the one
        rule ``failure`` names, with its next step."""
        hint = failure.hint()
        if violations is None:
            assert failure.rule is not None
            violations = [Violation(rule_id=failure.rule, message=failure.message, hint=hint.next_step)]
        return ToolOutcome(
            call=call,
            effect=effect,
            verdict=Verdict.REFUSED,
            violations=list(violations),
            error_class=failure.error_class.value,
            hint=hint,
        )

    @staticmethod
    def _violated(violations: Sequence[Violation], tool: str) -> ToolFailure:
        first = violations[0]
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        return PolicyViolation(f"{first.rule_id}: {first.message}{more}", tool=tool, rule=first.rule_id)

    def _context(self, phase: Phase, call: ToolCall | None, changes: ChangeSet) -> CheckContext:
        return CheckContext(phase=phase, query=self.backend.query, changes=changes, call=call)

    def _call(self, call: ToolCall, approval_id: str | None) -> ToolOutcome:
        info = self.tools.get(call.tool)
        if call.tool.startswith(RESERVED_PREFIX) or info is None:
            unknown = NotFound(
                f"Unknown tool: {call.tool}",
                tool=call.tool,
                rule="unknown_tool",
                next_step="Call one of the listed tools.",
            )
            return self._refuse(call, unknown)
        if not self.policy.allows(call.tool):
            hidden = PolicyViolation(
                f"The tool {call.tool} is not available in this workflow.",
                tool=call.tool,
                rule="tool_not_allowed",
                next_step="Use one of the tools listed for this session.",
            )
            return self._refuse(call, hidden)
        effect, _why = classify(info, call.arguments, self.policy.effect_of(call.tool))
        invalid = self.validators.check(call.tool, info.input_schema, call.arguments)
        if invalid is not None:
            return self._refuse(call, invalid, effect=effect, violations=[])
        before = run_checks(self.checks, self._context("before_call", call, ChangeSet()))
        if before:
            return self._refuse(call, self._violated(before, call.tool), effect=effect, violations=before)
        rule = self.policy.approval_for(call.tool, effect, call.arguments, self.backend.query)
        approved: Approval | None = None
        if approval_id is not None or self._needs_person(rule is not None, effect):
            if self.gate is not None:
                resolution = self.gate.resolve(call, approval_id)
                if resolution.action == "refuse":
                    return self._approval_refused(call, effect, resolution)
                if resolution.action == "hold":
                    assert resolution.approval is not None
                    return self._held(call, effect, resolution.approval, resolution.approval.preview)
                if resolution.action == "run":
                    approved = resolution.approval
            elif approval_id is not None:
                off = NotFound(
                    f"No approval request has the id {approval_id!r}: approvals are not enabled here.",
                    tool=call.tool,
                    rule="approval_not_found",
                    next_step="Send the call without an approval id.",
                )
                return self._refuse(call, off)
        if (
            approved is None
            and not self.backend.transactional
            and self._needs_person(rule is not None, effect)
        ):
            # Forwarding is doing on a backend that cannot roll back: hold before it is sent.
            return self._hold(
                call,
                effect,
                rule.id if rule is not None else "irreversible_unrehearsed",
                rule.source if rule is not None else None,
                ChangeSet(),
                rehearsed=False,
            )

        override = self.policy.retry_for(call.tool)
        idempotent = info.annotations.get("idempotentHint") is True
        if override is not None and override.idempotent is not None:
            idempotent = override.idempotent
        last, failed = self.retry.run(
            lambda: self._forward(call),
            effect=effect,
            idempotent=idempotent,
            max_attempts=override.max_attempts if override is not None else None,
        )
        attempts = [self._record(call, a) for a in failed]
        retries = sum(1 for a in attempts if a.retried)
        result, changes, savepoint = last.value.result, last.value.changes, last.value.savepoint
        failure = last.failure
        if failure is not None:
            applied = None if self._outcome_unknown(last, effect) else False
            return self._under(
                approved,
                ToolOutcome(
                    call=call,
                    effect=effect,
                    verdict=Verdict.FAILED,
                    result=result.text if result is not None else None,
                    changes=changes,
                    error_class=failure.error_class.value,
                    hint=failure.hint(retries=retries, applied=applied),
                    retries=retries,
                    attempts=attempts,
                    outcome_unknown=applied is None,
                ),
            )
        assert result is not None, "an attempt without a failure has a result"
        violations: list[Violation] = []
        if effect is EffectClass.READ and changes:
            violations.append(
                Violation(
                    rule_id="read_only_wrote",
                    message=f"{call.tool} is classified read-only but changed {len(changes)} row(s).",
                    hint="The change was rolled back; classify a tool meant to write in the policy pack.",
                )
            )
        violations += run_checks(self.checks, self._context("after_call", call, changes))
        if violations:
            self.backend.rollback_to(savepoint)
            return self._under(
                approved,
                ToolOutcome(
                    call=call,
                    effect=effect,
                    verdict=Verdict.ROLLED_BACK,
                    result=result.text,
                    changes=changes,
                    violations=violations,
                    error_class=ErrorClass.POLICY_VIOLATION.value,
                    hint=self._violated(violations, call.tool).hint(),
                    retries=retries,
                    attempts=attempts,
                ),
            )
        if approved is not None and approved.rehearsed and not same_changes(changes, approved.preview):
            # The world moved since the rehearsal: what would be kept is not what the reviewer saw.
            self.backend.rollback_to(savepoint)
            again = self._request(
                call, effect, approved.rule_id, approved.rule_source, changes, rehearsed=True
            )
            differs = (
                f"Run under approval {approved.id}, {call.tool} would change something other than what "
                f"was approved, so it was undone and returns to review as request {again.id}."
            )
            return self._held(call, effect, again, changes, retries=retries, attempts=attempts, why=differs)
        if approved is None and rule is not None:
            # Rehearsal only: the preview is kept on the outcome, the state is not (no lock is held
            # while a person decides; the approved call is executed again for real).
            self.backend.rollback_to(savepoint)
            return self._hold(
                call,
                effect,
                rule.id,
                rule.source,
                changes,
                rehearsed=True,
                retries=retries,
                attempts=attempts,
            )
        self.backend.release(savepoint)
        return self._under(
            approved,
            ToolOutcome(
                call=call,
                effect=effect,
                verdict=Verdict.ALLOWED,
                result=result.text,
                changes=changes,
                retries=retries,
                attempts=attempts,
            ),
        )

    # -- approvals ------------------------------------------------------------------------------
    def _needs_person(self, rule_matched: bool, effect: EffectClass) -> bool:
        return rule_matched or (not self.backend.transactional and effect is EffectClass.IRREVERSIBLE)

    def _passed_checks(self, tool: str, phases: Sequence[Phase]) -> list[CheckResult]:
        """The checks that ran on the call and passed (a held call got this far), for the reviewer."""
        out: list[CheckResult] = []
        for check in self.checks:
            if check.phase not in phases or not check.applies_to(tool):
                continue
            text = check.text if isinstance(check, SqlCheck | PythonCheck) else None
            out.append(
                CheckResult(
                    rule_id=check.id,
                    passed=True,
                    message=text.message if text is not None else None,
                    source=text.source if text is not None else None,
                )
            )
        return out

    @staticmethod
    def _under(approval: Approval | None, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome`` of a call run under ``approval`` (consumed), naming it."""
        if approval is not None:
            outcome.approval_id = approval.id
            outcome.approval_state = USED
            outcome.approval_expires_at = approval.expires_at
        return outcome

    def _held(
        self,
        call: ToolCall,
        effect: EffectClass,
        approval: Approval,
        preview: ChangeSet,
        *,
        retries: int = 0,
        attempts: Sequence[AttemptRecord] = (),
        why: str | None = None,
    ) -> ToolOutcome:
        """Held under a pending approval: the request id, its expiry, and what the agent does next."""
        expires = approval.expires_at.isoformat()
        message = f"{call.tool} needs a human approval before it runs: request {approval.id} is pending."
        if why is not None:
            message = f"{why} {message}"
        step = (
            f"Nothing was done. A reviewer must approve request {approval.id} before it expires at "
            f"{expires}. Wait, then send exactly the same call again (the same arguments): it runs once "
            "approved. Do not change the arguments: a changed call needs a new approval."
        )
        violation = Violation(
            rule_id=approval.rule_id, message=message, hint=step, source=approval.rule_source
        )
        return ToolOutcome(
            call=call,
            effect=effect,
            verdict=Verdict.HELD,
            changes=preview,
            violations=[violation],
            error_class=ErrorClass.APPROVAL_PENDING.value,
            hint=ErrorHint(
                error_class=ErrorClass.APPROVAL_PENDING.value,
                message=message,
                next_step=step,
                retryable=True,
            ),
            retries=retries,
            attempts=list(attempts),
            approval_id=approval.id,
            approval_state=approval.state.value,
            approval_expires_at=approval.expires_at,
        )

    def _approval_refused(self, call: ToolCall, effect: EffectClass, resolution: Resolution) -> ToolOutcome:
        failure, approval = resolution.failure, resolution.approval
        assert failure is not None and resolution.rule_id is not None
        violation = Violation(
            rule_id=resolution.rule_id,
            message=resolution.reason or failure.message,
            hint=failure.hint().next_step,
            source=approval.rule_source if approval is not None else None,
        )
        outcome = self._refuse(call, failure, effect=effect, violations=[violation])
        if approval is not None:
            outcome.approval_id = approval.id
            outcome.approval_state = approval.state.value
            outcome.approval_expires_at = approval.expires_at
        return outcome

    def _forward(self, call: ToolCall) -> Attempt[_Forwarded]:
        """One attempt in its own savepoint; a failed attempt is rolled back to it before it returns.

        What the executor raises is classified (a transport error is a failure like any other),
        except the backend's own errors, which propagate after the savepoint is rolled back.
        """
        savepoint = self.backend.savepoint()
        self._dirty = True
        result: ToolResult | None = None
        failure: ToolFailure | None
        try:
            token = FORWARDING.set(call)
            try:
                result = self.execute(call.tool, call.arguments)
            except BackendError:
                raise
            except Exception as exc:
                failure = self.classifier.exception(call.tool, exc)
                if not failure.classified:
                    logger.warning("unclassified failure of %s", call.tool, exc_info=exc)
            else:
                failure = self.classifier.result(call.tool, result.text, result.is_error)
            finally:
                FORWARDING.reset(token)
            changes = self.backend.changes(savepoint)
        except BaseException:
            # The upstream may have written before it failed; its outcome is unknown, so undo it.
            self.backend.rollback_to(savepoint)
            raise
        if failure is not None:
            if failure.restart_transaction and not self.kept and self.backend.transactional:
                # The transaction's read snapshot may predate another writer's commit: SQLite
                # then refuses it the write lock for good, so the retry needs a new one (ending
                # the transaction undoes the attempt too).
                self._restart()
            else:
                self.backend.rollback_to(savepoint)
        return Attempt(
            _Forwarded(savepoint, result, changes),
            failure=failure,
            rolled_back=failure is not None and self.backend.transactional,
        )

    @staticmethod
    def _outcome_unknown(attempt: Attempt[_Forwarded], effect: EffectClass) -> bool:
        """A state-changing call whose failure does not prove it did nothing, and nothing undid it."""
        assert attempt.failure is not None
        return (
            effect is not EffectClass.READ and not attempt.rolled_back and not attempt.failure.safe_to_retry
        )

    def _record(self, call: ToolCall, attempt: Attempt[_Forwarded]) -> AttemptRecord:
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

    def _request(
        self,
        call: ToolCall,
        effect: EffectClass,
        rule_id: str,
        source: PolicySource | None,
        preview: ChangeSet,
        *,
        rehearsed: bool,
    ) -> Approval:
        """Queue ``call`` with the gate; the reviewer sees the checks it passed to get this far."""
        assert self.gate is not None
        phases: tuple[Phase, ...] = ("before_call", "after_call") if rehearsed else ("before_call",)
        return self.gate.request(
            call,
            effect=effect,
            rule_id=rule_id,
            rule_source=source,
            preview=preview,
            rehearsed=rehearsed,
            checks=self._passed_checks(call.tool, phases),
        )

    def _hold(
        self,
        call: ToolCall,
        effect: EffectClass,
        rule_id: str,
        source: PolicySource | None,
        preview: ChangeSet,
        *,
        rehearsed: bool,
        retries: int = 0,
        attempts: Sequence[AttemptRecord] = (),
    ) -> ToolOutcome:
        """Hold a call for a person: queued with the gate, or (no gate) held with nothing queued.

        A rehearsed call ran and was rolled back (nothing changed); an unrehearsed one was never sent.
        """
        if self.gate is not None:
            request = self._request(call, effect, rule_id, source, preview, rehearsed=rehearsed)
            return self._held(call, effect, request, preview, retries=retries, attempts=attempts)
        nothing = "changed" if rehearsed else "sent"
        held = Violation(
            rule_id=rule_id,
            message=f"{call.tool} needs a human approval before it runs.",
            hint=f"The request was held and nothing was {nothing}; tell the user it awaits approval.",
            source=source,
        )
        return ToolOutcome(
            call=call,
            effect=effect,
            verdict=Verdict.HELD,
            changes=preview,
            violations=[held],
            error_class=ErrorClass.APPROVAL_PENDING.value,
            hint=ApprovalPending(held.message, tool=call.tool, rule=rule_id).hint(),
            retries=retries,
            attempts=list(attempts),
        )

    # -- commit / rollback ----------------------------------------------------------------------
    def pending_changes(self) -> ChangeSet:
        """The net change set of the session so far."""
        return self.backend.changes().net()

    def commit(self) -> CommitOutcome:
        if self.closed:
            raise SessionClosedError("session is closed")
        changes = self.pending_changes()
        violations = run_checks(self.checks, self._context("at_commit", None, changes))
        if violations:
            return CommitOutcome(committed=False, violations=violations, changes=changes)
        self.backend.commit()
        self.closed = True
        return CommitOutcome(committed=True, changes=changes)

    def rollback(self) -> None:
        if self.closed:
            raise SessionClosedError("session is closed")
        self.backend.rollback()
        self.closed = True
