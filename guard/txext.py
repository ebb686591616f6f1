"""The transaction extension ``shadowguard/tx`` (version 1), both ends: participants and the guard's client.

docs/transaction-extension.md is the specification. An MCP server that keeps its state in a database
*participates*: it advertises the extension, accepts the guard's transaction id in each request's
``_meta["shadowguard/tx"]``, and serves the methods ``shadowguard/tx/begin``, ``savepoint``,
``rollback_to``, ``release``, ``changes``, ``query``, ``commit`` and ``rollback``. The guard then
drives the upstream as a :class:`guard.backend.Backend` (:class:`RemoteBackend`): writes run inside
a shadow transaction on the upstream itself, and row-level change sets come from its database.

Server side: :class:`TransactionParticipant` registers the methods on a low-level
``mcp.server.Server`` and adds the capability entry. The host supplies two things: the session key
of a request (transactions belong to sessions), and a :class:`BackendAccess` that runs a function
against the session's backend, in a worker thread, serialised with that session's tool calls (one
connection must never be used by two threads at once). A server with one SQLAlchemy connection::

    backend = SqlBackend(connection, tables)
    access = serialized(backend)
    tx = TransactionParticipant(session_key=lambda ctx: "main", access=access)
    tx.install(server)                          # before create_initialization_options()

    async def on_call_tool(ctx, params):
        name = tx.transaction_of(ctx)           # the _meta tx id, validated, or None

        def run(backend):
            tx.check_call("main", name, backend)   # refuses a tx id that is not open here
            return my_tool(backend.connection, params)

        return await access("main", run)

Client side: :class:`RemoteBackend` is synchronous because :class:`guard.session.GuardSession` is.
Run the GuardSession in a worker thread (``await anyio.to_thread.run_sync(...)``); RemoteBackend
then reaches the async ``mcp.ClientSession`` on the event loop with ``anyio.from_thread.run``.
Outside an AnyIO worker thread, pass a ``BlockingPortal`` whose loop owns the ClientSession.
Calling RemoteBackend on the event loop thread itself fails with AnyIO's RuntimeError: it would
block the loop that must answer it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
import sqlalchemy as sa
from anyio.from_thread import BlockingPortal
from mcp import ClientSession, MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from guard.backend import Backend, BackendError, NotReversibleError
from guard.models import ChangeSet, RowChange
from guard.session import Executor, ToolResult
from guard.sqltext import SqlTextError

logger = logging.getLogger(__name__)

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
FEATURES = (PIGGYBACK,)
OPS_META_KEY = "shadowguard/tx/ops"
OP_ERROR_KEY = "shadowguard/tx/op"
"""Key in a JSON-RPC error's ``data`` when a piggybacked operation failed: ``{"index", "method"}``."""
OP_SAVEPOINT = "savepoint"
OP_RELEASE = "release"
_OP_METHODS = {OP_SAVEPOINT: SAVEPOINT, OP_RELEASE: RELEASE}
_MAX_OPS = 64

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

_MAX_ID = 256

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")
R = TypeVar("R", bound=types.Result)
Handler = Callable[[Ctx, "TxParams"], Awaitable[BaseModel | dict[str, Any] | None]]


# -- wire models ------------------------------------------------------------------------------------


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


async def _advertise_in_handshake(ctx: Ctx, call_next: CallNext, *, entry: dict[str, Any]) -> HandlerResult:
    """Add the entry to ``capabilities.experimental`` of an ``initialize`` result (handshake era)."""
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        capabilities = dict(result.get("capabilities") or {})
        capabilities["experimental"] = {**(capabilities.get("experimental") or {}), EXTENSION: entry}
        result = {**result, "capabilities": capabilities}
    return result


# -- server side ------------------------------------------------------------------------------------


class BackendAccess(Protocol):
    """Runs ``work(backend)`` for a session: in a worker thread, serialised with its tool calls.

    The backend must be the one on the connection that session's tool calls use, and the same
    object for as long as the session's state lives: a different object (the state was replaced
    or closed) ends any transaction that was open on the old one.
    """

    def __call__(self, key: str, work: Callable[[Backend], T], /) -> Awaitable[T]: ...


def serialized(backend: Backend) -> BackendAccess:
    """A :class:`BackendAccess` for a server with one backend: one lock, worker threads."""
    lock = anyio.Lock()

    async def access(key: str, work: Callable[[Backend], T], /) -> T:
        async with lock:
            return await anyio.to_thread.run_sync(work, backend)

    return access


