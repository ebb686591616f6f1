"""``shadowguard serve`` end to end: real upstream subprocesses, real transports, both protocol eras.

Upstreams (tests/proxy/conftest.py): the notes fixture (benchmark/fixtures/notes_server.py) with the
transaction extension and its policy pack, the same server without it (journaled, tools prefixed
``j_``), and the retail benchmark domain (``shadowguard env serve``) with
policies/sandbox_external_retail. Behind the HTTP proxy (one ``shadowguard serve`` for the test run)
they are HTTP servers; behind the stdio proxies (one ``shadowguard serve --stdio`` per agent
connection) the notes fixture, and in one era the retail domain, are stdio subprocesses.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters

from benchmark.procs import startup_timeout_s
from benchmark.tasks import BenchData
from tests.support.processes import SHADOWGUARD, kill, notes_http_args
from tests.support.proxy import (
    Agent,
    era_agent_session,
    journal_upstream,
    notes_rows,
    notes_upstream,
    outcome_meta,
    retail_http_upstream,
    retail_upstream,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]


@pytest.fixture(scope="module")
def stdio_configs(
    module_tmp: Path, bench: BenchData, notes_db: Path, marker: str, upstreams: Any
) -> dict[str, Path]:
    """``shadowguard serve --stdio`` configs per era: the notes fixture as a stdio subprocess, the
    journaled notes over HTTP, and the retail domain as a stdio subprocess (legacy) or over HTTP."""
    notes = notes_upstream(notes_db, marker)
    journal = journal_upstream(upstreams.journal.url)
    return {
        "legacy": write_config(
            module_tmp / "stdio-legacy.yaml", [notes, journal, retail_upstream(bench, marker)]
        ),
        "2026-07-28": write_config(
            module_tmp / "stdio-2026.yaml",
            [notes, journal, retail_http_upstream(upstreams.retail.url)],
        ),
    }


@pytest.fixture(params=ERAS)
def mode(request: pytest.FixtureRequest) -> str:
    """The protocol era: a test that takes it runs once per era."""
    return str(request.param)


@pytest.fixture
def n(mode: str) -> str:
    """A prefix for the ids of the notes a test writes: its era and a random part, so that tests on the
    module's shared upstreams never meet."""
    return f"{mode[:3]}-{uuid.uuid4().hex[:6]}"


@asynccontextmanager
async def connect(url: str, mode: str) -> AsyncIterator[Agent]:
    """An agent on the HTTP proxy; in the 2026-07-28 era it names its session in ``_meta``."""
    async with Client(url, mode=mode, cache=None, read_timeout_seconds=60) as client:
        yield Agent(client, era_agent_session(mode))


def rule_ids(verdict: dict[str, Any]) -> list[str]:
    return [v["rule_id"] for v in verdict["violations"]]


def audit_records(proxy: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proxy.audit.read_text().splitlines()]


# -- tools/list ---------------------------------------------------------------------------------------


async def test_tools_are_relayed_exactly_and_filtered(http_proxy: Any, upstreams: Any, mode: str) -> None:
    async with Client(upstreams.journal.url, mode=mode, cache=None) as direct:
        upstream = {t.name: t for t in (await direct.list_tools()).tools}
    async with connect(http_proxy.url, mode) as agent:
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}

    for name in ("get_note", "list_notes", "put_note", "delete_note", "echo_meta", "whoami"):
        assert tools[name].model_dump() == upstream[name].model_dump(), name
    for name in ("get_note", "put_note", "delete_note", "whoami"):
        relayed = tools["j_" + name].model_dump()
        assert relayed.pop("name") == "j_" + name
        expected = upstream[name].model_dump()
        expected.pop("name")
        assert relayed == expected
    assert tools["get_note"].output_schema == upstream["get_note"].output_schema
    assert tools["put_note"].annotations is not None
    assert tools["put_note"].annotations.destructive_hint is False

    hidden = {"admin_reset", "__reserved__dump", "j_admin_reset", "j___reserved__dump", "j_echo_meta"}
    assert not hidden & set(tools)
    assert "zendesk_delete_item" not in tools  # cut by the retail pack's allowlist
    assert {"cancel_order", "get_order", "zendesk_update_item"} <= set(tools)
    assert "violations" in (tools["commit"].description or "")
    assert tools["commit"].input_schema["properties"] == {}
    assert "rollback" in tools


