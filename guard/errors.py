"""Tool-error classes: what went wrong, whether the guard may send the call again, what the agent is told.

Modelled on HTTPX's ``_exceptions.py``: the tree below is the documentation, and retry behaviour is a
property of the class, never an ``if`` at a call site. :mod:`guard.classifier` maps what an upstream
returned or raised to one of these; :mod:`guard.retry` decides from the class properties (and the
call's effect) whether to send the call again; everything not retried becomes an :class:`ErrorHint`.

    ToolFailure                            retryable  safe_to_retry
    ├── TransientError                     yes        no    the upstream misbehaved; it may pass
    │   ├── UpstreamTimeout                yes        no    sent, no answer in time
    │   ├── ConnectionDropped              yes        no    the connection broke after sending
    │   ├── ConnectFailed                  yes        yes   never sent: refused, DNS, connect timeout
    │   ├── LockContention                 yes        no    another transaction holds a lock; waited
    │   └── ServerError                    yes        no    5xx / JSON-RPC internal error
    │       └── ServiceUnavailable         yes        no    503 (its Retry-After is honoured)
    ├── RateLimited                        yes        yes   429: refused before anything was done
    ├── InvalidArguments                   no         yes   caught before forwarding, or refused
    ├── NotFound                           no         yes
    ├── PreconditionFailed                 no         yes   the record is not in a state that allows it
    │   └── Conflict                       no         yes   it already exists / was already done
    ├── PermissionDenied                   no         yes
    ├── PolicyViolation                    no         yes   a rule failed; the guard rolled it back
    ├── ApprovalError                      no         yes   the call waits for / was refused by a person
    │   ├── ApprovalPending
    │   │   └── ApprovalQueued             yes        yes   queued for a reviewer; runs once approved
    │   ├── ApprovalRejected
    │   └── ApprovalExpired
    └── InternalError                      no         no    anything the guard does not recognise

``retryable``: the same call, sent again unchanged, may succeed, so the guard may retry it itself.
``safe_to_retry``: the failure itself proves the call left no effect upstream. A retryable failure
that is not safe (timeout after sending, dropped connection, 5xx) leaves the outcome of a
state-changing call unknown; :func:`guard.retry.decide` then retries only a read, an idempotent
call, or a write that ran in a savepoint the guard rolled back (docs/errors.md).

A failure is a value (the classifier returns it; it is raised only where a caller wants an
exception). Its :meth:`ToolFailure.hint` is what the agent sees: class, what failed, what to do
next, never a stack trace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, ClassVar

from guard.models import ErrorHint, FieldProblem

MAX_MESSAGE = 500


class ErrorClass(StrEnum):
    """The error classes (docs/errors.md); the value is what
    :attr:`guard.models.ToolOutcome.error_class` holds."""

    TRANSIENT = "transient"
    RATE_LIMITED = "rate_limited"
    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_FOUND = "not_found"
    PRECONDITION_FAILED = "precondition_failed"
    CONFLICT = "conflict"
    PERMISSION_DENIED = "permission_denied"
    POLICY_VIOLATION = "policy_violation"
    APPROVAL_PENDING = "approval_pending"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_EXPIRED = "approval_expired"
    INTERNAL = "internal"


_TRACEBACK = re.compile(r"Traceback \(most recent call last\):.*?(?=^\S)", re.S | re.M)
_SPACE = re.compile(r"\s+")


def clean_message(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line an agent can read: tracebacks cut to their last line, whitespace collapsed, bounded."""
    if "Traceback (most recent call last)" in text:
        lines = [line for line in _TRACEBACK.sub("", text).splitlines() if line.strip()]
        text = lines[-1] if lines else "upstream traceback"
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Hint(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class ToolFailure(Exception):
    """Base class: a call that did not succeed, with how it was recognised.

    ``rule`` names the classifier rule that matched (``None``: nothing matched and the failure is
    :class:`InternalError` by default, i.e. *unclassified*); ``source`` says where it came from
    (``validation``, ``result``, ``exception``, ``status``, ``jsonrpc``, ``guard``).
    """

    error_class: ClassVar[ErrorClass] = ErrorClass.INTERNAL
    retryable: ClassVar[bool] = False
    safe_to_retry: ClassVar[bool] = False
    restart_transaction: ClassVar[bool] = False
    """A retry needs a new shadow transaction (when the session has kept nothing yet)."""
    next_step: ClassVar[str] = (
        "The call failed for a reason the guard does not recognise. It was not retried. "
        "Tell the user what failed rather than guessing a workaround."
    )

    def __init__(
        self,
        message: str,
        *,
        tool: str | None = None,
        rule: str | None = None,
        source: str = "guard",
        retry_after: float | None = None,
        fields: Sequence[FieldProblem] = (),
        next_step: str | None = None,
        status: int | None = None,
        code: int | None = None,
    ) -> None:
        self.message = clean_message(message)
        super().__init__(self.message)
        self.tool = tool
        self.rule = rule
        self.source = source
        self.retry_after = retry_after
        self.fields = list(fields)
        self.next_step_override = next_step
        self.status = status
        self.code = code

    @property
    def classified(self) -> bool:
        """False when no rule recognised the failure (an :class:`InternalError` by default)."""
        return self.rule is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, rule={self.rule!r}, source={self.source!r})"

    def hint(self, *, retries: int = 0, applied: bool | None = False) -> ErrorHint:
        """What the agent is told. ``applied``: False = nothing was kept, None = outcome unknown."""
        values = _Hint(
            tool=self.tool or "the tool",
            message=self.message,
            retries=retries,
            retry_after=f"{self.retry_after:g}" if self.retry_after is not None else "a few",
        )
        step = (self.next_step_override or self.next_step).format_map(values)
        if applied is None:
            step += (
                " Its outcome is unknown: it may have been applied. Read the current state before "
                "calling it again."
            )
        elif self.retryable and retries:
            step += " Nothing of the failed attempts was kept."
        return ErrorHint(
            error_class=self.error_class.value,
            message=self.message,
            next_step=step,
            retryable=self.retryable,
            retry_after_s=self.retry_after,
            fields=self.fields,
        )


