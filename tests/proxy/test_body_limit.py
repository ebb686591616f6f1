"""Found by ``bench chaos`` (hostile input): ``/mcp`` answered a body over ``http.max_body_bytes`` with a
bare "Request body too large" (no limit, no config key), and the REST APIs read any body whole, with
no bound at all. Every HTTP request body is now bounded, and a refusal names the limit and its key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.bodylimit import BodyLimit

LIMIT = 1000


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"bytes": len(await request.body())})


def app() -> BodyLimit:
    return BodyLimit(Starlette(routes=[Route("/api/x", echo, methods=["POST"])]), LIMIT)


async def _post(
    content: bytes | AsyncIterator[bytes], headers: dict[str, str] | None = None
) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app())
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as http:
        return await http.post("/api/x", content=content)


@pytest.mark.anyio
async def test_a_body_within_the_limit_passes() -> None:
    answer = await _post(b"x" * LIMIT)
    assert (answer.status_code, answer.json()) == (200, {"bytes": LIMIT})


@pytest.mark.anyio
async def test_a_declared_body_over_the_limit_is_refused_naming_the_limit_and_key() -> None:
    answer = await _post(b"x" * (LIMIT + 1))
    assert answer.status_code == 413
    message = answer.json()["error"]["message"]
    assert f"{LIMIT + 1} bytes" in message and f"limit of {LIMIT} bytes" in message
    assert "http.max_body_bytes" in message


@pytest.mark.anyio
async def test_a_streamed_body_over_the_limit_is_refused_before_it_is_read_whole() -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(100):
            sent += 1
            yield b"x" * 500

    answer = await _post(chunks())
    assert answer.status_code == 413
    assert "http.max_body_bytes" in answer.json()["error"]["message"]