# -- the notes fixture: a transactional upstream ------------------------------------------------------


async def test_notes_session_read_write_violations_commit_and_rollback(
    http_proxy: Any, upstreams: Any, mode: str, n: str
) -> None:
    db = upstreams.notes_db
    async with connect(http_proxy.url, mode) as agent:
        read = await agent.call("get_note", {"id": "n1"})
        assert not read.is_error
        assert read.structured_content == {"id": "n1", "body": "first note", "status": "published"}
        stamp = outcome_meta(read)
        assert stamp["verdict"] == "allowed"
        session = stamp["session"]
        if agent.session is not None:
            assert session == agent.session

        await agent.ok("put_note", {"id": f"{n}-a", "body": "hello"})
        assert (await agent.json("get_note", {"id": f"{n}-a"}))["body"] == "hello"
        assert f"{n}-a" not in notes_rows(db), "uncommitted writes must not be visible outside"

        rolled = await agent.refused("put_note", {"id": f"{n}-b", "body": ""})
        assert rolled["verdict"] == "rolled_back"
        violation = rolled["violations"][0]
        assert violation["rule_id"] == "notes.body_not_empty"
        assert violation["hint"] == "Write the note's text in its body."
        assert violation["source"] == {"ref": "Notes handbook §1", "quote": "Every note has a body."}
        missing = await agent.call("get_note", {"id": f"{n}-b"})
        assert missing.is_error and text(missing).startswith(f"no note '{n}-b'")  # the upstream's
        assert outcome_meta(missing)["verdict"] == "failed"
        assert missing.structured_content is not None and missing.structured_content["hint"]["next_step"]

        failed = await agent.call("put_note", {"id": f"{n}-c", "body": "x", "status": "bogus"})
        assert failed.is_error and "unknown status 'bogus'" in text(failed)

        await agent.ok("put_note", {"id": f"{n}-d", "body": "TODO"})
        refused = await agent.call("commit")
        assert refused.is_error
        assert refused.structured_content is not None
        assert refused.structured_content["committed"] is False
        assert rule_ids(refused.structured_content) == ["notes.no_todo_drafts"]
        assert "Commit refused" in text(refused)
        assert f"{n}-a" not in notes_rows(db)

        await agent.ok("put_note", {"id": f"{n}-d", "body": "done"})
        assert await agent.commit() == {"committed": True, "changes": 2, "applied_calls": 0, "violations": []}
        rows = notes_rows(db)
        assert rows[f"{n}-a"]["body"] == "hello" and rows[f"{n}-d"]["body"] == "done"
        assert f"{n}-b" not in rows

        await agent.ok("put_note", {"id": f"{n}-e", "body": "second thoughts"})
        await agent.ok("delete_note", {"id": f"{n}-a"})
        undone = await agent.call("rollback")
        assert not undone.is_error and undone.structured_content == {
            "rolled_back": True,
            "changes": 2,
            "undone_calls": [],
            "not_undone_calls": [],
        }
        rows = notes_rows(db)
        assert f"{n}-e" not in rows and f"{n}-a" in rows
        assert (await agent.call("get_note", {"id": f"{n}-e"})).is_error

        # _meta: the agent's own keys reach the upstream; reserved ones never cross, either way
        echoed = await agent.call(
            "echo_meta",
            meta={"acme/trace": "t-1", "shadowguard/tx": "forged", "io.modelcontextprotocol/x": 1},
        )
        seen = json.loads(text(echoed))
        assert seen["acme/trace"] == "t-1"
        assert seen["shadowguard/tx"] != "forged"  # the proxy's own transaction, never the agent's
        assert seen["shadowguard/session"].startswith("sg-")  # the proxy's upstream session id
        assert "io.modelcontextprotocol/x" not in seen
        meta = dict(echoed.meta or {})
        assert meta["notes/echo"] == "kept"
        assert "shadowguard/forged" not in meta and "io.modelcontextprotocol/custom" not in meta
        server_info = meta.get("io.modelcontextprotocol/serverInfo")
        assert server_info is None or server_info["name"] == "shadowguard"

        await agent.ok("put_note", {"id": f"{n}-f", "body": "left pending"})
        if mode != "legacy":
            await agent.call("rollback")
    if mode == "legacy":
        # The client ended its HTTP session (DELETE /mcp): the guard session is rolled back with it.
        assert f"{n}-f" not in notes_rows(db)
        closed = [r for r in audit_records(http_proxy) if r["kind"] == "rollback" and r["session"] == session]
        assert [r["reason"] for r in closed] == ["agent", "closed"]
        async with httpx2.AsyncClient(base_url=http_proxy.base) as http:
            gone = await http.get(f"/api/sessions/{session}")
        assert gone.status_code == 404 and "closed" in gone.json()["error"]["message"]


