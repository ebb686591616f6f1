"""The lean upstream send: ``tools/call`` to a 2026-07-28 HTTP upstream as one POST, no SDK session.

The SDK's client puts every request through its dispatcher, a writer task and the transport's
streams (about a millisecond of CPU a call here). A 2026-07-28 ``tools/call`` over HTTP is one
self-contained POST, so :class:`LeanUpstream` sends it on the upstream's pooled ``httpx2`` client
(keep-alive; :mod:`proxy.upstream_http` resends only what the upstream cannot have received) with
the headers and ``_meta`` envelope the SDK client sends (the envelope is copied from the SDK's own
requests on the same client, never rebuilt), and reads the JSON or single-answer SSE response.

Outcomes are those of the SDK path (:meth:`proxy.upstream_connection.UpstreamConnection.call_tool`):

* a JSON-RPC error, in a 2xx or (as JSON) a 4xx/5xx body -> :class:`~mcp.MCPError` with it;
* another 4xx/5xx -> ``-32601`` "Not Found" (404) or ``-32603`` "Server returned an error response";
  ``202`` -> ``-32600``; an unexpected content type -> ``-32600``; unparsable JSON -> ``-32700``;
* no answer within ``CALL_TIMEOUT_S`` -> ``-32001`` (request timeout);
* the connection failing under the request (reset, refused, closed mid-answer) -> ``-32000``
  (connection closed), which the connection reports as :class:`~proxy.upstream_types.UpstreamGoneError`;
* a result is checked against the version's result schema and, unless ``isError``, the tool's output
  schema (``ClientSession.validate_tool_result``), as the SDK client does; a compiled check of the same
  schema answers first for content that conforms (:mod:`proxy.result_schema`).

The envelope's client capabilities are the agent's, not the proxy's: a ``tools/call`` relayed for an
agent (:data:`AGENT_CAPABILITIES`, set by :meth:`proxy.server.GuardProxy.call_tool`) declares, of the
SDK client's capabilities (the input requests the proxy can relay), only those the agent declared,
as it declared them. An upstream is then not told that a client can answer an elicitation, sampling
or roots request that the agent cannot (a well-behaved one takes its path for such a client, as it
would for the agent directly), and it does not parse capabilities nobody has (about 0.1 million
instructions of the notes fixture's per call, issue 18). A request the proxy sends on its own (no
agent's call under way) keeps the SDK client's envelope as it is.

An ``InputRequiredResult`` (the upstream needs the client's input) is answered here through the
same callbacks the SDK client would call (the connection's peer); the call then continues with the
answers on the SDK client (``Client.call_tool(input_responses=..., request_state=...)``: the next
round, not a resend). A refused input request fails the call with its error, as on the SDK path; one
for a capability the agent did not declare is refused here, saying so.
A tool with ``x-mcp-header`` arguments, or a call with progress or a log-level opt-in to relay,
is left to the SDK client (decided before anything is sent).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx2
import mcp.types as types
from mcp import MCPError
from mcp.shared.inbound import encode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from proxy import result_surface, telemetry, wire_json
from proxy.lean_http import PlainHttp
from proxy.result_schema import OutputSchemaCheck
from proxy.upstream_http import upstream_http_limits

if TYPE_CHECKING:
    from mcp.shared.dispatcher import ProgressFnT

    from proxy.upstream_connection import UpstreamConnection

logger = logging.getLogger(__name__)

ENVELOPE_KEYS = (PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY)
X_MCP_HEADER = "x-mcp-header"

Callbacks = Mapping[str, Callable[..., Awaitable[Any]]]
R = TypeVar("R", bound=types.Result)

AGENT_CAPABILITIES: ContextVar[types.ClientCapabilities | None] = ContextVar(
    "shadowguard_agent_capabilities", default=None
)
"""What the agent whose ``tools/call`` is being relayed declared (an empty model: nothing); None: no
agent's call is under way (module docstring). Worker threads and ``anyio.from_thread`` calls back
onto the event loop carry it with the rest of the call's context."""

_INPUT_CAPABILITIES: tuple[tuple[type[types.Request[Any, Any]], str], ...] = (
    (types.ElicitRequest, "elicitation"),
    (types.CreateMessageRequest, "sampling"),
    (types.ListRootsRequest, "roots"),
)
"""The input requests an upstream can make of a ``tools/call``, and the capability each needs."""


