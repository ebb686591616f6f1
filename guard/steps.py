"""The steps of one guarded call, in order (:data:`PIPELINE`):

    allow  →  validate  →  before-call checks  →  approval  →  shadow execute with retries
           →  after-call checks  →  keep or undo

Each step takes the session and the call's :class:`CallState` and returns an outcome that ends the
call, or ``None`` to go on (the last step always ends it). A step may fill in the state for the
ones after it (the tool's effect, the approval rule, the forwarded attempt). Each can be run alone
on a session (tests/guard/test_steps.py). Outcomes are built with :meth:`ToolOutcome.of` from the
failure's class; approval holds with :mod:`guard.holds`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from guard.approvals.gate import same_changes
from guard.approvals.models import Approval
from guard.checks import run_checks
from guard.effects import ToolInfo, classify
from guard.errors import NotFound, PolicyViolation, ToolFailure
from guard.holds import approval_refused, held, hold, request, under
from guard.models import AttemptRecord, ChangeSet, EffectClass, ToolCall, ToolOutcome, Verdict, Violation
from guard.policy import ApprovalRule
from guard.retry import Attempt, Reason, RetryDecision

if TYPE_CHECKING:
    from guard.retry import Attempt
    from guard.session import Forwarded, GuardSession

RESERVED_PREFIX = "__reserved__"


@dataclass
class CallState:
    """What the steps learn about one call as it goes through them."""

    call: ToolCall
    approval_id: str | None = None
    """The approval the caller runs the call under (needs a gate)."""
    info: ToolInfo | None = None
    effect: EffectClass = EffectClass.READ
    rule: ApprovalRule | None = None
    """The approval rule the call matched (before it ran)."""
    approved: Approval | None = None
    """The approval it runs under, once the gate said so."""
    forwarded: Forwarded | None = None
    """The last attempt's savepoint, upstream result and change set."""
    retries: int = 0
    attempts: list[AttemptRecord] = field(default_factory=list)
    started: float = 0.0
    """When the call began (``time.perf_counter``), for its ``duration_ms``."""


Step = Callable[["GuardSession", CallState], ToolOutcome | None]


def unknown_tool(call: ToolCall) -> ToolOutcome:
    """The one refusal of a tool name that is not listed (unknown, hidden or reserved)."""
    failure = NotFound(
        f"Unknown tool: {call.tool}",
        tool=call.tool,
        rule="unknown_tool",
        next_step="Call one of the listed tools (tools/list).",
    )
    return ToolOutcome.of(call, EffectClass.READ, Verdict.REFUSED, failure)


def violated(violations: Sequence[Violation], tool: str) -> ToolFailure:
    """The failure an agent is told about when rules were broken: the first, and how many more."""
    first = violations[0]
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return PolicyViolation(f"{first.rule_id}: {first.message}{more}", tool=tool, rule=first.rule_id)


