"""A participant's named points in a transaction: savepoints and watches (docs/adr/013).

A client names a point when it piggybacks ``savepoint`` or ``watch``. A savepoint is the backend's;
a watch is only the change log's position, so what happened after it can be told
(:func:`changes_since`) but not undone: :func:`rollback_to` a watch succeeds when nothing changed
since it and is refused with :class:`~guard.backend.NotReversibleError` (nothing undone) otherwise.
Every method that takes a savepoint name goes through here, inside :func:`guard.txext.registry.mapped`.
"""

from __future__ import annotations

from typing import cast

from guard.backend import Backend, BackendError, NotReversibleError, Watchable, conforms
from guard.models import ChangeSet
from guard.txext.registry import OpenTransaction


def watchable(backend: Backend) -> Watchable:
    """``backend`` as a :class:`Watchable`; BackendError if it cannot watch."""
    if not conforms(backend, Watchable):
        raise BackendError(f"this session's backend ({type(backend).__name__}) cannot watch its change log")
    return cast(Watchable, backend)


def watch(entry: OpenTransaction, name: str, backend: Backend) -> None:
    """Open the watch ``name`` at the change log's current position."""
    entry.opened(name, position=watchable(backend).position())


def release(entry: OpenTransaction, name: str, backend: Backend) -> None:
    """Keep what happened since ``name``: a savepoint is released, a watch is forgotten."""
    if name not in entry.watches:
        backend.release(entry.resolve(name))
    entry.closed(name)


def rollback_to(entry: OpenTransaction, name: str, backend: Backend) -> None:
    """Undo what happened since the savepoint ``name``; a watch only closes if nothing changed since it."""
    position = entry.watches.get(name)
    if position is None:
        backend.rollback_to(entry.resolve(name))
    else:
        changed = watchable(backend).changes_after(position)
        if changed:
            raise NotReversibleError(
                f"{name!r} is a watch, not a savepoint: the {len(changed)} row change(s) made since it "
                "cannot be undone alone; nothing was undone"
            )
    entry.closed(name)


def changes_since(entry: OpenTransaction, name: str | None, backend: Backend) -> ChangeSet:
    """The changes since ``name`` (a savepoint or a watch), or since ``begin`` when None."""
    if name is None:
        return backend.changes(None)
    position = entry.watches.get(name)
    if position is not None:
        return watchable(backend).changes_after(position)
    return backend.changes(entry.resolve(name))