DECLARED_NOTHING = types.ClientCapabilities()
"""An agent that declared no capability (never mutated: one model for every such call)."""


@contextmanager
def relaying_for(declared: types.ClientCapabilities | None) -> Iterator[None]:
    """The block relays a call for an agent that declared ``declared`` (None: nothing)."""
    token = AGENT_CAPABILITIES.set(declared if declared is not None else DECLARED_NOTHING)
    try:
        yield
    finally:
        AGENT_CAPABILITIES.reset(token)


def relayed_capabilities(offered: Mapping[str, Any], declared: types.ClientCapabilities) -> dict[str, Any]:
    """Of the capabilities the proxy's client declares (``offered``: its envelope's), those the agent
    declared too, each as the agent declared it: what an upstream may ask of the agent's call."""
    out: dict[str, Any] = {}
    if declared is DECLARED_NOTHING:
        return out  # the commonest agent (issue 18's profile: the walk below cost about 5 µs a call)
    for key in offered:
        field = _CAPABILITY_FIELDS.get(key)
        value = getattr(declared, field) if field is not None else None
        if isinstance(value, BaseModel):
            out[key] = value.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif value is not None:
            out[key] = value
    return out


_CAPABILITY_FIELDS = {
    (info.alias or name): name for name, info in types.ClientCapabilities.model_fields.items()
}
"""A client capability's field of :class:`mcp.types.ClientCapabilities`, by its name on the wire."""


class EnvelopeTap:
    """Copies the SDK client's per-request ``_meta`` envelope (protocol version, client info, client
    capabilities) from the first 2026-07-28 ``tools/list`` or ``tools/call`` it sends on ``client``
    (an ``httpx2`` request hook; it unhooks itself once it has one)."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self.client = client
        self.envelope: dict[str, Any] | None = None
        client.event_hooks["request"].append(self._hook)

    async def _hook(self, request: httpx2.Request) -> None:
        if self.envelope is not None or request.method != "POST":
            return
        try:
            body = json.loads(request.content)
        except (ValueError, httpx2.RequestNotRead):
            return
        if not isinstance(body, dict) or body.get("method") not in ("tools/list", "tools/call"):
            return  # the session's own stamp, not a probe's (server/discover) or a handshake's
        meta = (body.get("params") or {}).get("_meta")
        if not isinstance(meta, dict) or meta.get(PROTOCOL_VERSION_META_KEY) not in MODERN_PROTOCOL_VERSIONS:
            return
        if all(key in meta for key in ENVELOPE_KEYS):
            self.envelope = {key: meta[key] for key in ENVELOPE_KEYS}
            self.client.event_hooks["request"].remove(self._hook)


def declares_param_headers(tool: types.Tool | None) -> bool:
    """The tool's input schema marks an argument ``x-mcp-header`` (the SDK mirrors it in a header)."""
    if tool is None:
        return True  # unknown to the proxy: the SDK client decides what to send
    properties = tool.input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return False
    return any(isinstance(p, Mapping) and X_MCP_HEADER in p for p in properties.values())


