"""The approvals REST API as the proxy tests use it: two reviewers' tokens (an approver, a viewer),
their ``auth`` section for a proxy config, an HTTP client on a served proxy, and a decision."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2

from proxy.approvals.auth import hash_token
from tests.support.processes import Process

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
