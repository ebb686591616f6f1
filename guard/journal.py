"""JournalBackend: the Backend for upstreams that cannot transact (``transactional = False``).

Such an upstream applies every forwarded call for real, at once. The journal therefore *records*
writes instead of holding them, and undoes them only the way a saga does: by running the
compensating tool the policy pack names for each one (``tools.compensations``: a tool plus an
argument mapping from the original call), newest first. It never reports a rollback it did not do:

* a rollback over any recorded write without a usable compensation raises
  :class:`NotCompensatedError` (a :class:`~guard.backend.NotReversibleError`) before anything runs;
* a compensation that fails stops the rollback; the calls still in effect stay journaled and are
  listed on the error.

What GuardSession must do with a non-transactional backend (it does, see ``guard.session``):
forwarding is doing, there is no rehearsal, so an IRREVERSIBLE call, or one an approval rule
matches, is held *before* it is forwarded (verdict ``held``, empty preview).

What the journal cannot give: :meth:`changes` holds only the row changes the upstream itself
reports (the optional ``reported_changes`` hook reads them from a result); without that it is an
empty ChangeSet. :meth:`query` raises: there is no shadow state to query, so SQL checks fail closed
(policy packs for such upstreams use checks that need no query). A failed call (``is_error``, or an
in-band error text: :func:`guard.classifier.error_message`) is not journaled: the upstream said it did
nothing, and the journal has no way to know otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from guard.backend import BackendError, NotReversibleError
from guard.classifier import error_message
from guard.effects import ToolInfo, classify
from guard.models import ChangeSet, EffectClass, ToolCall
from guard.policy import EMPTY, PolicyPack
from guard.session import FORWARDING, Executor, ToolResult

ReportedChanges = Callable[[str, Mapping[str, Any], ToolResult], ChangeSet]


class JournalEntry(BaseModel):
    """One forwarded write: the call, what the upstream answered, and how to undo it (if at all)."""

    call: ToolCall
    result: str
    changes: ChangeSet = Field(default_factory=ChangeSet)
    compensation: ToolCall | None = None
    """The compensating call, arguments already mapped from the original call."""
    not_compensable: str | None = None
    """Why there is no compensation (None when there is one)."""


class NotCompensatedError(NotReversibleError):
    """A rollback that could not be (fully) done; ``entries`` are the calls still in effect."""

    def __init__(self, message: str, entries: Sequence[JournalEntry]) -> None:
        super().__init__(message)
        self.entries = list(entries)


def _describe(entry: JournalEntry) -> str:
    return f"{entry.call.tool} (call {entry.call.id}): {entry.not_compensable}"


class JournalBackend:
    """Records forwarded writes and compensates them on rollback (see the module docstring).

    ``execute`` forwards to the upstream; pass :meth:`execute` (not it) to GuardSession so that
    forwarded writes are journaled. ``tools`` and ``policy`` classify calls exactly as GuardSession
    does, so reads are never journaled.
    """

    transactional = False

    def __init__(
        self,
        execute: Executor,
        tools: Mapping[str, ToolInfo],
        policy: PolicyPack = EMPTY,
        *,
        reported_changes: ReportedChanges | None = None,
        session_id: str | None = None,
        principal: str | None = None,
    ) -> None:
        self.upstream = execute
        self.tools = tools
        self.policy = policy
        self.reported_changes = reported_changes
        self.session_id = session_id
        self.principal = principal
        self.entries: list[JournalEntry] = []
        self._open = False
        self._savepoints: dict[str, int] = {}
        self._names = itertools.count(1)

    # -- the executor GuardSession forwards through
    def execute(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Forward one call; journal it when it is a write that succeeded."""
        self._require()
        result = self.upstream(tool, arguments)
        if error_message(result.text, result.is_error) is not None:
            return result
        info = self.tools.get(tool, ToolInfo(name=tool))
        effect, _ = classify(info, arguments, self.policy.effect_of(tool))
        if effect is EffectClass.READ:
            return result
        call = ToolCall(
            session_id=self.session_id, principal=self.principal, tool=tool, arguments=dict(arguments)
        )
        forwarding = FORWARDING.get()
        if forwarding is not None and forwarding.tool == tool and forwarding.arguments == call.arguments:
            call.id = forwarding.id  # the id the agent is told, so that a rollback names the call it saw
        changes = self.reported_changes(tool, arguments, result) if self.reported_changes else ChangeSet()
        compensation, why = self._compensation_for(call)
        self.entries.append(
            JournalEntry(
                call=call,
                result=result.text,
                changes=changes,
                compensation=compensation,
                not_compensable=why,
            )
        )
        return result

    def _compensation_for(self, call: ToolCall) -> tuple[ToolCall | None, str | None]:
        rule = self.policy.model.tools.compensations.get(call.tool)
        if rule is None:
            return None, "the policy names no compensating tool"
        missing = sorted({src for src in rule.arguments.values() if src not in call.arguments})
        if missing:
            return None, f"the call lacks argument(s) {missing} that the compensation {rule.tool} needs"
        arguments = {target: call.arguments[src] for target, src in rule.arguments.items()}
        return (
            ToolCall(
                session_id=self.session_id, principal=self.principal, tool=rule.tool, arguments=arguments
            ),
            None,
        )

    # -- Backend
    def _require(self) -> None:
        if not self._open:
            raise BackendError("no journal: call begin() first")

    def begin(self) -> None:
        if self._open:
            raise BackendError("journal already begun")
        self.entries = []
        self._savepoints.clear()
        self._open = True

    def savepoint(self) -> str:
        """A mark in the journal; nothing is held."""
        self._require()
        name = f"j{next(self._names)}"
        self._savepoints[name] = len(self.entries)
        return name

    def _mark(self, savepoint: str) -> int:
        self._require()
        try:
            return self._savepoints[savepoint]
        except KeyError:
            raise BackendError(f"unknown or closed savepoint {savepoint!r}") from None

    def _close_from(self, savepoint: str) -> None:
        names = list(self._savepoints)
        for name in names[names.index(savepoint) :]:  # savepoints nest: later ones close too
            del self._savepoints[name]

    def rollback_to(self, savepoint: str) -> None:
        self._undo(self._mark(savepoint))
        self._close_from(savepoint)

    def release(self, savepoint: str) -> None:
        self._mark(savepoint)
        self._close_from(savepoint)

    def changes(self, since: str | None = None) -> ChangeSet:
        """Changes the upstream reported for the journaled calls (empty if it reports none)."""
        self._require()
        mark = 0 if since is None else self._mark(since)
        return ChangeSet(changes=[c for e in self.entries[mark:] for c in e.changes])

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        raise BackendError(
            "this upstream cannot transact: there is no shadow state to query (checks that need a "
            "query cannot be evaluated against it)"
        )

    def commit(self) -> None:
        """Nothing to apply (every write already happened); the journal is closed, entries kept."""
        self._require()
        self._open = False
        self._savepoints.clear()

    def rollback(self) -> None:
        self._require()
        self._undo(0)
        self._open = False
        self._savepoints.clear()

    def _undo(self, mark: int) -> None:
        """Compensate entries[mark:] newest first, or raise before running any if one cannot be."""
        pending = self.entries[mark:]
        stuck = [e for e in pending if e.compensation is None]
        if stuck:
            raise NotCompensatedError(
                f"cannot undo {len(stuck)} of {len(pending)} journaled call(s), so none was undone: "
                + "; ".join(_describe(e) for e in stuck),
                pending,
            )
        while len(self.entries) > mark:
            entry = self.entries[-1]
            compensation = entry.compensation
            assert compensation is not None
            result = self.upstream(compensation.tool, compensation.arguments)
            if result.is_error:
                remaining = self.entries[mark:]
                raise NotCompensatedError(
                    f"compensation {compensation.tool} for {entry.call.tool} (call {entry.call.id}) "
                    f"failed: {result.text}; {len(remaining)} journaled call(s) remain in effect",
                    remaining,
                )
            self.entries.pop()