class LeanUpstream:
    """Sends ``tools/call`` to one 2026-07-28 HTTP upstream (see the module docstring)."""

    _ids = itertools.count(1_000_000_000)

    def __init__(
        self, upstream: str, url: str, http: httpx2.AsyncClient, tools: Mapping[str, types.Tool]
    ) -> None:
        self.upstream = upstream
        self.url = url
        self._url = httpx2.URL(url)
        """``url`` parsed once: each POST would otherwise parse the string again (issue 18's profile)."""
        self.http = http
        limits = upstream_http_limits()
        self.plain: PlainHttp | None = PlainHttp(
            self._url,
            http,
            keepalive_expiry=limits.keepalive_expiry or 0.0,
            max_connections=limits.max_connections or 1,
            max_keepalive=limits.max_keepalive_connections or 0,
        )
        """Sends the POST without httpx's client and pool when it :meth:`~PlainHttp.takes` it
        (proxy/lean_http.py); None: always through ``http``."""
        self.tools = tools
        """The upstream's tool list by name (the upstream's own mapping, updated in place)."""
        self.tap = EnvelopeTap(http)
        self.output_schema = OutputSchemaCheck()

    def takes(
        self,
        connection: UpstreamConnection,
        name: str,
        progress: ProgressFnT | None,
        extra: Mapping[str, Any],
    ) -> bool:
        """The call goes lean: a 2026-07-28 connection whose envelope is known, with a peer to answer
        input rounds, no progress or log opt-in to relay, no ``x-mcp-header`` argument."""
        if self.tap.envelope is None or progress is not None or extra or connection.peer is None:
            return False
        if connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        return not declares_param_headers(self.tools.get(name))

    async def call_tool(
        self,
        connection: UpstreamConnection,
        name: str,
        arguments: Mapping[str, Any],
        meta: Mapping[str, Any],
        timeout: float,
    ) -> types.CallToolResult:
        """The call's final result: the POST, then (an input round) the SDK client with the answers."""
        telemetry.record_relay_call("lean_upstream")
        result = await self.call(name, arguments, meta, timeout)
        if isinstance(result, types.InputRequiredResult):
            assert connection.peer is not None  # takes() requires it
            requests = result.input_requests or {}
            refuse_undeclared(self.upstream, requests, AGENT_CAPABILITIES.get())
            answers = await answer_inputs(requests, connection.peer.client_options(connection))
            return await connection.client.call_tool(
                name,
                dict(arguments),
                timeout,
                None,
                input_responses=answers,
                request_state=result.request_state,
                meta=cast("types.RequestParamsMeta", dict(meta)),
            )
        if not result.is_error and not self.output_schema.conforms(connection.session, name, result):
            await connection.session.validate_tool_result(name, result)
        return result

    async def call(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any], timeout: float
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One ``tools/call`` POST; raises :class:`MCPError` as the SDK client would (module docstring)."""
        params = {"name": name, "arguments": dict(arguments), "_meta": dict(meta)}
        declared = AGENT_CAPABILITIES.get()
        version, raw = await self.request(
            "tools/call",
            params,
            timeout,
            {"mcp-name": encode_header_value(name)},
            capabilities=declared,
        )
        return _result(version, raw)

    async def aclose(self) -> None:
        """Closes :attr:`plain`'s idle connections (the ``httpx2`` client is its owner's to close)."""
        if self.plain is not None:
            await self.plain.aclose()

    def ready(self) -> bool:
        """The SDK client's ``_meta`` envelope is known: :meth:`request` can be sent."""
        return self.tap.envelope is not None

    async def request(
        self,
        method: str,
        params: Mapping[str, Any],
        timeout: float,
        headers: Mapping[str, str] | None = None,
        *,
        capabilities: types.ClientCapabilities | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """One JSON-RPC request of ``method`` as one POST, ``params["_meta"]`` completed with the SDK
        client's envelope, whose client capabilities are narrowed to those the agent declared when
        the request is made for one (``capabilities``: :func:`relayed_capabilities`); the protocol
        version and the raw result (not validated: the caller's job). Raises :class:`MCPError` as the
        SDK client would (module docstring); a timeout says ``method``."""
        envelope = self.tap.envelope
        if envelope is None:
            raise RuntimeError(
                f"LeanUpstream {method} before the SDK sent a 2026-07-28 request (check ready)"
            )
        version = envelope[PROTOCOL_VERSION_META_KEY]
        request_id = next(self._ids)
        stamp = envelope
        if capabilities is not None:
            offered = envelope[CLIENT_CAPABILITIES_META_KEY]
            stamp = {**envelope, CLIENT_CAPABILITIES_META_KEY: relayed_capabilities(offered, capabilities)}
        sent = {**params, "_meta": {**(params.get("_meta") or {}), **stamp}}
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": sent}
        wire = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": version,
            "mcp-method": method,
            **(headers or {}),
        }
        try:
            # asyncio's own timeout, not anyio's fail_after: a fifth of the instructions (issue 18), and
            # its one cancellation leaves httpcore's cleanup after it alone (anyio's is re-delivered).
            async with asyncio.timeout(timeout):
                content = wire_json.dumps(body)
                if self.plain is not None and self.plain.takes(timeout):
                    raw = await self._post_plain(self.plain, content, wire, request_id)
                else:
                    raw = await self._post(content, wire, request_id)
        except TimeoutError:
            raise MCPError(
                code=types.REQUEST_TIMEOUT,
                message=f"Timed out while waiting for response to {method}. Waited {timeout} seconds.",
            ) from None
        except httpx2.TransportError as exc:
            raise MCPError(code=types.CONNECTION_CLOSED, message=f"Connection closed: {exc!r}") from exc
        return version, raw

    async def _post(self, content: bytes, headers: dict[str, str], request_id: int) -> dict[str, Any]:
        """The JSON-RPC result of the POST (its error raised as MCPError).

        ``build_request`` and ``send(stream=True)`` are what ``AsyncClient.stream`` does, without its
        context-manager wrapper; the response is closed here as ``stream`` closes it."""
        request = self.http.build_request("POST", self._url, content=content, headers=headers)
        response = await self.http.send(request, stream=True)
        try:
            message = await _message_of(
                response.status_code, response.headers, response.aread, response.aiter_lines, request_id
            )
        finally:
            await response.aclose()
        return _result_of(message)

    async def _post_plain(
        self, plain: PlainHttp, content: bytes, headers: dict[str, str], request_id: int
    ) -> dict[str, Any]:
        """:meth:`_post` on :attr:`plain`: the same statuses, content types and errors."""
        response = await plain.post(content, headers)
        try:
            message = await _message_of(
                response.status_code, response.headers, response.read, response.iter_lines, request_id
            )
        finally:
            await response.close()
        return _result_of(message)


