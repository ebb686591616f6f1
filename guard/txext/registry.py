"""A participant's open transactions: one per session, its savepoint aliases and its lease.

Also how one backend operation's failure becomes the extension's JSON-RPC error (:func:`mapped`),
which every participant method and piggybacked operation goes through.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import sqlalchemy as sa

from guard.backend import Backend, BackendError, NotReversibleError
from guard.sqltext import SqlTextError
from guard.txext.protocol import NOT_REVERSIBLE, QUERY, QUERY_REFUSED, TX_FAILED, TX_STATE, TX_UNKNOWN, error

T = TypeVar("T")


@dataclass
class OpenTransaction:
    tx: str
    backend: weakref.ref[Backend]
    renewed: float
    """When a request last named it (the clock of its :class:`Registry`)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Savepoint names the client chose (piggybacked) -> the backend's, in the order they opened."""
    watches: dict[str, int] = field(default_factory=dict)
    """Watches the client named (``watch``, docs/adr/013) -> the change log's position then."""
    order: dict[str, None] = field(default_factory=dict)
    """Every client name (aliases and watches), in the order they opened."""

    def resolve(self, name: str) -> str:
        return self.aliases.get(name, name)

    def is_open(self, name: str) -> bool:
        return name in self.order

    def opened(self, name: str, *, savepoint: str | None = None, position: int | None = None) -> None:
        """Client name ``name`` opened: a savepoint (the backend's name) or a watch (a position)."""
        if savepoint is not None:
            self.aliases[name] = savepoint
        elif position is not None:
            self.watches[name] = position
        self.order[name] = None

    def closed(self, name: str) -> None:
        """``name`` was released or rolled back to: it and the names opened after it are closed."""
        if name in self.order:
            names = list(self.order)
            for gone in names[names.index(name) :]:
                del self.order[gone]
                self.aliases.pop(gone, None)
                self.watches.pop(gone, None)


class Registry:
    """Session key -> its open transaction; safe to use from worker threads (one lock)."""

    def __init__(self, *, lease_s: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_s = lease_s
        self._clock = clock
        self._open: dict[str, OpenTransaction] = {}
        self._lock = threading.Lock()

    def current(self, key: str, tx: str, backend: Backend) -> OpenTransaction:
        """The open transaction ``tx`` of session ``key`` (renewed), or TX_UNKNOWN.

        ``backend`` is the one the session's calls use now: a different object than at ``begin``
        means the session's state was replaced or closed, which ended the transaction.
        """
        with self._lock:
            entry = self._open.get(key)
            if entry is None or entry.tx != tx:
                raise error(
                    TX_UNKNOWN,
                    f"no open transaction {tx!r} in this session (never begun, ended, or rolled back "
                    "when its lease lapsed)",
                )
            if entry.backend() is not backend:
                del self._open[key]
                raise error(
                    TX_UNKNOWN,
                    f"transaction {tx!r} is gone: the session's state was replaced or closed, "
                    "and its changes with it",
                )
            entry.renewed = self._clock()
            return entry

    def register(self, key: str, tx: str, backend: Backend) -> None:
        """Open ``tx`` for session ``key`` (TX_STATE if one is open on the same backend)."""
        with self._lock:
            for k in [k for k, e in self._open.items() if e.backend() is None]:
                del self._open[k]
            entry = self._open.get(key)
            if entry is not None and entry.backend() is backend:
                raise error(TX_STATE, f"transaction {entry.tx!r} is already open in this session")
            self._open[key] = OpenTransaction(tx, weakref.ref(backend), renewed=self._clock())

    def forget(self, key: str, tx: str) -> None:
        with self._lock:
            entry = self._open.get(key)
            if entry is not None and entry.tx == tx:
                del self._open[key]

    # -- leases
    def touch(self, key: str, tx: str) -> None:
        """A request named ``tx``: its lease starts again."""
        with self._lock:
            entry = self._open.get(key)
            if entry is not None and entry.tx == tx:
                entry.renewed = self._clock()

    def lapsed(self) -> list[tuple[str, str]]:
        """(session key, tx) of every transaction whose lease lapsed, sorted."""
        with self._lock:
            return sorted(self._lapsed_locked())

    def take_lapsed(self, key: str, tx: str) -> bool:
        """Forget ``tx`` of session ``key`` if it is still open and still lapsed (the caller rolls
        it back); False when a request renewed or ended it meanwhile."""
        with self._lock:
            entry = self._open.get(key)
            due = entry is not None and entry.tx == tx and (key, tx) in self._lapsed_locked()
            if due:
                del self._open[key]
            return due

    def _lapsed_locked(self) -> set[tuple[str, str]]:
        if self.lease_s is None:
            return set()
        cutoff = self._clock() - self.lease_s
        return {(key, e.tx) for key, e in self._open.items() if e.renewed < cutoff}


def mapped(method: str, op: Callable[[Backend], T], backend: Backend) -> T:
    """Run one backend operation; its failures become the extension's JSON-RPC errors."""
    try:
        return op(backend)
    except NotReversibleError as exc:
        raise error(NOT_REVERSIBLE, f"{method}: {exc}") from exc
    except BackendError as exc:
        raise error(TX_STATE, f"{method}: {exc}") from exc
    except SqlTextError as exc:
        raise error(QUERY_REFUSED, f"{method}: {exc}") from exc
    except sa.exc.DBAPIError as exc:
        if method == QUERY:  # the SELECT ran in a savepoint that was rolled back: nothing changed
            raise error(QUERY_REFUSED, f"{method}: the database refused the query: {exc.orig}") from exc
        raise error(TX_FAILED, f"{method}: database error: {exc.orig}") from exc
    except sa.exc.SQLAlchemyError as exc:
        raise error(TX_FAILED, f"{method}: {exc}") from exc
