"""The guard's contract: calls, outcomes, row-level change sets, violations, verdicts.

These pydantic models are the audit record of a guarded session; everything else in ``guard`` and
``proxy`` is built on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from guard.errors import ToolFailure


class EffectClass(StrEnum):
    """What a tool call may do to the world, decided before the call runs."""

    READ = "read"
    WRITE = "write"  # reversible: the guard can roll it back
    IRREVERSIBLE = "irreversible"  # money moved, access granted, something sent or deleted


class Verdict(StrEnum):
    """What the guard did with one call."""

    ALLOWED = "allowed"  # ran; its changes (if any) are kept in the shadow transaction
    ROLLED_BACK = "rolled_back"  # ran in a savepoint, violated a rule, was rolled back
    REFUSED = "refused"  # never ran: not allowed, hidden or invalid
    HELD = "held"  # rehearsed and rolled back; waits for a human decision
    FAILED = "failed"  # ran and failed (tool or system error); nothing of it is kept


Op = Literal["insert", "update", "delete"]


class RowChange(BaseModel):
    """One row's side effect. ``before``/``after`` are full row images (None for insert/delete)."""

    model_config = ConfigDict(frozen=True)

    table: str
    key: str
    op: Op
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class ChangeSet(BaseModel):
    """Row-level side effects in the order they happened."""

    changes: list[RowChange] = Field(default_factory=list)

    def __iter__(self) -> Iterator[RowChange]:  # type: ignore[override]
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __bool__(self) -> bool:
        return bool(self.changes)

    @property
    def tables(self) -> set[str]:
        return {c.table for c in self.changes}

    def extend(self, other: Iterable[RowChange]) -> ChangeSet:
        return ChangeSet(changes=[*self.changes, *other])

    def net(self) -> ChangeSet:
        """Collapse successive changes of the same row into one (insert+update = insert, ...).

        A row inserted and then deleted disappears; an update that ends where it began disappears.
        Order follows each row's first change.
        """
        merged: dict[tuple[str, str], RowChange | None] = {}
        for change in self.changes:
            ident = (change.table, change.key)
            if ident not in merged:
                merged[ident] = change
                continue
            first = merged[ident]
            before = first.before if first is not None else None
            existed_before = first is not None and first.op != "insert"
            if first is None:
                # an earlier insert+delete cancelled out; this change starts afresh
                merged[ident] = change
                continue
            if change.op == "delete":
                merged[ident] = (
                    RowChange(table=change.table, key=change.key, op="delete", before=before)
                    if existed_before
                    else None
                )
            elif existed_before:
                merged[ident] = RowChange(
                    table=change.table, key=change.key, op="update", before=before, after=change.after
                )
            else:
                merged[ident] = RowChange(table=change.table, key=change.key, op="insert", after=change.after)
        out = []
        for c in merged.values():
            if c is None or (c.op == "update" and c.before == c.after):
                continue
            out.append(c)
        return ChangeSet(changes=out)

    def by_table(self) -> dict[str, list[RowChange]]:
        grouped: dict[str, list[RowChange]] = {}
        for c in self.changes:
            grouped.setdefault(c.table, []).append(c)
        return grouped