async def test_reserved_hidden_and_invalid_calls_are_refused(http_proxy: Any, mode: str) -> None:
    async with connect(http_proxy.url, mode) as agent:
        for name in ("__reserved__dump", "admin_reset", "j_admin_reset", "no_such_tool"):
            verdict = await agent.refused(name)
            assert verdict["verdict"] == "refused"
            assert rule_ids(verdict) == ["unknown_tool"]
        invalid = await agent.refused("get_note", {"id": 5})
        assert invalid["verdict"] == "refused" and invalid["error_class"] == "invalid_arguments"
        assert [f["field"] for f in invalid["hint"]["fields"]] == ["id"]
        extra = await agent.refused("cancel_order", {"order_id": "ORD-10000002", "reason": "x"})
        assert extra["error_class"] == "invalid_arguments"
        assert "reason" in json.dumps(extra["hint"])


# -- the retail benchmark domain with its policy pack --------------------------------------------------


async def test_retail_domain_through_its_policy_pack(http_proxy: Any, mode: str) -> None:
    async with connect(http_proxy.url, mode) as agent:
        assert (await agent.json("get_order", {"order_id": "ORD-10000001"}))["status"] == "shipped"

        refused = await agent.refused(
            "cancel_order", {"order_id": "ORD-10000001", "cancellation_reason": "customer_request"}
        )
        assert refused["verdict"] == "refused"
        violation = refused["violations"][0]
        assert violation["rule_id"] == "retail.cancel_order.eligible_status"
        assert "§8.1" in violation["source"]["ref"]
        assert violation["rows"] == [
            {"o.id": "ORD-10000001", "o.status": "shipped", "args.order_id": "ORD-10000001"}
        ]
        assert (await agent.json("get_order", {"order_id": "ORD-10000001"}))["status"] == "shipped"

        cancelled = await agent.json(
            "cancel_order", {"order_id": "ORD-10000002", "cancellation_reason": "customer_request"}
        )
        assert cancelled["status"] == "cancelled"
        assert (await agent.json("get_order", {"order_id": "ORD-10000002"}))["status"] == "cancelled"

        closed = await agent.refused(
            "zendesk_update_item", {"table": "tickets", "id": "3", "item": {"status": "closed"}}
        )
        assert closed["verdict"] == "rolled_back"
        assert "retail.tickets.no_system_statuses" in rule_ids(closed)
        ticket = await agent.json("zendesk_get_item", {"table": "tickets", "id": "3"})
        assert ticket["item"]["status"] == "solved"

        await agent.ok(
            "zendesk_update_item", {"table": "tickets", "id": "1", "item": {"description": "Called back"}}
        )
        refused_commit = await agent.call("commit")
        assert refused_commit.is_error and refused_commit.structured_content is not None
        assert "retail.tickets.resolved_before_commit" in rule_ids(refused_commit.structured_content)

        await agent.ok("zendesk_update_item", {"table": "tickets", "id": "1", "item": {"status": "solved"}})
        await agent.commit()
        assert (await agent.json("get_order", {"order_id": "ORD-10000002"}))["status"] == "cancelled"

        await agent.ok("zendesk_update_item", {"table": "tickets", "id": "5", "item": {"status": "pending"}})
        undone = await agent.call("rollback")
        assert not undone.is_error
        ticket = await agent.json("zendesk_get_item", {"table": "tickets", "id": "5"})
        assert ticket["item"]["status"] == "open"


