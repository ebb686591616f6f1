"""GuardSession: one agent session's guarded pipeline over a shadow transaction.

    call  →  allowed?  →  classify  →  before_call checks  →  [approval rule? rehearse, roll back, hold]
          →  savepoint  →  execute  →  change set  →  after_call checks  →  keep (release) | roll back
    commit →  at_commit checks on the net change set  →  commit | refuse with violations

On a backend that cannot roll back (``transactional = False``, e.g. JournalBackend) there is no
rehearsal: an irreversible or approval-matched call is held before it is forwarded.

The session is transport-independent: the benchmark drives it in-process, the proxy drives it from
MCP requests. Nothing here reads a benchmark answer key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guard.backend import Backend
from guard.checks import Check, CheckContext, Phase, run_checks
from guard.effects import ToolInfo, classify
from guard.models import ChangeSet, CommitOutcome, EffectClass, ToolCall, ToolOutcome, Verdict, Violation
from guard.policy import EMPTY, PolicyPack

RESERVED_PREFIX = "__reserved__"


@dataclass(frozen=True)
class ToolResult:
    """What an upstream returned for one call."""

    text: str
    is_error: bool = False


Executor = Callable[[str, Mapping[str, Any]], ToolResult]


class SessionClosedError(RuntimeError):
    """The session was committed or rolled back; open a new one."""


class GuardSession:
    """The per-session pipeline. ``extra_checks`` are added to the pack's (e.g. the oracle judge)."""

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
    ) -> None:
        self.backend = backend
        self.execute = execute
        self.tools = tools
        self.policy = policy
        self.session_id = session_id
        self.principal = principal
        self.checks: list[Check] = [*policy.checks, *extra_checks]
        self.outcomes: list[ToolOutcome] = []
        self.closed = False
        backend.begin()

    # -- calls ----------------------------------------------------------------------------------
    def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> ToolOutcome:
        if self.closed:
            raise SessionClosedError("session is closed")
        started = time.perf_counter()
        call = ToolCall(
            session_id=self.session_id, principal=self.principal, tool=tool, arguments=dict(arguments or {})
        )
        outcome = self._call(call)
        outcome.duration_ms = (time.perf_counter() - started) * 1000
        self.outcomes.append(outcome)
        return outcome

    def _refuse(self, call: ToolCall, effect: EffectClass, rule: str, message: str, hint: str) -> ToolOutcome:
        violation = Violation(rule_id=rule, message=message, hint=hint)
        return ToolOutcome(call=call, effect=effect, verdict=Verdict.REFUSED, violations=[violation])

    def _context(self, phase: Phase, call: ToolCall | None, changes: ChangeSet) -> CheckContext:
        return CheckContext(phase=phase, query=self.backend.query, changes=changes, call=call)

    def _call(self, call: ToolCall) -> ToolOutcome:
        info = self.tools.get(call.tool)
        if call.tool.startswith(RESERVED_PREFIX) or info is None:
            return self._refuse(
                call,
                EffectClass.READ,
                "unknown_tool",
                f"Unknown tool: {call.tool}",
                "Call one of the listed tools.",
            )
        if not self.policy.allows(call.tool):
            return self._refuse(
                call,
                EffectClass.READ,
                "tool_not_allowed",
                f"The tool {call.tool} is not available in this workflow.",
                "Use one of the tools listed for this session.",
            )
        effect, _why = classify(info, call.arguments, self.policy.effect_of(call.tool))
        before = run_checks(self.checks, self._context("before_call", call, ChangeSet()))
        if before:
            return ToolOutcome(call=call, effect=effect, verdict=Verdict.REFUSED, violations=before)
        if not self.backend.transactional:
            unrehearsed = self._hold_unrehearsed(call, effect)
            if unrehearsed is not None:
                return unrehearsed

        savepoint = self.backend.savepoint()
        result = self.execute(call.tool, call.arguments)
        changes = self.backend.changes(savepoint)
        if result.is_error:
            self.backend.rollback_to(savepoint)
            return ToolOutcome(
                call=call, effect=effect, verdict=Verdict.FAILED, result=result.text, changes=changes
            )
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
            return ToolOutcome(
                call=call,
                effect=effect,
                verdict=Verdict.ROLLED_BACK,
                result=result.text,
                changes=changes,
                violations=violations,
            )
        approval = self.policy.approval_for(call.tool, effect, call.arguments)
        if approval is not None:
            # Rehearsal only: the preview is kept on the outcome, the state is not (no lock is held
            # while a person decides; the approved call is executed again for real).
            self.backend.rollback_to(savepoint)
            held = Violation(
                rule_id=approval.id,
                message=f"{call.tool} needs a human approval before it runs.",
                hint="The request was held and nothing was changed; tell the user it awaits approval.",
                source=approval.source,
            )
            return ToolOutcome(
                call=call,
                effect=effect,
                verdict=Verdict.HELD,
                result=None,
                changes=changes,
                violations=[held],
            )
        self.backend.release(savepoint)
        return ToolOutcome(
            call=call, effect=effect, verdict=Verdict.ALLOWED, result=result.text, changes=changes
        )

    def _hold_unrehearsed(self, call: ToolCall, effect: EffectClass) -> ToolOutcome | None:
        """On a backend that cannot roll back, forwarding is doing: hold what needs a person first.

        An irreversible call, or one an approval rule matches, is held before it is forwarded;
        there is no rehearsal, so the outcome carries no change preview.
        """
        approval = self.policy.approval_for(call.tool, effect, call.arguments)
        if approval is None and effect is not EffectClass.IRREVERSIBLE:
            return None
        held = Violation(
            rule_id=approval.id if approval is not None else "irreversible_unrehearsed",
            message=f"{call.tool} needs a human approval before it runs.",
            hint="The request was held and nothing was sent; tell the user it awaits approval.",
            source=approval.source if approval is not None else None,
        )
        return ToolOutcome(call=call, effect=effect, verdict=Verdict.HELD, violations=[held])

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
