"""The approvals REST API as the proxy tests use it: two reviewers' tokens (an approver, a viewer),
their ``auth`` section for a proxy config, an HTTP client on a served proxy, and a decision."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types

from guard.approvals import ApprovalRequest
from guard.models import EffectClass
from proxy.approvals.auth import hash_token
from tests.support.processes import Process
from tests.support.proxy import Agent, notes_rows, outcome_meta

APPROVER_TOKEN = "approver-" + uuid.uuid4().hex
VIEWER_TOKEN = "viewer-" + uuid.uuid4().hex
REVIEWERS_AUTH: dict[str, Any] = {
    "reviewers": [
        {"name": "maria", "role": "approver", "token_sha256": hash_token(APPROVER_TOKEN)},
        {"name": "victor", "role": "viewer", "token_sha256": hash_token(VIEWER_TOKEN)},
    ]
}
"""A proxy config's ``auth``: ``maria`` approves (:data:`APPROVER_TOKEN`), ``victor`` only views."""


@asynccontextmanager
async def api(process: Process) -> AsyncIterator[httpx2.AsyncClient]:
    """An HTTP client on the served proxy's base URL (its REST API)."""
    async with httpx2.AsyncClient(base_url=process.base, timeout=30) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def decide(http: httpx2.AsyncClient, approval_id: str, decision: str, reason: str | None) -> Any:
    """``maria`` approves or rejects (``decision``) the held call; it must be decided so. Returns the
    approval as the API answers it."""
    answer = await http.post(
        f"/api/approvals/{approval_id}/{decision}", json={"reason": reason}, headers=bearer(APPROVER_TOKEN)
    )
    assert answer.status_code == 200, answer.text
    decided = answer.json()
    assert decided["state"] == ("approved" if decision == "approve" else "rejected"), decided
    return decided


async def committed_note(agent: Agent, db: Path, note: str, body: str = "keep me") -> None:
    """The agent writes ``note`` and commits; it is then in the notes database ``db``."""
    await agent.ok("put_note", {"id": note, "body": body, "status": "published"})
    await agent.commit()
    assert note in notes_rows(db)


async def session_of(agent: Agent) -> str:
    """The guard session id the proxy gives this agent (a read names it in the outcome)."""
    return str(outcome_meta(await agent.call("list_notes"))["session"])


async def pending_approval(
    http: httpx2.AsyncClient, session_id: str, *, other_than: str | None = None, timeout_s: float = 60.0
) -> dict[str, Any]:
    """The session's one pending request (other than ``other_than``), once a held call has made it
    (read through the API by the viewer)."""
    with anyio.fail_after(timeout_s):
        while True:
            listed = await http.get(
                "/api/approvals",
                params={"state": "pending", "session_id": session_id},
                headers=bearer(VIEWER_TOKEN),
            )
            assert listed.status_code == 200, listed.text
            items: list[dict[str, Any]] = [a for a in listed.json()["items"] if a["id"] != other_than]
            if items:
                [item] = items
                return item
            await anyio.sleep(0.05)


async def held_while(agent: Agent, note: str, step: Callable[[], Awaitable[object]]) -> types.CallToolResult:
    """The agent sends ``delete_note`` (held: it waits for a reviewer) and ``step`` runs meanwhile;
    returns the call's result once both are done."""
    results: list[types.CallToolResult] = []

    async def held_call() -> None:
        results.append(await agent.call("delete_note", {"id": note}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(held_call)
        await step()
    [result] = results
    return result


def delete_note_request(expires_at: datetime, *, principal: str | None = None) -> ApprovalRequest:
    """A held ``delete_note`` call of session ``s1`` under the notes approvals pack's review rule, as
    the proxy would file it; a test creates it in a store directly."""
    return ApprovalRequest(
        principal=principal,
        session_id="s1",
        tool="delete_note",
        arguments={"id": "x"},
        effect=EffectClass.IRREVERSIBLE,
        rule_id="notes.delete_needs_review",
        policy_version="sha256:0",
        expires_at=expires_at,
    )
