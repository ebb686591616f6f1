"""The OpenEnv server: ``openenv``'s HTTPEnvServer over :class:`TBEpisode`, plus ``/ready``.

One WebSocket connection at ``/ws`` is one session with its own episode (up to ``max_episodes`` at
once; past that the ``openenv`` server refuses the connection with ``CAPACITY_REACHED``).
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from fastapi import FastAPI, WebSocketDisconnect
from fastapi.responses import JSONResponse

from benchmark.openenv_env._openenv import HTTPEnvServer
from benchmark.openenv_env.episode import TBEpisode
from benchmark.openenv_env.models import TBObservation, WireAction
from benchmark.openenv_env.shared import Shared

ENV_NAME = "shadowguard-thinkingbox"
log = logging.getLogger("shadowguard.openenv")


def build_app(shared: Shared, max_episodes: int = 64) -> _QuietClose:
    """The FastAPI app serving ``shared``'s tasks; ``shared`` is warmed first (fails on bad data)."""
    shared.warm()
    server = HTTPEnvServer(
        env=functools.partial(TBEpisode, shared),
        action_cls=WireAction,
        observation_cls=TBObservation,
        max_concurrent_envs=max_episodes,
    )
    app = FastAPI(title="shadowguard ThinkingBox OpenEnv server", version="0.1.0")

    @app.get("/ready")
    def ready() -> JSONResponse:
        body: dict[str, Any] = {
            "ready": True,
            "env": ENV_NAME,
            "tasks": len(shared.tasks),
            "default_arm": shared.default_arm,
            "active_episodes": server.active_sessions,
            "max_episodes": server.max_concurrent_envs,
            "user_simulator": shared.user is not None,
            "judge": shared.judge is not None,
            "llm_endpoints": shared.llm_endpoints,
        }
        return JSONResponse(body)

    server.register_routes(app)
    return _QuietClose(app)


class _QuietClose:
    """openenv-core 0.3's ``/ws`` handler closes the socket after the client has gone and lets the
    resulting ``WebSocketDisconnect`` escape (later ``openenv`` releases catch it): a client that ends
    its session normally would log a traceback. Only that exception, on a WebSocket, is dropped here;
    the episode was already closed (and, if unfinished, rolled back) by then."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            log.debug("websocket closed by the client before the server's close frame")


def serve(shared: Shared, host: str, port: int, max_episodes: int) -> None:
    """Serve until interrupted; ``port`` 0 picks a free port. The ``ws://`` URL goes to stderr once
    the socket is bound (clients connecting before uvicorn starts wait in the backlog)."""
    import socket

    import uvicorn

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    for chatty in ("httpx", "httpx2"):  # the LLM clients' HTTP layer: one INFO line per request
        logging.getLogger(chatty).setLevel(logging.WARNING)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        app = build_app(shared, max_episodes)
        sock.bind((host, port))
        sock.listen(2048)
        shown = f"[{host}]" if ":" in host else host
        print(
            f"shadowguard env openenv: listening on ws://{shown}:{sock.getsockname()[1]}/ws "
            f"(arm {shared.default_arm}, {len(shared.tasks)} tasks)",
            file=sys.stderr,
            flush=True,
        )
        uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])
    finally:
        sock.close()
        shared.close()
