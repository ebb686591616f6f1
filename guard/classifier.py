"""Map what an upstream returned or raised to an error class (guard.errors).

Five kinds of evidence, each with its own entry point on :class:`Classifier`:

* a tool result: MCP ``isError`` results, and *in-band* error bodies of results that claim success
  (``{"error": "Tool execution failed: ...", "tool": ...}``, as the ThinkingBox tools and many
  FastMCP servers return) — :meth:`Classifier.result`;
* the error message inside either — :meth:`Classifier.text`: the policy pack's ``errors.rules``
  first (per upstream), then the built-in English rules below, first match wins;
* JSON-RPC error codes (``MCPError``) — :meth:`Classifier.jsonrpc`;
* HTTP statuses with their ``Retry-After`` — :meth:`Classifier.status`;
* transport exceptions (HTTPX/httpx2/httpcore, anyio streams, OS socket errors) and anything raised
  by an executor — :meth:`Classifier.exception`.

Nothing here imports an HTTP or MCP client: exceptions are recognised by their attributes and class
names, so the classifier works with whatever client the proxy uses. A text no rule recognises is an
:class:`~guard.errors.InternalError` whose ``rule`` is ``None`` (*unclassified*); the corpus test over
the benchmark's error probes fails on any such text.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from guard.errors import (
    FAILURE_CLASSES,
    Conflict,
    ConnectFailed,
    ConnectionDropped,
    InternalError,
    InvalidArguments,
    LockContention,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ToolFailure,
    TransientError,
    UpstreamTimeout,
)
from guard.models import FieldProblem
from guard.policy import EMPTY, PolicyPack

MAX_RETRY_AFTER = 3600.0


@dataclass(frozen=True)
class TextRule:
    """A pattern searched in an error message, and the class it means."""

    id: str
    pattern: re.Pattern[str]
    failure: type[ToolFailure]
    tools: frozenset[str] | None = None
    next_step: str | None = None

    def matches(self, tool: str | None, message: str) -> bool:
        if self.tools is not None and tool not in self.tools:
            return False
        return self.pattern.search(message) is not None


def _rule(id: str, pattern: str, failure: type[ToolFailure]) -> TextRule:
    return TextRule(id, re.compile(pattern, re.I), failure)


BUILTIN_RULES: tuple[TextRule, ...] = (
    # Anchored prefixes first: they say what the message is about before any word inside it does.
    _rule("input_validation", r"^(input )?validation (failed|error)", InvalidArguments),
    _rule("invalid_prefix", r"^invalid\b", InvalidArguments),
    _rule("missing_prefix", r"^missing (required )?(parameter|argument|field|value)", InvalidArguments),
    _rule(
        "lock_contention",
        r"database (table )?is locked|\bSQLITE_BUSY|lock wait timeout|could not obtain lock|"
        r"canceling statement due to lock timeout|deadlock detected|could not serialize access",
        LockContention,
    ),
    _rule(
        "statement_kind",
        r"^only\b[^.]{0,60}\b(are|is) (allowed|supported|permitted)\b|"
        r"\b(queries|statements) are not (allowed|supported|permitted)\b",
        InvalidArguments,
    ),
    _rule("rate_limited", r"\brate[- ]?limit|too many requests|quota exceeded|\bthrottl", RateLimited),
    _rule("timeout", r"\btimed? ?out\b|\btimeout\b|deadline exceeded|\brequest timeout\b", UpstreamTimeout),
    _rule(
        "unavailable",
        r"temporarily unavailable|service unavailable|try again later|bad gateway|"
        r"connection (reset|refused|closed|aborted)|server disconnected",
        TransientError,
    ),
    _rule(
        "permission",
        r"permission denied|\bforbidden\b|access denied|\bunauthori[sz]ed\b|not authori[sz]ed|"
        r"not (allowed|permitted) to\b|insufficient (privileges|permissions)|"
        r"\boutside (of )?(the )?allowed\b",
        PermissionDenied,
    ),
    _rule(
        "required",
        r"\b(is|are) required\b|\bmust provide\b|must be provided|\bprovide (an? )?\w+ or \w+|"
        r"field required|missing required",
        InvalidArguments,
    ),
    _rule(
        "conflict",
        r"\balready (exists?|assigned|retired|has|have|a member|registered|in use|cancell?ed|"
        r"processed|applied|redeemed|refunded|linked)\b|\bduplicate\b|\bconflict",
        Conflict,
    ),
    _rule(
        "not_found",
        r"\bnot found\b|\bno\b[^.;]{0,80}?\bfound\b|does not exist|doesn't exist|\bno such\b|"
        r"^unknown (tool|table|record|id)\b|\bdid not resolve\b|\bunknown revision\b",
        NotFound,
    ),
    _rule(
        "precondition",
        r"\bcannot be (modified|deleted|updated|changed|cancell?ed|processed|refunded|reopened)\b|"
        r"\bnot updatable\b|\bcannot (assign|modify|cancel|delete|update|refund|process|change)\b|"
        r"\bout of stock\b|\bno (\w+ ){0,2}available\b|\bno available\b|"
        r"\bnot (eligible|associated|active|in a state)\b|"
        r"\bcurrent status is\b|\bexpired\b|\binsufficient\b|\bmust have\b|\bnot allowed\b",
        PreconditionFailed,
    ),
    _rule(
        "invalid_value",
        r"\binvalid\b|\bunsupported\b|failed to parse|could not parse|unable to parse|"
        r"unconverted data remains|does not match( the)? format|\bmalformed\b|"
        r"\bmust (be|contain)\b|\bcannot exceed\b|\bexpected\b.*\bformat\b|\bout of range\b|"
        r"\bsyntax error\b",
        InvalidArguments,
    ),
)
"""Generic English rules, in order. docs/errors.md lists them with examples from the corpus."""

_PREFIX = re.compile(
    r"^\s*(tool execution failed|error executing tool [\w.\-/]+|error calling tool '?[\w.\-/]+'?|error)"
    r"\s*:\s*",
    re.I,
)
_ERROR_TEXT = re.compile(
    r"^\s*((\w+ )?error|tool execution failed|error executing tool [\w.\-/]+|"
    r"error calling tool '?[\w.\-/]+'?)\s*:\s*\S",
    re.I,
)
"""A plain-text result that is an error message: ``Error: Only SELECT queries are allowed``,
``Database error: no such table: t`` (a label, at most one word before "error", then a colon)."""
_IN_BAND_KEYS = frozenset({"error", "tool", "code", "message", "details", "detail", "status", "type"})
_PYDANTIC = re.compile(r"^(?:input )?validation failed: (.+)$", re.I | re.S)


def error_message(text: str, is_error: bool) -> str | None:
    """The error message carried by a tool result, or None when the result is not an error.

    ``is_error`` results are errors whatever their text. Results that claim success count as errors
    only for a JSON object whose ``error`` is a non-empty string (or an object with a ``message``) and
    whose other keys are error-envelope keys, so a record that merely has an ``error`` field is not
    mistaken for a failure; or for a text that *begins* with an error label and a colon (``Error:
    ...``, ``Database error: ...``, ``Tool execution failed: ...``), as servers that catch their
    exceptions into text write it.
    """
    stripped = text.strip()
    body: Any = None
    # Only an object with an "error" key is parsed: the key is spelled out in the text, or escaped
    # (a large record set is not decoded just to find it is no error envelope).
    if stripped.startswith("{") and ('"error"' in stripped or "\\u" in stripped):
        try:
            body = json.loads(stripped)
        except json.JSONDecodeError:
            body = None
    if isinstance(body, dict) and "error" in body and set(body) <= _IN_BAND_KEYS:
        error = body["error"]
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
            return str(error["message"])
        if isinstance(error, str) and error.strip():
            return error
    if is_error:
        return stripped or "the tool reported an error without a message"
    if _ERROR_TEXT.match(stripped):
        return stripped
    return None


def strip_envelope(message: str) -> str:
    """The message without a server's generic wrapper prefix (``Tool execution failed: ...``)."""
    previous = None
    while previous != message:
        previous, message = message, _PREFIX.sub("", message, count=1)
    return message.strip()


