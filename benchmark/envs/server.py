"""One benchmark domain as a real MCP tool server (``shadowguard env serve``), over stdio or streamable HTTP.

The agent-facing surface is exactly the reference's: the domain's tools with their exported names,
descriptions and JSON schemas, and every ``tools/call`` answered with one text content holding the
reference's response string (errors included, in-band, never ``isError``). Everything a harness needs
besides that lives outside the tool list, as custom JSON-RPC methods that no agent sees in
``tools/list``:

* ``shadowguard/env/init`` ``{"task_id": ...}`` or ``{"data_patch": {...}}`` -> ``{"state_hash": ...}``:
  a fresh environment (defaults + the task's patch) for the calling session, replacing its previous one.
* ``shadowguard/env/state_hash`` ``{}`` -> ``{"state_hash": ...}``: the session's current stable-state hash.
* ``shadowguard/env/close`` ``{}`` -> ``{}``: drop the session's environment now.

The server also participates in the guard's transaction extension (``shadowguard/tx``, see
docs/transaction-extension.md): a session's transaction runs on its environment's connection, so its
tool calls are inside it. Re-initialising or closing the session ends an open transaction.

Sessions: ``_meta["shadowguard/session"]`` when the client sends it (any transport or era; required by
the sessionless 2026-07-28 HTTP era), else the handshake era's ``Mcp-Session-Id``, else (stdio) the
process's single connection. A session that has not been initialised runs on the domain defaults.
Nothing here reads a task's answer key: golden calls and expected hashes never leave the grader.
"""

from __future__ import annotations

import logging
import math
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
import mcp.types as types
import uvicorn
from mcp import ClientSession, MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from pydantic import ConfigDict, Field
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from benchmark.envs.environment import Domain, Environment
from benchmark.envs.errors import DataError, UnknownTableError
from benchmark.envs.store import Database
from benchmark.guarded import backend_for
from benchmark.tasks import BenchData, Task
from guard.backend import Backend
from guard.keepalive import SERVER_KEEP_ALIVE_S
from guard.sql_backend import SqlBackend
from guard.txext.participant import TransactionParticipant
from guard.txext.protocol import DEFAULT_LEASE_S

logger = logging.getLogger(__name__)

SESSION_META_KEY = "shadowguard/session"
INIT_METHOD = "shadowguard/env/init"
STATE_HASH_METHOD = "shadowguard/env/state_hash"
CLOSE_METHOD = "shadowguard/env/close"
MCP_PATH = "/mcp"
DEFAULT_IDLE_TIMEOUT = 30 * 60.0
DEFAULT_MAX_SESSIONS = 1000
_MAX_SESSION_ID = 256
_STDIO_KEY = "stdio"

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")
_Paging = types.PaginatedRequestParams | None


# -- wire models (shared by the server and by harness clients) --------------------------------------


class EnvInitParams(types.RequestParams):
    """``shadowguard/env/init`` params: exactly one of ``task_id`` or ``data_patch``.

    Loosely typed on purpose: the handler checks shapes itself so bad input gets a precise message
    instead of the SDK's generic "Invalid request parameters".
    """

    model_config = ConfigDict(extra="allow")

    task_id: Any = Field(default=None, alias="task_id")
    data_patch: Any = Field(default=None, alias="data_patch")


class EnvSessionParams(types.RequestParams):
    """Params of the methods that only name a session (through ``_meta``)."""

    model_config = ConfigDict(extra="allow")


class EnvStateResult(types.Result):
    state_hash: str = Field(alias="state_hash")


class EnvInitRequest(types.Request[EnvInitParams, Literal["shadowguard/env/init"]]):
    method: Literal["shadowguard/env/init"] = "shadowguard/env/init"
    params: EnvInitParams


class EnvStateHashRequest(types.Request[EnvSessionParams, Literal["shadowguard/env/state_hash"]]):
    method: Literal["shadowguard/env/state_hash"] = "shadowguard/env/state_hash"
    params: EnvSessionParams = Field(default_factory=EnvSessionParams)


class EnvCloseRequest(types.Request[EnvSessionParams, Literal["shadowguard/env/close"]]):
    method: Literal["shadowguard/env/close"] = "shadowguard/env/close"
    params: EnvSessionParams = Field(default_factory=EnvSessionParams)


def session_meta(session_id: str | None) -> dict[str, Any] | None:
    """The request ``_meta`` that selects an environment session (None: the connection's own)."""
    return None if session_id is None else {SESSION_META_KEY: session_id}