class PolicySource(BaseModel):
    """The policy text a rule enforces: where it is and what it says."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: str
    quote: str | None = None


class Violation(BaseModel):
    """A rule that a call or a commit broke, with what the agent can do about it."""

    rule_id: str
    message: str
    hint: str | None = None
    source: PolicySource | None = None
    rows: list[dict[str, Any]] = Field(default_factory=list)


class FieldProblem(BaseModel):
    """One argument that failed validation: where, what was wrong, what was expected, an example."""

    model_config = ConfigDict(frozen=True)

    field: str
    """Dotted path of the argument (``item.status``, ``lines[0].sku``); empty for the whole call."""
    problem: str
    expected: str
    example: Any = None


class ErrorHint(BaseModel):
    """What an agent is told about a failed call: class, what failed, what to do next. No traceback."""

    error_class: str
    message: str
    next_step: str
    retryable: bool = False
    """True when sending the same call again later may succeed (the guard's own retries are spent)."""
    retry_after_s: float | None = None
    fields: list[FieldProblem] = Field(default_factory=list)


class AttemptRecord(BaseModel):
    """One failed attempt of a call that the guard retried or gave up on."""

    error_class: str
    message: str
    changes: ChangeSet = Field(default_factory=ChangeSet)
    """What the attempt had changed before it failed (the guard then rolled it back, see ``rolled_back``)."""
    rolled_back: bool = False
    retried: bool = False
    reason: str = ""
    """Why the guard retried or stopped (a :class:`guard.retry.Reason` value)."""
    delay_s: float = 0.0


class ToolCall(BaseModel):
    """One call as the agent sent it."""

    id: str = Field(default_factory=lambda: os.urandom(16).hex())
    """32 random hex digits (as many random bits as a UUID4 holds, without building one: issue 18)."""
    session_id: str | None = None
    principal: str | None = None
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolOutcome(BaseModel):
    """What happened to one call: the audit record."""

    call: ToolCall
    effect: EffectClass
    verdict: Verdict
    result: str | None = None
    error_class: str | None = None
    changes: ChangeSet = Field(default_factory=ChangeSet)
    violations: list[Violation] = Field(default_factory=list)
    retries: int = 0
    hint: ErrorHint | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list)
    """The failed attempts, in order (a call that succeeded first time has none)."""
    duration_ms: float = 0.0
    approval_id: str | None = None
    """The approval request the call is bound to: the one it waits for (held), the one it ran under
    (allowed, rolled back, failed) or the one that refused it (guard.approvals)."""
    approval_state: str | None = None
    """That request's state as the guard last saw it (an ``ApprovalState`` value, or ``used``)."""
    approval_expires_at: datetime | None = None
    outcome_unknown: bool = False
    """A failed state-changing call that may have been applied all the same (it timed out after it was
    sent, and nothing undid it): the agent must read the state before calling it again."""

    @classmethod
    def of(
        cls,
        call: ToolCall,
        effect: EffectClass,
        verdict: Verdict,
        failure: ToolFailure | None = None,
        *,
        violations: Iterable[Violation] | None = None,
        retries: int = 0,
        applied: bool | None = False,
        **fields: Any,
    ) -> ToolOutcome:
        """The one way an outcome is built. With ``failure``, its error class and hint come from the
        failure's class (retryable included: a class property, guard.errors); ``violations`` default
        to the one rule the failure names (none when it names none), with its next step.
        ``applied``: False = nothing of the call was kept, None = its outcome is unknown."""
        if failure is None:
            return cls(
                call=call, effect=effect, verdict=verdict, violations=list(violations or ()),
                retries=retries, **fields,
            )  # fmt: skip
        hint = failure.hint(retries=retries, applied=applied)
        if violations is None:
            violations = (
                [Violation(rule_id=failure.rule, message=failure.message, hint=hint.next_step)]
                if failure.rule is not None
                else []
            )
        return cls(
            call=call,
            effect=effect,
            verdict=verdict,
            error_class=failure.error_class.value,
            hint=hint,
            violations=list(violations),
            retries=retries,
            outcome_unknown=applied is None,
            **fields,
        )


class CommitOutcome(BaseModel):
    """The result of asking to commit a session."""

    committed: bool
    violations: list[Violation] = Field(default_factory=list)
    changes: ChangeSet = Field(default_factory=ChangeSet)
    applied: list[ToolCall] = Field(default_factory=list)
    """Calls that were already applied when they ran (upstreams that cannot transact): the commit did
    not make them durable, they were so from the start; committed, they are no longer undone by a
    rollback. Their ids are the ones the agent saw."""
    upstreams: dict[str, str] | None = None
    """For a commit that did not finish on every upstream (or one answered from its commit record
    after a restart): each upstream's ``applied``, ``unknown`` or ``not_applied``; else None."""
