"""Writers on a SQLite upstream queue in the proxy without any config (issue 15).

`bench perf proxy --kind write --clients 32` saw 141 of 640 writes through the proxy fail with
"database is locked". Cause: in WAL mode SQLite refuses the write lock *at once* to a transaction
that has read (the notes fixture's ``put_note`` reads the row first), whatever its ``busy_timeout``;
a session holds the lock from its write to its commit (client round trips included), so the others
could only poll, and the guard's 8 retries ran out. A participant on SQLite now advertises
``writers: 1`` (``guard.txext.settings``), and the proxy queues sessions for that writer slot
(FIFO, up to ``writer_wait_s``) instead of letting them collide in the database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from benchmark import chaos_db
from benchmark.chaos_stack import NotesHttp, client, meta, notes_rows, start_proxy, text_of, write_config
from benchmark.fixtures import NOTES_POLICY

SESSIONS = 8


def _verdict(result: Any) -> dict[str, Any]:
    return dict(result.structured_content or {})


def test_a_sqlite_upstreams_writers_wait_in_the_proxy_and_never_collide_in_the_database(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "notes.sqlite")
    chaos_db.prepare(db)
    notes = NotesHttp(tmp_path, db)
    proxy = None
    try:
        url = notes.start()
        # No `writers` in the config: the slot comes from what the upstream advertises.
        upstream = {"name": "notes", "transport": "http", "url": url, "policy": str(NOTES_POLICY)}
        proxy, proxy_url = start_proxy(
            write_config(tmp_path / "proxy.yaml", [upstream]), tmp_path / "proxy.log"
        )
        outcomes: dict[str, dict[str, Any]] = {}

        async def main() -> None:
            seen: list[int] = []
            http, c = client(proxy_url, seen)
            async with http, c:
                # A holds an uncommitted write: SQLite's write lock is A's until it commits.
                first = await c.call_tool(
                    "put_note", {"id": "a", "body": "x", "status": "draft"}, meta=meta("A")
                )
                assert not first.is_error, text_of(first)

                async def writer(name: str) -> None:
                    args = {"id": name, "body": "x", "status": "draft"}
                    result = await c.call_tool("put_note", args, meta=meta(name))
                    outcomes[name] = {"error": result.is_error, "text": text_of(result), **_verdict(result)}
                    if not result.is_error:
                        done = await c.call_tool("commit", {}, meta=meta(name))
                        assert _verdict(done).get("committed") is True, text_of(done)

                async with anyio.create_task_group() as tg:
                    for n in range(SESSIONS):
                        tg.start_soon(writer, f"w{n}")
                    await anyio.sleep(1.5)  # every writer is waiting now: in the proxy, not the database
                    done = await c.call_tool("commit", {}, meta=meta("A"))
                    assert _verdict(done).get("committed") is True, text_of(done)
            assert seen == []

        anyio.run(main)
        for name, outcome in sorted(outcomes.items()):
            assert not outcome["error"], f"{name}: {outcome['text']}"
        # A write that collided in the database would have been retried by the guard (audited).
        calls = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        writes = [c for c in calls if c.get("tool") == "put_note"]
        assert len(writes) == SESSIONS + 1
        assert [c for c in writes if c.get("retries") or c.get("error_class")] == []
        assert set(notes_rows(db, "")) >= {"a"} | {f"w{n}" for n in range(SESSIONS)}
    finally:
        if proxy is not None:
            proxy.stop()
        notes.stop()