async def init_environment(
    session: ClientSession,
    *,
    task_id: str | None = None,
    data_patch: Mapping[str, Any] | None = None,
    session_id: str | None = None,
) -> str:
    """Client side of ``shadowguard/env/init``; returns the initial state hash."""
    body: dict[str, Any] = {"_meta": session_meta(session_id)}
    if task_id is not None:
        body["task_id"] = task_id
    if data_patch is not None:
        body["data_patch"] = dict(data_patch)
    request = EnvInitRequest(params=EnvInitParams.model_validate(body))
    return (await session.send_request(request, EnvStateResult)).state_hash


async def environment_state_hash(session: ClientSession, *, session_id: str | None = None) -> str:
    """Client side of ``shadowguard/env/state_hash``."""
    request = EnvStateHashRequest(params=EnvSessionParams.model_validate({"_meta": session_meta(session_id)}))
    return (await session.send_request(request, EnvStateResult)).state_hash


async def close_environment(session: ClientSession, *, session_id: str | None = None) -> None:
    """Client side of ``shadowguard/env/close``."""
    request = EnvCloseRequest(params=EnvSessionParams.model_validate({"_meta": session_meta(session_id)}))
    await session.send_request(request, types.EmptyResult)


# -- sessions ---------------------------------------------------------------------------------------


def _invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


@dataclass
class EnvSession:
    """One client's environment. ``lock`` serialises its calls; ``users`` pins it against reaping."""

    key: str
    env: Environment | None = None
    backend: tuple[Environment, SqlBackend] | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0
    closed: bool = False
    last_used: float = field(default_factory=time.monotonic)


class EnvSessions:
    """Environments per session key, created on first use and closed on request, idle or shutdown.

    Environment work runs in worker threads (a PostgreSQL round trip must not stall other sessions);
    opening is serialised because the database lazily builds shared per-domain templates.
    """

    def __init__(
        self,
        domain: Domain,
        database: Database,
        *,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_timeout is not None and not (math.isfinite(idle_timeout) and idle_timeout > 0):
            raise ValueError("idle_timeout must be a positive number of seconds or None")
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.domain = domain
        self.database = database
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: dict[str, EnvSession] = {}
        self._open_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: str) -> bool:
        return key in self._sessions

    def open_environment(self, data_patch: Mapping[str, Any] | None = None) -> Environment:
        """A new environment with the defaults and ``data_patch``; nothing leaks if the patch is bad."""
        with self._open_lock:
            env = Environment(self.domain, self.database)
        try:
            if data_patch is not None:
                env.apply_patch(data_patch)
        except BaseException:
            env.close()
            raise
        return env

    def _reap(self) -> None:
        if self.idle_timeout is None:
            return
        cutoff = self._clock() - self.idle_timeout
        for key, s in list(self._sessions.items()):
            if s.users == 0 and s.last_used < cutoff:
                logger.info("closing idle environment session %s", key)
                self._discard(s)

    def _discard(self, s: EnvSession) -> None:
        if self._sessions.get(s.key) is s:
            del self._sessions[s.key]
        s.closed = True
        if s.env is not None:
            s.env.close()
            s.env = None

    @asynccontextmanager
    async def use(self, key: str) -> AsyncIterator[EnvSession]:
        """Hold a session's lock for one operation; its environment stays open meanwhile."""
        while True:
            self._reap()
            s = self._sessions.get(key)
            if s is None:
                if len(self._sessions) >= self.max_sessions:
                    raise MCPError(
                        code=types.INVALID_REQUEST,
                        message=f"too many environment sessions ({self.max_sessions}); "
                        f"close one with {CLOSE_METHOD}",
                    )
                s = self._sessions[key] = EnvSession(key, last_used=self._clock())
            s.users += 1
            try:
                async with s.lock:
                    if s.closed:
                        continue
                    yield s
                    return
            finally:
                s.users -= 1
                s.last_used = self._clock()

    def _environment(self, s: EnvSession) -> Environment:
        """The session's environment (the domain defaults until it is initialised); worker thread only."""
        if s.env is None:
            s.env = self.open_environment()
        return s.env

    def _backend(self, s: EnvSession) -> SqlBackend:
        """The shadow-transaction backend on the session's current environment; worker thread only."""
        env = self._environment(s)
        if s.backend is None or s.backend[0] is not env:
            s.backend = (env, backend_for(env))
        return s.backend[1]

    async def with_backend(self, key: str, work: Callable[[Environment, SqlBackend], T]) -> T:
        """Run ``work`` on the session's environment and its backend, serialised with its other calls."""
        async with self.use(key) as s:
            return await anyio.to_thread.run_sync(lambda: work(self._environment(s), self._backend(s)))

    # Each operation runs whole in one worker thread, including any swap of ``s.env``: a cancelled
    # request still lets its thread finish, so no environment is left half-assigned or unclosed.
    async def call_tool(self, key: str, name: str, arguments: Mapping[str, Any] | None) -> str:
        async with self.use(key) as s:
            return await anyio.to_thread.run_sync(lambda: self._environment(s).call_tool(name, arguments))

    async def init(self, key: str, data_patch: Mapping[str, Any]) -> str:
        """Replace the session's environment with a fresh one; on bad input the old one stays."""
        async with self.use(key) as s:

            def replace() -> str:
                env = self.open_environment(data_patch)
                try:
                    digest = env.state_hash()
                except BaseException:
                    env.close()
                    raise
                old, s.env = s.env, env
                if old is not None:
                    old.close()
                return digest

            return await anyio.to_thread.run_sync(replace)

    async def state_hash(self, key: str) -> str:
        async with self.use(key) as s:
            return await anyio.to_thread.run_sync(lambda: self._environment(s).state_hash())

    async def close(self, key: str) -> bool:
        """Close a session's environment now; False when there was none."""
        s = self._sessions.get(key)
        if s is None:
            return False
        async with s.lock:
            self._discard(s)
        return True

    def close_all(self) -> None:
        for s in list(self._sessions.values()):
            self._discard(s)


