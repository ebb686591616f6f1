"""Commit records (docs/adr/011-commit-records-and-participant-leases.md): what a commit across
upstreams did when it did not finish, as the agent and orchestrators are told it.

A commit asks each upstream in turn to commit; no upstream can promise in advance that it will
(SQLite has no prepared transactions, and the extension has no prepare step), so a proxy that dies,
or an upstream that fails, between two of them leaves the commit applied on some upstreams and not
on others. The session ledger (:mod:`proxy.ledger`) keeps the record; this module turns it into the
commit's answer: which upstreams applied the changes, which did not, and which are unknown (the
commit was sent, or about to be, when its answer was lost: read the data back).

``SHADOWGUARD_CRASH_AT`` names a fault-injection point (:func:`crash_point`): ``kill:<point>`` makes the
process kill itself with SIGKILL there, ``fail:<point>`` makes the step fail with :class:`InjectedFault`.
Tests use it to stop the proxy, or fail an upstream's commit, between two upstream commits
deterministically. Unset (always, outside tests) it does nothing.
"""

from __future__ import annotations

import os
import signal

from guard.backend import BackendError
from guard.models import CommitOutcome, Violation
from proxy.ledger import INTERRUPTED, CommitRecord, LedgerEntry

CRASH_ENV = "SHADOWGUARD_CRASH_AT"
"""Environment variable naming a :func:`crash_point` (tests only; unset in any real deployment)."""
INCOMPLETE_RULES = frozenset({INTERRUPTED, "partial_commit"})
"""Rule ids of a commit that applied on some upstreams and not (or not known) on others."""


class InjectedFault(BackendError):
    """The step failed because ``SHADOWGUARD_CRASH_AT`` said so (tests only)."""


def crash_point(name: str) -> None:
    """Fault injection at ``name`` when ``SHADOWGUARD_CRASH_AT`` is ``kill:<name>`` (SIGKILL this
    process) or ``fail:<name>`` (raise :class:`InjectedFault`)."""
    wanted = os.environ.get(CRASH_ENV)
    if wanted == f"kill:{name}":
        os.kill(os.getpid(), signal.SIGKILL)
    if wanted == f"fail:{name}":
        raise InjectedFault(f"fault injected at {name} ({CRASH_ENV})")


def upstream_states(record: CommitRecord) -> dict[str, str]:
    """Each upstream of the record: ``applied``, ``unknown`` or ``not_applied``."""
    states = {name: "not_applied" for name in record.not_applied}
    states.update({name: "unknown" for name in record.unknown})
    states.update({name: "applied" for name in record.applied})
    return {name: states[name] for name in record.upstreams}


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(repr(n) for n in names)


def record_message(record: CommitRecord, *, interrupted: bool, failure: str = "") -> str:
    """What the record says, per upstream, in the agent's words."""
    if interrupted:
        parts = ["The commit did not finish: the proxy stopped during it (it was restarted)."]
    else:
        parts = [f"The commit failed part-way{f' ({failure})' if failure else ''}."]
    if record.applied:
        parts.append(f"Applied (committed) on: {_names(record.applied)}.")
    if record.unknown:
        parts.append(
            f"Outcome unknown on: {_names(record.unknown)} (the commit was sent, or about to be sent, "
            "when its answer was lost; read the data back to see whether it landed)."
        )
    if record.not_applied:
        parts.append(f"Not applied (rolled back) on: {_names(record.not_applied)}.")
    return " ".join(parts)


def record_outcome(record: CommitRecord, *, interrupted: bool, failure: str = "") -> CommitOutcome:
    """The answer to a commit whose record is ``record``: committed only when every upstream applied."""
    states = upstream_states(record)
    if record.complete:
        return CommitOutcome(committed=True, upstreams=states)
    step = "Read back what the commit was to change on the upstreams named unknown; " + (
        "redo what is missing there and on those not applied, then commit."
        if record.unknown or record.not_applied
        else "then commit."
    )
    return CommitOutcome(
        committed=False,
        upstreams=states,
        violations=[
            Violation(
                rule_id=INTERRUPTED if interrupted else "partial_commit",
                message=record_message(record, interrupted=interrupted, failure=failure),
                hint=step,
            )
        ],
    )


def entry_outcome(entry: LedgerEntry) -> CommitOutcome | None:
    """The commit answer of a ledger entry that holds a commit record; None for a plain loss."""
    if entry.commit is None:
        return None
    return record_outcome(entry.commit, interrupted=entry.state == INTERRUPTED)
