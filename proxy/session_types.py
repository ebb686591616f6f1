"""What a guard session (proxy.sessions) reports and is told: its result types, observer and reasons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import mcp.types as types
from pydantic import BaseModel, Field

from guard.models import ChangeSet, CommitOutcome, ToolCall, ToolOutcome
from proxy.ledger import RESTARTED

SESSION_META_KEY = "shadowguard/session"
"""The ``_meta`` key naming a session: agents may send it to the proxy; the proxy sends its own
per-session id under it to transactional upstreams (their session selector on sessionless HTTP)."""

OnIdle = Literal["rollback"]
EndReason = Literal["idle", "lease", "closed", "shutdown", "read"]
"""Why a session ended: ``lease`` its client sent nothing for ``sessions.lease_s``; ``read`` the
one-call session of a read that named no session (docs/adr/008-default-sessions.md)."""
RollbackReason = Literal[
    "agent", "api", "idle", "lease", "closed", "shutdown", "read", "upstream_failed", "commit_failed"
]
"""Why a session's transactions were rolled back (a metric label: keep the set small)."""


_LOST_BECAUSE = {
    RESTARTED: "the proxy stopped before they were committed (it was restarted), and its upstream "
    "transactions were rolled back",
    "idle": "the session was idle for longer than the idle timeout and was rolled back",
    "closed": "the session's connection was closed and it was rolled back",
    "shutdown": "the proxy shut down and rolled the session back",
    "upstream_failed": "an upstream failed and the session was rolled back",
    "commit_failed": "a commit failed and the session was rolled back",
}


def lost_message(reason: str) -> str:
    """Why a session's uncommitted changes are gone, for a ledger ``reason`` (proxy.ledger)."""
    why = _LOST_BECAUSE.get(reason, f"the session was rolled back ({reason})")
    return f"This session's uncommitted changes were lost: {why}."


class RollbackOutcome(BaseModel):
    """The result of rolling a session back. ``not_reversed`` names what stayed in effect, if anything."""

    rolled_back: bool
    not_reversed: list[str] = Field(default_factory=list)
    changes: ChangeSet = Field(default_factory=ChangeSet)
    """The net changes that were discarded (as far as the backends could tell)."""
    undone: list[ToolCall] = Field(default_factory=list)
    """Calls a journaled upstream had applied, undone by their compensating calls."""
    not_undone: list[ToolCall] = Field(default_factory=list)
    """Calls a journaled upstream had applied that stay in effect (no compensation, or it failed)."""

    @property
    def empty(self) -> bool:
        """Nothing was pending: no row discarded, no call undone or left in effect."""
        return not (self.changes or self.undone or self.not_undone or self.not_reversed)


class SessionObserver(Protocol):
    """Where a session reports what happened (the proxy wires audit log and metrics to it)."""

    def call(self, outcome: ToolOutcome) -> None: ...

    def commit(self, session_id: str, outcome: CommitOutcome) -> None: ...

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None: ...


class _Silent:
    """Observes nothing (a session without an audit log or metrics, e.g. in tests)."""

    def call(self, outcome: ToolOutcome) -> None:
        return None

    def commit(self, session_id: str, outcome: CommitOutcome) -> None:
        return None

    def rollback(self, session_id: str, reason: str, outcome: RollbackOutcome) -> None:
        return None


silent: SessionObserver = _Silent()


@dataclass
class CallResult:
    """A guarded call: the guard's outcome and, when the call was forwarded, the upstream's answer."""

    outcome: ToolOutcome
    upstream_result: types.CallToolResult | None = None
