"""Fifty agents at once on one transactional upstream, through one ``shadowguard serve`` over HTTP.

Every agent writes its own marker into the same ticket of the retail domain, inside its own guard
session (half of them handshake-era clients keyed by ``Mcp-Session-Id``, half 2026-07-28 clients
keyed by ``_meta``). All writes are pending at the same moment; each agent must then read back
exactly its own marker (never another session's uncommitted write), and after half of them roll back
and half commit, each must see exactly what it decided (each upstream session has its own state,
so a commit is visible to its own session only).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support.proxy import Agent, text

pytestmark = pytest.mark.anyio
AGENTS = 50
TICKET = {"table": "tickets", "id": "1"}
ORIGINAL = "Office printer stopped responding to print requests"
"""Ticket 1's description in the retail domain's default state."""


class Barrier:
    """All agents reach a point before any goes on (anyio has no barrier)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.released = anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.parties:
            self.released.set()
        with anyio.fail_after(120):
            await self.released.wait()


async def test_fifty_sessions_never_see_each_others_uncommitted_writes(http_proxy: Any) -> None:
    written, decided = Barrier(AGENTS), Barrier(AGENTS)
    seen: dict[int, dict[str, Any]] = {}

    async def agent(i: int) -> None:
        mode = "legacy" if i % 2 else "2026-07-28"
        async with Client(http_proxy.url, mode=mode, cache=None, read_timeout_seconds=120) as client:
            me = Agent(client, None if mode == "legacy" else f"concurrent-{i}")

            async def ticket() -> dict[str, Any]:
                return dict((await me.json("zendesk_get_item", TICKET))["item"])

            marker = f"agent {i} was here"
            solved = {"description": marker, "status": "solved"}
            await me.ok("zendesk_update_item", {**TICKET, "item": solved})
            await written.wait()  # every session now holds an uncommitted write to the same row
            during = await ticket()
            outcome = await me.call("rollback" if i % 4 < 2 else "commit")
            assert not outcome.is_error, text(outcome)
            await decided.wait()
            seen[i] = {"marker": marker, "during": during, "after": await ticket()}

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for i in range(AGENTS):
                tg.start_soon(agent, i)

    assert len(seen) == AGENTS
    for i, s in sorted(seen.items()):
        assert s["during"]["description"] == s["marker"], f"agent {i} saw {s['during']['description']!r}"
        committed = i % 4 >= 2
        assert s["after"]["description"] == (s["marker"] if committed else ORIGINAL), json.dumps(s)
        assert s["after"]["status"] == ("solved" if committed else "open")
