"""The audit log: one JSON line per decided call, commit and rollback.

A record says who did what and what the guard decided, not what the data was: tool arguments are
replaced by a digest (``sha256:`` of their canonical JSON, the same value an approval is bound to)
unless the operator opts in with ``include_arguments``; results, violation rows and row images are
never written, only counts and table names. Lines are appended by one writer at a time (thread-safe),
each flushed as it is written, so a crash loses at most the record being written.

With no path the lines go to the ``shadowguard.audit`` logger at INFO, for deployments that collect
logs rather than files. Every record has::

    {"ts": "2025-11-29T10:15:02.123456+00:00",
     "kind": "call" | "commit" | "rollback" | "approval_decision", "session": ...}

plus, for ``call``: ``call_id, principal, tool, effect, verdict, error_class, retries, duration_ms,
changes, tables, violations, arguments_digest`` (and ``arguments`` when opted in; ``approval_id`` and
``approval_state`` for a call bound to an approval request: held, or run or refused under it); for ``commit``:
``committed, changes, applied_calls, tables, violations, duration_ms`` (``applied_calls``: the ids of
calls a journaled upstream had applied when they ran); for ``rollback``: ``reason, rolled_back, changes,
undone_calls, not_undone_calls`` (pending rows discarded; ids of applied calls compensated, and of those
still in effect); for
``approval_decision`` (a reviewer approved or rejected a held call): ``approval_id, principal, tool,
reviewer, role, decision, reason, arguments_digest, at``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic_core import to_jsonable_python

from guard.models import ChangeSet, CommitOutcome, ToolOutcome, Violation

logger = logging.getLogger("shadowguard.audit")


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the arguments as canonical JSON (sorted keys, no whitespace).

    Text that is not valid Unicode (a lone surrogate, which JSON can spell) is digested as its
    surrogate code units, so that the record of a refused call can still be written.
    """
    canonical = json.dumps(
        to_jsonable_python(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _violations(violations: list[Violation]) -> list[dict[str, Any]]:
    return [
        {
            "rule": v.rule_id,
            "message": v.message,
            "source": v.source.ref if v.source is not None else None,
            "rows": len(v.rows),
        }
        for v in violations
    ]


def _tables(changes: ChangeSet) -> list[str]:
    return sorted(changes.tables)


class AuditLog:
    """Appends audit records to ``path`` (created with its folder), or logs them when ``path`` is None."""

    def __init__(self, path: Path | None, include_arguments: bool = False) -> None:
        self.path = path
        self.include_arguments = include_arguments
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A lone surrogate (in a refused call's tool name or arguments) is written as its JSON
            # escape (\\udXXX inside a JSON string), so every line stays valid JSON and valid UTF-8.
            self._file = path.open("a", encoding="utf-8", errors="backslashreplace")

    @property
    def writes(self) -> bool:
        """A record is written somewhere: to :attr:`path`, or to the ``shadowguard.audit`` logger at INFO."""
        return self.path is not None or logger.isEnabledFor(logging.INFO)

    def record_call(self, outcome: ToolOutcome, session_id: str | None) -> dict[str, Any]:
        """Write the record of one decided call; returns what was written (``{}`` when :attr:`writes`
        is false: a call's record, its arguments' digest above all, is not built for nobody)."""
        if not self.writes:
            return {}
        call = outcome.call
        record: dict[str, Any] = {
            "kind": "call",
            "session": session_id if session_id is not None else call.session_id,
            "call_id": call.id,
            "principal": call.principal,
            "tool": call.tool,
            "effect": outcome.effect.value,
            "verdict": outcome.verdict.value,
            "error_class": outcome.error_class,
            "retries": outcome.retries,
            "duration_ms": round(outcome.duration_ms, 3),
            "changes": len(outcome.changes),
            "tables": _tables(outcome.changes),
            "violations": _violations(outcome.violations),
            "arguments_digest": arguments_digest(call.arguments),
        }
        if outcome.approval_id is not None:
            record["approval_id"] = outcome.approval_id
            record["approval_state"] = outcome.approval_state
        if self.include_arguments:
            record["arguments"] = to_jsonable_python(call.arguments)
        return self._write(record)

    def record_commit(
        self, outcome: CommitOutcome, session_id: str | None, *, duration_ms: float | None = None
    ) -> dict[str, Any]:
        """Write the record of one commit request, committed or refused."""
        record: dict[str, Any] = {
            "kind": "commit",
            "session": session_id,
            "committed": outcome.committed,
            "changes": len(outcome.changes),
            "applied_calls": [c.id for c in outcome.applied],
            "tables": _tables(outcome.changes),
            "violations": _violations(outcome.violations),
            "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
        }
        return self._write(record)

    def record_rollback(
        self,
        session_id: str | None,
        reason: str,
        *,
        changes: int | None = None,
        rolled_back: bool = True,
        undone_calls: list[str] | None = None,
        not_undone_calls: list[str] | None = None,
    ) -> dict[str, Any]:
        """Write the record of a session rolled back (``reason``: agent, idle, shutdown, api, ...):
        ``changes`` pending row changes discarded, ``undone_calls`` the ids of applied calls that
        compensations undid, ``not_undone_calls`` of those still in effect (then ``rolled_back`` is
        false)."""
        record: dict[str, Any] = {
            "kind": "rollback",
            "session": session_id,
            "reason": reason,
            "rolled_back": rolled_back,
            "changes": changes,
            "undone_calls": list(undone_calls or []),
            "not_undone_calls": list(not_undone_calls or []),
        }
        return self._write(record)

    def record_approval_decision(
        self,
        *,
        approval_id: str,
        session_id: str,
        principal: str | None,
        tool: str,
        reviewer: str,
        role: str,
        decision: str,
        reason: str | None,
        arguments_digest: str,
        at: datetime,
    ) -> dict[str, Any]:
        """Write the record of a reviewer's decision (``approve`` or ``reject``) on a held call."""
        record: dict[str, Any] = {
            "kind": "approval_decision",
            "session": session_id,
            "approval_id": approval_id,
            "principal": principal,
            "tool": tool,
            "reviewer": reviewer,
            "role": role,
            "decision": decision,
            "reason": reason,
            "arguments_digest": arguments_digest,
            "at": at.isoformat(),
        }
        return self._write(record)

    def _write(self, fields: dict[str, Any]) -> dict[str, Any]:
        record = {"ts": datetime.now(UTC).isoformat(), **fields}
        if not self.writes:
            return record  # nobody reads the line (issue 18: encoded for nothing on every call)
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        with self._lock:
            if self.path is None:
                logger.info("%s", line)
            else:
                if self._file is None:
                    raise ValueError(f"audit log {self.path} is closed")
                self._file.write(line + "\n")
                self._file.flush()
        return record

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