def allow(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """A listed tool the pack allows; its effect is classified here."""
    call = state.call
    info = session.tools.get(call.tool)
    if call.tool.startswith(RESERVED_PREFIX) or info is None:
        return unknown_tool(call)
    if not session.policy.allows(call.tool):
        hidden = PolicyViolation(
            f"The tool {call.tool} is not available in this workflow.",
            tool=call.tool,
            rule="tool_not_allowed",
            next_step="Use one of the tools listed for this session.",
        )
        return ToolOutcome.of(call, EffectClass.READ, Verdict.REFUSED, hidden)
    state.info = info
    state.effect = classify(info, call.arguments, session.policy.effect_of(call.tool))[0]
    return None


def validate(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """Arguments that fit the tool's input schema (never forwarded otherwise)."""
    assert state.info is not None
    call = state.call
    invalid = session.validators.check(call.tool, state.info.input_schema, call.arguments)
    if invalid is None:
        return None
    return ToolOutcome.of(call, state.effect, Verdict.REFUSED, invalid, violations=[])


def before_call(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """The pack's ``before_call`` checks, on the state before the call."""
    broken = run_checks(session.checks, session.context("before_call", state.call, ChangeSet()))
    if not broken:
        return None
    failure = violated(broken, state.call.tool)
    return ToolOutcome.of(state.call, state.effect, Verdict.REFUSED, failure, violations=broken)


def approval(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """A call a person must approve: resolved with the gate (refused, held, or run under its
    approval); on a backend that cannot roll back, held before it is forwarded."""
    call = state.call
    state.rule = session.policy.approval_for(call.tool, state.effect, call.arguments, session.backend.query)
    needs_person = session.needs_person(state.rule is not None, state.effect)
    if state.approval_id is not None or needs_person:
        if session.gate is not None:
            resolution = session.gate.resolve(call, state.approval_id)
            if resolution.action == "refuse":
                return approval_refused(session, call, state.effect, resolution)
            if resolution.action == "hold":
                assert resolution.approval is not None
                return held(call, state.effect, resolution.approval, resolution.approval.preview)
            if resolution.action == "run":
                state.approved = resolution.approval
        elif state.approval_id is not None:
            off = NotFound(
                f"No approval request has the id {state.approval_id!r}: approvals are not enabled here.",
                tool=call.tool,
                rule="approval_not_found",
                next_step="Send the call without an approval id.",
            )
            return ToolOutcome.of(call, state.effect, Verdict.REFUSED, off)
    if state.approved is None and not session.backend.transactional and needs_person:
        # Forwarding is doing on a backend that cannot roll back: hold before it is sent.
        rule = state.rule
        rule_id = rule.id if rule is not None else "irreversible_unrehearsed"
        source = rule.source if rule is not None else None
        return hold(session, call, state.effect, rule_id, source, ChangeSet(), rehearsed=False)
    return None


def execute(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """Forward the call in a savepoint, retried while its failure's class and effect allow; a call
    that still fails is reported with what the agent can do next."""
    call = state.call
    idempotent, max_attempts = retry_terms(session, state)
    keep_applied = state.effect is EffectClass.IRREVERSIBLE and not idempotent
    last, failed = session.retry.run(
        lambda: session.forward(call, keep_applied=keep_applied),
        effect=state.effect,
        idempotent=idempotent,
        max_attempts=max_attempts,
    )
    return executed(session, state, last, failed)


def retry_terms(session: GuardSession, state: CallState) -> tuple[bool, int | None]:
    """Whether the call counts as idempotent, and the pack's attempt limit for it (None: none)."""
    assert state.info is not None
    override = session.policy.retry_for(state.call.tool)
    idempotent = state.info.annotations.get("idempotentHint") is True
    if override is not None and override.idempotent is not None:
        idempotent = override.idempotent
    return idempotent, override.max_attempts if override is not None else None


def executed(
    session: GuardSession, state: CallState, last: Attempt[Forwarded], failed: Sequence[Attempt[Forwarded]]
) -> ToolOutcome | None:
    """After the retry loop: the attempts recorded on the state; a call that still failed is
    reported with what the agent can do next (None: the last attempt succeeded)."""
    call = state.call
    if last.value.lost is not None:
        # Applied, answer lost (GuardSession.forward): kept, never sent again; listed as an attempt.
        unknown = RetryDecision(False, Reason.OUTCOME_UNKNOWN)
        failed = [*failed, Attempt(last.value, last.value.lost, decision=unknown)]
    state.attempts = [session.record(call, a) for a in failed]
    state.retries = sum(1 for a in state.attempts if a.retried)
    state.forwarded = last.value
    if last.failure is None:
        assert last.value.result is not None, "an attempt without a failure has a result"
        return None
    outcome_unknown = (
        state.effect is not EffectClass.READ and not last.rolled_back and not last.failure.safe_to_retry
    )
    result = last.value.result
    outcome = ToolOutcome.of(
        call,
        state.effect,
        Verdict.FAILED,
        last.failure,
        violations=[],
        retries=state.retries,
        applied=None if outcome_unknown else False,
        result=result.text if result is not None else None,
        changes=last.value.changes,
        attempts=state.attempts,
    )
    return under(state.approved, outcome)


def after_call(session: GuardSession, state: CallState) -> ToolOutcome | None:
    """The pack's ``after_call`` checks on the call's change set (and a read that wrote): broken,
    the call is rolled back to its savepoint."""
    broken = after_call_broken(session, state)
    return undo_broken(session, state, broken) if broken else None


def after_call_broken(session: GuardSession, state: CallState) -> list[Violation]:
    """What :func:`after_call` finds broken (talks to the backend only through the checks' queries)."""
    forwarded = state.forwarded
    assert forwarded is not None and forwarded.result is not None
    call, changes = state.call, forwarded.changes
    broken: list[Violation] = []
    if state.effect is EffectClass.READ and changes:
        broken.append(
            Violation(
                rule_id="read_only_wrote",
                message=f"{call.tool} is classified read-only but changed {len(changes)} row(s).",
                hint="The change was rolled back; classify a tool meant to write in the policy pack.",
            )
        )
    return broken + run_checks(session.checks, session.context("after_call", call, changes))


def undo_broken(session: GuardSession, state: CallState, broken: Sequence[Violation]) -> ToolOutcome:
    """A call whose after-call checks broke: rolled back to its savepoint, the violations reported."""
    forwarded = state.forwarded
    assert forwarded is not None and forwarded.result is not None
    call, changes = state.call, forwarded.changes
    session.backend.rollback_to(forwarded.savepoint)
    outcome = ToolOutcome.of(
        call,
        state.effect,
        Verdict.ROLLED_BACK,
        violated(broken, call.tool),
        violations=list(broken),
        retries=state.retries,
        result=forwarded.result.text,
        changes=changes,
        attempts=state.attempts,
    )
    return under(state.approved, outcome)


def keep_or_undo(session: GuardSession, state: CallState) -> ToolOutcome:
    """Keep the call (release its savepoint), unless it was a rehearsal for a reviewer or, run under
    an approval, changed something other than what was approved (then undone and held)."""
    forwarded, approved, call = state.forwarded, state.approved, state.call
    assert forwarded is not None and forwarded.result is not None
    changes, effect = forwarded.changes, state.effect
    retries, attempts = state.retries, state.attempts
    if approved is not None and approved.rehearsed and not same_changes(changes, approved.preview):
        # The world moved since the rehearsal: what would be kept is not what the reviewer saw.
        session.backend.rollback_to(forwarded.savepoint)
        again = request(
            session, call, effect, approved.rule_id, approved.rule_source, changes, rehearsed=True
        )
        differs = (
            f"Run under approval {approved.id}, {call.tool} would change something other than what "
            f"was approved, so it was undone and returns to review as request {again.id}."
        )
        return held(call, effect, again, changes, why=differs, retries=retries, attempts=attempts)
    if approved is None and state.rule is not None:
        # Rehearsal only: the preview is kept on the outcome, the state is not (no lock is held
        # while a person decides; the approved call is executed again for real).
        session.backend.rollback_to(forwarded.savepoint)
        rule = state.rule
        return hold(
            session, call, effect, rule.id, rule.source, changes,
            rehearsed=True, retries=retries, attempts=attempts,
        )  # fmt: skip
    session.backend.release(forwarded.savepoint)
    outcome = ToolOutcome.of(
        call, effect, Verdict.ALLOWED, retries=retries, result=forwarded.result.text, changes=changes,
        attempts=attempts,
    )  # fmt: skip
    return under(approved, outcome)


PIPELINE: tuple[Step, ...] = (allow, validate, before_call, approval, execute, after_call, keep_or_undo)
"""The steps of a call, in order; the last one always returns the outcome."""
