"""``shadowguard approvals``: the real CLI against the real approvals API (uvicorn on a free port) over
the real SQLite store. Exit codes: 0 done, 1 refused by the API (its message printed), 2 usage."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from proxy.approvals.auth import authenticate_agent, authenticate_reviewer, hash_token
from proxy.cli import app as cli_app
from proxy.config import AuthConfig, ProxyConfig, ReviewerConfig
from tests.support.proxy import approvals_app

ALICE = "alice-cli-token"
VICTOR = "victor-cli-token"
SHADOWGUARD = str(Path(sys.executable).parent / "shadowguard")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Any]:
    """The app served over a SQLite store (``approvals_app``): ``base``, ``store``, ``seed()``."""
    auth = AuthConfig(
        reviewers=[
            ReviewerConfig(name="alice", role="approver", token_sha256=hash_token(ALICE)),
            ReviewerConfig(name="victor", role="viewer", token_sha256=hash_token(VICTOR)),
        ]
    )
    with approvals_app(tmp_path, auth) as app:
        yield app


def run(setup: Any, *args: str, token: str | None = ALICE, env: dict[str, str] | None = None) -> Any:
    """``shadowguard approvals ARGS`` in-process, with the server's URL and ``token`` in the environment."""
    environment = {"SHADOWGUARD_REVIEWER_TOKEN": token or "", "SHADOWGUARD_URL": setup.base if setup else ""}
    environment.update(env or {})
    return CliRunner().invoke(cli_app, ["approvals", *args], env=environment)


def test_list_text_and_json(setup: Any) -> None:
    older = setup.seed()
    newer = setup.seed(tool="cancel_order")
    setup.store.decide(older, approve=True, reviewer="alice", reason=None)
    text = run(setup, "list")
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].startswith(newer) and "pending" in lines[0] and "cancel_order" in lines[0]
    assert lines[1].startswith(older) and "approved" in lines[1] and "changes=2" in lines[1]
    pending = run(setup, "list", "--state", "pending", "--json")
    assert pending.exit_code == 0, pending.output
    body = json.loads(pending.stdout)
    assert [i["id"] for i in body["items"]] == [newer] and body["count"] == 1
    assert run(setup, "list", "--tool", "no_such_tool").stdout.strip() == "no approvals"


def test_show_prints_the_row_diff_and_history(setup: Any) -> None:
    approval_id = setup.seed()
    result = run(setup, "show", approval_id, token=VICTOR)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "update orders ORD-7" in out
    assert '- status: "delivered"' in out and '+ status: "refunded"' in out
    assert "total" not in out.split("update orders ORD-7")[1].split("insert refunds")[0], (
        "unchanged columns hidden"
    )
    assert "insert refunds R-1" in out and "+ amount: 250.0" in out
    assert 'policy     policy.md#refunds: "Refunds over $100 need a manager."' in out
    assert "check      pass refund-max\n" in out and "within the order total" not in out, (
        "a passing check is named without its message (the violation text it would show on failure)"
    )
    assert "requested by agent-1" in out
    as_json = json.loads(run(setup, "show", approval_id, "--json").stdout)
    assert as_json["id"] == approval_id and [e["action"] for e in as_json["history"]] == ["requested"]


def test_approve_and_reject(setup: Any) -> None:
    first, second = setup.seed(), setup.seed()
    approved = run(setup, "approve", first, "--reason", "looks right")
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.strip() == f"{first}: approved by alice"
    stored = setup.store.get(first)
    assert stored.state == "approved" and stored.decided_by == "alice" and stored.reason == "looks right"
    rejected = run(setup, "reject", second, "--reason", "wrong order")
    assert rejected.exit_code == 0, rejected.output
    assert setup.store.get(second).reason == "wrong order"
    decisions = [json.loads(line) for line in setup.audit_path.read_text().splitlines()]
    assert [(r["approval_id"], r["decision"]) for r in decisions] == [(first, "approve"), (second, "reject")]


def test_refusals_exit_1_with_the_api_message(setup: Any) -> None:
    approval_id = setup.seed()
    viewer = run(setup, "approve", approval_id, token=VICTOR)
    assert viewer.exit_code == 1
    assert "403 forbidden" in viewer.stderr and "viewer" in viewer.stderr
    assert setup.store.get(approval_id).state == "pending"
    unknown = run(setup, "show", "apr_" + "Z" * 24)
    assert unknown.exit_code == 1 and "404 not_found" in unknown.stderr
    stranger = run(setup, "list", token="not-a-reviewer")
    assert stranger.exit_code == 1 and "401 unauthorized" in stranger.stderr
    assert run(setup, "approve", approval_id).exit_code == 0
    again = run(setup, "reject", approval_id, "--reason", "too late")
    assert again.exit_code == 1 and "409 conflict" in again.stderr
    assert setup.store.get(approval_id).state == "approved"


def test_usage_errors_exit_2(setup: Any, tmp_path: Path) -> None:
    approval_id = setup.seed()
    no_reason = run(setup, "reject", approval_id)
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    no_token = run(setup, "list", token=None)
    assert no_token.exit_code == 2 and "SHADOWGUARD_REVIEWER_TOKEN" in no_token.output
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    assert run(setup, "list", "--token-file", str(empty)).exit_code == 2
    assert run(setup, "token", "--name", "x", "--role", "admin").exit_code == 2
    assert setup.store.get(approval_id).state == "pending"


def test_token_file_and_url_option(setup: Any, tmp_path: Path) -> None:
    approval_id = setup.seed()
    token_file = tmp_path / "token"
    token_file.write_text(ALICE + "\n")
    result = run(
        None, "approve", approval_id, "--url", setup.base, "--token-file", str(token_file), token=None
    )
    assert result.exit_code == 0, result.output
    assert setup.store.get(approval_id).decided_by == "alice"


def test_unreachable_api_exits_1() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(None, "list", "--url", f"http://127.0.0.1:{port}")
    assert result.exit_code == 1 and "cannot reach" in result.stderr


@pytest.mark.parametrize("role", ["viewer", "approver", "agent"])
def test_token_prints_a_token_and_its_config(role: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_app, ["approvals", "token", "--name", "carol", "--role", role])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    token = lines[0].rsplit(" ", 1)[1]
    snippet = "\n".join(lines[2:])
    config_file = tmp_path / "proxy.yaml"
    config_file.write_text(snippet)
    auth = ProxyConfig.load(config_file).auth
    if role == "agent":
        found = authenticate_agent(token, auth)
        assert found is not None and found.name == "carol"
        assert authenticate_reviewer(token, auth) is None
    else:
        reviewer = authenticate_reviewer(token, auth)
        assert reviewer is not None and reviewer.name == "carol" and reviewer.role == role
    assert token not in snippet and hash_token(token) in snippet
    assert yaml.safe_load(snippet)["auth"]
    other = CliRunner().invoke(cli_app, ["approvals", "token", "--name", "carol", "--role", role])
    assert other.stdout.splitlines()[0] != lines[0], "a new random token every time"


def test_the_console_script(setup: Any) -> None:
    approval_id = setup.seed()
    env = {"SHADOWGUARD_URL": setup.base, "SHADOWGUARD_REVIEWER_TOKEN": ALICE, "PATH": "/usr/bin:/bin"}

    def approvals(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SHADOWGUARD, "approvals", *args], env=env, capture_output=True, text=True, timeout=60
        )

    ok = approvals("approve", approval_id)
    assert ok.returncode == 0, ok.stderr
    refused = approvals("approve", approval_id)
    assert refused.returncode == 1 and "409 conflict" in refused.stderr
    assert approvals("show").returncode == 2