class TransientError(ToolFailure):
    """The upstream or the way to it misbehaved; the same call may succeed later."""

    error_class = ErrorClass.TRANSIENT
    retryable = True
    next_step = (
        "The upstream did not answer properly ({message}); the guard retried {retries} time(s). "
        "Try again later, or tell the user the system is unavailable."
    )


class UpstreamTimeout(TransientError):
    """The request was sent and no answer came in time: it may or may not have been done."""


class ConnectionDropped(TransientError):
    """The connection broke after the request was sent: it may or may not have been done."""


class ConnectFailed(TransientError):
    """The request never reached the upstream (refused, name resolution, connect timeout)."""

    safe_to_retry = True


class LockContention(TransientError):
    """Another transaction holds a lock the call needs (SQLite ``database is locked``, PostgreSQL
    lock or serialization failures): the upstream gave up waiting and did nothing of the statement.

    The guard retries it in a fresh transaction when the session has kept nothing yet (an old read
    snapshot can never be upgraded to a write once another writer committed); otherwise the call's
    savepoint is rolled back and it is retried within the transaction.
    """

    restart_transaction = True
    next_step = (
        "Another session holds a lock on the data {tool} needs ({message}); the guard retried "
        "{retries} time(s) and nothing of the call was kept. Send the same call again in a moment: "
        "the lock is released when the other session commits or rolls back."
    )


class ServerError(TransientError):
    """The upstream answered 5xx or a JSON-RPC internal error: it may have done part of the work."""


class ServiceUnavailable(ServerError):
    """503: the upstream is overloaded or down for maintenance; honour its Retry-After."""


class RateLimited(ToolFailure):
    """429 or an in-band "rate limit": the upstream refused the call before doing anything."""

    error_class = ErrorClass.RATE_LIMITED
    retryable = True
    safe_to_retry = True
    next_step = (
        "The upstream is limiting the call rate; the guard retried {retries} time(s). Wait at least "
        "{retry_after} seconds before calling {tool} again."
    )


