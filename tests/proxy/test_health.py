"""``/healthz``, ``/readyz`` and ``/metrics`` served by a real uvicorn server on a loopback port."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import pytest
import uvicorn
from fastapi import FastAPI

from guard.models import EffectClass, ToolCall, ToolOutcome, Verdict
from proxy.health import Readiness, health_router
from proxy.telemetry import record_call

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(readiness: Readiness) -> AsyncIterator[str]:
    app = FastAPI()
    app.include_router(health_router(readiness))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            while not server.started:
                await anyio.sleep(0.01)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            server.should_exit = True
    finally:
        sock.close()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


async def fetch(url: str) -> tuple[int, str, str]:
    return await anyio.to_thread.run_sync(get, url)


async def test_healthz_and_readyz_follow_the_upstreams() -> None:
    state = {"accounts": False, "crm": True}
    async with serving(lambda: state) as base:
        status, _, body = await fetch(base + "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        status, _, body = await fetch(base + "/readyz")
        assert status == 503
        assert json.loads(body) == {
            "status": "not ready",
            "waiting_for": ["accounts"],
            "upstreams": {"accounts": False, "crm": True},
        }
        state["accounts"] = True
        status, _, body = await fetch(base + "/readyz")
        assert (status, json.loads(body)["status"]) == (200, "ready")


async def test_readyz_takes_an_async_probe_and_no_upstreams_is_not_ready() -> None:
    async def probe() -> Mapping[str, bool]:
        await anyio.sleep(0)
        return {}

    async with serving(probe) as base:
        status, _, body = await fetch(base + "/readyz")
    assert status == 503
    assert json.loads(body)["reason"] == "no upstreams configured"


async def test_metrics_exposes_the_guard_counters() -> None:
    record_call(
        ToolOutcome(call=ToolCall(tool="metrics_probe"), effect=EffectClass.READ, verdict=Verdict.ALLOWED)
    )
    ready: Callable[[], Mapping[str, bool]] = lambda: {"a": True}  # noqa: E731
    async with serving(ready) as base:
        status, content_type, body = await fetch(base + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    assert 'shadowguard_tool_calls_total{effect="read",tool="metrics_probe",verdict="allowed"} 1.0' in body
    assert "# TYPE shadowguard_tool_call_duration_seconds histogram" in body
    assert "process_cpu_seconds_total" in body
