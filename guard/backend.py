"""The transactional state a guarded session runs against.

A :class:`Backend` gives the guard shadow transactions: savepoints around each write, row-level change
sets computed by the backend (never reconstructed from what the agent says), read-only queries inside
the transaction for checks, and commit/rollback. Implementations: :class:`guard.sql_backend.SqlBackend`
(SQLAlchemy: SQLite, PostgreSQL), a remote participant speaking the transaction extension
(docs/transaction-extension.md), and :class:`guard.journal.JournalBackend` for upstreams that cannot
transact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from guard.models import ChangeSet


class BackendError(Exception):
    """The backend could not do what was asked (the message says what and why)."""


class NotReversibleError(BackendError):
    """A rollback was asked of changes the backend cannot undo; nothing is claimed undone."""


@runtime_checkable
class Backend(Protocol):
    """Shadow-transaction operations, in the order a session uses them."""

    transactional: bool
    """True when rollback really undoes writes; False for journals (see NotReversibleError)."""

    def begin(self) -> None: ...

    def savepoint(self) -> str:
        """Open a savepoint; return its name for :meth:`rollback_to`, :meth:`release`, :meth:`changes`."""
        ...

    def rollback_to(self, savepoint: str) -> None: ...

    def release(self, savepoint: str) -> None: ...

    def changes(self, since: str | None = None) -> ChangeSet:
        """Row changes since the savepoint was opened (or since :meth:`begin`), in order."""
        ...

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """One read-only SELECT (``:name`` parameters) inside the transaction; anything else is refused."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


@runtime_checkable
class Piggybacking(Protocol):
    """A backend whose savepoint and release ride on the next request instead of a round trip of
    their own, and whose change set since a savepoint the next tool call reports
    (:class:`guard.txext.RemoteBackend` with a participant that serves piggybacking)."""

    piggybacking: bool
    """True while operations ride on requests (False: each is a round trip)."""

    def reported(self, savepoint: str) -> bool:
        """:meth:`Backend.changes` since ``savepoint`` is answered without a request."""
        ...


@runtime_checkable
class AsksAhead(Protocol):
    """A backend that can ask for the queries the guard's checks will run next on the request that
    precedes them, so that each costs no round trip of its own (:class:`guard.txext.RemoteBackend`
    with a participant that serves ``after``, docs/adr/015)."""

    answering: bool
    """True while queries asked ahead are answered (False: :meth:`expect` asks nothing)."""

    def expect(self, queries: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """The SELECTs (text, parameters) the guard will run after the next tool call or change set."""
        ...

    def answered(self, sql: str, params: Mapping[str, Any] | None = None) -> bool:
        """:meth:`Backend.query` of ``sql`` with ``params`` is answered without a request."""
        ...


@runtime_checkable
class Watchable(Protocol):
    """A backend that can tell what changed since a point without a savepoint (docs/adr/013): a
    participant serves the ``watch`` operation with it. Nothing can be undone to such a point."""

    def position(self) -> int:
        """Where the change log stands now (in the open transaction)."""
        ...

    def changes_after(self, position: int) -> ChangeSet:
        """Row changes logged after ``position`` that are still in effect, in order."""
        ...


_CONFORMS: dict[tuple[type, type], bool] = {}


def conforms(backend: object, protocol: type) -> bool:
    """``isinstance(backend, protocol)`` for a runtime-checkable Protocol of backends, decided
    once per backend class: a Protocol's isinstance looks up every member on every call (issue 18:
    about 3 % of a passthrough read's proxy CPU, and on a participant about as much of the
    upstream's CPU per call). The backends define these members on the class or set them in
    ``__init__``, so every instance of a class conforms as its first did."""
    key = (type(backend), protocol)
    known = _CONFORMS.get(key)
    if known is None:
        known = _CONFORMS[key] = isinstance(backend, protocol)
    return known