class LeanTxSession:
    """What :class:`guard.txext.RemoteBackend` needs of a client session (``send_request``,
    ``call_tool``), for a transactional connection: each ``shadowguard/tx`` request (begin, query,
    changes, commit, ...) goes as one POST through the upstream's :class:`LeanUpstream` once it is
    :meth:`~LeanUpstream.ready` on a 2026-07-28 connection, else, like every ``call_tool``, through
    the connection's SDK session. Results and errors are the SDK path's: a JSON-RPC error or a lost
    connection is :class:`MCPError`, a result that does not fit ``result_type`` raises pydantic's
    ``ValidationError``, as ``ClientSession.send_request`` does (the profile of issue 18: the SDK's
    dispatcher costs about a millisecond of proxy CPU per request, one to two requests per write)."""

    def __init__(self, connection: UpstreamConnection) -> None:
        self.connection = connection

    async def send_request(
        self,
        request: types.Request[Any, Any],
        result_type: type[R],
        request_read_timeout_seconds: float | None = None,
    ) -> R:
        """``request``'s result as ``result_type`` (see the class docstring)."""
        connection, lean, timeout = self.connection, self.connection.lean, request_read_timeout_seconds
        if (
            lean is None
            or timeout is None  # the SDK session's own default applies
            or not lean.ready()
            or connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            result: R = await connection.session.send_request(request, result_type, timeout)
            return result
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        telemetry.record_relay_call("lean_tx")
        _, raw = await lean.request(data["method"], data.get("params") or {}, timeout)
        return result_type.model_validate(raw)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        *,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult:
        """A ``tools/call`` on the connection's SDK session (the proxy forwards its own calls on the
        connection: :meth:`proxy.upstreams.UpstreamConnection.call_tool`)."""
        result: types.CallToolResult = await self.connection.session.call_tool(
            name, arguments, read_timeout_seconds, meta=meta
        )
        return result


def _decode(content: bytes) -> dict[str, Any]:
    try:
        message = wire_json.loads(content)
    except (ValueError, RecursionError) as exc:
        raise MCPError(code=types.PARSE_ERROR, message=f"Failed to parse JSON response: {exc}") from exc
    if not isinstance(message, dict):
        raise MCPError(code=types.PARSE_ERROR, message="Failed to parse JSON response: not an object")
    return message


def _raise_error(message: Mapping[str, Any]) -> None:
    error = message.get("error")
    if error is None:
        return
    try:
        data = types.ErrorData.model_validate(error)
    except ValidationError as exc:
        raise MCPError(code=types.PARSE_ERROR, message=f"Failed to parse JSON response: {exc}") from exc
    raise MCPError.from_error_data(data)


def _result_of(message: Mapping[str, Any]) -> dict[str, Any]:
    _raise_error(message)
    result = message.get("result")
    if not isinstance(result, dict):
        raise MCPError(code=types.PARSE_ERROR, message="Failed to parse JSON response: no result")
    return result


async def _message_of(
    status: int,
    headers: Mapping[str, str],
    read: Callable[[], Awaitable[bytes]],
    lines: Callable[[], AsyncIterator[str]],
    request_id: int,
) -> dict[str, Any]:
    """The JSON-RPC message an answer with ``status`` and ``headers`` carries, its body read with
    ``read`` (JSON) or ``lines`` (an event stream), as the SDK client reads it; MCPError for a 202,
    an error status or an unexpected content type."""
    kind = headers.get("content-type", "").lower()
    if status == 202:
        raise MCPError(code=types.INVALID_REQUEST, message="server answered a request with 202 Accepted")
    if status >= 400:
        if kind.startswith("application/json"):
            _raise_error(_decode(await read()))
        if status == 404:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Not Found")
        raise MCPError(code=types.INTERNAL_ERROR, message="Server returned an error response")
    if kind.startswith("application/json"):
        return _decode(await read())
    if kind.startswith("text/event-stream"):
        return await _answer_in_stream(lines(), request_id)
    raise MCPError(code=types.INVALID_REQUEST, message=f"Unexpected content type: {kind}")


async def _answer_in_stream(lines: AsyncIterator[str], request_id: int) -> dict[str, Any]:
    """The response to ``request_id`` in an SSE answer (notifications before it are not relayed: a
    lean call has no progress token or log level to relay them for)."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line == "" and data:
            message = _decode("\n".join(data).encode())
            data = []
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return message
            logger.debug("lean tools/call: skipped %s on the answer stream", message.get("method"))
    raise MCPError(code=types.CONNECTION_CLOSED, message="SSE stream ended without a response")


def _result(version: str, raw: dict[str, Any]) -> types.CallToolResult | types.InputRequiredResult:
    """The typed result, checked against the version's result schema as the SDK client checks it."""
    try:
        result_surface.check(version, raw)
        if raw.get("resultType") == "input_required":
            return types.InputRequiredResult.model_validate(raw, by_name=False)
        return types.CallToolResult.model_validate(raw, by_name=False)
    except (ValidationError, KeyError) as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid tools/call result: {exc}") from exc


def not_declared(what: str, capability: str) -> str:
    """The refusal of an upstream's input request (``what``: "upstream 'x' asked for <method>") for a
    capability the agent's client did not declare (here and on the SDK path, proxy.relay)."""
    return f"{what}, but the agent's client did not declare the {capability} capability"


def refuse_undeclared(
    upstream: str, requests: Mapping[str, Any], declared: types.ClientCapabilities | None
) -> None:
    """An input request for a capability the agent did not declare (``declared``; None: no agent's
    call, nothing to judge) fails the call with :class:`MCPError`, as the relay refuses one on the
    SDK path (the upstream was not told the agent has it: it asked all the same)."""
    if declared is None:
        return
    for request in requests.values():
        for kind, capability in _INPUT_CAPABILITIES:
            if isinstance(request, kind) and getattr(declared, capability) is None:
                what = f"upstream {upstream!r} asked for {request.method}"
                raise MCPError(code=types.INVALID_REQUEST, message=not_declared(what, capability))


async def answer_inputs(requests: Mapping[str, Any], callbacks: Callbacks) -> dict[str, Any]:
    """Answers to an ``InputRequiredResult``'s requests from the client's callbacks (the peer's, as
    the SDK client would call them); a refusal raises its error as :class:`MCPError`."""
    answers: dict[str, Any] = {}
    for key, request in requests.items():
        if isinstance(request, types.ElicitRequest):
            answer = await callbacks["elicitation_callback"](None, request.params)
        elif isinstance(request, types.CreateMessageRequest):
            answer = await callbacks["sampling_callback"](None, request.params)
        elif isinstance(request, types.ListRootsRequest):
            answer = await callbacks["list_roots_callback"](None)
        else:
            raise MCPError(code=types.INVALID_REQUEST, message=f"unsupported input request {key!r}")
        if isinstance(answer, types.ErrorData):
            raise MCPError.from_error_data(answer)
        answers[key] = answer
    return answers


__all__ = [
    "AGENT_CAPABILITIES",
    "DECLARED_NOTHING",
    "EnvelopeTap",
    "LeanTxSession",
    "LeanUpstream",
    "answer_inputs",
    "declares_param_headers",
    "not_declared",
    "refuse_undeclared",
    "relayed_capabilities",
    "relaying_for",
]