def _pydantic_fields(message: str) -> list[FieldProblem]:
    """``Input validation failed: a.b: Field required; c: Input should be ...`` -> one problem each."""
    found = _PYDANTIC.match(message)
    if found is None:
        return []
    problems = []
    for part in found.group(1).split("; "):
        loc, sep, problem = part.partition(": ")
        if sep:
            problems.append(
                FieldProblem(field=loc.strip(), problem=problem.strip(), expected=problem.strip())
            )
    return problems


def parse_retry_after(value: str | float | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or an HTTP date); None if unusable."""
    if value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                moment = parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if moment.tzinfo is None:
                return None
            seconds = moment.timestamp() - now()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


JSONRPC_CLASSES: dict[int, type[ToolFailure]] = {
    -32700: InternalError,  # parse error: a protocol fault, not the agent's
    -32600: InternalError,  # invalid request
    -32601: InternalError,  # method not found: the upstream does not serve tools/call
    -32602: InvalidArguments,  # invalid params (MCP: unknown tool or bad arguments)
    -32603: ServerError,  # internal error (the MCP SDK also reports any HTTP >= 400 this way)
    -32000: ConnectionDropped,  # MCP CONNECTION_CLOSED
    -32001: UpstreamTimeout,  # MCP REQUEST_TIMEOUT
    -32002: NotFound,  # MCP resource not found
    -32800: ConnectionDropped,  # request cancelled (legacy streamable HTTP)
    -32020: InternalError,  # header mismatch
    -32022: InternalError,  # unsupported protocol version
    -32042: PermissionDenied,  # URL elicitation required: the user must authorise first
}
"""Codes whose meaning is fixed. For -32603 and other server codes the message is tried first."""

_GENERIC_CODES = frozenset({-32603, -32000})


def status_class(status: int) -> type[ToolFailure]:
    """The class an HTTP status means by itself."""
    if status == 429:
        return RateLimited
    if status == 503:
        return ServiceUnavailable
    if status in (408, 504):
        return UpstreamTimeout
    if status >= 500:
        return ServerError
    return {
        400: InvalidArguments,
        401: PermissionDenied,
        403: PermissionDenied,
        404: NotFound,
        409: Conflict,
        410: NotFound,
        412: PreconditionFailed,
        413: InvalidArguments,
        422: InvalidArguments,
        423: PreconditionFailed,
        425: TransientError,
        428: PreconditionFailed,
    }.get(status, InternalError)


_TRANSPORT_NAMES: dict[str, type[ToolFailure]] = {
    "ConnectError": ConnectFailed,
    "ConnectTimeout": ConnectFailed,
    "PoolTimeout": ConnectFailed,
    "ProxyError": ConnectFailed,
    "ReadTimeout": UpstreamTimeout,
    "WriteTimeout": UpstreamTimeout,
    "TimeoutException": UpstreamTimeout,
    "RemoteProtocolError": ConnectionDropped,
    "ReadError": ConnectionDropped,
    "WriteError": ConnectionDropped,
    "CloseError": ConnectionDropped,
    "NetworkError": ConnectionDropped,
    "ClosedResourceError": ConnectionDropped,
    "BrokenResourceError": ConnectionDropped,
    "EndOfStream": ConnectionDropped,
}
_TRANSPORT_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2", "anyio")


def _transport_class(exc: BaseException) -> type[ToolFailure] | None:
    for klass in type(exc).__mro__:
        if klass.__module__.split(".")[0] in _TRANSPORT_MODULES and klass.__name__ in _TRANSPORT_NAMES:
            return _TRANSPORT_NAMES[klass.__name__]
    if isinstance(exc, ConnectionRefusedError):
        return ConnectFailed
    if isinstance(exc, ConnectionError):
        return ConnectionDropped
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout
    if type(exc).__name__ == "gaierror":
        return ConnectFailed
    return None


def _status_of(exc: BaseException) -> tuple[int, Mapping[str, str]] | None:
    """An HTTP status carried by an exception (HTTPX ``HTTPStatusError`` and look-alikes)."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status is None:
        status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        return None
    headers = getattr(response, "headers", None)
    if headers is None:
        headers = getattr(exc, "headers", None) or {}
    return status, headers


