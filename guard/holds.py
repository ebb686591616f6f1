"""Outcomes of calls a person must decide on (guard.approvals): held, queued, refused by the gate, or
run under an approval. Used by the steps of :mod:`guard.steps`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from guard.approvals.gate import USED, Resolution
from guard.approvals.models import Approval, CheckResult
from guard.checks import Phase, PythonCheck, SqlCheck
from guard.errors import ApprovalPending, ApprovalQueued
from guard.models import (
    AttemptRecord,
    ChangeSet,
    EffectClass,
    PolicySource,
    ToolCall,
    ToolOutcome,
    Verdict,
    Violation,
)

if TYPE_CHECKING:
    from guard.session import GuardSession


def passed_checks(session: GuardSession, tool: str, phases: Sequence[Phase]) -> list[CheckResult]:
    """The checks that ran on the call and passed (a held call got this far), for the reviewer."""
    out: list[CheckResult] = []
    for check in session.checks:
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


def under(approval: Approval | None, outcome: ToolOutcome) -> ToolOutcome:
    """``outcome`` of a call run under ``approval`` (consumed), naming it."""
    if approval is not None:
        outcome.approval_id = approval.id
        outcome.approval_state = USED
        outcome.approval_expires_at = approval.expires_at
    return outcome


def held(
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
    queued = ApprovalQueued(message, tool=call.tool, rule=approval.rule_id, next_step=step)
    violation = Violation(rule_id=approval.rule_id, message=message, hint=step, source=approval.rule_source)
    outcome = ToolOutcome.of(
        call,
        effect,
        Verdict.HELD,
        queued,
        violations=[violation],
        changes=preview,
        attempts=list(attempts),
        approval_id=approval.id,
        approval_state=approval.state.value,
        approval_expires_at=approval.expires_at,
    )
    outcome.retries = retries  # the hint's next step is the same whatever the attempts before
    return outcome


def approval_refused(
    session: GuardSession, call: ToolCall, effect: EffectClass, resolution: Resolution
) -> ToolOutcome:
    """Refused by the gate (rejected, expired, used, not matching), naming the approval."""
    failure, approval = resolution.failure, resolution.approval
    assert failure is not None and resolution.rule_id is not None
    violation = Violation(
        rule_id=resolution.rule_id,
        message=resolution.reason or failure.message,
        hint=failure.hint().next_step,
        source=approval.rule_source if approval is not None else None,
    )
    outcome = ToolOutcome.of(call, effect, Verdict.REFUSED, failure, violations=[violation])
    if approval is not None:
        outcome.approval_id = approval.id
        outcome.approval_state = approval.state.value
        outcome.approval_expires_at = approval.expires_at
    return outcome


def request(
    session: GuardSession,
    call: ToolCall,
    effect: EffectClass,
    rule_id: str,
    source: PolicySource | None,
    preview: ChangeSet,
    *,
    rehearsed: bool,
) -> Approval:
    """Queue ``call`` with the gate; the reviewer sees the checks it passed to get this far."""
    assert session.gate is not None
    phases: tuple[Phase, ...] = ("before_call", "after_call") if rehearsed else ("before_call",)
    return session.gate.request(
        call,
        effect=effect,
        rule_id=rule_id,
        rule_source=source,
        preview=preview,
        rehearsed=rehearsed,
        checks=passed_checks(session, call.tool, phases),
    )


def hold(
    session: GuardSession,
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
    if session.gate is not None:
        queued = request(session, call, effect, rule_id, source, preview, rehearsed=rehearsed)
        return held(call, effect, queued, preview, retries=retries, attempts=attempts)
    nothing = "changed" if rehearsed else "sent"
    violation = Violation(
        rule_id=rule_id,
        message=f"{call.tool} needs a human approval before it runs.",
        hint=f"The request was held and nothing was {nothing}; tell the user it awaits approval.",
        source=source,
    )
    pending = ApprovalPending(violation.message, tool=call.tool, rule=rule_id)
    return ToolOutcome.of(
        call,
        effect,
        Verdict.HELD,
        pending,
        violations=[violation],
        retries=retries,
        changes=preview,
        attempts=list(attempts),
    )