# -- upstream failure -----------------------------------------------------------------------------------


async def test_upstream_killed_mid_session_rolls_back_and_the_proxy_keeps_serving(
    http_proxy: Any, upstreams: Any, mode: str, n: str
) -> None:
    db = upstreams.notes_db
    async with connect(http_proxy.url, mode) as agent:
        await agent.ok("put_note", {"id": f"{n}-lost", "body": "pending"})
        port = int(upstreams.notes.url.rsplit(":", 1)[1].split("/")[0])
        kill(upstreams.notes.proc.pid)

        failed = await agent.call("put_note", {"id": f"{n}-after", "body": "x"})
        assert failed.is_error
        assert failed.structured_content is not None
        assert failed.structured_content["verdict"] == "failed"
        assert rule_ids(failed.structured_content) == ["upstream_failed"]
        assert "went away" in text(failed) and "nothing was committed" in text(failed)
        assert f"{n}-lost" not in notes_rows(db)

        down = await agent.refused("get_note", {"id": "n1"})
        assert rule_ids(down) == ["upstream_unavailable"]
        assert (await agent.json("get_order", {"order_id": "ORD-10000001"}))["status"] == "shipped"

        lost = await agent.call("commit")
        assert lost.is_error and lost.structured_content is not None
        assert rule_ids(lost.structured_content) == ["changes_lost"]

        upstreams.notes.restart(notes_http_args(db, port, transactional=True))
        await agent.ok("put_note", {"id": f"{n}-again", "body": "redone"})
        assert (await agent.call("get_note", {"id": f"{n}-lost"})).is_error
        assert not (await agent.call("commit")).is_error
        rows = notes_rows(db)
        assert f"{n}-again" in rows and f"{n}-lost" not in rows


# -- a journaled (non-transactional) upstream ------------------------------------------------------------


async def test_journaled_upstream_applies_holds_and_compensates(
    http_proxy: Any, upstreams: Any, mode: str, n: str
) -> None:
    db = upstreams.journal_db
    async with connect(http_proxy.url, mode) as agent:
        await agent.ok("j_put_note", {"id": f"{n}-j", "body": "applied at once"})
        assert f"{n}-j" in notes_rows(db), "a journaled upstream applies writes at once"

        held = await agent.refused("j_delete_note", {"id": "n2"})
        # Held before it is forwarded; this proxy has no reviewer, so refused at once (docs/approvals.md).
        assert held["verdict"] == "refused" and rule_ids(held) == ["no_reviewer"]
        assert "irreversible_unrehearsed" in held["violations"][0]["message"]
        assert "n2" in notes_rows(db), "an irreversible call is held before it is forwarded"

        undone = await agent.call("rollback")
        assert not undone.is_error, text(undone)
        assert f"{n}-j" not in notes_rows(db), "rollback runs the compensating tool"

        await agent.ok("j_put_note", {"id": f"{n}-k", "body": "kept"})
        assert not (await agent.call("commit")).is_error
        assert f"{n}-k" in notes_rows(db)


# -- orchestrators: the sessions API --------------------------------------------------------------------