# -- the MCP server ---------------------------------------------------------------------------------


def _server_version() -> str:
    try:
        return version("shadowguard")
    except PackageNotFoundError:
        return "0"


def mcp_tools(domain: Domain) -> list[types.Tool]:
    """The agent-visible tools: reference names, descriptions and schemas, plus effect annotations."""
    out = []
    for tool in domain.tools.values():
        hints = {"readOnlyHint": not tool.writes, **tool.annotations}
        out.append(
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=tool.input_schema,
                annotations=types.ToolAnnotations.model_validate(hints),
            )
        )
    return out


class EnvServer:
    """The MCP server of one domain: its tools, the harness methods and the session store."""

    def __init__(
        self,
        domain: Domain,
        database: Database,
        data: BenchData,
        *,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        tx_lease_s: float | None = DEFAULT_LEASE_S,
    ) -> None:
        self.domain = domain
        self.data = data
        self.sessions = EnvSessions(domain, database, idle_timeout=idle_timeout, max_sessions=max_sessions)
        self.tools = mcp_tools(domain)
        self._tasks: dict[str, Task] | None = None
        self._tasks_lock = threading.Lock()
        self.server: Server[Any] = Server(
            f"shadowguard-{domain.name}",
            version=_server_version(),
            description=f"ThinkingBox-Bench domain {domain.name} (shadowguard re-implementation)",
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.add_request_handler(INIT_METHOD, EnvInitParams, self._init)
        self.server.add_request_handler(STATE_HASH_METHOD, EnvSessionParams, self._state_hash)
        self.server.add_request_handler(CLOSE_METHOD, EnvSessionParams, self._close)
        # A transaction whose guard stopped renewing it (docs/adr/011) is rolled back and its session's
        # environment closed: its pooled schema (PostgreSQL) or connection goes back at once.
        self.transactions = TransactionParticipant(
            session_key=self.session_key,
            access=self._backend_access,
            lease_s=tx_lease_s,
            on_lapse=self.sessions.close,
        )
        self.transactions.install(self.server)

    # -- session keys
    @staticmethod
    def session_key(ctx: Ctx) -> str:
        """Explicit ``_meta`` session id, else the legacy HTTP session, else the stdio connection."""
        meta: Mapping[str, Any] = ctx.meta or {}
        if SESSION_META_KEY in meta:
            value = meta[SESSION_META_KEY]
            if not isinstance(value, str) or not value or len(value) > _MAX_SESSION_ID:
                raise _invalid(
                    f"_meta[{SESSION_META_KEY!r}] must be a non-empty string of at most "
                    f"{_MAX_SESSION_ID} characters"
                )
            return "meta:" + value
        if ctx.request is None:
            return _STDIO_KEY
        header: str | None = ctx.request.headers.get("mcp-session-id")
        if header:
            return "http:" + header
        raise _invalid(
            f"no environment session: this request carries neither an Mcp-Session-Id nor "
            f"_meta[{SESSION_META_KEY!r}] (the 2026-07-28 HTTP era is sessionless: send a session id there)"
        )

    # -- tools
    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self.domain.tools.get(name)
        return None if tool is None else tool.input_schema

    async def _list_tools(self, ctx: Ctx, params: _Paging) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name in self.domain.tools:
            key, tx = self.session_key(ctx), self.transactions.transaction_of(ctx)

            def call(env: Environment, backend: SqlBackend) -> str:
                with self.transactions.calling(key, tx, backend):
                    return env.call_tool(params.name, params.arguments)

            text = await self.sessions.with_backend(key, call)
        else:
            text = f"Unknown tool: {params.name}"  # the reference's answer; no environment needed
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=False)

    async def _backend_access(self, key: str, work: Callable[[Backend], T], /) -> T:
        return await self.sessions.with_backend(key, lambda env, backend: work(backend))

    # -- harness methods
    def _task_index(self) -> dict[str, Task]:
        with self._tasks_lock:
            if self._tasks is None:
                self._tasks = {t.id: t for t in self.data.tasks()}
            return self._tasks

    async def _patch_for(self, params: EnvInitParams) -> Mapping[str, Any]:
        extra = sorted(params.model_extra or {})
        if extra:
            raise _invalid(f"{INIT_METHOD}: unknown parameter(s) {extra}; expected task_id or data_patch")
        given = {"task_id", "data_patch"} & params.model_fields_set
        if len(given) != 1:
            raise _invalid(f"{INIT_METHOD}: give exactly one of task_id or data_patch")
        if "data_patch" in given:
            if not isinstance(params.data_patch, Mapping):
                raise _invalid(f"{INIT_METHOD}: data_patch must be an object mapping table -> rows")
            return params.data_patch
        task_id = params.task_id
        if not isinstance(task_id, str) or not task_id:
            raise _invalid(f"{INIT_METHOD}: task_id must be a non-empty string")
        try:
            tasks = await anyio.to_thread.run_sync(self._task_index)
        except DataError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"cannot load tasks: {exc}") from exc
        task = tasks.get(task_id)
        if task is None:
            raise _invalid(f"{INIT_METHOD}: unknown task id {task_id!r}")
        if task.domain != self.domain.name:
            raise _invalid(
                f"{INIT_METHOD}: task {task_id!r} belongs to domain {task.domain}, not {self.domain.name}"
            )
        return task.data_patch

    async def _init(self, ctx: Ctx, params: EnvInitParams) -> EnvStateResult:
        key = self.session_key(ctx)
        patch = await self._patch_for(params)
        try:
            digest = await self.sessions.init(key, patch)
        except (DataError, UnknownTableError) as exc:
            raise _invalid(f"{INIT_METHOD}: {exc}") from exc
        return EnvStateResult(state_hash=digest)

    async def _state_hash(self, ctx: Ctx, params: EnvSessionParams) -> EnvStateResult:
        return EnvStateResult(state_hash=await self.sessions.state_hash(self.session_key(ctx)))

    async def _close(self, ctx: Ctx, params: EnvSessionParams) -> dict[str, Any]:
        await self.sessions.close(self.session_key(ctx))
        return {}

    # -- transports
    async def serve_stdio(self) -> None:
        """Serve one stdio connection (either era) until stdin closes."""
        try:
            async with stdio_server() as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
        finally:
            self.sessions.close_all()

    def http_app(
        self, *, host: str = "127.0.0.1", idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    ) -> ASGIApp:
        """The streamable-HTTP app: ``/mcp`` (both eras) and ``/healthz``."""

        async def healthz(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "domain": self.domain.name, "sessions": len(self.sessions)})

        app = self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            host=host,
            session_idle_timeout=idle_timeout,
            custom_starlette_routes=[Route("/healthz", healthz, methods=["GET"])],
        )
        return _CloseOnDelete(app, self.sessions)

    def serve_http(self, host: str, port: int, *, announce: Callable[[str], None] | None = None) -> None:
        """Serve over streamable HTTP until interrupted; ``port`` 0 picks a free port (announced)."""
        # IPPROTO_TCP explicitly: with protocol 0 asyncio does not set TCP_NODELAY on accepted
        # connections, and Nagle's algorithm then delays every response by ~40 ms.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(2048)  # clients that connect before uvicorn starts wait in the backlog
            bound = sock.getsockname()[1]
            app = self.http_app(host=host, idle_timeout=self.sessions.idle_timeout)
            config = uvicorn.Config(
                app, log_level="warning", lifespan="on", timeout_keep_alive=SERVER_KEEP_ALIVE_S
            )
            server = uvicorn.Server(config)
            shown = f"[{host}]" if ":" in host else host
            if announce is not None:
                announce(f"http://{shown}:{bound}{MCP_PATH}")
            server.run(sockets=[sock])
        finally:
            sock.close()
            self.sessions.close_all()


class _CloseOnDelete:
    """Closes a handshake-era session's environment when the client ends it with ``DELETE /mcp``."""

    def __init__(self, app: ASGIApp, sessions: EnvSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "DELETE" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        session_id = Headers(scope=scope).get("mcp-session-id")
        if session_id and status and status[0] < 300:
            await self.sessions.close("http:" + session_id)


def announce_stderr(url: str) -> None:
    print(f"shadowguard env serve: listening on {url}", file=sys.stderr, flush=True)
