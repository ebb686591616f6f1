"""How the lean relay writes an answer (proxy.relay_lean.answer_call): JSON when the call is quick,
SSE with pings once it is slow, nothing when the client left (the call cancelled, its shielded
cleanup kept), and no watch left running in any case. The ASGI ``receive`` and ``send`` here are
in-memory channels; tests/proxy/test_relay_lean.py runs the relay end to end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import pytest

from proxy import relay_lean
from proxy.relay_lean import answer_call

pytestmark = pytest.mark.anyio

ANSWER = {"jsonrpc": "2.0", "id": 7, "result": {"content": [], "resultType": "complete"}}


class Client:
    """The client side of one request: ``receive`` blocks until :meth:`leave`, ``send`` records."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._left = anyio.Event()

    async def receive(self) -> dict[str, Any]:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self._left.set()


def _others() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def test_a_quick_answer_is_one_json_response_and_leaves_no_watch() -> None:
    client, before = Client(), _others()

    async def envelope() -> dict[str, Any]:
        await anyio.sleep(0)
        return ANSWER

    await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    await anyio.sleep(0)  # the cancelled watch ends on the loop's next turn
    start, body = client.sent
    assert start["status"] == 200 and (b"content-type", b"application/json") in start["headers"]
    assert json.loads(body["body"]) == ANSWER and not body.get("more_body", False)
    assert _others() == before


async def test_a_slow_answer_commits_to_sse_pings_then_sends_one_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_lean, "SSE_COMMIT_S", 0.05)
    client, before = Client(), _others()
    pinged = anyio.Event()

    async def envelope() -> dict[str, Any]:
        while sum(m.get("body") == b": ping\r\n\r\n" for m in client.sent) < 2:
            await anyio.sleep(0.01)
        pinged.set()
        return ANSWER

    await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    await anyio.sleep(0)
    assert pinged.is_set()
    start, *pings, last = client.sent
    assert start["type"] == "http.response.start"
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert len(pings) >= 2 and all(p["more_body"] for p in pings)
    data = last["body"].decode()
    assert data.startswith("event: message\r\ndata: ") and last["more_body"] is False
    assert json.loads(data.split("data: ", 1)[1]) == ANSWER
    assert _others() == before


async def test_a_client_that_leaves_cancels_the_call_but_not_its_shielded_cleanup() -> None:
    client, before = Client(), _others()
    cleaned = anyio.Event()

    async def envelope() -> dict[str, Any]:
        try:
            client.leave()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # a cancelled scope would raise here at once
                cleaned.set()
        raise AssertionError("unreachable")

    with anyio.fail_after(5):
        await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    await anyio.sleep(0)
    assert cleaned.is_set() and client.sent == []
    assert _others() == before


async def test_a_failing_call_raises_and_stops_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_lean, "SSE_COMMIT_S", 0.02)
    client, before = Client(), _others()

    async def envelope() -> dict[str, Any]:
        await anyio.sleep(0.08)  # long enough for the watch to have committed to SSE
        raise RuntimeError("the call broke")

    with pytest.raises(RuntimeError, match="the call broke"):
        await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    await anyio.sleep(0)
    assert client.sent and client.sent[0]["type"] == "http.response.start"
    count = len(client.sent)
    await anyio.sleep(0.06)
    assert len(client.sent) == count, "no ping after the call ended"
    assert _others() == before


async def test_a_watch_that_fails_is_logged_and_the_call_still_answers(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay_lean, "WATCH_AFTER_S", 0.0)
    client = Client()

    async def broken_receive() -> dict[str, Any]:
        raise RuntimeError("the transport broke")

    async def envelope() -> dict[str, Any]:
        await anyio.sleep(0.01)
        return ANSWER

    await answer_call(broken_receive, client.send, envelope)  # type: ignore[arg-type]
    assert json.loads(client.sent[1]["body"]) == ANSWER
    [record] = [r for r in caplog.records if "watch over a client failed" in r.getMessage()]
    assert record.exc_info is not None and "the transport broke" in str(record.exc_info[1])


async def test_a_quick_call_starts_no_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr(relay_lean, "_watch_ended", lambda watch: started.append("watch"))
    client = Client()

    async def envelope() -> dict[str, Any]:
        await anyio.sleep(0)
        return ANSWER

    await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    await anyio.sleep(relay_lean.WATCH_AFTER_S * 2)  # the timer, had it been left, would fire
    assert started == [] and json.loads(client.sent[1]["body"]) == ANSWER


async def test_a_client_gone_before_the_watch_starts_is_noticed_when_it_does() -> None:
    client = Client()
    client.leave()
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def envelope() -> dict[str, Any]:
        await anyio.sleep(5)
        return ANSWER

    with anyio.fail_after(2):
        await answer_call(client.receive, client.send, envelope)  # type: ignore[arg-type]
    assert client.sent == [] and loop.time() - began >= relay_lean.WATCH_AFTER_S