async def test_sessions_api_commits_refuses_and_rolls_back(http_proxy: Any) -> None:
    session = f"api-{uuid.uuid4().hex[:8]}"
    async with (
        Client(http_proxy.url, mode="2026-07-28", cache=None) as client,
        httpx2.AsyncClient(base_url=http_proxy.base) as http,
    ):
        agent = Agent(client, session)
        await agent.ok(
            "zendesk_update_item", {"table": "tickets", "id": "1", "item": {"description": "Called back"}}
        )
        listed = (await http.get("/api/sessions")).json()["sessions"]
        status = next(s for s in listed if s["id"] == session)
        assert status["in_transaction"] is True and status["upstreams"] == ["retail"]

        refused = await http.post(f"/api/sessions/{session}/commit")
        assert refused.status_code == 200
        body = refused.json()
        assert body["committed"] is False
        assert [v["rule_id"] for v in body["violations"]] == ["retail.tickets.resolved_before_commit"]
        assert body["violations"][0]["source"]["ref"].startswith("System prompt")

        await agent.ok("zendesk_update_item", {"table": "tickets", "id": "1", "item": {"status": "solved"}})
        committed = (await http.post(f"/api/sessions/{session}/commit")).json()
        assert committed == {
            "session": session,
            "committed": True,
            "changes": 1,
            "applied_calls": 0,
            "violations": [],
        }

        await agent.ok(
            "cancel_order", {"order_id": "ORD-10000002", "cancellation_reason": "customer_request"}
        )
        rolled = (await http.post(f"/api/sessions/{session}/rollback")).json()
        assert rolled["rolled_back"] is True and rolled["changes"] >= 1 and rolled["not_reversed"] == []
        assert (await agent.json("get_order", {"order_id": "ORD-10000002"}))["status"] == "processing"
        ticket = await agent.json("zendesk_get_item", {"table": "tickets", "id": "1"})
        assert ticket["item"]["status"] == "solved", "the committed change stays"

        missing = await http.post("/api/sessions/no-such-session/commit")
        assert missing.status_code == 404
        await agent.call("rollback")


# -- stdio -----------------------------------------------------------------------------------------------


async def test_stdio_agent_session(stdio_configs: dict[str, Path], notes_db: Path, mode: str) -> None:
    args = ["serve", "--config", str(stdio_configs[mode]), "--stdio"]
    params = StdioServerParameters(command=SHADOWGUARD, args=args)
    n = f"stdio-{mode[:3]}-{uuid.uuid4().hex[:6]}"
    async with Client(params, mode=mode, cache=None, read_timeout_seconds=startup_timeout_s()) as client:
        agent = Agent(client)
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"get_note", "j_put_note", "cancel_order", "commit", "rollback"} <= tools
        assert "__reserved__dump" not in tools

        read = await agent.call("get_note", {"id": "n1"})
        assert outcome_meta(read)["session"].startswith("stdio:")
        await agent.ok("put_note", {"id": f"{n}-a", "body": "TODO"})
        refused = await agent.call("commit")
        assert refused.is_error and refused.structured_content is not None
        assert rule_ids(refused.structured_content) == ["notes.no_todo_drafts"]
        await agent.ok("put_note", {"id": f"{n}-a", "body": "over stdio"})
        assert not (await agent.call("commit")).is_error
        assert notes_rows(notes_db)[f"{n}-a"]["body"] == "over stdio"

        verdict = await agent.refused(
            "cancel_order", {"order_id": "ORD-10000001", "cancellation_reason": "customer_request"}
        )
        assert rule_ids(verdict) == ["retail.cancel_order.eligible_status"]
        assert rule_ids(await agent.refused("__reserved__dump")) == ["unknown_tool"]

        await agent.ok("put_note", {"id": f"{n}-b", "body": "pending"})
        await agent.ok("zendesk_update_item", {"table": "tickets", "id": "5", "item": {"status": "pending"}})
        kill(int(await agent.ok("whoami")))
        failed = await agent.call("get_note", {"id": f"{n}-b"})
        assert failed.is_error and "nothing was committed" in text(failed)
        ticket = await agent.json("zendesk_get_item", {"table": "tickets", "id": "5"})
        assert ticket["item"]["status"] == "open", "the other upstream's transaction was rolled back too"
        assert f"{n}-b" not in notes_rows(notes_db)
        lost = await agent.call("commit")
        assert lost.is_error and lost.structured_content is not None
        assert rule_ids(lost.structured_content) == ["changes_lost"]

        assert (await agent.json("get_note", {"id": f"{n}-a"}))["body"] == "over stdio"
        await agent.ok("put_note", {"id": f"{n}-c", "body": "after the restart"})
        assert not (await agent.call("commit")).is_error
    assert notes_rows(notes_db)[f"{n}-c"]["body"] == "after the restart"