def _error(code: int, message: str) -> MCPError:
    return MCPError(code=code, message=message)


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise _error(
            types.INVALID_PARAMS, f"{what} must be a non-empty string of at most {_MAX_ID} characters"
        )
    return value


@dataclass
class _Open:
    tx: str
    backend: weakref.ref[Backend]
    renewed: float
    """When a request last named it (the clock of :class:`TransactionParticipant`)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Savepoint names the client chose (piggybacked) -> the backend's, in the order they opened."""

    def resolve(self, name: str) -> str:
        return self.aliases.get(name, name)

    def closed(self, name: str) -> None:
        """``name`` was released or rolled back to: it and the aliases opened after it are closed."""
        if name in self.aliases:
            names = list(self.aliases)
            for gone in names[names.index(name) :]:
                del self.aliases[gone]


@dataclass
class _Ops:
    """The piggybacked operations of one request, applied at most once, before the request's own work."""

    key: str
    tx: str
    ops: list[tuple[str, str]]
    started: bool = False
    opened: list[str] = field(default_factory=list)
    failure: MCPError | None = None


_CARRIED: contextvars.ContextVar[_Ops | None] = contextvars.ContextVar("shadowguard_tx_ops", default=None)
"""The current tools/call's operations, for :meth:`TransactionParticipant.check_call` (worker threads
inherit it: AnyIO runs them in a copy of the caller's context)."""


def _parse_ops(value: Any) -> list[tuple[str, str]]:
    what = f"_meta[{OPS_META_KEY!r}]"
    if not isinstance(value, list) or len(value) > _MAX_OPS:
        raise _error(types.INVALID_PARAMS, f"{what} must be a list of at most {_MAX_OPS} operations")
    ops = []
    for item in value:
        if not isinstance(item, Mapping) or set(item) != {"op", "savepoint"} or item["op"] not in _OP_METHODS:
            raise _error(
                types.INVALID_PARAMS,
                f'{what}: each operation is {{"op": "savepoint"|"release", "savepoint": name}}',
            )
        ops.append((str(item["op"]), _check_id(item["savepoint"], f"{what}: savepoint")))
    return ops


