"""The guard's tool-call helpers for ``shadowguard/tx``: the errors a participant answers, the
senders a caller hands :meth:`guard.txext.RemoteBackend.send_tool_call`, the change sets a
``tools/call`` answer reports, and the executor GuardSession forwards through."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp import MCPError

from guard.backend import BackendError, NotReversibleError
from guard.models import ChangeSet
from guard.session import Executor, ToolResult
from guard.txext.protocol import (
    AFTER_META_KEY,
    CHANGES,
    NOT_REVERSIBLE,
    OP_ERROR_KEY,
    OP_SAVEPOINT,
    OP_WATCH,
    OPS_META_KEY,
    TX_FAILED,
    TX_META_KEY,
)

if TYPE_CHECKING:
    from guard.txext.client import RemoteBackend

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


def tx_error(method: str, exc: MCPError) -> TransactionError:
    """The :class:`TransactionError` for ``method``'s error answer ``exc``."""
    if exc.code == NOT_REVERSIBLE:
        return NotReversibleTransactionError(exc.message, exc.code)
    return TransactionError(f"{method} failed ({exc.code}): {exc.message}", exc.code)


class Reported:
    """A savepoint's change set as a tools/call answered it, or the error met reading it."""

    def __init__(self, changes: ChangeSet | None, error: TransactionError | None) -> None:
        self.changes = changes
        self.error = error


def read_report(result: types.CallToolResult, open_names: Collection[str]) -> dict[str, Reported]:
    """The change sets (or errors) ``result`` reports for the savepoints or watches in ``open_names``."""
    reported: dict[str, Reported] = {}
    report = (result.meta or {}).get(TX_META_KEY)
    savepoints = report.get("savepoints") if isinstance(report, Mapping) else None
    if not isinstance(savepoints, Mapping):
        return reported
    for name, entry in savepoints.items():
        if name not in open_names or not isinstance(entry, Mapping):
            continue
        if isinstance(entry.get("error"), Mapping):
            error = entry["error"]
            code = error.get("code") if isinstance(error.get("code"), int) else TX_FAILED
            failure = MCPError(code=code, message=str(error.get("message")))
            reported[name] = Reported(None, tx_error(CHANGES, failure))
        elif isinstance(entry.get("changes"), list):
            changes = ChangeSet.model_validate({"changes": entry["changes"]})
            reported[name] = Reported(changes, None)
    return reported


def text_of(result: types.CallToolResult) -> str:
    """A tool result's text contents, joined by newlines."""
    return "\n".join(part.text for part in result.content if isinstance(part, types.TextContent))


def executor_for(
    call_tool: Callable[[str, Mapping[str, Any]], types.CallToolResult],
    is_error: Callable[[str], bool] | None,
) -> Executor:
    """An executor for GuardSession over ``call_tool``; ``is_error`` recognises tools that report
    errors in-band."""

    def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        result = call_tool(tool, arguments)
        text = text_of(result)
        failed = bool(result.is_error) or (is_error is not None and is_error(text))
        return ToolResult(text=text, is_error=failed)

    return execute


def send_tool_call(
    remote: RemoteBackend, send: SendToolCall, meta: Mapping[str, Any] | None
) -> types.CallToolResult:
    """:meth:`RemoteBackend.send_tool_call`: the piggyback sequence of one tools/call."""
    wire = _tool_call_meta(remote, meta)
    try:
        result = send(wire)
    except MCPError as exc:
        failed = _tool_call_failed(remote, exc)
        if failed is exc:
            raise
        raise failed from exc
    return _tool_call_answered(remote, result)


async def send_tool_call_async(
    remote: RemoteBackend, send: SendToolCallAsync, meta: Mapping[str, Any] | None
) -> types.CallToolResult:
    """:func:`send_tool_call` with ``send`` awaited."""
    wire = _tool_call_meta(remote, meta)
    try:
        result = await send(wire)
    except MCPError as exc:
        failed = _tool_call_failed(remote, exc)
        if failed is exc:
            raise
        raise failed from exc
    return _tool_call_answered(remote, result)


def _tool_call_meta(remote: RemoteBackend, meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The call's ``_meta``: the caller's, the backend's, the transaction id and the queue."""
    if remote.tx is None:
        raise BackendError("no transaction: call begin() first")
    remote.last_sent = time.monotonic()
    wire = {**(meta or {}), **remote._meta(remote.tx)}
    ops = remote._take_queue()
    if ops:
        wire[OPS_META_KEY] = ops
    remote._answers = {}
    after = remote._take_expected()
    if after:
        wire[AFTER_META_KEY] = after
    watches = [op["savepoint"] for op in ops if op["op"] == OP_WATCH]
    remote._last_watch = watches[-1] if watches else None
    if remote._last_watch is None or len(watches) > 1:
        remote._clean = False  # a call that is not one watched read may change anything
    return wire


def _tool_call_failed(remote: RemoteBackend, exc: MCPError) -> Exception:
    """What a ``tools/call`` that raised ``exc`` raises: a failed operation's TransactionError,
    else ``exc`` itself."""
    remote._reported.clear()
    remote._asking = []
    remote._clean = False  # what the call did is unknown
    op = exc.data.get(OP_ERROR_KEY) if isinstance(exc.data, Mapping) else None
    if op is None:
        remote._in_flight = []
        return exc
    return failure(remote, exc, "tools/call")


def failure(remote: RemoteBackend, exc: MCPError, method: str) -> BackendError:
    """The error to raise for a failed request: a failed piggybacked operation's own error (and
    the savepoints or watches it kept from opening remember it), else the request's."""
    op = exc.data.get(OP_ERROR_KEY) if isinstance(exc.data, Mapping) else None
    ops, remote._in_flight = remote._in_flight, []
    if isinstance(op, Mapping) and isinstance(op.get("index"), int) and 0 <= op["index"] < len(ops):
        error = tx_error(str(op.get("method")), exc)
        for item in ops[op["index"] :]:
            if item["op"] in (OP_SAVEPOINT, OP_WATCH):
                remote._failed[item["savepoint"]] = error
                remote._forget_from(item["savepoint"])
        return error
    return tx_error(method, exc)


def _tool_call_answered(remote: RemoteBackend, result: types.CallToolResult) -> types.CallToolResult:
    """Keep the change sets (or errors) ``result`` reports for the savepoints still open; the
    anchor stays clean only if the call's watch reported no change."""
    remote._in_flight = []
    remote._reported = read_report(result, remote._open)
    remote._take_answers(result.meta)
    if remote._last_watch is not None:
        watched = remote._reported.get(remote._last_watch)
        if watched is None or watched.changes is None or watched.changes:
            remote._clean = False
    return result
