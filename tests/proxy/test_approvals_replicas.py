"""Two proxy replicas sharing one approval queue: a decision taken through one releases the call held by
the other, which runs it exactly once.

Two ``shadowguard serve`` processes (A and B) relay the same notes fixture (HTTP, transactional) with a
policy pack whose approval rule names ``delete_note`` (``notes_approvals_policy.yaml``), and share a
store: the local Redis (under a key prefix of the test's own), or PostgreSQL (under a table prefix of
the test's own). The agent talks to A; the reviewer decides through B's approvals API.
``SHADOWGUARD_TEST_REDIS=off`` / ``SHADOWGUARD_TEST_PG=off`` skip a backend.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from guard.approvals import ApprovalState, open_approval_store
from proxy.approvals.auth import hash_token
from tests.support.processes import notes_http, shadowguard_serving
from tests.support.proxy import (
    NOTES_APPROVALS_POLICY,
    agent_on,
    notes_http_upstream,
    notes_rows,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio
APPROVER_TOKEN = "approver-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def notes(module_tmp: Path) -> Iterator[tuple[Any, Path, Path]]:
    """The shared upstream, its database file, and the policy pack both replicas load."""
    db = module_tmp / "notes.sqlite"
    process = notes_http(db).ready()
    yield process, db, NOTES_APPROVALS_POLICY
    process.stop()


@pytest.fixture(params=["redis", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, approval_store_url: Callable[[str], str]) -> str:
    """A queue of the test's own on a shared server; everything under it is removed afterwards."""
    return approval_store_url(request.param)


@pytest.fixture
def replicas(tmp_path: Path, notes: tuple[Any, Path, Path], store_url: str) -> Iterator[tuple[Any, Any]]:
    upstream, _db, pack = notes
    configs = {
        name: write_config(
            tmp_path / f"{name}.yaml",
            [notes_http_upstream(upstream.url, pack)],
            http={"host": "127.0.0.1", "port": 0},
            approvals={"store": store_url, "wait_s": 60, "poll_s": 0.05},
            auth={
                "reviewers": [
                    {"name": "maria", "role": "approver", "token_sha256": hash_token(APPROVER_TOKEN)}
                ]
            },
        )
        for name in ("a", "b")
    }
    with shadowguard_serving(configs) as processes:
        yield processes["a"], processes["b"]


async def test_a_decision_through_one_replica_releases_the_call_held_by_the_other(
    replicas: tuple[Any, Any], notes: tuple[Any, Path, Path], store_url: str
) -> None:
    a, b = replicas
    _upstream, db, _pack = notes
    note = f"rep-{uuid.uuid4().hex[:8]}"
    auth = {"Authorization": f"Bearer {APPROVER_TOKEN}"}
    async with (
        agent_on(a.url, "2026-07-28") as agent,
        httpx2.AsyncClient(base_url=b.base, timeout=30) as reviewer_b,
    ):
        session = agent.session
        await agent.ok("put_note", {"id": note, "body": "keep me", "status": "published"})
        assert not (await agent.call("commit")).is_error
        results: list[Any] = []

        async def held_call() -> None:
            results.append(await agent.call("delete_note", {"id": note}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(held_call)
            with anyio.fail_after(60):
                while True:
                    listed = await reviewer_b.get(
                        "/api/approvals", params={"state": "pending", "session_id": session}, headers=auth
                    )
                    assert listed.status_code == 200, listed.text
                    if listed.json()["items"]:
                        break
                    await anyio.sleep(0.05)
            [pending] = listed.json()["items"]
            assert note in notes_rows(db)
            approved = await reviewer_b.post(
                f"/api/approvals/{pending['id']}/approve", json={"reason": None}, headers=auth
            )
            assert approved.status_code == 200, approved.text

        [released] = results
        assert not released.is_error, text(released)
        assert json.loads(text(released)) == {"deleted": note}
        stamp = dict((released.meta or {})["shadowguard/outcome"])
        assert (stamp["approval_id"], stamp["approval_state"]) == (pending["id"], "used")
        assert (await agent.commit())["changes"] == 1
    assert note not in notes_rows(db)

    store = open_approval_store(store_url)
    try:
        used = store.get(pending["id"])
        assert used.state is ApprovalState.APPROVED and used.used_at is not None
        assert [e.action for e in store.history(pending["id"])] == ["requested", "approved", "used"]
    finally:
        store.close()
