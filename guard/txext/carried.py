"""The participant's side of piggybacked operations: savepoint, watch and release riding on a request's
``_meta["shadowguard/tx/ops"]``, applied once before the request's own work, and what a ``tools/call``
reports: the change sets since the savepoints they opened, and the answers to the queries it asked
for after the tool (docs/transaction-extension.md)."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp import MCPError

from guard.backend import Backend
from guard.txext import points
from guard.txext.after import Query, run_after
from guard.txext.protocol import (
    CHANGES,
    MAX_OPS,
    OP_ERROR_KEY,
    OP_METHODS,
    OP_RELEASE,
    OP_SAVEPOINT,
    OP_WATCH,
    OPS_META_KEY,
    TX_STATE,
    check_id,
    error,
)
from guard.txext.registry import Registry, mapped


@dataclass
class CarriedOps:
    """The piggybacked operations of one request, applied at most once, before the request's own work."""

    key: str
    tx: str
    ops: list[tuple[str, str]]
    started: bool = False
    opened: list[str] = field(default_factory=list)
    failure: MCPError | None = None
    after: list[Query] = field(default_factory=list)
    """The queries to answer after the tool (feature ``after``, :mod:`guard.txext.after`)."""
    reported: dict[str, Any] | None = None
    """The report, when the host computed it in the tool's own access
    (:meth:`guard.txext.TransactionParticipant.calling`); None: the middleware computes it."""

    def reports(self, key: str, tx: str) -> bool:
        """This request's operations ran for ``(key, tx)`` and its answer carries a report."""
        return (
            self.started
            and self.failure is None
            and (self.key, self.tx) == (key, tx)
            and bool(self.opened or self.after)
        )


CARRIED: contextvars.ContextVar[CarriedOps | None] = contextvars.ContextVar(
    "shadowguard_tx_ops", default=None
)
"""The current tools/call's operations, for :meth:`TransactionParticipant.check_call` (worker threads
inherit it: AnyIO runs them in a copy of the caller's context)."""


def parse_ops(value: Any, *, watch: bool = False) -> list[tuple[str, str]]:
    """The ``(op, savepoint)`` pairs of ``_meta["shadowguard/tx/ops"]``; INVALID_PARAMS if malformed
    (``watch``: the participant serves the ``watch`` operation)."""
    what = f"_meta[{OPS_META_KEY!r}]"
    if not isinstance(value, list) or len(value) > MAX_OPS:
        raise error(types.INVALID_PARAMS, f"{what} must be a list of at most {MAX_OPS} operations")
    allowed = set(OP_METHODS) if watch else set(OP_METHODS) - {OP_WATCH}
    ops = []
    for item in value:
        if not isinstance(item, Mapping) or set(item) != {"op", "savepoint"} or item["op"] not in allowed:
            names = "|".join(f'"{op}"' for op in OP_METHODS if op in allowed)
            raise error(
                types.INVALID_PARAMS, f'{what}: each operation is {{"op": {names}, "savepoint": name}}'
            )
        ops.append((str(item["op"]), check_id(item["savepoint"], f"{what}: savepoint")))
    return ops


def run_ops(registry: Registry, carried: CarriedOps, backend: Backend) -> None:
    """Apply the operations in order (in the session's worker thread); the first that fails is
    raised with ``data[OP_ERROR_KEY]`` naming it, and kept in ``carried.failure``."""
    carried.started = True
    for index, (op, name) in enumerate(carried.ops):
        method = OP_METHODS[op]
        try:
            entry = registry.current(carried.key, carried.tx, backend)
            if op == OP_RELEASE:
                mapped(method, functools.partial(points.release, entry, name), backend)
                continue
            if entry.is_open(name):
                raise error(TX_STATE, f"{method}: savepoint {name!r} is already open")
            if op == OP_SAVEPOINT:
                entry.opened(name, savepoint=mapped(method, lambda b: b.savepoint(), backend))
            else:
                mapped(method, functools.partial(points.watch, entry, name), backend)
            carried.opened.append(name)
        except MCPError as exc:
            data = {OP_ERROR_KEY: {"index": index, "method": method}}
            carried.failure = MCPError(code=exc.code, message=exc.message, data=data)
            raise carried.failure from exc


def report(registry: Registry, carried: CarriedOps, backend: Backend) -> dict[str, Any]:
    """What a tools/call answers in ``_meta["shadowguard/tx"]``: the changes since each savepoint
    or watch its operations opened (or the error that reading them met, for the client to raise),
    and the answers to the queries it asked for after the tool."""
    out: dict[str, Any] = {}
    for name in carried.opened:
        try:
            entry = registry.current(carried.key, carried.tx, backend)
            if not entry.is_open(name):
                raise error(TX_STATE, f"{CHANGES}: unknown or closed savepoint {name!r}")
            changes = mapped(CHANGES, functools.partial(points.changes_since, entry, name), backend)
        except MCPError as exc:
            out[name] = {"error": {"code": exc.code, "message": exc.message}}
        else:
            # a watched read's usual answer, no change, needs no dump
            out[name] = {"changes": changes.model_dump(mode="json")["changes"] if changes.changes else []}
    if not carried.after:
        return {"savepoints": out}
    return {"savepoints": out, "after": run_after(carried.after, backend)}
