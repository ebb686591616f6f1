"""The guard's side of ``shadowguard/tx``: :class:`RemoteBackend` drives a participant as a
:class:`guard.backend.Backend`, so that writes run inside a shadow transaction on the upstream itself
and row-level change sets come from its database.

RemoteBackend is synchronous because :class:`guard.session.GuardSession` is. Run the GuardSession in
a worker thread (``await anyio.to_thread.run_sync(...)``); RemoteBackend then reaches the async
``mcp.ClientSession`` on the event loop with ``anyio.from_thread.run``. Outside an AnyIO worker
thread, pass a ``BlockingPortal`` whose loop owns the ClientSession. Calling RemoteBackend on the
event loop thread itself fails with AnyIO's RuntimeError: it would block the loop that must answer it.

Errors: every error answer of the participant is a :class:`TransactionError` (a
:class:`~guard.backend.BackendError` with the JSON-RPC ``code``); ``NOT_REVERSIBLE`` is its subclass
:class:`NotReversibleTransactionError`, also a :class:`~guard.backend.NotReversibleError`.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import anyio.from_thread
import mcp.types as types
from anyio.from_thread import BlockingPortal
from mcp import ClientSession, MCPError

from guard.backend import BackendError, NotReversibleError
from guard.models import ChangeSet
from guard.session import Executor, ToolResult
from guard.txext.protocol import (
    BEGIN,
    CHANGES,
    COMMIT,
    EXTENSION,
    NOT_REVERSIBLE,
    OP_ERROR_KEY,
    OP_RELEASE,
    OP_SAVEPOINT,
    OPS_META_KEY,
    PIGGYBACK,
    QUERY,
    RELEASE,
    RENEW,
    ROLLBACK,
    ROLLBACK_TO,
    SAVEPOINT,
    TX_FAILED,
    TX_META_KEY,
    TX_UNKNOWN,
    TxBeginResult,
    TxChangesResult,
    TxParams,
    TxQueryResult,
    TxRequest,
    TxSavepointResult,
)

T = TypeVar("T")
R = TypeVar("R", bound=types.Result)

SendToolCall = Callable[[dict[str, Any]], types.CallToolResult]
SendToolCallAsync = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]
"""Sends one ``tools/call`` with the ``_meta`` it is given and returns the answer (synchronously);
raises ``MCPError`` for a JSON-RPC error answer."""


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
    the transaction go through :meth:`call_tool` / :meth:`executor`, or, for a caller that sends
    them on a connection of its own, :meth:`send_tool_call`, so that they carry it too.

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

    # -- tool calls inside the transaction
    def send_tool_call(
        self, send: SendToolCall, meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        """One ``tools/call`` in the open transaction: the piggyback sequence, in one place.

        ``send`` gets the call's ``_meta``: ``meta`` (the caller's own, e.g. a progress token),
        :attr:`meta`, the transaction id and the queued operations, which ride on it. The change
        sets the answer reports (an ``isError`` result too) are kept for :meth:`changes`. When the
        answer is a JSON-RPC error because a piggybacked operation failed, the tool did not run and
        that operation's :class:`TransactionError` is raised instead; any other error of ``send`` is
        raised as it is (the operations were applied; the tool's error is the caller's to handle).
        BackendError without an open transaction. :meth:`send_tool_call_async` is the same on an
        event loop.
        """
        wire = self._tool_call_meta(meta)
        try:
            result = send(wire)
        except MCPError as exc:
            failed = self._tool_call_failed(exc)
            if failed is exc:
                raise
            raise failed from exc
        return self._tool_call_answered(result)

    async def send_tool_call_async(
        self, send: SendToolCallAsync, meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        """:meth:`send_tool_call` with ``send`` awaited (the proxy's calls on the event loop)."""
        wire = self._tool_call_meta(meta)
        try:
            result = await send(wire)
        except MCPError as exc:
            failed = self._tool_call_failed(exc)
            if failed is exc:
                raise
            raise failed from exc
        return self._tool_call_answered(result)

    def _tool_call_meta(self, meta: Mapping[str, Any] | None) -> dict[str, Any]:
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        self.last_sent = time.monotonic()
        wire = {**(meta or {}), **self._meta(self.tx)}
        ops = self._take_queue()
        if ops:
            wire[OPS_META_KEY] = ops
        return wire

    def _tool_call_failed(self, exc: MCPError) -> Exception:
        """What a ``tools/call`` that raised ``exc`` raises: a failed operation's TransactionError,
        else ``exc`` itself."""
        self._reported.clear()
        op = exc.data.get(OP_ERROR_KEY) if isinstance(exc.data, Mapping) else None
        if op is None:
            self._in_flight = []
            return exc
        return self._failure(exc, "tools/call")

    def _tool_call_answered(self, result: types.CallToolResult) -> types.CallToolResult:
        self._in_flight = []
        self._keep_reported(result)
        return result

    def reported(self, savepoint: str) -> bool:
        """:meth:`changes` since ``savepoint`` needs no request (the last tools/call reported it, or
        its own error is raised): guard.backend.Piggybacking."""
        return savepoint in self._failed or (savepoint in self._open and savepoint in self._reported)

    def _keep_reported(self, result: types.CallToolResult) -> None:
        """Keep the change sets (or errors) ``result`` reports for the savepoints still open."""
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

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        """One ``tools/call`` on :attr:`session`, in the open transaction (:meth:`send_tool_call`)."""

        def send(meta: dict[str, Any]) -> types.CallToolResult:
            call = functools.partial(
                self.session.call_tool, name, dict(arguments or {}), self.timeout, meta=meta
            )
            return self._sync(call)

        return self.send_tool_call(send)

    def executor(self, *, is_error: Callable[[str], bool] | None = None) -> Executor:
        """An executor for GuardSession; ``is_error`` recognises tools that report errors in-band."""

        def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            result = self.call_tool(tool, arguments)
            text = _text(result)
            failed = bool(result.is_error) or (is_error is not None and is_error(text))
            return ToolResult(text=text, is_error=failed)

        return execute
