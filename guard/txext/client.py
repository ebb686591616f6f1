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

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import anyio.from_thread
import mcp.types as types
from anyio.from_thread import BlockingPortal
from mcp import ClientSession, MCPError

from guard.backend import BackendError
from guard.models import ChangeSet
from guard.session import Executor
from guard.txext import toolcalls
from guard.txext.after import Query, asked, key, read_answers, wire
from guard.txext.protocol import (
    AFTER,
    AFTER_META_KEY,
    BEGIN,
    CHANGES,
    COMMIT,
    EXTENSION,
    OP_RELEASE,
    OP_SAVEPOINT,
    OP_WATCH,
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
    WATCH,
    TxBeginResult,
    TxChangesResult,
    TxParams,
    TxQueryResult,
    TxRequest,
    TxSavepointResult,
)
from guard.txext.toolcalls import (
    NotReversibleTransactionError,
    Reported,
    SendToolCall,
    SendToolCallAsync,
    TransactionError,
    executor_for,
    tx_error,
)

__all__ = [
    "NotReversibleTransactionError",
    "RemoteBackend",
    "SendToolCall",
    "SendToolCallAsync",
    "TransactionError",
    "TxSession",
]

T = TypeVar("T")
R = TypeVar("R", bound=types.Result)


class TxSession(Protocol):
    """What RemoteBackend uses of its client session: an ``mcp.ClientSession``, or a stand-in that
    sends the same requests another way with the same results and errors (the proxy's
    ``proxy.lean_upstream.LeanTxSession``)."""

    async def send_request(
        self,
        request: types.Request[Any, Any],
        result_type: type[R],
        request_read_timeout_seconds: float | None = None,
    ) -> R: ...

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        *,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult: ...


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

    With a participant that also serves ``watch`` (docs/adr/013), a savepoint opened inside
    :meth:`reading` (a read-classified call) is a *watch*: no savepoint of its own, only the change
    log's position, reported like a savepoint's change set. What a watched call changed is undone by
    rolling back to the *anchor*, a real savepoint opened before the first watch of a run of reads
    and kept while every call since it carried a watch that changed nothing; so undoing it undoes
    exactly that call. Without an anchor to use, the participant refuses (NOT_REVERSIBLE: nothing
    undone) rather than undo more or less than the call did.
    """

    transactional = True

    def __init__(
        self,
        session: ClientSession | TxSession,
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
        self._reported: dict[str, Reported] = {}
        self._failed: dict[str, TransactionError] = {}
        self.watching = False
        """True between begin and the transaction's end when reads are watched (docs/adr/013)."""
        self._read_next = False
        self._anchor: str | None = None
        """The open savepoint watched reads are undone to; ``_clean``: nothing changed since it."""
        self._clean = False
        self._watches: dict[str, str] = {}
        """Open watch -> the anchor open when it was opened."""
        self._last_watch: str | None = None
        """The watch the last tools/call carried (None: it carried none)."""
        self.answering = False
        """True between begin and the transaction's end when the participant answers queries
        after a request (feature ``after``, docs/adr/015)."""
        self._expected: list[tuple[str, Query]] = []
        """Queries (key, query) to ask for on the next tools/call or changes request."""
        self._asking: list[tuple[str, Query]] = []
        self._answers: dict[str, list[dict[str, Any]] | MCPError] = {}
        """Answers to queries asked ahead, by :func:`guard.txext.after.key`; only ever answers on the
        transaction's current state (cleared by any request that may change it)."""
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
        if method != QUERY:
            self._answers = {}
        if method == CHANGES:
            after = self._take_expected()
            if after:
                meta[AFTER_META_KEY] = after
        params = TxParams.model_validate({"_meta": meta, **fields})
        send = functools.partial(
            self.session.send_request, TxRequest(method=method, params=params), result_type, self.timeout
        )
        try:
            result = self._sync(send)
        except MCPError as exc:
            self._asking = []
            raise toolcalls.failure(self, exc, method) from exc
        self._in_flight = []
        self._take_answers(result.meta)
        return result

    def _take_expected(self) -> list[dict[str, Any]]:
        """The queries asked ahead, as the next tools/call or changes request carries them."""
        asked, self._expected = self._expected, []
        self._asking = asked
        return wire([query for _, query in asked])

    def _take_answers(self, meta: Mapping[str, Any] | None) -> None:
        """Keep the answers ``meta`` gives to the queries the request asked for."""
        asked, self._asking = self._asking, []
        if asked:
            self._answers = read_answers(meta, asked)

    def _forget_from(self, savepoint: str) -> None:
        """``savepoint`` and the piggybacked ones opened after it are closed (or never opened)."""
        if savepoint in self._open:
            for name in self._open[self._open.index(savepoint) :]:
                self._reported.pop(name, None)
                self._watches.pop(name, None)
                if name == self._anchor:
                    self._anchor = None
            del self._open[self._open.index(savepoint) :]

    def _check_usable(self, savepoint: str) -> None:
        error = self._failed.get(savepoint)
        if error is not None:
            raise error

    def _reset(self) -> None:
        self.piggybacking = self.watching = False
        self._anchor, self._last_watch = None, None
        self._watches.clear()
        self._queue, self._in_flight, self._open = [], [], []
        self._reported.clear()
        self._failed.clear()
        self.answering = False
        self._expected, self._asking, self._answers = [], [], {}

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
        self.watching = self.piggybacking and WATCH in answer.features
        self.answering = self.piggybacking and AFTER in answer.features
        self.lease_s = answer.lease_s

    def savepoint(self) -> str:
        if not self.piggybacking:
            return self._request(SAVEPOINT, TxSavepointResult).savepoint
        if self.tx is None:
            raise BackendError("no transaction: call begin() first")
        read, self._read_next = self._read_next, False
        if read and self.watching:
            if self._anchor is not None and not self._clean:
                self._drop_anchor()
            if self._anchor is None:
                self._anchor, self._clean = self._queue_point(OP_SAVEPOINT), True
            name = self._queue_point(OP_WATCH)
            self._watches[name] = self._anchor
            return name
        self._drop_anchor()
        return self._queue_point(OP_SAVEPOINT)

    def _queue_point(self, op: str) -> str:
        self._names += 1
        name = f"p{self._names}"
        self._queue.append({"op": op, "savepoint": name})
        self._open.append(name)
        return name

    def _drop_anchor(self) -> None:
        """Release the anchor unless something opened after it is still open (then it stays,
        no longer clean, and is released at the next chance)."""
        anchor, self._clean = self._anchor, False
        if anchor is not None and self._open and self._open[-1] == anchor:
            self._queue.append({"op": OP_RELEASE, "savepoint": anchor})
            self._forget_from(anchor)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """The next :meth:`savepoint` opened inside is for a read-classified call: a watch when the
        participant serves ``watch`` (docs/adr/013), else an ordinary savepoint."""
        self._read_next = True
        try:
            yield
        finally:
            self._read_next = False

    def rollback_to(self, savepoint: str) -> None:
        self._check_usable(savepoint)
        if savepoint in self._watches:
            reported = self._reported.get(savepoint)
            if reported is not None and reported.changes is not None and not reported.changes:
                self.release(savepoint)  # it changed nothing: there is nothing to undo
                return
            anchor = self._watches[savepoint]
            if savepoint == self._last_watch and anchor == self._anchor and anchor in self._open:
                savepoint = anchor  # only this call ran since the anchor: undo exactly it
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
        answer = self._answers.get(key(sql, params) or "")
        if isinstance(answer, MCPError):
            raise toolcalls.tx_error(QUERY, answer)
        if answer is not None:
            return [dict(row) for row in answer]
        return self._request(QUERY, TxQueryResult, sql=sql, params=dict(params or {})).rows

    # -- queries asked ahead (guard.backend.AsksAhead)
    def expect(self, queries: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Ask for ``queries`` on the next tools/call or changes request (in place of any asked for
        before): their answers on the state after it then need no ``query`` request. Nothing is
        sent now; without the ``after`` feature nothing is asked. A query whose parameters have no
        JSON form is not asked ahead."""
        if not self.answering:
            return
        self._expected = [q for q in (asked(sql, params) for sql, params in queries) if q is not None]

    def answered(self, sql: str, params: Mapping[str, Any] | None = None) -> bool:
        """:meth:`query` needs no request (its answer, or its error, came with the last request)."""
        return (key(sql, params) or "") in self._answers

    def commit(self) -> None:
        self._drop_anchor()
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
            raise tx_error(RENEW, exc) from exc

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
        return toolcalls.send_tool_call(self, send, meta)

    async def send_tool_call_async(
        self, send: SendToolCallAsync, meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        """:meth:`send_tool_call` with ``send`` awaited (the proxy's calls on the event loop)."""
        return await toolcalls.send_tool_call_async(self, send, meta)

    def reported(self, savepoint: str) -> bool:
        """:meth:`changes` since ``savepoint`` needs no request (the last tools/call reported it, or
        its own error is raised): guard.backend.Piggybacking."""
        return savepoint in self._failed or (savepoint in self._open and savepoint in self._reported)

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        """One ``tools/call`` on :attr:`session`, in the open transaction (:meth:`send_tool_call`)."""

        def send(meta: dict[str, Any]) -> types.CallToolResult:
            call = functools.partial(
                self.session.call_tool,
                name,
                dict(arguments or {}),
                self.timeout,
                meta=cast(types.RequestParamsMeta, meta),
            )
            return self._sync(call)

        return self.send_tool_call(send)

    def executor(self, *, is_error: Callable[[str], bool] | None = None) -> Executor:
        """An executor for GuardSession; ``is_error`` recognises tools that report errors in-band."""
        return executor_for(self.call_tool, is_error)
