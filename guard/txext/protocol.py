"""The wire of ``shadowguard/tx`` version 1: names, ``_meta`` keys, error codes and message models.

docs/transaction-extension.md is the specification; both ends (:mod:`guard.txext.participant`,
:mod:`guard.txext.client`) speak it through the names below and nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import mcp.types as types
from mcp import MCPError
from pydantic import ConfigDict, Field

from guard.models import RowChange

EXTENSION = "shadowguard/tx"
VERSION = 1
TX_META_KEY = "shadowguard/tx"

BEGIN = "shadowguard/tx/begin"
SAVEPOINT = "shadowguard/tx/savepoint"
ROLLBACK_TO = "shadowguard/tx/rollback_to"
RELEASE = "shadowguard/tx/release"
CHANGES = "shadowguard/tx/changes"
QUERY = "shadowguard/tx/query"
COMMIT = "shadowguard/tx/commit"
ROLLBACK = "shadowguard/tx/rollback"
RENEW = "shadowguard/tx/renew"
METHODS = (BEGIN, SAVEPOINT, ROLLBACK_TO, RELEASE, CHANGES, QUERY, COMMIT, ROLLBACK, RENEW)

DEFAULT_LEASE_S = 60.0
"""How long a participant keeps a transaction that hears nothing from its guard (docs/adr/011): every
request naming it renews it (and ``renew``, which the guard sends while its agent is quiet); when it
lapses the participant rolls it back, so a guard that died (kill -9) holds no lock for ever. The
``begin`` answer says it (``lease_s``); a guard renews at a third of it."""

PIGGYBACK = "piggyback"
"""The optional feature (docs/transaction-extension.md, "Piggybacked operations"): savepoint and
release ride on the next request in ``_meta["shadowguard/tx/ops"]``, and a ``tools/call`` that
opened a savepoint answers with its change set in the result's ``_meta["shadowguard/tx"]``."""
WATCH = "watch"
"""The optional feature (docs/transaction-extension.md, "Watched reads", docs/adr/013): the piggybacked
operation ``watch`` notes the capture log's position under a client name instead of opening a
savepoint; the tools/call reports the changes since it like a savepoint's. Needs ``piggyback``."""
AFTER = "after"
"""The optional feature (docs/transaction-extension.md, "Queries after a request", docs/adr/015): read-only
SELECTs listed in ``_meta["shadowguard/tx/after"]`` of a ``tools/call`` or ``changes`` request run after
its own work, in the same access to the backend, and are answered in the result's
``_meta["shadowguard/tx"]["after"]``: the guard's after-call (and at-commit) check queries, whose
parameters depend only on the call's arguments, without a ``query`` round trip each. Needs ``piggyback``."""
FEATURES = (PIGGYBACK, WATCH, AFTER)
OPS_META_KEY = "shadowguard/tx/ops"
AFTER_META_KEY = "shadowguard/tx/after"
"""``_meta`` key of the queries a request asks to run after its own work (feature ``after``)."""
MAX_AFTER = 32
"""The most queries one request asks for after its work."""
OP_ERROR_KEY = "shadowguard/tx/op"
"""Key in a JSON-RPC error's ``data`` when a piggybacked operation failed: ``{"index", "method"}``."""
OP_SAVEPOINT = "savepoint"
OP_RELEASE = "release"
OP_WATCH = "watch"
OP_METHODS = {OP_SAVEPOINT: SAVEPOINT, OP_RELEASE: RELEASE, OP_WATCH: SAVEPOINT}
"""A piggybacked operation -> the method it stands for (in errors that name it; a watch stands in
for a savepoint)."""
MAX_OPS = 64
"""The most operations one request carries."""
MAX_ID = 256
"""The longest transaction id or savepoint name."""

# JSON-RPC error codes (outside the range JSON-RPC and MCP reserve). Malformed params are -32602.
TX_FAILED = -31000
"""The backend failed (a database error); the transaction's state is unknown: roll it back."""
TX_UNKNOWN = -31001
"""No such open transaction in the caller's session (never begun, ended, or its state was replaced)."""
TX_STATE = -31002
"""The request does not fit the transaction's state (begin twice, unknown or closed savepoint)."""
QUERY_REFUSED = -31003
"""``query`` was not one read-only SELECT, or the database refused it; nothing changed."""
NOT_REVERSIBLE = -31004
"""The participant cannot undo what was asked; nothing is claimed undone."""


class TxParams(types.RequestParams):
    """Params of every tx method. Loose on purpose: handlers check shapes and name what is wrong."""

    model_config = ConfigDict(extra="allow")

    savepoint: Any = Field(default=None, alias="savepoint")
    since: Any = Field(default=None, alias="since")
    sql: Any = Field(default=None, alias="sql")
    params: Any = Field(default=None, alias="params")


class TxRequest(types.Request[TxParams, str]):
    method: str
    params: TxParams


class TxBeginResult(types.Result):
    features: list[str] = Field(default_factory=list)
    """Optional features the participant serves for this transaction (absent: none)."""
    lease_s: float | None = Field(default=None, alias="lease_s")
    """The transaction's lease: rolled back after this long without a request naming it (absent: none)."""


class TxSavepointResult(types.Result):
    savepoint: str


class TxChangesResult(types.Result):
    changes: list[RowChange]


class TxQueryResult(types.Result):
    rows: list[dict[str, Any]]


def settings(features: Collection[str] = FEATURES, writers: int | None = None) -> dict[str, Any]:
    """What a participant advertises at ``capabilities.extensions["shadowguard/tx"]``.

    ``writers``: how many transactions can hold uncommitted writes at once (a SQLite database: 1);
    absent: no such limit. The proxy then queues sessions for that many writer slots.
    """
    entry: dict[str, Any] = {"versions": [VERSION], "methods": list(METHODS)}
    if features:
        entry["features"] = list(features)
    if writers is not None:
        entry["writers"] = writers
    return entry


def advertised_writers(capabilities: types.ServerCapabilities | None) -> int | None:
    """The ``writers`` a participant advertises (a positive integer), else None."""
    for entries in (capabilities.extensions, capabilities.experimental) if capabilities else ():
        entry = (entries or {}).get(EXTENSION)
        if isinstance(entry, Mapping):
            value = entry.get("writers")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return value
    return None


def advertises(capabilities: types.ServerCapabilities | None) -> bool:
    """True when a server's capabilities say it participates in version 1 of the extension.

    The entry is under ``extensions`` on the 2026-07-28 wire and under ``experimental`` in the
    handshake era, whose capability schema has no ``extensions`` (the SDK drops it there).
    """
    if capabilities is None:
        return False
    for entries in (capabilities.extensions, capabilities.experimental):
        entry = (entries or {}).get(EXTENSION)
        if isinstance(entry, Mapping) and VERSION in (entry.get("versions") or ()):
            return True
    return False


def error(code: int, message: str) -> MCPError:
    """A JSON-RPC error of the extension (one of the codes above, or INVALID_PARAMS)."""
    return MCPError(code=code, message=message)


def check_id(value: Any, what: str) -> str:
    """``value`` as a transaction id or savepoint name; INVALID_PARAMS naming ``what`` otherwise."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID:
        raise error(types.INVALID_PARAMS, f"{what} must be a non-empty string of at most {MAX_ID} characters")
    return value