class InvalidArguments(ToolFailure):
    """The arguments do not fit the tool's input schema, or the upstream refused them as invalid."""

    error_class = ErrorClass.INVALID_ARGUMENTS
    safe_to_retry = True
    next_step = (
        "Fix the arguments ('fields' lists each wrong one with what is expected and an example) "
        "and call {tool} again. Sending the same arguments again will fail the same way."
    )


class NotFound(ToolFailure):
    """A record the call names does not exist."""

    error_class = ErrorClass.NOT_FOUND
    safe_to_retry = True
    next_step = (
        "The record does not exist. Look the identifier up with a search or list tool, or ask the "
        "user to confirm it; do not guess identifiers."
    )


class PreconditionFailed(ToolFailure):
    """The record exists but is not in a state that allows the call."""

    error_class = ErrorClass.PRECONDITION_FAILED
    safe_to_retry = True
    next_step = (
        "The record is not in a state that allows this ({message}). Read its current state and "
        "what the policy allows; do not resend the call unchanged."
    )


class Conflict(PreconditionFailed):
    """The change collides with the current state: it already exists or was already done."""

    error_class = ErrorClass.CONFLICT
    next_step = (
        "The change conflicts with the current state ({message}). Read the current state: the "
        "intended change may already be in place."
    )


class PermissionDenied(ToolFailure):
    """The caller may not do this."""

    error_class = ErrorClass.PERMISSION_DENIED
    safe_to_retry = True
    next_step = "This call is not permitted for this session. Do not retry it; tell the user."


class PolicyViolation(ToolFailure):
    """A policy rule refused the call, or the guard rolled it back after a check failed."""

    error_class = ErrorClass.POLICY_VIOLATION
    safe_to_retry = True
    next_step = (
        "The call breaks a policy rule (see the violations) and nothing of it was kept. Change it to "
        "satisfy the rule, or tell the user why it cannot be done."
    )


class ApprovalError(ToolFailure):
    """The call needs, or needed, a human decision."""

    safe_to_retry = True


class ApprovalPending(ApprovalError):
    error_class = ErrorClass.APPROVAL_PENDING
    next_step = (
        "The call waits for a human approval and nothing was done yet. Tell the user it awaits "
        "approval; do not send it again."
    )


class ApprovalQueued(ApprovalPending):
    """Held under an approval request that is queued for a reviewer: sending the same call again once
    it is approved runs it (the guard never retries it itself: it is never an upstream's answer)."""

    retryable = True


class ApprovalRejected(ApprovalError):
    error_class = ErrorClass.APPROVAL_REJECTED
    next_step = "A reviewer rejected this call and it was not done. Do not send it again; tell the user."


class ApprovalExpired(ApprovalError):
    error_class = ErrorClass.APPROVAL_EXPIRED
    next_step = (
        "The approval request expired without a decision; the call was not done. Ask for it again "
        "only if the user still wants it."
    )


class InternalError(ToolFailure):
    """Anything the guard does not recognise (and its own faults); never retried blindly."""


FAILURE_CLASSES: dict[ErrorClass, type[ToolFailure]] = {
    ErrorClass.TRANSIENT: TransientError,
    ErrorClass.RATE_LIMITED: RateLimited,
    ErrorClass.INVALID_ARGUMENTS: InvalidArguments,
    ErrorClass.NOT_FOUND: NotFound,
    ErrorClass.PRECONDITION_FAILED: PreconditionFailed,
    ErrorClass.CONFLICT: Conflict,
    ErrorClass.PERMISSION_DENIED: PermissionDenied,
    ErrorClass.POLICY_VIOLATION: PolicyViolation,
    ErrorClass.APPROVAL_PENDING: ApprovalPending,
    ErrorClass.APPROVAL_REJECTED: ApprovalRejected,
    ErrorClass.APPROVAL_EXPIRED: ApprovalExpired,
    ErrorClass.INTERNAL: InternalError,
}
"""The class a rule that names only an :class:`ErrorClass` produces (policy packs name classes)."""


def render_hint(hint: ErrorHint) -> dict[str, Any]:
    """The hint as MCP structured content: ``{"error": {...}}`` with empty parts left out."""
    return {"error": hint.model_dump(mode="json", exclude_none=True, exclude_defaults=False)}