def _jsonrpc_of(exc: BaseException) -> tuple[int, str, Any] | None:
    """A JSON-RPC error carried by an exception (mcp ``MCPError``; v1 ``McpError`` has ``.error``)."""
    for holder in (exc, getattr(exc, "error", None)):
        code = getattr(holder, "code", None)
        message = getattr(holder, "message", None)
        if isinstance(code, int) and not isinstance(code, bool) and isinstance(message, str):
            return code, message, getattr(holder, "data", None)
    return None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


class Classifier:
    """Pack rules (per upstream) before the built-in rules; every entry point returns a ToolFailure."""

    def __init__(self, rules: Sequence[TextRule] = (), *, now: Callable[[], float] = time.time) -> None:
        self.rules: tuple[TextRule, ...] = (*rules, *BUILTIN_RULES)
        self.now = now

    @classmethod
    def for_policy(cls, pack: PolicyPack = EMPTY, *, now: Callable[[], float] = time.time) -> Classifier:
        """A classifier with the pack's ``errors.rules`` ahead of the built-in ones."""
        rules = [
            TextRule(
                id=f"{pack.name}:errors.rules[{i}]",
                pattern=re.compile(rule.match, re.I),
                failure=FAILURE_CLASSES[rule.error_class],
                tools=frozenset(rule.tools) if rule.tools is not None else None,
                next_step=rule.hint,
            )
            for i, rule in enumerate(pack.model.errors.rules)
        ]
        return cls(rules, now=now)

    def text(self, tool: str | None, message: str, *, source: str = "result") -> ToolFailure:
        """Classify an error message; :class:`InternalError` with ``rule=None`` when nothing matches."""
        core = strip_envelope(message)
        for rule in self.rules:
            if rule.matches(tool, core):
                fields = _pydantic_fields(core) if rule.failure is InvalidArguments else []
                return rule.failure(
                    core, tool=tool, rule=rule.id, source=source, fields=fields, next_step=rule.next_step
                )
        return InternalError(core, tool=tool, rule=None, source=source)

    def result(self, tool: str | None, text: str, is_error: bool) -> ToolFailure | None:
        """The failure a tool result reports (isError or in-band), or None for a success."""
        message = error_message(text, is_error)
        if message is None:
            return None
        return self.text(tool, message)

    def status(
        self,
        tool: str | None,
        status: int,
        headers: Mapping[str, str] | None = None,
        message: str | None = None,
    ) -> ToolFailure:
        """An HTTP error status (with its Retry-After, honoured for 429 and 503)."""
        failure = status_class(status)
        retry_after = parse_retry_after(_header(headers or {}, "Retry-After"), self.now)
        text = f"HTTP {status}" + (f": {message}" if message else "")
        return failure(
            text, tool=tool, rule=f"http_{status}", source="status", retry_after=retry_after, status=status
        )

    def jsonrpc(self, tool: str | None, code: int, message: str, data: Any = None) -> ToolFailure:
        """A JSON-RPC error; generic server codes defer to the message when a rule recognises it."""
        if code in _GENERIC_CODES or (-32099 <= code <= -32000 and code not in JSONRPC_CLASSES):
            by_text = self.text(tool, message, source="jsonrpc")
            if by_text.classified:
                by_text.code = code
                return by_text
        failure = JSONRPC_CLASSES.get(code)
        if failure is None:
            failure = ServerError if -32099 <= code <= -32000 else InternalError
        return failure(
            f"JSON-RPC {code}: {message}", tool=tool, rule=f"jsonrpc_{code}", source="jsonrpc", code=code
        )

    def exception(self, tool: str | None, exc: BaseException) -> ToolFailure:
        """Whatever an executor raised. Unknown exceptions are InternalError, by type and message only."""
        if isinstance(exc, ToolFailure):
            return exc
        status = _status_of(exc)
        if status is not None:
            return self.status(tool, status[0], status[1], str(exc) or None)
        rpc = _jsonrpc_of(exc)
        if rpc is not None:
            return self.jsonrpc(tool, *rpc)
        transport = _transport_class(exc)
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if transport is not None:
            return transport(text, tool=tool, rule=f"transport:{type(exc).__name__}", source="exception")
        return InternalError(text, tool=tool, rule=None, source="exception")
