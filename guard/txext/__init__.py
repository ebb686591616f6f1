"""The transaction extension ``shadowguard/tx`` (version 1), both ends: participants and the guard's client.

docs/transaction-extension.md is the specification. An MCP server that keeps its state in a database
*participates*: it advertises the extension, accepts the guard's transaction id in each request's
``_meta["shadowguard/tx"]``, and serves the methods ``shadowguard/tx/begin``, ``savepoint``,
``rollback_to``, ``release``, ``changes``, ``query``, ``commit``, ``rollback`` and ``renew``. The guard
then drives the upstream as a :class:`guard.backend.Backend` (:class:`RemoteBackend`): writes run inside
a shadow transaction on the upstream itself, and row-level change sets come from its database.

One concept per module:

- :mod:`guard.txext.protocol` — the wire: method names, ``_meta`` keys, features, error codes, the
  message models, what a participant advertises (:func:`settings`) and how a client sees it
  (:func:`advertises`);
- :mod:`guard.txext.participant` — what a transactional upstream runs (:class:`TransactionParticipant`,
  :class:`BackendAccess`, :func:`serialized`), with its open transactions and leases in
  :mod:`guard.txext.registry`, its lease reaper in :mod:`guard.txext.leases`, its named points
  (savepoints and watches) in :mod:`guard.txext.points`, its side of piggybacked operations in
  :mod:`guard.txext.carried` and of queries after a request in :mod:`guard.txext.after`;
- :mod:`guard.txext.client` — the guard's side (:class:`RemoteBackend`, :class:`TransactionError`),
  with its errors and the piggyback sequence of a tools/call in :mod:`guard.txext.toolcalls`
  (:meth:`RemoteBackend.send_tool_call`).

The names below are the public API; the modules' other names may change without notice.
"""

from guard.txext.client import (
    NotReversibleTransactionError,
    RemoteBackend,
    SendToolCall,
    SendToolCallAsync,
    TransactionError,
)
from guard.txext.leases import BackendAccess
from guard.txext.participant import TransactionParticipant, serialized
from guard.txext.protocol import (
    AFTER,
    AFTER_META_KEY,
    BEGIN,
    CHANGES,
    COMMIT,
    DEFAULT_LEASE_S,
    EXTENSION,
    FEATURES,
    METHODS,
    NOT_REVERSIBLE,
    OP_ERROR_KEY,
    OP_RELEASE,
    OP_SAVEPOINT,
    OP_WATCH,
    OPS_META_KEY,
    PIGGYBACK,
    QUERY,
    QUERY_REFUSED,
    RELEASE,
    RENEW,
    ROLLBACK,
    ROLLBACK_TO,
    SAVEPOINT,
    TX_FAILED,
    TX_META_KEY,
    TX_STATE,
    TX_UNKNOWN,
    VERSION,
    WATCH,
    TxBeginResult,
    TxChangesResult,
    TxParams,
    TxQueryResult,
    TxRequest,
    TxSavepointResult,
    advertised_writers,
    advertises,
    settings,
)

__all__ = [
    "AFTER",
    "AFTER_META_KEY",
    "BEGIN",
    "CHANGES",
    "COMMIT",
    "DEFAULT_LEASE_S",
    "EXTENSION",
    "FEATURES",
    "METHODS",
    "NOT_REVERSIBLE",
    "OPS_META_KEY",
    "OP_ERROR_KEY",
    "OP_RELEASE",
    "OP_SAVEPOINT",
    "OP_WATCH",
    "PIGGYBACK",
    "QUERY",
    "QUERY_REFUSED",
    "RELEASE",
    "RENEW",
    "ROLLBACK",
    "ROLLBACK_TO",
    "SAVEPOINT",
    "TX_FAILED",
    "TX_META_KEY",
    "TX_STATE",
    "TX_UNKNOWN",
    "VERSION",
    "WATCH",
    "BackendAccess",
    "NotReversibleTransactionError",
    "RemoteBackend",
    "SendToolCall",
    "SendToolCallAsync",
    "TransactionError",
    "TransactionParticipant",
    "TxBeginResult",
    "TxChangesResult",
    "TxParams",
    "TxQueryResult",
    "TxRequest",
    "TxSavepointResult",
    "advertised_writers",
    "advertises",
    "serialized",
    "settings",
]
