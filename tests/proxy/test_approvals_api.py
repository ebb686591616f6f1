"""The approvals REST API through a real HTTP server (uvicorn) over the real SQL store (SQLite and
PostgreSQL): every route, every role, refusals that change nothing, and the audit trail of decisions.

Also: the reviewer/agent token rules of the config, and agent authentication on ``/mcp``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from guard.approvals.models import ApprovalQuery
from guard.approvals.sql import SqlApprovalStore
from proxy.approvals.auth import hash_token
from proxy.config import AgentConfig, AuthConfig, ConfigError, ProxyConfig, ReviewerConfig
from proxy.server import OUTCOME_META_KEY
from tests.support.proxy import approvals_app, initialize_request

TOKENS = {
    "alice": "alice-approver-token",
    "bob": "bob-approver-token",
    "victor": "victor-viewer-token",
    "agent-1": "agent-one-token",
    "agent-2": "agent-two-token",
}
ROLES = {"alice": "approver", "bob": "approver", "victor": "viewer"}
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def auth_config(*, agents: bool = True) -> AuthConfig:
    return AuthConfig(
        reviewers=[
            ReviewerConfig(name=name, role=role, token_sha256=hash_token(TOKENS[name]))  # type: ignore[arg-type]
            for name, role in ROLES.items()
        ],
        agents=[AgentConfig(name=n, token_sha256=hash_token(TOKENS[n])) for n in ("agent-1", "agent-2")]
        if agents
        else [],
    )


class Clock:
    """The store's clock, moved by the test (expiry without waiting)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Api:
    base: str
    store: SqlApprovalStore
    clock: Clock
    audit_path: Path
    seed: Callable[..., str]
    """Queues a held refund (``tests.support.proxy.refund_request``; keyword arguments replace fields)."""

    def client(self, who: str | None = None, *, token: str | None = None) -> httpx2.Client:
        headers = {}
        if who is not None:
            token = TOKENS[who]
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx2.Client(base_url=self.base, headers=headers, timeout=30)

    def snapshot(self) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Every approval and its history: what a refused request must leave as it was."""
        return [
            (a.model_dump(), [e.model_dump() for e in self.store.history(a.id)])
            for a in self.store.list(ApprovalQuery(limit=1000))
        ]

    def audit(self) -> list[dict[str, Any]]:
        lines = self.audit_path.read_text().splitlines() if self.audit_path.exists() else []
        return [r for r in map(json.loads, lines) if r["kind"] == "approval_decision"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def api(
    request: pytest.FixtureRequest, tmp_path: Path, approval_store_url: Callable[[str], str]
) -> Iterator[Api]:
    clock = Clock()
    with approvals_app(
        tmp_path, auth_config(), store_url=approval_store_url(request.param), clock=clock
    ) as app:
        yield Api(app.base, app.store, clock, app.audit_path, app.seed)


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


def assert_error(response: httpx2.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return str(body["error"]["message"])


# -- reading ------------------------------------------------------------------------------------------


def test_list_filters_and_pages(api: Api) -> None:
    first = api.seed()
    api.clock.now += timedelta(seconds=1)
    second = api.seed(tool="cancel_order", session_id="sess-2", principal="agent-2")
    api.clock.now += timedelta(seconds=1)
    third = api.seed()
    api.store.decide(third, approve=False, reviewer="alice", reason="no")
    with api.client("victor") as http:
        everything = http.get("/api/approvals").json()
        assert [i["id"] for i in everything["items"]] == [third, second, first]
        assert everything["count"] == 3

        def ids(**params: Any) -> list[str]:
            response = http.get("/api/approvals", params=params)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["count"] == len(body["items"])
            return [i["id"] for i in body["items"]]

        assert ids(state="pending") == [second, first]
        assert ids(state=["pending", "rejected"]) == [third, second, first]
        assert ids(state="rejected") == [third]
        assert ids(tool="cancel_order") == [second]
        assert ids(principal="agent-2") == [second]
        assert ids(session_id="sess-1") == [third, first]
        assert ids(limit=1, offset=1) == [second]
        assert ids(tool="no_such_tool") == []


def test_detail_shows_preview_checks_and_history(api: Api) -> None:
    approval_id = api.seed()
    with api.client("victor") as http:
        body = http.get(f"/api/approvals/{approval_id}").json()
    assert body["id"] == approval_id and body["state"] == "pending"
    assert body["preview"]["changes"][0]["before"]["status"] == "delivered"
    assert body["preview"]["changes"][0]["after"]["status"] == "refunded"
    assert body["checks"] == [
        {"rule_id": "refund-max", "passed": True, "message": "within the order total", "source": None}
    ]
    assert body["rule_source"]["quote"] == "Refunds over $100 need a manager."
    assert [e["action"] for e in body["history"]] == ["requested"]
    assert body["arguments_digest"].startswith("sha256:")


# -- deciding ------------------------------------------------------------------------------------------


def test_approve_is_recorded_in_store_and_audit_log(api: Api) -> None:
    approval_id = api.seed()
    with api.client("alice") as http:
        response = http.post(f"/api/approvals/{approval_id}/approve", json={"reason": "checked the order"})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["state"] == "approved" and body["decided_by"] == "alice"
        assert body["reason"] == "checked the order"
        detail = http.get(f"/api/approvals/{approval_id}").json()
    assert [(e["action"], e["actor"]) for e in detail["history"]] == [
        ("requested", "agent-1"),
        ("approved", "alice"),
    ]
    stored = api.store.get(approval_id)
    assert stored.state == "approved" and stored.decided_by == "alice"
    [record] = api.audit()
    assert record == {
        "ts": record["ts"],
        "kind": "approval_decision",
        "session": "sess-1",
        "approval_id": approval_id,
        "principal": "agent-1",
        "tool": "refund_order",
        "reviewer": "alice",
        "role": "approver",
        "decision": "approve",
        "reason": "checked the order",
        "arguments_digest": stored.arguments_digest,
        "at": stored.decided_at.isoformat() if stored.decided_at else None,
    }


def test_approve_without_a_body_or_reason(api: Api) -> None:
    no_body, null_reason = api.seed(), api.seed()
    with api.client("alice") as http:
        assert http.post(f"/api/approvals/{no_body}/approve").json()["reason"] is None
        assert http.post(f"/api/approvals/{null_reason}/approve", json={"reason": None}).status_code == 200
    assert [r["reason"] for r in api.audit()] == [None, None]


def test_reject_needs_a_reason(api: Api) -> None:
    approval_id = api.seed()
    before = api.snapshot()
    with api.client("alice") as http:
        url = f"/api/approvals/{approval_id}/reject"
        for body in (
            {},
            {"reason": ""},
            {"reason": "   "},
            {"reason": "\x1f\n"},
            {"reason": "\x85"},
            {"reason": "\xa0\ufeff\u3000"},
            {"reason": None},
            {"reason": "x" * 2001},
        ):
            message = assert_error(http.post(url, json=body), 422, "invalid")
            assert "reason" in message
        assert_error(http.post(url), 422, "invalid")
        assert api.snapshot() == before and api.audit() == []
        response = http.post(url, json={"reason": "amount exceeds the order"})
        assert response.status_code == 200, response.text
        assert response.json()["state"] == "rejected"
    assert api.store.get(approval_id).reason == "amount exceeds the order"
    [record] = api.audit()
    assert record["decision"] == "reject" and record["reason"] == "amount exceeds the order"


def test_malformed_bodies_are_422_and_change_nothing(api: Api) -> None:
    approval_id = api.seed()
    before = api.snapshot()
    with api.client("alice") as http:
        url = f"/api/approvals/{approval_id}/approve"
        assert_error(
            http.post(url, content=b"{not json", headers={"content-type": "application/json"}), 422, "invalid"
        )
        assert_error(http.post(url, json=["reason"]), 422, "invalid")
        assert_error(http.post(url, json={"reason": "ok", "approve": True}), 422, "invalid")
        assert_error(http.post(url, json={"reason": 5}), 422, "invalid")
        assert_error(
            http.post(url, content=b'{"reason": "x"}', headers={"content-type": "text/plain"}), 422, "invalid"
        )
        assert_error(http.get("/api/approvals", params={"state": "maybe"}), 422, "invalid")
        assert_error(http.get("/api/approvals", params={"limit": 0}), 422, "invalid")
        assert_error(http.get("/api/approvals", params={"offset": -1}), 422, "invalid")
    assert api.snapshot() == before and api.audit() == []


# -- refusals: ids -----------------------------------------------------------------------------------


def test_forged_and_malformed_ids(api: Api) -> None:
    api.seed()
    before = api.snapshot()
    forged = "apr_" + "A" * 24
    with api.client("alice") as http:
        assert_error(http.get(f"/api/approvals/{forged}"), 404, "not_found")
        assert_error(http.post(f"/api/approvals/{forged}/approve", json={}), 404, "not_found")
        assert_error(http.post(f"/api/approvals/{forged}/reject", json={"reason": "no"}), 404, "not_found")
        for bad in ("apr_%20x", "a" * 65, "apr_'or'1'='1"):
            assert_error(http.post(f"/api/approvals/{bad}/approve", json={}), 422, "invalid")
    assert api.snapshot() == before and api.audit() == []


def test_reused_id_is_409_and_keeps_the_first_decision(api: Api) -> None:
    approval_id = api.seed()
    with api.client("alice") as http:
        assert http.post(f"/api/approvals/{approval_id}/approve", json={}).status_code == 200
    before = api.snapshot()
    with api.client("bob") as http:
        message = assert_error(http.post(f"/api/approvals/{approval_id}/approve", json={}), 409, "conflict")
        assert "approved" in message
        assert_error(
            http.post(f"/api/approvals/{approval_id}/reject", json={"reason": "late"}), 409, "conflict"
        )
    assert api.snapshot() == before
    assert [r["reviewer"] for r in api.audit()] == ["alice"]
    assert api.store.get(approval_id).decided_by == "alice"


def test_expired_and_cancelled_are_409(api: Api) -> None:
    expiring = api.seed(expires_at=api.clock() + timedelta(minutes=1))
    cancelled = api.seed()
    api.store.cancel(cancelled, reason="session ended")
    api.clock.now += timedelta(minutes=2)
    api.store.expire_due()
    before = api.snapshot()
    with api.client("alice") as http:
        assert "expired" in assert_error(
            http.post(f"/api/approvals/{expiring}/approve", json={}), 409, "conflict"
        )
        assert "cancelled" in assert_error(
            http.post(f"/api/approvals/{cancelled}/reject", json={"reason": "no"}), 409, "conflict"
        )
    assert api.snapshot() == before and api.audit() == []


def test_pending_past_expiry_is_refused_even_before_the_sweep(api: Api) -> None:
    approval_id = api.seed(expires_at=api.clock() + timedelta(minutes=1))
    api.clock.now += timedelta(minutes=2)
    with api.client("alice") as http:
        assert_error(http.post(f"/api/approvals/{approval_id}/approve", json={}), 409, "conflict")
    assert api.store.get(approval_id).state == "expired"
    assert api.audit() == []


# -- refusals: who ---------------------------------------------------------------------------------------


def test_roles_and_tokens(api: Api) -> None:
    approval_id = api.seed()
    before = api.snapshot()
    approve = f"/api/approvals/{approval_id}/approve"
    with api.client("victor") as viewer:
        assert viewer.get("/api/approvals").status_code == 200
        assert viewer.get(f"/api/approvals/{approval_id}").status_code == 200
        assert "viewer" in assert_error(viewer.post(approve, json={}), 403, "forbidden")
        assert_error(
            viewer.post(f"/api/approvals/{approval_id}/reject", json={"reason": "x"}), 403, "forbidden"
        )
        assert_error(
            viewer.post("/api/approvals/bulk", json={"ids": [approval_id], "decision": "approve"}),
            403,
            "forbidden",
        )
    with api.client("agent-1") as agent:
        assert "agent" in assert_error(agent.get("/api/approvals"), 403, "forbidden")
        assert_error(agent.get(f"/api/approvals/{approval_id}"), 403, "forbidden")
        assert_error(agent.post(approve, json={}), 403, "forbidden")
        assert_error(
            agent.post("/api/approvals/bulk", json={"ids": [approval_id], "decision": "approve"}),
            403,
            "forbidden",
        )
    for client in (api.client(), api.client(token="not-a-token")):
        with client as http:
            for response in (http.get("/api/approvals"), http.post(approve, json={})):
                assert_error(response, 401, "unauthorized")
                assert response.headers["www-authenticate"].startswith("Bearer")
    with httpx2.Client(base_url=api.base, headers={"Authorization": f"Basic {TOKENS['alice']}"}) as basic:
        assert_error(basic.post(approve, json={}), 401, "unauthorized")
    assert api.snapshot() == before and api.audit() == []


def test_a_reviewer_cannot_decide_their_own_request(api: Api) -> None:
    own = api.seed(principal="bob")
    before = api.snapshot()
    with api.client("bob") as http:
        assert "own" in assert_error(http.post(f"/api/approvals/{own}/approve", json={}), 403, "forbidden")
        assert_error(http.post(f"/api/approvals/{own}/reject", json={"reason": "mine"}), 403, "forbidden")
        assert http.get(f"/api/approvals/{own}").status_code == 200
    assert api.snapshot() == before and api.audit() == []
    with api.client("alice") as http:
        assert http.post(f"/api/approvals/{own}/approve", json={}).status_code == 200


def test_no_reviewers_configured_refuses_everyone(tmp_path: Path) -> None:
    with approvals_app(tmp_path, AuthConfig()) as app:
        approval_id = app.seed()
        with httpx2.Client(base_url=app.base, headers=bearer("alice")) as http:
            assert "no reviewers" in assert_error(http.get("/api/approvals"), 403, "forbidden")
            assert_error(http.post(f"/api/approvals/{approval_id}/approve", json={}), 403, "forbidden")
        assert app.store.get(approval_id).state == "pending"


def test_without_an_audit_log_nothing_is_decided(tmp_path: Path) -> None:
    with approvals_app(tmp_path, auth_config(), audited=False) as app:
        approval_id = app.seed()
        with httpx2.Client(base_url=app.base, headers=bearer("alice")) as http:
            assert http.get("/api/approvals").status_code == 200
            assert "audit" in assert_error(
                http.post(f"/api/approvals/{approval_id}/approve", json={}), 503, "unavailable"
            )
        assert app.store.get(approval_id).state == "pending"


# -- bulk ---------------------------------------------------------------------------------------------------


def test_bulk_gives_every_id_its_own_result(api: Api) -> None:
    pending, other = api.seed(), api.seed()
    own = api.seed(principal="bob")
    decided = api.seed()
    api.store.decide(decided, approve=True, reviewer="alice", reason=None)
    forged = "apr_" + "B" * 24
    ids = [pending, own, decided, forged, other]
    with api.client("bob") as http:
        response = http.post(
            "/api/approvals/bulk", json={"ids": ids, "decision": "reject", "reason": "batch"}
        )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["id"], r["status"]) for r in results] == [
        (pending, 200),
        (own, 403),
        (decided, 409),
        (forged, 404),
        (other, 200),
    ]
    assert results[0]["approval"]["state"] == "rejected" and results[0]["error"] is None
    assert results[2]["approval"]["state"] == "approved" and "approved" in results[2]["error"]
    assert results[1]["approval"] is None and "own" in results[1]["error"]
    assert results[3]["approval"] is None and results[3]["error"]
    assert api.store.get(own).state == "pending"
    assert api.store.get(decided).decided_by == "alice"
    assert [(r["approval_id"], r["decision"], r["reviewer"]) for r in api.audit()] == [
        (pending, "reject", "bob"),
        (other, "reject", "bob"),
    ]


def test_bulk_malformed_is_422_and_changes_nothing(api: Api) -> None:
    approval_id = api.seed()
    before = api.snapshot()
    with api.client("alice") as http:
        for body in (
            {"ids": [approval_id], "decision": "reject"},
            {"ids": [approval_id], "decision": "reject", "reason": " "},
            {"ids": [], "decision": "approve"},
            {"ids": [approval_id, approval_id], "decision": "approve"},
            {"ids": [f"apr_{i}" for i in range(101)], "decision": "approve"},
            {"ids": [approval_id], "decision": "maybe"},
            {"ids": ["../etc"], "decision": "approve"},
            {"ids": [approval_id]},
        ):
            assert_error(http.post("/api/approvals/bulk", json=body), 422, "invalid")
    assert api.snapshot() == before and api.audit() == []


def test_bulk_approve(api: Api) -> None:
    ids = [api.seed() for _ in range(3)]
    with api.client("alice") as http:
        response = http.post("/api/approvals/bulk", json={"ids": ids, "decision": "approve"})
    assert [r["status"] for r in response.json()["results"]] == [200, 200, 200]
    assert {api.store.get(i).state for i in ids} == {"approved"}
    assert len(api.audit()) == 3


# -- the app around the API ---------------------------------------------------------------------------------


def test_openapi_schema_and_wrong_methods(api: Api) -> None:
    with api.client() as http:
        schema = http.get("/api/openapi.json").json()
        assert {"/api/approvals", "/api/approvals/{approval_id}", "/api/approvals/bulk"} <= set(
            schema["paths"]
        )
        wrong = http.delete("/api/approvals")
        assert wrong.status_code == 405 and "GET" in wrong.headers["allow"]


def test_auth_config_refuses_shared_and_duplicate_tokens(tmp_path: Path) -> None:
    same = hash_token("shared")

    def load(auth: dict[str, Any]) -> ProxyConfig:
        path = tmp_path / "proxy.yaml"
        path.write_text(json.dumps({"auth": auth}))
        return ProxyConfig.load(path)

    with pytest.raises(ConfigError, match="agent and a reviewer share a token"):
        load(
            {
                "agents": [{"name": "a", "token_sha256": same}],
                "reviewers": [{"name": "r", "role": "approver", "token_sha256": same}],
            }
        )
    with pytest.raises(ConfigError, match="appears twice"):
        load(
            {
                "reviewers": [
                    {"name": "r1", "role": "approver", "token_sha256": same},
                    {"name": "r2", "role": "viewer", "token_sha256": same},
                ]
            }
        )
    with pytest.raises(ConfigError, match="'r' is used twice"):
        load(
            {
                "reviewers": [
                    {"name": "r", "role": "approver", "token_sha256": same},
                    {"name": "r", "role": "viewer", "token_sha256": hash_token("other")},
                ]
            }
        )
    with pytest.raises(ConfigError, match="'a' is used twice"):
        load(
            {"agents": [{"name": "a", "token_sha256": same}, {"name": "a", "token_sha256": hash_token("x")}]}
        )
    loaded = load(
        {
            "agents": [{"name": "a", "token_sha256": same}],
            "reviewers": [{"name": "r", "role": "viewer", "token_sha256": hash_token("x")}],
        }
    )
    assert [r.name for r in loaded.auth.reviewers] == ["r"]


# -- agents on /mcp ----------------------------------------------------------------------------------------


@pytest.fixture
def mcp_server(tmp_path: Path) -> Iterator[str]:
    with approvals_app(tmp_path, auth_config()) as app:
        yield app.base


def test_mcp_needs_an_agent_token(mcp_server: str) -> None:
    initialize = initialize_request()
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx2.Client(base_url=mcp_server, headers=headers) as http:
        for token in (None, TOKENS["alice"], TOKENS["victor"], "nope"):
            auth = {"Authorization": f"Bearer {token}"} if token else {}
            response = http.post("/mcp", json=initialize, headers=auth)
            assert_error(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
        reviewer = http.post("/mcp", json=initialize, headers=bearer("alice"))
        assert "reviewer" in reviewer.json()["error"]["message"]
        ok = http.post("/mcp", json=initialize, headers=bearer("agent-1"))
        assert ok.status_code == 200, ok.text
        session = ok.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        own = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        mine = http.post("/mcp", json=ping, headers={**own, **bearer("agent-1")})
        assert mine.status_code == 200, mine.text
        theirs = http.post("/mcp", json=ping, headers={**own, **bearer("agent-2")})
        assert theirs.status_code == 404, "a session is bound to the agent that opened it"


@pytest.mark.anyio
async def test_an_agent_runs_as_its_configured_name(mcp_server: str) -> None:
    headers = bearer("agent-1")
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(
            streamable_http_client(f"{mcp_server}/mcp", http_client=http), mode="2026-07-28", cache=None
        ) as agent,
    ):
        result = await agent.call_tool("rollback", {})
    assert result.meta is not None
    assert result.meta[OUTCOME_META_KEY]["session"] == "principal:agent-1"
