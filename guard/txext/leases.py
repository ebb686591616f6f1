"""A participant's lease keeping (docs/adr/011): renewing on each answer, and the reaper that rolls
back transactions no request named for ``lease_s`` (a guard that died holds no lock for ever)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware

from guard.backend import Backend
from guard.txext.protocol import METHODS, TX_META_KEY
from guard.txext.registry import Registry

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")


class BackendAccess(Protocol):
    """Runs ``work(backend)`` for a session: in a worker thread, serialised with its tool calls.

    The backend must be the one on the connection that session's tool calls use, and the same
    object for as long as the session's state lives: a different object (the state was replaced
    or closed) ends any transaction that was open on the old one.
    """

    def __call__(self, key: str, work: Callable[[Backend], T], /) -> Awaitable[T]: ...


def renew_after(registry: Registry, session_key: Callable[[Ctx], str]) -> ServerMiddleware[Any]:
    """Server middleware: a request naming a transaction renews its lease when it is answered (it
    was renewed on arrival too), so a call longer than the lease does not lapse it."""

    async def middleware(ctx: Ctx, call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        meta: Mapping[str, Any] = ctx.meta or {}
        tx = meta.get(TX_META_KEY)
        if isinstance(tx, str) and (ctx.method == "tools/call" or ctx.method in METHODS):
            registry.touch(session_key(ctx), tx)
        return result

    return middleware


async def reap(
    registry: Registry, access: BackendAccess, on_lapse: Callable[[str], Awaitable[object]] | None
) -> list[str]:
    """Roll back every transaction whose lease lapsed (serialised with its session's calls, and only
    if it is still open and still lapsed then); the session keys, after ``on_lapse``."""
    lapsed = []
    for key, tx in registry.lapsed():

        def roll_back(backend: Backend, key: str = key, tx: str = tx) -> bool:
            if not registry.take_lapsed(key, tx):
                return False
            try:
                backend.rollback()
            except Exception as exc:  # its state is unknown: the host's on_lapse drops the session
                logger.warning("transaction %s (lease lapsed): rollback failed: %s", tx, exc)
            return True

        if await access(key, roll_back):
            logger.info("transaction %s of session %s: lease lapsed, rolled back", tx, key)
            lapsed.append(key)
            if on_lapse is not None:
                await on_lapse(key)
    return lapsed


def run_in_lifespan(server: Server[Any], reaper: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``reaper`` in the server's lifespan (cancelled when the server stops)."""
    inner = server.lifespan

    @contextlib.asynccontextmanager
    async def lifespan(app: Server[Any]) -> AsyncIterator[Any]:
        async with inner(app) as state, anyio.create_task_group() as tg:
            tg.start_soon(reaper)
            try:
                yield state
            finally:
                tg.cancel_scope.cancel()

    server.lifespan = lifespan
