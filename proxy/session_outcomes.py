"""The outcomes a guard session (proxy.sessions) answers on its own, when a call could not be guarded
to the end: each built with :meth:`ToolOutcome.of` from its failure's class (guard.errors), which
decides the error class and whether the agent may send the call again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guard.backend import NotReversibleError
from guard.effects import ToolInfo, classify
from guard.errors import InternalError, LockContention, ToolFailure, TransientError
from guard.models import EffectClass, ToolCall, ToolOutcome, Verdict
from proxy.upstreams import Upstream


@dataclass(frozen=True)
class Attempted:
    """The call an outcome is about: whose, to which upstream, what."""

    session_id: str
    principal: str | None
    upstream: Upstream
    tool: str
    arguments: Mapping[str, Any]

    def call(self) -> ToolCall:
        return ToolCall(
            session_id=self.session_id,
            principal=self.principal,
            tool=self.tool,
            arguments=dict(self.arguments),
        )

    def effect(self) -> EffectClass:
        upstream, tool = self.upstream, self.tool
        info = upstream.tool_info(tool) if tool in upstream.tools else ToolInfo(name=tool)
        return classify(info, self.arguments, upstream.policy.effect_of(tool))[0]

    def failed(self, failure: ToolFailure, message: str, *, listed: bool = True) -> ToolOutcome:
        """A failed call; its ``result`` is ``message`` in full (the failure's is bounded);
        ``listed=False``: the failure is not listed as a violation."""
        return ToolOutcome.of(
            self.call(),
            self.effect(),
            Verdict.FAILED,
            failure,
            violations=None if listed else [],
            result=message,
        )


def unavailable(attempted: Attempted, exc: Exception, *, closed: bool) -> ToolOutcome:
    """The upstream could not be reached, or the session closed while the call waited: nothing sent."""
    name = attempted.upstream.name
    message = f"{exc}." if closed else f"The upstream {name!r} is unavailable: {exc}. The call was not sent."
    failure = TransientError(
        message,
        tool=attempted.tool,
        rule="upstream_unavailable",
        next_step="Nothing changed. Try the call again later.",
    )
    return attempted.failed(failure, message)


def no_writer_slot(attempted: Attempted) -> ToolOutcome:
    upstream = attempted.upstream
    failure = LockContention(
        f"every writer slot of the upstream {upstream.name!r} stayed "
        f"taken by other sessions with uncommitted writes for {upstream.writer_wait_s:g} s",
        tool=attempted.tool,
        rule="writer_slots",
        source="guard",
    )
    return attempted.failed(failure, failure.message, listed=False)


def lock_at_begin(attempted: Attempted, exc: BaseException) -> ToolOutcome:
    """The leg's transaction could not begin: the upstream gave up waiting for a lock another
    session holds (on PostgreSQL, the capture triggers' DDL). Nothing was begun or kept, so this
    is a retryable conflict for this call only, not a loss of the session (issue 15)."""
    failure = LockContention(
        f"the upstream {attempted.upstream.name!r} could not begin this session's transaction: {exc}",
        tool=attempted.tool,
        rule="lock_contention",
        source="upstream",
    )
    return attempted.failed(failure, failure.message, listed=False)


def upstream_failed(
    attempted: Attempted, exc: BaseException, gone: bool, not_reversed: Sequence[str]
) -> ToolOutcome:
    """The call could not be guarded to the end and the session was rolled back (``not_reversed``:
    what stayed in effect). Retryable when the upstream went away (a new connection may work)."""
    name, tool = attempted.upstream.name, attempted.tool
    if isinstance(exc, NotReversibleError) and not gone:
        what = f"The call to {tool} broke a rule and could not be undone: {exc}."
    elif gone:
        what = f"The upstream {name!r} went away during {tool} ({exc})."
    else:
        what = f"The upstream {name!r} failed during {tool}: {exc}."
    if not_reversed:
        after = (
            " The session was rolled back except for: "
            + "; ".join(not_reversed)
            + ". Those changes remain in effect."
        )
    else:
        after = " All uncommitted changes of this session were rolled back; nothing was committed."
    message = what + after
    failure_class = TransientError if gone else InternalError
    failure = failure_class(
        message,
        tool=tool,
        rule="upstream_failed",
        next_step="Start over: the next call opens a new transaction. Redo the lost changes.",
    )
    return attempted.failed(failure, message)


def not_recorded(attempted: Attempted, exc: Exception, not_reversed: Sequence[str]) -> ToolOutcome:
    """A kept write the ledger could not note was undone (a crash would then go unreported)."""
    message = (
        f"The proxy could not note that this session holds uncommitted changes ({exc}), so "
        f"{attempted.tool} and every uncommitted change of this session were rolled back; nothing "
        "was committed."
    )
    if not_reversed:
        message += " Not undone: " + "; ".join(not_reversed) + "."
    failure = TransientError(
        message,
        tool=attempted.tool,
        rule="session_not_recorded",
        next_step="Try again later: the next call opens a new transaction. Redo the lost changes.",
    )
    return attempted.failed(failure, message)