class TransactionParticipant:
    """Serves the extension's methods for one low-level ``Server``; one open transaction per session."""

    def __init__(
        self,
        *,
        session_key: Callable[[Ctx], str],
        access: BackendAccess,
        features: Collection[str] = FEATURES,
        lease_s: float | None = DEFAULT_LEASE_S,
        on_lapse: Callable[[str], Awaitable[object]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        writers: int | None = None,
    ) -> None:
        if writers is not None and writers < 1:
            raise ValueError(f"writers must be a positive number or None, got {writers!r}")
        self.writers = writers
        """Transactions that can hold uncommitted writes at once (advertised; None: no limit)."""
        if lease_s is not None and not lease_s > 0:
            raise ValueError(f"lease_s must be a positive number of seconds or None, got {lease_s!r}")
        unknown = sorted(set(features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(FEATURES)}")
        self.session_key = session_key
        self.access = access
        self.features = tuple(f for f in FEATURES if f in features)
        """The optional features served (all by default; ``()`` behaves as a participant that
        predates them: piggybacked operations are refused with INVALID_PARAMS)."""
        self.lease_s = lease_s
        """A transaction no request named for this long is rolled back (None: never)."""
        self.on_lapse = on_lapse
        """Told the session key of each transaction rolled back for its lapsed lease (after the
        rollback), e.g. to free what the session holds (a pooled schema, a connection)."""
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()  # the registry is touched from worker threads

    def install(self, server: Server[Any]) -> None:
        """Register the methods and advertise the extension in both protocol eras."""
        handlers: dict[str, Handler] = {
            BEGIN: self._begin,
            SAVEPOINT: self._savepoint,
            ROLLBACK_TO: self._rollback_to,
            RELEASE: self._release,
            CHANGES: self._changes,
            QUERY: self._query,
            COMMIT: self._commit,
            ROLLBACK: self._rollback,
            RENEW: self._renew,
        }
        for method, handler in handlers.items():
            server.add_request_handler(method, TxParams, handler)
        entry = settings(self.features, self.writers)
        server.extensions[EXTENSION] = entry
        server.middleware.append(functools.partial(_advertise_in_handshake, entry=entry))
        server.middleware.append(self._carry_ops)
        server.middleware.append(self._renew_after)
        if self.lease_s is not None:
            inner = server.lifespan

            @contextlib.asynccontextmanager
            async def lifespan(app: Server[Any]) -> AsyncIterator[Any]:
                async with inner(app) as state, anyio.create_task_group() as tg:
                    tg.start_soon(self.run_reaper)
                    try:
                        yield state
                    finally:
                        tg.cancel_scope.cancel()

            server.lifespan = lifespan

    # -- leases
    async def _renew_after(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Server middleware: a request naming a transaction renews its lease when it is answered
        (it was renewed on arrival too), so a call longer than the lease does not lapse it."""
        result = await call_next(ctx)
        meta: Mapping[str, Any] = ctx.meta or {}
        tx = meta.get(TX_META_KEY)
        if isinstance(tx, str) and (ctx.method == "tools/call" or ctx.method in METHODS):
            self._touch(self.session_key(ctx), tx)
        return result

    def _touch(self, key: str, tx: str) -> None:
        with self._lock:
            entry = self._open.get(key)
            if entry is not None and entry.tx == tx:
                entry.renewed = self._clock()

    def _lapsed(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._lapsed_locked())

    async def reap(self) -> list[str]:
        """Roll back every transaction whose lease lapsed (serialised with its session's calls, and
        only if it is still open and still lapsed then); the session keys, after ``on_lapse``."""
        lapsed = []
        for key, tx in self._lapsed():

            def roll_back(backend: Backend, key: str = key, tx: str = tx) -> bool:
                with self._lock:
                    entry = self._open.get(key)
                    due = entry is not None and entry.tx == tx and (key, tx) in self._lapsed_locked()
                    if due:
                        del self._open[key]
                if not due:
                    return False
                try:
                    backend.rollback()
                except Exception as exc:  # its state is unknown: the host's on_lapse drops the session
                    logger.warning("transaction %s (lease lapsed): rollback failed: %s", tx, exc)
                return True

            if await self.access(key, roll_back):
                logger.info("transaction %s of session %s: lease lapsed, rolled back", tx, key)
                lapsed.append(key)
                if self.on_lapse is not None:
                    await self.on_lapse(key)
        return lapsed

    def _lapsed_locked(self) -> set[tuple[str, str]]:
        if self.lease_s is None:
            return set()
        cutoff = self._clock() - self.lease_s
        return {(key, e.tx) for key, e in self._open.items() if e.renewed < cutoff}

    async def run_reaper(self) -> None:
        """:meth:`reap` every quarter lease until cancelled (``install`` runs it in the server's lifespan)."""
        if self.lease_s is None:
            return
        while True:
            await anyio.sleep(max(self.lease_s / 4, 0.05))
            await self.reap()

    # -- what hosts call from their tools/call handler
    @staticmethod
    def transaction_of(ctx: Ctx) -> str | None:
        """The transaction id a request names in ``_meta`` (validated), or None."""
        meta: Mapping[str, Any] = ctx.meta or {}
        if TX_META_KEY not in meta:
            return None
        return _check_id(meta[TX_META_KEY], f"_meta[{TX_META_KEY!r}]")

    def check_call(self, key: str, tx: str | None, backend: Backend) -> None:
        """Refuse (before it runs) a call naming a transaction that is not open in its session.

        Call it inside :attr:`access`, with the backend it hands out, so that the check and the
        call see the same state. A call without a transaction id is the host's to place. The
        call's piggybacked operations (savepoint, release) are applied here, in the same worker
        thread and lock hold; a failed one raises its error and the tool must not run.
        """
        if tx is None:
            return
        carried = _CARRIED.get()
        if carried is not None and not carried.started and (carried.key, carried.tx) == (key, tx):
            self._run_ops(carried, backend)
        self._current(key, tx, backend)

    # -- piggybacked operations
    def _run_ops(self, carried: _Ops, backend: Backend) -> None:
        carried.started = True
        for index, (op, name) in enumerate(carried.ops):
            method = _OP_METHODS[op]
            try:
                entry = self._current(carried.key, carried.tx, backend)
                if op == OP_SAVEPOINT:
                    if name in entry.aliases:
                        raise _error(TX_STATE, f"{method}: savepoint {name!r} is already open")
                    entry.aliases[name] = _mapped(method, lambda b: b.savepoint(), backend)
                    carried.opened.append(name)
                else:
                    _mapped(method, functools.partial(_release, savepoint=entry.resolve(name)), backend)
                    entry.closed(name)
            except MCPError as exc:
                data = {OP_ERROR_KEY: {"index": index, "method": method}}
                carried.failure = MCPError(code=exc.code, message=exc.message, data=data)
                raise carried.failure from exc

    def _report(self, carried: _Ops, backend: Backend) -> dict[str, Any]:
        """What a tools/call answers in ``_meta["shadowguard/tx"]``: the changes since each savepoint
        its operations opened (or the error that reading them met, for the client to raise)."""
        out: dict[str, Any] = {}
        for name in carried.opened:
            try:
                entry = self._current(carried.key, carried.tx, backend)
                real = entry.aliases.get(name)
                if real is None:
                    raise _error(TX_STATE, f"{CHANGES}: unknown or closed savepoint {name!r}")
                changes = _mapped(CHANGES, functools.partial(_changes_since, since=real), backend)
            except MCPError as exc:
                out[name] = {"error": {"code": exc.code, "message": exc.message}}
            else:
                out[name] = {"changes": changes.model_dump(mode="json")["changes"]}
        return {"savepoints": out}

    async def _carry_ops(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Server middleware: apply a tools/call's piggybacked operations before its tool (in
        :meth:`check_call`, or here when the host never called it) and report the change sets."""
        meta: Mapping[str, Any] = ctx.meta or {}
        if OPS_META_KEY not in meta or (ctx.method in METHODS and PIGGYBACK in self.features):
            return await call_next(ctx)
        if PIGGYBACK not in self.features:
            raise _error(
                types.INVALID_PARAMS, f"_meta[{OPS_META_KEY!r}]: this participant does not piggyback"
            )
        if ctx.method != "tools/call":
            raise _error(
                types.INVALID_PARAMS,
                f"_meta[{OPS_META_KEY!r}] rides only on tools/call and {EXTENSION} requests",
            )
        key, tx = self._selectors(ctx, "tools/call")
        carried = _Ops(key, tx, _parse_ops(meta[OPS_META_KEY]))
        token = _CARRIED.set(carried)
        try:
            result = await call_next(ctx)
        except Exception:
            if carried.failure is not None:
                raise carried.failure from None
            if not carried.started:
                await self.access(key, functools.partial(self._run_ops, carried))
            raise
        finally:
            _CARRIED.reset(token)
        if carried.failure is not None:  # the host turned the failure into a result: the tool did not run
            raise carried.failure
        if not carried.started:
            await self.access(key, functools.partial(self._run_ops, carried))
        if not carried.opened:
            return result
        report = await self.access(key, functools.partial(self._report, carried))
        if isinstance(result, BaseModel):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        wire = dict(result or {})
        wire["_meta"] = {**(wire.get("_meta") or {}), TX_META_KEY: report}
        return wire

    # -- registry
    def _current(self, key: str, tx: str, backend: Backend) -> _Open:
        with self._lock:
            entry = self._open.get(key)
            if entry is None or entry.tx != tx:
                raise _error(
                    TX_UNKNOWN,
                    f"no open transaction {tx!r} in this session (never begun, ended, or rolled back "
                    "when its lease lapsed)",
                )
            if entry.backend() is not backend:
                del self._open[key]
                raise _error(
                    TX_UNKNOWN,
                    f"transaction {tx!r} is gone: the session's state was replaced or closed, "
                    "and its changes with it",
                )
            entry.renewed = self._clock()
            return entry

    def _register(self, key: str, tx: str, backend: Backend) -> None:
        with self._lock:
            for k in [k for k, e in self._open.items() if e.backend() is None]:
                del self._open[k]
            entry = self._open.get(key)
            if entry is not None and entry.backend() is backend:
                raise _error(TX_STATE, f"transaction {entry.tx!r} is already open in this session")
            self._open[key] = _Open(tx, weakref.ref(backend), renewed=self._clock())

    def _forget(self, key: str, tx: str) -> None:
        with self._lock:
            entry = self._open.get(key)
            if entry is not None and entry.tx == tx:
                del self._open[key]

    # -- handlers
    @staticmethod
    def _accept(method: str, params: TxParams, allowed: Collection[str]) -> None:
        given = (params.model_fields_set | set(params.model_extra or {})) - {"meta"}
        unknown = sorted(given - set(allowed))
        if unknown:
            expected = ", ".join(sorted(allowed)) or "none"
            raise _error(
                types.INVALID_PARAMS, f"{method}: unknown parameter(s) {unknown}; expected: {expected}"
            )

    def _selectors(self, ctx: Ctx, method: str) -> tuple[str, str]:
        tx = self.transaction_of(ctx)
        if tx is None:
            raise _error(types.INVALID_PARAMS, f"{method}: _meta[{TX_META_KEY!r}] names no transaction")
        return self.session_key(ctx), tx

    async def _within(
        self, ctx: Ctx, method: str, op: Callable[[Backend, _Open], T], *, ends: bool = False
    ) -> T:
        key, tx = self._selectors(ctx, method)
        meta: Mapping[str, Any] = ctx.meta or {}
        carried = _Ops(key, tx, _parse_ops(meta[OPS_META_KEY])) if OPS_META_KEY in meta else None

        def work(backend: Backend) -> T:
            if carried is not None:
                self._run_ops(carried, backend)
            entry = self._current(key, tx, backend)
            try:
                result = _mapped(method, lambda b: op(b, entry), backend)
            except MCPError as exc:
                if ends and exc.code == TX_FAILED:  # a refusal keeps the transaction; a failure ends it
                    self._forget(key, tx)
                raise
            if ends:
                self._forget(key, tx)
            return result

        return await self.access(key, work)

    async def _begin(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(BEGIN, params, ())
        key, tx = self._selectors(ctx, BEGIN)
        if OPS_META_KEY in (ctx.meta or {}):
            raise _error(types.INVALID_PARAMS, f"{BEGIN}: nothing can be piggybacked before a transaction")

        def work(backend: Backend) -> None:
            self._register(key, tx, backend)
            try:
                _mapped(BEGIN, lambda b: b.begin(), backend)
            except BaseException:
                self._forget(key, tx)
                raise

        await self.access(key, work)
        answer: dict[str, Any] = {"features": list(self.features)} if self.features else {}
        if self.lease_s is not None:
            answer["lease_s"] = self.lease_s
        return answer

    async def _savepoint(self, ctx: Ctx, params: TxParams) -> TxSavepointResult:
        self._accept(SAVEPOINT, params, ())
        name = await self._within(ctx, SAVEPOINT, lambda b, _: b.savepoint())
        return TxSavepointResult(savepoint=name)

    async def _rollback_to(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK_TO, params, ("savepoint",))
        name = _check_id(params.savepoint, f"{ROLLBACK_TO}: savepoint")

        def rollback_to(backend: Backend, entry: _Open) -> None:
            backend.rollback_to(entry.resolve(name))
            entry.closed(name)

        await self._within(ctx, ROLLBACK_TO, rollback_to)
        return {}

    async def _release(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(RELEASE, params, ("savepoint",))
        name = _check_id(params.savepoint, f"{RELEASE}: savepoint")

        def release(backend: Backend, entry: _Open) -> None:
            backend.release(entry.resolve(name))
            entry.closed(name)

        await self._within(ctx, RELEASE, release)
        return {}

    async def _changes(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(CHANGES, params, ("since",))
        since = None if params.since is None else _check_id(params.since, f"{CHANGES}: since")
        changes = await self._within(
            ctx, CHANGES, lambda b, entry: b.changes(None if since is None else entry.resolve(since))
        )
        return changes.model_dump(mode="json")

    async def _query(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(QUERY, params, ("sql", "params"))
        if not isinstance(params.sql, str) or not params.sql.strip():
            raise _error(types.INVALID_PARAMS, f"{QUERY}: sql must be a non-empty string")
        if params.params is not None and not isinstance(params.params, Mapping):
            raise _error(types.INVALID_PARAMS, f"{QUERY}: params must be an object of :name -> value")
        sql, bound = params.sql, dict(params.params or {})
        rows = await self._within(ctx, QUERY, lambda b, _: b.query(sql, bound))
        return {"rows": to_jsonable_python(rows)}

    async def _commit(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(COMMIT, params, ())
        await self._within(ctx, COMMIT, lambda b, _: b.commit(), ends=True)
        return {}

    async def _rollback(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK, params, ())
        await self._within(ctx, ROLLBACK, lambda b, _: b.rollback(), ends=True)
        return {}

    async def _renew(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        """The guard is alive and the transaction still wanted: its lease starts again."""
        self._accept(RENEW, params, ())
        await self._within(ctx, RENEW, lambda b, _: None)
        return {}


def _release(backend: Backend, *, savepoint: str) -> None:
    backend.release(savepoint)


def _changes_since(backend: Backend, *, since: str) -> ChangeSet:
    return backend.changes(since)


def _mapped(method: str, op: Callable[[Backend], T], backend: Backend) -> T:
    """Run one backend operation; its failures become the extension's JSON-RPC errors."""
    try:
        return op(backend)
    except NotReversibleError as exc:
        raise _error(NOT_REVERSIBLE, f"{method}: {exc}") from exc
    except BackendError as exc:
        raise _error(TX_STATE, f"{method}: {exc}") from exc
    except SqlTextError as exc:
        raise _error(QUERY_REFUSED, f"{method}: {exc}") from exc
    except sa.exc.DBAPIError as exc:
        if method == QUERY:  # the SELECT ran in a savepoint that was rolled back: nothing changed
            raise _error(QUERY_REFUSED, f"{method}: the database refused the query: {exc.orig}") from exc
        raise _error(TX_FAILED, f"{method}: database error: {exc.orig}") from exc
    except sa.exc.SQLAlchemyError as exc:
        raise _error(TX_FAILED, f"{method}: {exc}") from exc


# -- client side ------------------------------------------------------------------------------------


class TransactionError(BackendError):
    """A participant answered a tx request with an error; ``code`` is the JSON-RPC code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class NotReversibleTransactionError(TransactionError, NotReversibleError):
    """The participant answered ``NOT_REVERSIBLE``: nothing was undone (a :class:`NotReversibleError`)."""


def _text(result: types.CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))


class _Reported:
    """A savepoint's change set as a tools/call answered it, or the error met reading it."""

    def __init__(self, changes: ChangeSet | None, error: TransactionError | None) -> None:
        self.changes = changes
        self.error = error


class RemoteBackend:
    """A participant as a synchronous :class:`Backend` (see the module docstring for threads).

    ``meta`` is merged into every request's ``_meta`` (e.g. the upstream's session selector);
    :meth:`begin` chooses the transaction id, which every later request carries. Tool calls for
    the transaction go through :meth:`call_tool` / :meth:`executor` so that they carry it too; a
    caller that sends them itself wraps each in :meth:`tool_call_meta` and :meth:`tool_call_done` /
    :meth:`tool_call_failed`.

    With ``piggyback`` (the default) and a participant that serves it (its ``begin`` answer says
    so), :meth:`savepoint` and :meth:`release` send nothing: they are queued and ride on the next
    request, and :meth:`changes` since a savepoint is answered from the change set the next
    ``tools/call`` reported. One tools/call is then one round trip. A queued operation that fails
    raises its :class:`TransactionError` from the request it rode on, and again from any later use
    of a savepoint it kept from opening. :meth:`commit` sends the queue first; :meth:`rollback`
    drops it (nothing queued can change what a rollback does).
    """

    transactional = True

    def __init__(
        self,
        session: ClientSession,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        portal: BlockingPortal | None = None,
        piggyback: bool = True,
    ) -> None:
        if meta is not None and TX_META_KEY in meta:
            raise ValueError(f"meta must not set {TX_META_KEY!r}: begin() chooses the transaction id")
        self.session = session
        self.meta = dict(meta or {})
        self.timeout = timeout
        self._portal = portal
        self.piggyback = piggyback
        self.tx: str | None = None
        self.piggybacking = False
        """True between begin and the transaction's end when operations are piggybacked."""
        self._names = 0
        self._queue: list[dict[str, str]] = []
        self._in_flight: list[dict[str, str]] = []
        self._open: list[str] = []
        """Piggybacked savepoints not yet released or rolled back to, oldest first."""
        self._reported: dict[str, _Reported] = {}
        self._failed: dict[str, TransactionError] = {}
        self.lease_s: float | None = None
        """The open transaction's lease, as the participant's ``begin`` answered (None: none)."""
        self.last_sent = time.monotonic()
        """When a request naming the transaction was last sent (:meth:`renewal_due`)."""

    def _sync(self, func: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._portal is not None:
            result: T = self._portal.call(func)
            return result
        return anyio.from_thread.run(func)

    def _meta(self, tx: str) -> dict[str, Any]:
        return {**self.meta, TX_META_KEY: tx}

    def _request(self, method: str, result_type: type[R], **fields: Any) -> R:
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        return self._send(self.tx, method, result_type, fields)

    def _take_queue(self) -> list[dict[str, str]]:
        ops, self._queue = self._queue, []
        self._in_flight = ops
        return ops

    def _send(self, tx: str, method: str, result_type: type[R], fields: Mapping[str, Any]) -> R:
        self.last_sent = time.monotonic()
        meta = self._meta(tx)
        ops = self._take_queue()
        if ops:
            meta[OPS_META_KEY] = ops
        params = TxParams.model_validate({"_meta": meta, **fields})
        send = functools.partial(
            self.session.send_request, TxRequest(method=method, params=params), result_type, self.timeout
        )
        try:
            result = self._sync(send)
        except MCPError as exc:
            raise self._failure(exc, method) from exc
        self._in_flight = []
        return result

    def _failure(self, exc: MCPError, method: str) -> BackendError:
        """The error to raise for a failed request: a failed piggybacked operation's own error (and
        the savepoints it kept from opening remember it), else the request's."""
        op = exc.data.get(OP_ERROR_KEY) if isinstance(exc.data, Mapping) else None
        ops, self._in_flight = self._in_flight, []
        if isinstance(op, Mapping) and isinstance(op.get("index"), int) and 0 <= op["index"] < len(ops):
            error = self._error(str(op.get("method")), exc)
            for item in ops[op["index"] :]:
                if item["op"] == OP_SAVEPOINT:
                    self._failed[item["savepoint"]] = error
                    self._forget_from(item["savepoint"])
            return error
        return self._error(method, exc)

    @staticmethod
    def _error(method: str, exc: MCPError) -> TransactionError:
        if exc.code == NOT_REVERSIBLE:
            return NotReversibleTransactionError(exc.message, exc.code)
        return TransactionError(f"{method} failed ({exc.code}): {exc.message}", exc.code)

    def _forget_from(self, savepoint: str) -> None:
        """``savepoint`` and the piggybacked ones opened after it are closed (or never opened)."""
        if savepoint in self._open:
            for name in self._open[self._open.index(savepoint) :]:
                self._reported.pop(name, None)
            del self._open[self._open.index(savepoint) :]

    def _check_usable(self, savepoint: str) -> None:
        error = self._failed.get(savepoint)
        if error is not None:
            raise error

    def _reset(self) -> None:
        self.piggybacking = False
        self._queue, self._in_flight, self._open = [], [], []
        self._reported.clear()
        self._failed.clear()

    # -- Backend
    def begin(self) -> None:
        if self.tx is not None:
            raise BackendError(f"transaction {self.tx} already begun")
        tx = uuid.uuid4().hex
        self._reset()
        try:
            answer = self._send(tx, BEGIN, TxBeginResult, {})
        except TransactionError as exc:
            if exc.code == types.METHOD_NOT_FOUND:
                raise BackendError(
                    f"the upstream does not serve {BEGIN}: it does not participate in {EXTENSION}; "
                    "drive it through guard.journal.JournalBackend instead"
                ) from exc
            raise
        self.tx = tx
        self.piggybacking = self.piggyback and PIGGYBACK in answer.features
        self.lease_s = answer.lease_s

    def savepoint(self) -> str:
        if not self.piggybacking:
            return self._request(SAVEPOINT, TxSavepointResult).savepoint
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        self._names += 1
        name = f"p{self._names}"
        self._queue.append({"op": OP_SAVEPOINT, "savepoint": name})
        self._open.append(name)
        return name

    def rollback_to(self, savepoint: str) -> None:
        self._check_usable(savepoint)
        self._reported.clear()  # what was reported since older savepoints is partly undone now
        self._request(ROLLBACK_TO, types.EmptyResult, savepoint=savepoint)
        self._forget_from(savepoint)

    def release(self, savepoint: str) -> None:
        self._check_usable(savepoint)
        if not self.piggybacking:
            self._request(RELEASE, types.EmptyResult, savepoint=savepoint)
            return
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        self._queue.append({"op": OP_RELEASE, "savepoint": savepoint})
        self._forget_from(savepoint)

    def changes(self, since: str | None = None) -> ChangeSet:
        if since is not None:
            self._check_usable(since)
            reported = self._reported.get(since) if since in self._open else None
            if reported is not None:
                if reported.error is not None:
                    raise reported.error
                assert reported.changes is not None
                return reported.changes
        fields = {} if since is None else {"since": since}
        return ChangeSet(changes=self._request(CHANGES, TxChangesResult, **fields).changes)

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._request(QUERY, TxQueryResult, sql=sql, params=dict(params or {})).rows

    def commit(self) -> None:
        self._end(COMMIT)

    def rollback(self) -> None:
        self._queue = []
        self._end(ROLLBACK)

    def _end(self, method: str) -> None:
        try:
            self._request(method, types.EmptyResult)
        except TransactionError as exc:
            if exc.code in (TX_UNKNOWN, TX_FAILED):
                self.tx = None  # the participant no longer holds it (or its state is unknown)
                self._reset()
            raise
        self.tx = None
        self._reset()

    # -- tool calls inside the transaction
    def tool_call_meta(self) -> dict[str, Any]:
        """The ``_meta`` a tools/call in the transaction carries: :attr:`meta`, the transaction id and
        the queued operations (now in flight: report the answer with :meth:`tool_call_done` or
        :meth:`tool_call_failed`)."""
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        self.last_sent = time.monotonic()
        meta = self._meta(self.tx)
        ops = self._take_queue()
        if ops:
            meta[OPS_META_KEY] = ops
        return meta

    # -- leases
    def renewal_due(self) -> bool:
        """The open transaction has a lease, and a third of it passed since a request named it."""
        return (
            self.tx is not None
            and self.lease_s is not None
            and time.monotonic() - self.last_sent >= self.lease_s / 3
        )

    async def renew(self) -> None:
        """Renew the open transaction's lease (on the event loop; never while a worker thread uses
        this backend: the caller holds the lock its calls run under). Raises TransactionError."""
        if self.tx is None:
            return
        self.last_sent = time.monotonic()
        params = TxParams.model_validate({"_meta": self._meta(self.tx)})
        try:
            await self.session.send_request(
                TxRequest(method=RENEW, params=params), types.EmptyResult, self.timeout
            )
        except MCPError as exc:
            raise self._error(RENEW, exc) from exc

    def tool_call_done(self, result: types.CallToolResult) -> None:
        """The tools/call answered (an ``isError`` result too): its operations were applied; keep the
        change sets it reported for :meth:`changes`."""
        self._in_flight = []
        self._reported.clear()
        report = (result.meta or {}).get(TX_META_KEY)
        savepoints = report.get("savepoints") if isinstance(report, Mapping) else None
        if not isinstance(savepoints, Mapping):
            return
        for name, entry in savepoints.items():
            if name not in self._open or not isinstance(entry, Mapping):
                continue
            if isinstance(entry.get("error"), Mapping):
                error = entry["error"]
                code = error.get("code") if isinstance(error.get("code"), int) else TX_FAILED
                failure = MCPError(code=code, message=str(error.get("message")))
                self._reported[name] = _Reported(None, self._error(CHANGES, failure))
            elif isinstance(entry.get("changes"), list):
                changes = ChangeSet.model_validate({"changes": entry["changes"]})
                self._reported[name] = _Reported(changes, None)

    def tool_call_failed(self, exc: MCPError) -> BackendError | None:
        """The tools/call answered with a JSON-RPC error: the :class:`TransactionError` to raise
        instead when a piggybacked operation failed (the tool did not run), else ``None`` (the
        operations were applied; the tool's error is the caller's to handle)."""
        self._reported.clear()
        op = exc.data.get(OP_ERROR_KEY) if isinstance(exc.data, Mapping) else None
        if op is None:
            self._in_flight = []
            return None
        return self._failure(exc, "tools/call")

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        meta = self.tool_call_meta()
        call = functools.partial(self.session.call_tool, name, dict(arguments or {}), self.timeout, meta=meta)
        try:
            result = self._sync(call)
        except MCPError as exc:
            error = self.tool_call_failed(exc)
            if error is not None:
                raise error from exc
            raise
        self.tool_call_done(result)
        return result

    def executor(self, *, is_error: Callable[[str], bool] | None = None) -> Executor:
        """An executor for GuardSession; ``is_error`` recognises tools that report errors in-band."""

        def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            result = self.call_tool(tool, arguments)
            text = _text(result)
            failed = bool(result.is_error) or (is_error is not None and is_error(text))
            return ToolResult(text=text, is_error=failed)

        return execute
