"""``shadowguard serve``'s entry points: the listening socket, uvicorn, the signals that stop it, and the
order in which a proxy is built, started, served and stopped (:func:`run_http`, :func:`run_stdio`)."""

from __future__ import annotations

import errno
import gc
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.types import ASGIApp

from guard.keepalive import SERVER_KEEP_ALIVE_S
from proxy.app import MCP_PATH, REVIEW_PATH, build_proxy, create_app, serving
from proxy.config import ConfigError, ProxyConfig
from proxy.http_writes import CoalescingHttpTools


def announce_stderr(url: str) -> None:
    print(f"shadowguard serve: listening on {url}", file=sys.stderr, flush=True)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the upstreams start so that a busy port fails fast.

    It is opened as IPPROTO_TCP explicitly: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    connections of sockets whose protocol says TCP, and with Nagle on, every response whose headers
    and body are written separately waits for the client's delayed ACK (about 40 ms a request).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _bind_side(host: str, port: int) -> socket.socket:
    """The stdio proxy's side port: the configured one, else (taken: hosts start one stdio proxy per
    window or chat, all with one config) a free one, said on stderr with the URL that follows."""
    try:
        return _bind(host, port)
    except OSError as exc:
        if port == 0 or exc.errno != errno.EADDRINUSE:
            raise
    print(
        f"shadowguard serve: port {port} is in use (another instance with this config?); "
        "the HTTP side app takes a free port instead",
        file=sys.stderr,
        flush=True,
    )
    return _bind(host, 0)


def _url(host: str, sock: socket.socket, path: str = MCP_PATH) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}{path}"


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the proxy stops it on SIGINT/SIGTERM, then rolls the
    open sessions back and stops its upstreams (uvicorn would re-raise the signal and kill the
    process before that)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


SHUTDOWN_GRACE_S = 5
"""After SIGINT/SIGTERM, requests still running after this long are cancelled (then every session is
rolled back): a stop never waits for a slow upstream or a long retry."""


def _uvicorn(app: ASGIApp) -> uvicorn.Server:
    return _Uvicorn(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            # httptools, the C parser (h11's pure-Python parsing was a fifth of a read's proxy CPU),
            # with each answer's headers and body sent in one write (proxy.http_writes)
            http=CoalescingHttpTools,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        )
    )


def loop_options(event_loop: str) -> dict[str, Any]:
    """anyio's backend options for ``proxy.event_loop``; ConfigError when uvloop is asked for and
    cannot be imported (never a quiet fall back to the slower loop)."""
    if event_loop == "asyncio":
        return {"use_uvloop": False}
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError as exc:
        raise ConfigError(
            f"proxy.event_loop is uvloop, but uvloop cannot be imported ({exc}): install it "
            "(pip install uvloop) or set proxy.event_loop: asyncio"
        ) from exc
    return {"use_uvloop": True}


def settle_heap() -> None:
    """Once start-up is done: collect its garbage, then freeze what survives (``gc.freeze``).

    Start-up builds some 185,000 long-lived objects (modules, the policy packs, the SDK's and
    pydantic's schemas, the upstreams' tool lists). Left in the cyclic collector's oldest generation,
    each full collection walks all of them: about 90 ms on the development machine, one every few
    thousand calls (issue 18: 30 µs of proxy CPU per call amortised, and a 90 ms stall on the call
    that triggers it). Frozen, they are never walked again; reference counting still frees any of them
    that is dropped later, and what the proxy builds afterwards (sessions, connections) is collected
    as before. The cost: a reference cycle among start-up objects that becomes garbage later stays
    allocated (bounded by what start-up built)."""
    gc.collect()
    gc.freeze()


async def _on_signal(
    stop: Callable[[], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            stop()
            return


async def run_http(config: ProxyConfig, *, announce: Callable[[str], None] = announce_stderr) -> None:
    """``shadowguard serve``: connect the upstreams, then serve HTTP until SIGINT/SIGTERM."""
    sock = _bind(config.http.host, config.http.port)
    try:
        proxy, recorder = build_proxy(config, review_url=_url(config.http.host, sock, REVIEW_PATH))
        async with serving(proxy, recorder, config), anyio.create_task_group() as tg:
            server = _uvicorn(create_app(proxy, config, lifespan_runs_proxy=False))

            def stop() -> None:
                server.should_exit = True
                proxy.sessions.stop_retrying()

            await tg.start(_on_signal, stop)
            settle_heap()
            announce(_url(config.http.host, sock))
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    finally:
        sock.close()


async def run_stdio(
    config: ProxyConfig, *, side_http: bool, announce: Callable[[str], None] = announce_stderr
) -> None:
    """``shadowguard serve --stdio``: one agent on stdin/stdout (until it closes them, or SIGINT/SIGTERM);
    the HTTP app on a side port if asked (:func:`_bind_side`)."""
    sock = _bind_side(config.http.host, config.http.port) if side_http else None
    try:
        review = _url(config.http.host, sock, REVIEW_PATH) if sock is not None else None
        proxy, recorder = build_proxy(config, spare_connections=False, review_url=review)
        async with serving(proxy, recorder, config), anyio.create_task_group() as tg:
            server: uvicorn.Server | None = None
            if sock is not None:
                server = _uvicorn(create_app(proxy, config, lifespan_runs_proxy=False))
                tg.start_soon(_serve_side, server, sock)
                announce(_url(config.http.host, sock))
            with anyio.CancelScope() as agent:

                def stop() -> None:
                    proxy.sessions.stop_retrying()
                    agent.cancel()

                await tg.start(_on_signal, stop)
                settle_heap()
                await proxy.serve_stdio(config.http.max_body_bytes)
            if server is not None:
                server.should_exit = True
            tg.cancel_scope.cancel()
    finally:
        if sock is not None:
            sock.close()


async def _serve_side(server: uvicorn.Server, sock: socket.socket) -> None:
    with anyio.CancelScope(shield=True):
        await server.serve(sockets=[sock])


__all__ = ["SHUTDOWN_GRACE_S", "announce_stderr", "loop_options", "run_http", "run_stdio", "settle_heap"]
