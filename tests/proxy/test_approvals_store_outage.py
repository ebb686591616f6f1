"""A PostgreSQL approval store that fails and comes back, through both relay paths (issue 15).

Two ``shadowguard serve`` processes on one PostgreSQL queue (a table prefix of the test's own): one with
the lean relay (``proxy.lean_relay``, the default), one through the SDK (``lean_relay: false``), each over
a notes fixture whose pack holds ``delete_note`` for approval. With a request pending, the store's
backends are killed (``pg_terminate_backend`` from an admin connection) and its table is renamed away,
so the next use meets a DBAPI error that is not an ``OperationalError`` (the class the ``bench chaos``
approval-store-postgresql trial found escaping as ``-32603``). docs/approvals.md promises: a call that
needs the store fails ``transient``, rule ``approvals_unavailable``, nothing done. Once the store is back,
the next held call is held again and the first request is still pending (the dead connections were
discarded, not reused).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from guard.approvals import SqlApprovalStore, open_approval_store
from tests.support.approvals import REVIEWERS_AUTH
from tests.support.processes import Process, notes_http, shadowguard_serving
from tests.support.proxy import NOTES_APPROVALS_POLICY, agent_on, notes_rows, text, write_config
from tests.support.services import PG_URL, require_postgres

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _admin(sql: str, *params: Any) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        return admin.execute(sql, params).rowcount


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    require_postgres()
    url = f"{PG_URL}?table_prefix=t_{uuid.uuid4().hex[:12]}_"
    yield url
    store = open_approval_store(url)
    assert isinstance(store, SqlApprovalStore)
    try:
        store.drop_tables()
    finally:
        store.close()


@pytest.fixture(scope="module")
def proxies(module_tmp: Path, store_url: str) -> Iterator[dict[str, tuple[Process, Path, str]]]:
    """Per relay path: the proxy, its notes database, and the application_name of its store connections."""
    configs, upstreams, found = {}, [], {}
    for name, lean in (("lean", True), ("sdk", False)):
        folder = module_tmp / name
        folder.mkdir()
        db = folder / "notes.sqlite"
        notes = notes_http(db).ready()
        upstreams.append(notes)
        app = f"sg-{name}-{uuid.uuid4().hex[:8]}"
        configs[name] = write_config(
            folder / "proxy.yaml",
            [{"name": "notes", "transport": "http", "url": notes.url, "policy": str(NOTES_APPROVALS_POLICY)}],
            http={"host": "127.0.0.1", "port": 0},
            approvals={"store": f"{store_url}&application_name={app}", "wait_s": 0},
            proxy={"lean_relay": lean},
            auth=REVIEWERS_AUTH,
        )
        found[name] = (db, app)
    try:
        with shadowguard_serving(configs) as served:
            yield {name: (served[name], *found[name]) for name in configs}
    finally:
        for notes in upstreams:
            notes.stop()


def _verdict(result: Any) -> dict[str, Any]:
    assert result.is_error, text(result)
    assert result.structured_content is not None, text(result)
    return dict(result.structured_content)


@pytest.mark.parametrize("path", ["lean", "sdk"])
async def test_a_store_that_fails_then_returns_fails_closed_then_holds_again(
    proxies: dict[str, tuple[Process, Path, str]], store_url: str, path: str
) -> None:
    proxy, db, app = proxies[path]
    table = f"{store_url.rsplit('table_prefix=', 1)[1]}approvals"
    notes = [f"{path}-{uuid.uuid4().hex[:8]}-{n}" for n in range(2)]
    async with agent_on(proxy.url, "2026-07-28") as agent:
        for note in notes:
            await agent.ok("put_note", {"id": note, "body": "keep me", "status": "published"})
        await agent.commit()
        first = _verdict(await agent.call("delete_note", {"id": notes[0]}))
        assert first["error_class"] == "approval_pending", first

        assert _admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", app
        )
        _admin(f'ALTER TABLE "{table}" RENAME TO "{table}_away"')
        try:
            # before the fix: an internal error (-32603, mcp.MCPError raised here), no verdict
            away = _verdict(await agent.call("delete_note", {"id": notes[1]}))
            assert away["error_class"] == "transient", away
            assert "approvals_unavailable" in json.dumps(away), away
            assert set(notes) <= set(notes_rows(db)), "nothing may run while the store is away"
        finally:
            _admin(f'ALTER TABLE "{table}_away" RENAME TO "{table}"')

        again = _verdict(await agent.call("delete_note", {"id": notes[0]}))
        assert (again["error_class"], again["approval_id"]) == ("approval_pending", first["approval_id"]), (
            again
        )
        held = _verdict(await agent.call("delete_note", {"id": notes[1]}))
        assert held["error_class"] == "approval_pending", held
        assert set(notes) <= set(notes_rows(db))
