"""The approval contract: a held call bound to its exact arguments, and the store that keeps it.

An :class:`Approval` is created when a call that needs a person (an irreversible effect, or a policy
approval rule) has been rehearsed in a savepoint and rolled back. It records what the reviewer must see
(the rehearsed :class:`~guard.models.ChangeSet`, the check results, the rule and its policy text) and
what the call must match to run (principal, session, tool, arguments digest, policy version).

States::

    pending ──decide(approve)──▶ approved ──consume()──▶ (used_at set: single use)
       │  ├──decide(reject)───▶ rejected
       │  ├──expiry passes────▶ expired      (its own outcome: the call was NOT done)
       │  └──cancel()─────────▶ cancelled    (the session ended before a decision)

Every transition is atomic in the store (compare-and-set on the state), so across replicas an
approval is decided once and consumed once. An approved approval must be consumed before
``expires_at`` too; after that, consume() refuses it and the call is not done.

Errors (all :class:`ApprovalStoreError`)::

    ApprovalStoreError
    ├── ApprovalNotFound     no approval has this id (a forged or mistyped id)
    ├── ApprovalConflict     the transition is not allowed from the current state
    │                        (already decided, expired, cancelled, already used); ``.approval`` is
    │                        the current record
    └── ApprovalStoreUnavailable
                             the store's server or file cannot be reached (nothing was changed,
                             or the outcome is unknown if it failed mid-commit); worth retrying later
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from guard.models import ChangeSet, EffectClass, PolicySource


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


FINAL_STATES = frozenset(
    {ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.EXPIRED, ApprovalState.CANCELLED}
)


def new_approval_id() -> str:
    """Unguessable: an id is all a reviewer link carries, so it must not be enumerable."""
    return "apr_" + secrets.token_urlsafe(18)


def arguments_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """sha256 over the tool name and the canonical JSON of the arguments (key order does not matter)."""
    canonical = json.dumps(
        {"tool": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":"), default=str
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def utcnow() -> datetime:
    return datetime.now(UTC)


class CheckResult(BaseModel):
    """One check the rehearsal ran, as the reviewer sees it."""

    model_config = ConfigDict(extra="forbid")

    rule_id: str
    passed: bool
    message: str | None = None
    source: PolicySource | None = None


class ApprovalRequest(BaseModel):
    """What the guard knows when it holds a call; the store turns it into a pending :class:`Approval`."""

    model_config = ConfigDict(extra="forbid")

    principal: str | None
    session_id: str
    upstream: str | None = None
    tool: str
    """The tool name the agent called (as exposed by the proxy)."""
    arguments: dict[str, Any]
    effect: EffectClass
    rule_id: str
    """The approval rule that matched, or ``irreversible`` for the effect class alone."""
    rule_source: PolicySource | None = None
    preview: ChangeSet = Field(default_factory=ChangeSet)
    """The rehearsed change set; empty when the backend cannot rehearse (journal)."""
    rehearsed: bool = True
    checks: list[CheckResult] = Field(default_factory=list)
    policy_version: str
    """A digest of the policy pack the call was checked against; a changed pack invalidates the approval."""
    expires_at: datetime


class Approval(ApprovalRequest):
    id: str = Field(default_factory=new_approval_id)
    arguments_digest: str
    state: ApprovalState = ApprovalState.PENDING
    created_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    reason: str | None = None
    """The reviewer's reason (required to reject, optional to approve), or why it was cancelled."""
    used_at: datetime | None = None
    used_by: str | None = None
    """Which proxy replica executed it (single use)."""

    @classmethod
    def from_request(cls, request: ApprovalRequest, *, now: datetime) -> Approval:
        return cls(
            **request.model_dump(),
            arguments_digest=arguments_digest(request.tool, request.arguments),
            created_at=now,
        )


class ApprovalEvent(BaseModel):
    """One audited transition: who did what to which approval, when, why, bound to which call digest."""

    model_config = ConfigDict(extra="forbid")

    approval_id: str
    action: Literal["requested", "approved", "rejected", "expired", "cancelled", "used"]
    actor: str
    """A reviewer's name, a principal, or ``shadowguard`` for expiry/cancellation by the proxy."""
    at: datetime
    reason: str | None = None
    arguments_digest: str


class ApprovalQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    states: list[ApprovalState] | None = None
    session_id: str | None = None
    principal: str | None = None
    tool: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class ApprovalStoreError(Exception):
    """Base of the store's errors (see the module docstring)."""


class ApprovalNotFound(ApprovalStoreError):
    def __init__(self, approval_id: str) -> None:
        super().__init__(f"no approval with id {approval_id!r}")
        self.approval_id = approval_id


class ApprovalConflict(ApprovalStoreError):
    def __init__(self, message: str, approval: Approval) -> None:
        super().__init__(message)
        self.approval = approval


class ApprovalStoreUnavailable(ApprovalStoreError):
    """The store cannot be reached; the message names the store's URL (never its password)."""


class ApprovalStore(Protocol):
    """Durable approvals, safe across replicas (every transition is an atomic compare-and-set).

    Reads report expiry lazily: a pending approval past ``expires_at`` is moved to ``expired`` (and
    the event recorded) by whichever call sees it first. ``now`` comes from the store's clock.
    """

    def create(self, request: ApprovalRequest) -> Approval: ...

    def get(self, approval_id: str) -> Approval:
        """Raises :class:`ApprovalNotFound`."""
        ...

    def list(self, query: ApprovalQuery) -> Sequence[Approval]:
        """Newest first."""
        ...

    def decide(self, approval_id: str, *, approve: bool, reviewer: str, reason: str | None) -> Approval:
        """pending → approved | rejected; :class:`ApprovalConflict` unless pending and not expired."""
        ...

    def consume(self, approval_id: str, *, consumer: str) -> Approval:
        """Mark an approved approval used, once. Raises :class:`ApprovalConflict` if not approved,
        already used, or past ``expires_at``."""
        ...

    def cancel(self, approval_id: str, *, reason: str) -> Approval:
        """pending → cancelled (the session ended). Raises :class:`ApprovalConflict` unless pending."""
        ...

    def expire_due(self) -> Sequence[Approval]:
        """Move every pending approval past its expiry to ``expired``; returns those moved."""
        ...

    def history(self, approval_id: str) -> Sequence[ApprovalEvent]:
        """The audited transitions of one approval, oldest first. Raises :class:`ApprovalNotFound`."""
        ...

    def close(self) -> None: ...
