"""The demo accounts app as a real MCP server: a ``python -m proxy.demo.server`` subprocess driven by SDK
clients over stdio (both protocol eras), directly and through the transaction extension
(``RemoteBackend`` in a worker thread), with the example policy pack on top.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import httpx2
import mcp.types as types
import pytest
import sqlalchemy as sa
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from benchmark.procs import startup_timeout_s
from guard.effects import ToolInfo, classify
from guard.models import EffectClass, Verdict
from guard.policy import load_policy
from guard.session import GuardSession
from guard.txext import TX_META_KEY, TX_UNKNOWN, RemoteBackend, advertises
from proxy.approvals.auth import hash_token
from proxy.config import ProxyConfig
from proxy.demo.server import SESSION_META_KEY, accounts, create_engine, metadata, prepare_database
from tests.support.proxy import request_meta

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "example" / "policy.yaml"
DEMO_CONFIG = ROOT / "proxy" / "demo" / "shadowguard.yaml"
T = TypeVar("T")

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "accounts.sqlite"


@asynccontextmanager
async def serve(db: Path, mode: str = "auto", *, reset: bool = True) -> AsyncIterator[Client]:
    args = ["-m", "proxy.demo.server", "--db", str(db), *(["--reset"] if reset else [])]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    async with Client(params, mode=mode, cache=None, read_timeout_seconds=30) as client:
        yield client


def text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


def balances(db: Path) -> dict[str, str]:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(accounts.c.id, accounts.c.balance_cents)).all()
    finally:
        engine.dispose()
    return {row[0]: f"{row[1] / 100:.2f}" for row in rows}


def transfer_args(source: str, target: str, amount: float | str, memo: str = "") -> dict[str, Any]:
    """The arguments of a ``transfer_funds`` call (``amount`` as sent: a string is a wrong type)."""
    return {"from_account": source, "to_account": target, "amount": amount, "memo": memo}


async def in_thread(func: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(func)


# -- tools, directly ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_lists_three_tools_with_annotations_and_advertises_the_extension(db: Path, mode: str) -> None:
    async with serve(db, mode) as client:
        assert advertises(client.server_capabilities)
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"list_accounts", "rename_account", "transfer_funds"}
    effects = {
        name: classify(
            ToolInfo(name, t.input_schema, t.annotations.model_dump(by_alias=True) if t.annotations else {}),
            {},
        )[0]
        for name, t in tools.items()
    }
    assert effects == {
        "list_accounts": EffectClass.READ,
        "rename_account": EffectClass.WRITE,
        "transfer_funds": EffectClass.IRREVERSIBLE,
    }
    assert tools["transfer_funds"].input_schema["required"] == [
        "from_account",
        "to_account",
        "amount",
        "memo",
    ]


async def test_the_three_tools_commit_at_once_without_a_transaction(db: Path) -> None:
    async with serve(db) as client:
        listed = json.loads(text(await client.call_tool("list_accounts", {})))
        assert [a["id"] for a in listed["accounts"]] == ["acc-alice", "acc-bob", "acc-carol"]
        assert listed["accounts"][0] == {
            "id": "acc-alice",
            "owner": "Alice Martin",
            "name": "Everyday",
            "status": "active",
            "balance": "1250.00",
            "currency": "EUR",
        }
        renamed = await client.call_tool("rename_account", {"account_id": "acc-bob", "name": "Rainy day"})
        assert not renamed.is_error
        assert renamed.structured_content is not None
        assert renamed.structured_content["account"]["name"] == "Rainy day"
        moved = await client.call_tool("transfer_funds", transfer_args("acc-alice", "acc-bob", 12.5, "lunch"))
        assert not moved.is_error
        body = json.loads(text(moved))
        assert body["transfer"]["amount"] == "12.50"
        assert (body["from"]["balance"], body["to"]["balance"]) == ("1237.50", "322.50")
    assert balances(db) == {"acc-alice": "1237.50", "acc-bob": "322.50", "acc-carol": "80.00"}
    async with serve(db, reset=False) as client:
        again = json.loads(text(await client.call_tool("list_accounts", {})))
    assert again["accounts"][1]["name"] == "Rainy day"


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("transfer_funds", transfer_args("acc-x", "acc-bob", 1), "Unknown account: acc-x"),
    ("transfer_funds", transfer_args("acc-bob", "acc-bob", 1), "must differ"),
    ("transfer_funds", transfer_args("acc-alice", "acc-bob", 0.001), "2 decimals"),
    ("transfer_funds", transfer_args("acc-alice", "acc-bob", -5), "positive"),
    ("transfer_funds", transfer_args("acc-alice", "acc-bob", "5"), "a number"),
    (
        "transfer_funds",
        {"from_account": "acc-alice", "to_account": "acc-bob", "amount": 5},
        "memo must be a string",
    ),
    ("rename_account", {"account_id": "acc-bob"}, "name must be a non-empty string"),
    ("rename_account", {"account_id": "acc-bob", "name": "x", "owner": "y"}, "unknown argument(s) ['owner']"),
    ("close_account", {"account_id": "acc-bob"}, "Unknown tool: close_account"),
]


async def test_bad_input_is_a_tool_error_and_changes_nothing(db: Path) -> None:
    async with serve(db) as client:
        for tool, arguments, message in BAD_CALLS:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, tool
            assert message in text(result)
    assert balances(db) == {"acc-alice": "1250.00", "acc-bob": "310.00", "acc-carol": "80.00"}


# -- the transaction extension ----------------------------------------------------------------------------


async def test_begin_savepoint_changes_rollback_through_remote_backend(db: Path) -> None:
    async with serve(db) as client:

        def work() -> None:
            remote = RemoteBackend(client.session, timeout=30)
            remote.begin()
            first = remote.savepoint()
            renamed = remote.call_tool("rename_account", {"account_id": "acc-alice", "name": "Household"})
            assert not renamed.is_error
            [change] = remote.changes(first)
            assert (change.table, change.key, change.op) == ("accounts", "acc-alice", "update")
            assert change.before is not None and change.after is not None
            assert (change.before["name"], change.after["name"]) == ("Everyday", "Household")
            remote.release(first)

            second = remote.savepoint()
            moved = remote.call_tool("transfer_funds", transfer_args("acc-alice", "acc-bob", 100, "rent"))
            assert not moved.is_error
            ops = [(c.table, c.op) for c in remote.changes(second)]
            assert ops == [("accounts", "update"), ("accounts", "update"), ("transfers", "insert")]
            assert remote.query("SELECT balance_cents FROM accounts WHERE id = :id", {"id": "acc-bob"}) == [
                {"balance_cents": 41000}
            ]
            remote.rollback_to(second)
            assert [c.table for c in remote.changes()] == ["accounts"]
            assert remote.query("SELECT COUNT(*) AS n FROM transfers") == [{"n": 0}]
            remote.rollback()

        await in_thread(work)
        listed = json.loads(text(await client.call_tool("list_accounts", {})))
    assert listed["accounts"][0]["name"] == "Everyday"
    assert balances(db) == {"acc-alice": "1250.00", "acc-bob": "310.00", "acc-carol": "80.00"}


async def test_commit_makes_the_shadow_changes_durable_and_sessions_are_isolated(db: Path) -> None:
    async with serve(db) as client:

        def work() -> RemoteBackend:
            remote = RemoteBackend(client.session, meta={SESSION_META_KEY: "agent-1"}, timeout=30)
            remote.begin()
            remote.call_tool("transfer_funds", transfer_args("acc-bob", "acc-alice", 10, "refund"))
            other = RemoteBackend(client.session, meta={SESSION_META_KEY: "agent-2"}, timeout=30)
            other.begin()
            assert len(remote.changes()) == 3
            assert len(other.changes()) == 0
            other.rollback()
            return remote

        remote = await in_thread(work)
        with pytest.raises(MCPError) as foreign:
            await client.call_tool(
                "list_accounts", {}, meta=request_meta({SESSION_META_KEY: "agent-2", TX_META_KEY: remote.tx})
            )
        assert foreign.value.code == TX_UNKNOWN
        await in_thread(remote.commit)
    assert balances(db) == {"acc-alice": "1260.00", "acc-bob": "300.00", "acc-carol": "80.00"}


# -- the example policy pack on the real server ------------------------------------------------------------


async def test_example_pack_guards_the_demo_app(db: Path) -> None:
    schema = {name: [c.name for c in table.columns] for name, table in metadata.tables.items()}
    async with serve(db, "legacy") as client:
        listed = (await client.list_tools()).tools
        tools = {
            t.name: ToolInfo(
                t.name,
                t.input_schema,
                t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {},
            )
            for t in listed
        }
        pack = load_policy(
            PACK,
            schema=schema,
            tools=list(tools),
            tool_arguments={
                name: list(info.input_schema.get("properties", {})) for name, info in tools.items()
            },
        )

        def work() -> list[Any]:
            remote = RemoteBackend(client.session, timeout=30)
            session = GuardSession(remote, remote.executor(), tools, pack, session_id="demo")
            renamed = session.call("rename_account", {"account_id": "acc-alice", "name": "Household"})
            overdraft = session.call("transfer_funds", transfer_args("acc-bob", "acc-alice", 500, "too much"))
            frozen = session.call("transfer_funds", transfer_args("acc-alice", "acc-carol", 5, "gift"))
            large = session.call("transfer_funds", transfer_args("acc-alice", "acc-bob", 1200, "car"))
            fine = session.call("transfer_funds", transfer_args("acc-alice", "acc-bob", 25, "books"))
            blank = session.call("rename_account", {"account_id": "acc-bob", "name": "  "})
            refused = session.commit()
            session.call("rename_account", {"account_id": "acc-bob", "name": "Savings"})
            committed = session.commit()
            return [renamed, overdraft, frozen, large, fine, blank, refused, committed]

        renamed, overdraft, frozen, large, fine, blank, refused, committed = await in_thread(work)

    assert renamed.verdict is Verdict.ALLOWED and len(renamed.changes) == 1
    assert overdraft.verdict is Verdict.ROLLED_BACK
    [violation] = overdraft.violations
    assert violation.rule_id == "example.no_overdraft"
    assert violation.source is not None and "section 3.1" in violation.source.ref
    assert violation.rows == [{"account_id": "acc-bob", "balance": -190.0}]
    assert frozen.verdict is Verdict.REFUSED and frozen.violations[0].rule_id == "example.frozen_accounts"
    assert not frozen.changes
    assert large.verdict is Verdict.HELD and large.violations[0].rule_id == "example.large_transfers"
    assert {c.table for c in large.changes} == {"accounts", "transfers"}
    assert fine.verdict is Verdict.ALLOWED and fine.effect is EffectClass.IRREVERSIBLE
    assert blank.verdict is Verdict.ALLOWED
    assert not refused.committed and refused.violations[0].rule_id == "example.accounts_named"
    assert committed.committed
    assert {(c.table, c.key) for c in committed.changes if c.table == "accounts"} == {
        ("accounts", "acc-alice"),
        ("accounts", "acc-bob"),
    }
    assert balances(db) == {"acc-alice": "1225.00", "acc-bob": "335.00", "acc-carol": "80.00"}


# -- the quickstart through the proxy ----------------------------------------------------------------------


def _shadowguard(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("shadowguard")
    if script.is_file():
        return [str(script), *args]
    return [sys.executable, "-c", "from proxy.cli import main; main()", *args]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_make_demo_runs_the_story_through_the_proxy(mode: str) -> None:
    """What ``make demo`` runs: proxy up, scripted agent over HTTP, proxy down; 0 = verdicts as expected.

    The large transfer is held, approved through the REST API by the run's own reviewer, run once
    when sent again, and committed; the second one is rejected and the agent gets the reason.
    """
    demo_folder = ROOT / "proxy" / "demo"
    before = _files(demo_folder)
    run = subprocess.run(
        [sys.executable, "-m", "proxy.demo", "--port", "0", "--mode", mode],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert ("(protocol 2026-07-28)" in out) == (mode == "auto")
    assert "guard -> rolled_back" in out and "[rule example.no_overdraft]" in out
    assert "guard -> refused" in out and "[rule example.frozen_accounts]" in out

    held = re.findall(r"guard -> held \(approval (apr_[\w-]+): pending\)", out)
    assert len(held) == 2, out
    approved, rejected = held
    assert "[rule example.large_transfers]" in out and "nothing was changed" in out
    assert f"reviewer -> POST /api/approvals/{approved}/approve" in out
    assert "update accounts  acc-alice  balance  1225.00 ->    25.00" in out  # the preview, as reviewed
    assert f"shadowguard approvals approve {approved} --reason" in out
    assert out.count(f"guard -> allowed (approval {approved}: used)") == 1
    assert "transfer #2: 1200.00 EUR acc-alice -> acc-bob; balances now 25.00 / 1535.00" in out
    assert f"reviewer -> POST /api/approvals/{rejected}/reject" in out
    assert f"guard -> refused (approval {rejected}: rejected)" in out
    assert "rejected by demo-reviewer: no reversal without a signed request from the customer" in out

    assert "guard -> committed" in out and "Committed: 4 row change(s)" in out
    assert "demo: every verdict as the policy pack says" in out
    assert "acc-alice  Alice Martin  Household    active      25.00 EUR" in out
    assert "acc-bob    Bob Chen      Savings      active    1535.00 EUR" in out
    assert "audit log of this run (16 JSON lines" in out
    audit = out[out.index("audit log of this run") :]
    assert len(re.findall(r"transfer_funds  allowed .* approval used", audit)) == 1
    assert "transfer_funds  approved    by demo-reviewer" in audit
    assert "transfer_funds  rejected    by demo-reviewer" in audit
    assert (
        _files(demo_folder) == before
    )  # the queue, the audit log and the app's database went to a temp folder


def _side_url(errlog: Path) -> str:
    """The HTTP side port's base URL, from the line ``shadowguard serve --stdio`` prints on stderr."""
    found = re.search(r"listening on (http://\S+)/mcp", errlog.read_text(encoding="utf-8"))
    assert found is not None, errlog.read_text(encoding="utf-8")
    return found.group(1)


