"""Liveness, readiness and metrics endpoints for orchestrators and scrapers.

* ``GET /healthz`` - 200 while the process serves HTTP at all (liveness: restart me if this fails).
* ``GET /readyz`` - 200 when every upstream is ready and the approval store (if any) answers a read,
  else 503 naming what is not (readiness: send me traffic; held calls and commits fail closed while
  the store is down). A proxy without upstreams is not ready: it has nothing to serve.
* ``GET /metrics`` - the Prometheus text exposition of :data:`proxy.telemetry.REGISTRY`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from proxy.telemetry import REGISTRY

Readiness = Callable[[], Mapping[str, bool] | Awaitable[Mapping[str, bool]]]
"""Upstream name (or ``"approval store"``) -> ready, sync or async (e.g. connected and its tool
list loaded)."""


def health_router(readiness: Readiness, *, registry: CollectorRegistry = REGISTRY) -> APIRouter:
    """The three endpoints; ``readiness`` is asked on every ``/readyz``."""
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        reported = readiness()
        upstreams = dict(await reported if inspect.isawaitable(reported) else reported)
        waiting = sorted(name for name, ready in upstreams.items() if not ready)
        if not upstreams:
            return JSONResponse(
                {"status": "not ready", "reason": "no upstreams configured", "upstreams": {}}, status_code=503
            )
        if waiting:
            return JSONResponse(
                {"status": "not ready", "waiting_for": waiting, "upstreams": upstreams}, status_code=503
            )
        return JSONResponse({"status": "ready", "upstreams": upstreams})

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
