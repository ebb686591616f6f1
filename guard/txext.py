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

import functools
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
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
METHODS = (BEGIN, SAVEPOINT, ROLLBACK_TO, RELEASE, CHANGES, QUERY, COMMIT, ROLLBACK)

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


class TxSavepointResult(types.Result):
    savepoint: str


class TxChangesResult(types.Result):
    changes: list[RowChange]


class TxQueryResult(types.Result):
    rows: list[dict[str, Any]]


def settings() -> dict[str, Any]:
    """What a participant advertises at ``capabilities.extensions["shadowguard/tx"]``."""
    return {"versions": [VERSION], "methods": list(METHODS)}


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


async def _advertise_in_handshake(ctx: Ctx, call_next: CallNext) -> HandlerResult:
    """Add the entry to ``capabilities.experimental`` of an ``initialize`` result (handshake era)."""
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        capabilities = dict(result.get("capabilities") or {})
        capabilities["experimental"] = {**(capabilities.get("experimental") or {}), EXTENSION: settings()}
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


class TransactionParticipant:
    """Serves the extension's methods for one low-level ``Server``; one open transaction per session."""

    def __init__(self, *, session_key: Callable[[Ctx], str], access: BackendAccess) -> None:
        self.session_key = session_key
        self.access = access
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
        }
        for method, handler in handlers.items():
            server.add_request_handler(method, TxParams, handler)
        server.extensions[EXTENSION] = settings()
        server.middleware.append(_advertise_in_handshake)

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
        call see the same state. A call without a transaction id is the host's to place.
        """
        if tx is not None:
            self._current(key, tx, backend)

    # -- registry
    def _current(self, key: str, tx: str, backend: Backend) -> _Open:
        with self._lock:
            entry = self._open.get(key)
            if entry is None or entry.tx != tx:
                raise _error(TX_UNKNOWN, f"no open transaction {tx!r} in this session")
            if entry.backend() is not backend:
                del self._open[key]
                raise _error(
                    TX_UNKNOWN,
                    f"transaction {tx!r} is gone: the session's state was replaced or closed, "
                    "and its changes with it",
                )
            return entry

    def _register(self, key: str, tx: str, backend: Backend) -> None:
        with self._lock:
            for k in [k for k, e in self._open.items() if e.backend() is None]:
                del self._open[k]
            entry = self._open.get(key)
            if entry is not None and entry.backend() is backend:
                raise _error(TX_STATE, f"transaction {entry.tx!r} is already open in this session")
            self._open[key] = _Open(tx, weakref.ref(backend))

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

    async def _within(self, ctx: Ctx, method: str, op: Callable[[Backend], T], *, ends: bool = False) -> T:
        key, tx = self._selectors(ctx, method)

        def work(backend: Backend) -> T:
            self._current(key, tx, backend)
            try:
                result = _mapped(method, op, backend)
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

        def work(backend: Backend) -> None:
            self._register(key, tx, backend)
            try:
                _mapped(BEGIN, lambda b: b.begin(), backend)
            except BaseException:
                self._forget(key, tx)
                raise

        await self.access(key, work)
        return {}

    async def _savepoint(self, ctx: Ctx, params: TxParams) -> TxSavepointResult:
        self._accept(SAVEPOINT, params, ())
        name = await self._within(ctx, SAVEPOINT, lambda b: b.savepoint())
        return TxSavepointResult(savepoint=name)

    async def _rollback_to(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK_TO, params, ("savepoint",))
        name = _check_id(params.savepoint, f"{ROLLBACK_TO}: savepoint")
        await self._within(ctx, ROLLBACK_TO, lambda b: b.rollback_to(name))
        return {}

    async def _release(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(RELEASE, params, ("savepoint",))
        name = _check_id(params.savepoint, f"{RELEASE}: savepoint")
        await self._within(ctx, RELEASE, lambda b: b.release(name))
        return {}

    async def _changes(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(CHANGES, params, ("since",))
        since = None if params.since is None else _check_id(params.since, f"{CHANGES}: since")
        changes = await self._within(ctx, CHANGES, lambda b: b.changes(since))
        return changes.model_dump(mode="json")

    async def _query(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(QUERY, params, ("sql", "params"))
        if not isinstance(params.sql, str) or not params.sql.strip():
            raise _error(types.INVALID_PARAMS, f"{QUERY}: sql must be a non-empty string")
        if params.params is not None and not isinstance(params.params, Mapping):
            raise _error(types.INVALID_PARAMS, f"{QUERY}: params must be an object of :name -> value")
        sql, bound = params.sql, dict(params.params or {})
        rows = await self._within(ctx, QUERY, lambda b: b.query(sql, bound))
        return {"rows": to_jsonable_python(rows)}

    async def _commit(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(COMMIT, params, ())
        await self._within(ctx, COMMIT, lambda b: b.commit(), ends=True)
        return {}

    async def _rollback(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK, params, ())
        await self._within(ctx, ROLLBACK, lambda b: b.rollback(), ends=True)
        return {}


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


def _text(result: types.CallToolResult) -> str:
    return "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))


class RemoteBackend:
    """A participant as a synchronous :class:`Backend` (see the module docstring for threads).

    ``meta`` is merged into every request's ``_meta`` (e.g. the upstream's session selector);
    :meth:`begin` chooses the transaction id, which every later request carries. Tool calls for
    the transaction go through :meth:`call_tool` / :meth:`executor` so that they carry it too.
    """

    transactional = True

    def __init__(
        self,
        session: ClientSession,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        portal: BlockingPortal | None = None,
    ) -> None:
        if meta is not None and TX_META_KEY in meta:
            raise ValueError(f"meta must not set {TX_META_KEY!r}: begin() chooses the transaction id")
        self.session = session
        self.meta = dict(meta or {})
        self.timeout = timeout
        self._portal = portal
        self.tx: str | None = None

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

    def _send(self, tx: str, method: str, result_type: type[R], fields: Mapping[str, Any]) -> R:
        params = TxParams.model_validate({"_meta": self._meta(tx), **fields})
        send = functools.partial(
            self.session.send_request, TxRequest(method=method, params=params), result_type, self.timeout
        )
        try:
            return self._sync(send)
        except MCPError as exc:
            if exc.code == NOT_REVERSIBLE:
                raise NotReversibleError(exc.message) from exc
            raise TransactionError(f"{method} failed ({exc.code}): {exc.message}", exc.code) from exc

    # -- Backend
    def begin(self) -> None:
        if self.tx is not None:
            raise BackendError(f"transaction {self.tx} already begun")
        tx = uuid.uuid4().hex
        try:
            self._send(tx, BEGIN, types.EmptyResult, {})
        except TransactionError as exc:
            if exc.code == types.METHOD_NOT_FOUND:
                raise BackendError(
                    f"the upstream does not serve {BEGIN}: it does not participate in {EXTENSION}; "
                    "drive it through guard.journal.JournalBackend instead"
                ) from exc
            raise
        self.tx = tx

    def savepoint(self) -> str:
        return self._request(SAVEPOINT, TxSavepointResult).savepoint

    def rollback_to(self, savepoint: str) -> None:
        self._request(ROLLBACK_TO, types.EmptyResult, savepoint=savepoint)

    def release(self, savepoint: str) -> None:
        self._request(RELEASE, types.EmptyResult, savepoint=savepoint)

    def changes(self, since: str | None = None) -> ChangeSet:
        fields = {} if since is None else {"since": since}
        return ChangeSet(changes=self._request(CHANGES, TxChangesResult, **fields).changes)

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._request(QUERY, TxQueryResult, sql=sql, params=dict(params or {})).rows

    def commit(self) -> None:
        self._end(COMMIT)

    def rollback(self) -> None:
        self._end(ROLLBACK)

    def _end(self, method: str) -> None:
        try:
            self._request(method, types.EmptyResult)
        except TransactionError as exc:
            if exc.code in (TX_UNKNOWN, TX_FAILED):
                self.tx = None  # the participant no longer holds it (or its state is unknown)
            raise
        self.tx = None

    # -- tool calls inside the transaction
    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        call = functools.partial(
            self.session.call_tool, name, dict(arguments or {}), self.timeout, meta=self._meta(self.tx)
        )
        return self._sync(call)

    def executor(self, *, is_error: Callable[[str], bool] | None = None) -> Executor:
        """An executor for GuardSession; ``is_error`` recognises tools that report errors in-band."""

        def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            result = self.call_tool(tool, arguments)
            text = _text(result)
            failed = bool(result.is_error) or (is_error is not None and is_error(text))
            return ToolResult(text=text, is_error=failed)

        return execute