async def test_the_demo_config_over_stdio_as_a_desktop_client_runs_it(db: Path, tmp_path: Path) -> None:
    """The Claude Desktop / Cursor path: ``shadowguard serve --stdio --config proxy/demo/shadowguard.yaml``
    (the HTTP side port on any free port, the app's database and the approval queue in the test's
    folder, one reviewer whose token only the test knows). A large transfer is held (the demo config
    answers at once), the commit is refused while it is pending, a reviewer approves it on the side
    port's REST API, and the same call sent again runs (once: the balances) and is committed."""
    engine = create_engine(db)
    prepare_database(engine, reset=True)
    engine.dispose()
    config = ProxyConfig.load(DEMO_CONFIG)
    [upstream] = config.upstreams
    override = [{**upstream.model_dump(mode="json"), "args": [*upstream.args, "--db", str(db)]}]
    token = secrets.token_urlsafe(32)
    reviewers = [{"name": "teller-2", "role": "approver", "token_sha256": hash_token(token)}]
    env = {
        **os.environ,
        "SHADOWGUARD_UPSTREAMS": json.dumps(override),
        "SHADOWGUARD_HTTP__PORT": "0",
        "SHADOWGUARD_APPROVALS__STORE": f"sqlite:///{tmp_path / 'approvals.db'}",
        "SHADOWGUARD_AUTH__REVIEWERS": json.dumps(reviewers),
    }
    command = _shadowguard("serve", "--stdio", "--config", str(DEMO_CONFIG))
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    errlog = tmp_path / "stderr.txt"
    large = transfer_args("acc-alice", "acc-bob", 1200, "car")
    with errlog.open("w", encoding="utf-8") as sink:
        async with Client(
            stdio_client(params, errlog=sink),
            mode="legacy",
            cache=None,
            read_timeout_seconds=startup_timeout_s(),
        ) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names[:3] == ["list_accounts", "rename_account", "transfer_funds"] and "commit" in names
            moved = await client.call_tool("transfer_funds", transfer_args("acc-bob", "acc-alice", 10, "x"))
            assert not moved.is_error, text(moved)
            assert balances(db)["acc-bob"] == "310.00"  # still in the shadow transaction
            overdraft = await client.call_tool(
                "transfer_funds", transfer_args("acc-bob", "acc-alice", 900, "x")
            )
            assert overdraft.is_error and "example.no_overdraft" in text(overdraft)

            held = await client.call_tool("transfer_funds", large)
            assert held.is_error and held.structured_content is not None, text(held)
            assert held.structured_content["verdict"] == "held"
            assert held.structured_content["error_class"] == "approval_pending"
            approval_id = held.structured_content["approval_id"]
            pending_commit = await client.call_tool("commit", {})
            assert pending_commit.is_error and approval_id in text(pending_commit)
            assert balances(db)["acc-alice"] == "1250.00"

            auth = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(base_url=_side_url(errlog), headers=auth, timeout=30) as http:
                queue = (await http.get("/api/approvals", params={"state": "pending"})).json()
                assert [a["id"] for a in queue["items"]] == [approval_id]
                preview = queue["items"][0]["preview"]["changes"]
                assert {(c["table"], c["key"], c["op"]) for c in preview} >= {
                    ("accounts", "acc-alice", "update"),
                    ("accounts", "acc-bob", "update"),
                }
                decided = await http.post(f"/api/approvals/{approval_id}/approve", json={"reason": "agreed"})
                assert decided.status_code == 200, decided.text
                assert decided.json()["decided_by"] == "teller-2"

            done = await client.call_tool("transfer_funds", large)
            assert not done.is_error, text(done)
            assert (done.meta or {})["shadowguard/outcome"]["approval_state"] == "used"
            committed = await client.call_tool("commit", {})
            assert not committed.is_error, text(committed)
    assert balances(db) == {"acc-alice": "60.00", "acc-bob": "1500.00", "acc-carol": "80.00"}
