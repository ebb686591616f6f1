"""Who may use the sessions API (``/api/sessions``): orchestrators, agents on their own sessions, nobody else.

Each proxy is the real app (``build_proxy`` + ``create_app``) behind a real uvicorn server, relaying to
two notes fixtures over HTTP (transactional; ``notes`` and ``other``, tools ``o_*``: SQLite has one
writer per database, so two sessions with pending writes use one each). Agents open guard sessions over
``/mcp`` with their tokens and leave a write pending; the sessions API is then called with every kind
of credential on every route, and a refused request must leave the session open and its write
uncommitted. After each test every session still open is rolled back.

Also: the config's token rules for orchestrators, the startup warning for an API left open next to
configured reviewers, the token command's orchestrator entry, and the OpenAPI security declaration.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from proxy.app import build_proxy, create_app
from proxy.approvals.auth import authenticate_orchestrator, hash_token, sessions_caller
from proxy.cli import app as cli_app
from proxy.config import AgentConfig, AuthConfig, ConfigError, ProxyConfig, ReviewerConfig
from proxy.registry import SessionRegistry
from proxy.server import OUTCOME_META_KEY, GuardProxy
from tests.support.processes import notes_http, serving
from tests.support.proxy import (
    NOTES_POLICY,
    initialize_request,
    notes_http_upstream,
    notes_rows,
    request_meta,
    write_config,
)

TOKENS = {
    "agent-1": "agent-one-sessions-token",
    "agent-2": "agent-two-sessions-token",
    "ops": "orchestrator-sessions-token",
    "alice": "alice-approver-sessions-token",
    "victor": "victor-viewer-sessions-token",
}
AGENTS = [{"name": n, "token_sha256": hash_token(TOKENS[n])} for n in ("agent-1", "agent-2")]
ORCHESTRATORS = [{"name": "ops", "token_sha256": hash_token(TOKENS["ops"])}]
REVIEWERS = [
    {"name": "alice", "role": "approver", "token_sha256": hash_token(TOKENS["alice"])},
    {"name": "victor", "role": "viewer", "token_sha256": hash_token(TOKENS["victor"])},
]
ROUTES = [
    ("GET", "/api/sessions"),
    ("GET", "/api/sessions/{id}"),
    ("POST", "/api/sessions/{id}/commit"),
    ("POST", "/api/sessions/{id}/rollback"),
]
WARNING = "/api/sessions takes no token"


@dataclass
class Proxy:
    """A running proxy: its URL, its guard sessions, and the notes databases behind it."""

    base: str
    proxy: GuardProxy
    dbs: dict[str, Path]
    admin: str | None
    """Who may roll every session back through the API (None: the API is open)."""

    def http(self, who: str | None = None, *, token: str | None = None) -> httpx2.Client:
        if who is not None:
            token = TOKENS[who]
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx2.Client(base_url=self.base, headers=headers, timeout=60)

    def write(self, who: str | None, note: str, upstream: str = "notes", session: str | None = None) -> str:
        """A guard session (named in ``_meta``; a fresh one unless ``session``) of ``who`` (None: no
        token) with ``note`` pending."""
        session = session or f"s-{uuid.uuid4().hex[:12]}"
        anyio.run(self._write, who, session, note, upstream)
        return session

    async def _write(self, who: str | None, session: str, note: str, upstream: str) -> None:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who is not None else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(
                streamable_http_client(f"{self.base}/mcp", http_client=http), mode="2026-07-28", cache=None
            ) as client,
        ):
            result = await client.call_tool(
                "put_note" if upstream == "notes" else "o_put_note",
                {"id": note, "body": "pending", "status": "published"},
                meta=request_meta({"shadowguard/session": session}),
            )
        assert not result.is_error, result
        assert result.meta is not None and result.meta[OUTCOME_META_KEY]["session"] == session

    def assert_pending(
        self, session_id: str, note: str, principal: str | None, upstream: str = "notes"
    ) -> None:
        """The session is still open, its write uncommitted (a refused request changed nothing)."""
        session = self.proxy.sessions.get(session_id, principal)
        assert session is not None and not session.closed
        assert session.principal == principal
        assert session.in_transaction
        assert not self.committed(note, upstream)

    def committed(self, note: str, upstream: str = "notes") -> bool:
        return note in notes_rows(self.dbs[upstream])

    def roll_back_everything(self) -> None:
        with self.http(self.admin) as http:
            for session in http.get("/api/sessions").json()["sessions"]:
                if session["in_transaction"]:
                    who = {"principal": session["principal"]} if session["principal"] else {}
                    response = http.post(f"/api/sessions/{session['id']}/rollback", params=who)
                    assert response.status_code == 200, response.text
        assert not any(s.in_transaction for s in self.proxy.sessions)


def new_note() -> str:
    return f"n-{uuid.uuid4().hex[:10]}"


def call(http: httpx2.Client, method: str, route: str, session_id: str) -> httpx2.Response:
    return http.request(method, route.format(id=session_id))


def assert_error(response: httpx2.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
    else:
        assert "www-authenticate" not in response.headers
    return message


def listed(response: httpx2.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {s["id"] for s in response.json()["sessions"]}


@pytest.fixture(scope="module")
def notes_dbs(module_tmp: Path) -> Iterator[dict[str, tuple[str, Path]]]:
    """Two notes fixtures over HTTP, by upstream name: (URL, database)."""
    processes = {name: notes_http(module_tmp / f"{name}.sqlite") for name in ("notes", "other")}
    try:
        yield {name: (p.ready().url, module_tmp / f"{name}.sqlite") for name, p in processes.items()}
    finally:
        for process in processes.values():
            process.stop()


@contextmanager
def running(
    folder: Path, notes: dict[str, tuple[str, Path]], auth: dict[str, Any], admin: str | None
) -> Iterator[Proxy]:
    folder.mkdir()
    upstreams = [
        notes_http_upstream(notes["notes"][0]),
        {
            "name": "other",
            "transport": "http",
            "url": notes["other"][0],
            "policy": str(NOTES_POLICY),
            "prefix": "o_",
        },
    ]
    path = write_config(
        folder / "proxy.yaml",
        upstreams,
        audit={"path": "audit.jsonl"},
        approvals={"store": "sqlite:///approvals.db"},
        auth=auth,
    )
    config = ProxyConfig.load(path)
    proxy, recorder = build_proxy(config)
    with serving(create_app(proxy, config, lifespan_runs_proxy=True, recorder=recorder)) as base:
        yield Proxy(base, proxy, {n: db for n, (_, db) in notes.items()}, admin)


@pytest.fixture(scope="module")
def guarded_proxy(module_tmp: Path, notes_dbs: dict[str, tuple[str, Path]]) -> Iterator[Proxy]:
    auth = {"agents": AGENTS, "orchestrators": ORCHESTRATORS, "reviewers": REVIEWERS}
    with running(module_tmp / "guarded", notes_dbs, auth, "ops") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def orchestrated_proxy(module_tmp: Path, notes_dbs: dict[str, tuple[str, Path]]) -> Iterator[Proxy]:
    auth = {"orchestrators": ORCHESTRATORS, "reviewers": REVIEWERS}
    with running(module_tmp / "orchestrated", notes_dbs, auth, "ops") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def open_proxy_module(module_tmp: Path, notes_dbs: dict[str, tuple[str, Path]]) -> Iterator[Proxy]:
    with running(module_tmp / "open", notes_dbs, {"reviewers": REVIEWERS}, None) as proxy:
        yield proxy


@pytest.fixture
def guarded(guarded_proxy: Proxy) -> Iterator[Proxy]:
    """Agents, an orchestrator and reviewers configured."""
    yield guarded_proxy
    guarded_proxy.roll_back_everything()


@pytest.fixture
def orchestrated(orchestrated_proxy: Proxy) -> Iterator[Proxy]:
    """An orchestrator and reviewers, no agents: /mcp is open, /api/sessions is not."""
    yield orchestrated_proxy
    orchestrated_proxy.roll_back_everything()


@pytest.fixture
def open_proxy(open_proxy_module: Proxy) -> Iterator[Proxy]:
    """Reviewers only: /mcp and /api/sessions are open."""
    yield open_proxy_module
    open_proxy_module.roll_back_everything()


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method,route", ROUTES)
@pytest.mark.parametrize(
    "who,token,status,code,says",
    [
        (None, None, 401, "unauthorized", "token is required"),
        (None, "not-a-known-token", 401, "unauthorized", "unknown token"),
        ("alice", None, 403, "forbidden", "reviewer"),
        ("victor", None, 403, "forbidden", "reviewer"),
    ],
)
def test_refused_credentials_change_nothing(
    guarded: Proxy,
    method: str,
    route: str,
    who: str | None,
    token: str | None,
    status: int,
    code: str,
    says: str,
) -> None:
    note = new_note()
    session = guarded.write("agent-1", note)
    with guarded.http(who, token=token) as http:
        assert says in assert_error(call(http, method, route, session), status, code)
    guarded.assert_pending(session, note, "agent-1")
    with guarded.http("ops") as ops:
        assert ops.post(f"/api/sessions/{session}/rollback").json()["rolled_back"] is True
    assert not guarded.committed(note)


def test_a_malformed_authorization_header_is_no_token(guarded: Proxy) -> None:
    note = new_note()
    session = guarded.write("agent-2", note)
    with guarded.http() as http:
        for header in ("Basic b3BzOnNlY3JldA==", "Bearer", f"Token {TOKENS['ops']}", TOKENS["ops"]):
            response = http.post(f"/api/sessions/{session}/commit", headers={"Authorization": header})
            assert_error(response, 401, "unauthorized")
    guarded.assert_pending(session, note, "agent-2")


# -- agents: their own sessions only -------------------------------------------------------------------


def test_an_agent_sees_and_acts_on_its_own_sessions_only(guarded: Proxy) -> None:
    mine, theirs = new_note(), new_note()
    own = guarded.write("agent-1", mine)
    foreign = guarded.write("agent-2", theirs, "other")
    with guarded.http("agent-1") as agent:
        sessions = listed(agent.get("/api/sessions"))
        assert own in sessions and foreign not in sessions
        assert {s["principal"] for s in agent.get("/api/sessions").json()["sessions"]} == {"agent-1"}
        detail = agent.get(f"/api/sessions/{own}").json()
        assert detail["id"] == own and detail["principal"] == "agent-1" and detail["in_transaction"] is True

        unknown = f"s-{uuid.uuid4().hex[:12]}"
        for method, route in ROUTES[1:]:
            hidden = assert_error(call(agent, method, route, foreign), 404, "not_found")
            absent = assert_error(call(agent, method, route, unknown), 404, "not_found")
            assert hidden == f"no open session {foreign!r}"
            assert absent == f"no open session {unknown!r}", "a foreign id reads exactly as an unknown one"
        guarded.assert_pending(foreign, theirs, "agent-2", "other")

        committed = agent.post(f"/api/sessions/{own}/commit")
        assert committed.status_code == 200, committed.text
        assert committed.json() == {
            "session": own,
            "committed": True,
            "changes": 1,
            "applied_calls": 0,
            "violations": [],
        }
    assert guarded.committed(mine) and not guarded.committed(theirs, "other")
    guarded.assert_pending(foreign, theirs, "agent-2", "other")

    with guarded.http("agent-2") as other:
        assert own not in listed(other.get("/api/sessions"))
        assert_error(other.get(f"/api/sessions/{own}"), 404, "not_found")
        rolled = other.post(f"/api/sessions/{foreign}/rollback").json()
        assert rolled["rolled_back"] is True and rolled["changes"] == 1 and rolled["not_reversed"] == []
    assert not guarded.committed(theirs, "other")


def test_an_id_taken_first_by_another_agent_does_not_block_its_owner(guarded: Proxy) -> None:
    """Sessions are keyed by (principal, id): agent-2 opening the id agent-1 will use first neither
    blocks agent-1 nor learns that agent-1's session exists; an orchestrator names the principal."""
    squatted, mine, theirs = f"s-{uuid.uuid4().hex[:12]}", new_note(), new_note()
    guarded.write("agent-2", theirs, "other", session=squatted)
    guarded.write("agent-1", mine, session=squatted)  # no refusal
    guarded.assert_pending(squatted, mine, "agent-1")
    guarded.assert_pending(squatted, theirs, "agent-2", "other")
    with guarded.http("agent-1") as agent:
        detail = agent.get(f"/api/sessions/{squatted}").json()
        assert (detail["principal"], detail["upstreams"]) == ("agent-1", ["notes"])
        assert agent.post(f"/api/sessions/{squatted}/commit").json()["committed"] is True
    assert guarded.committed(mine) and not guarded.committed(theirs, "other")
    with guarded.http("ops") as ops:
        both = ops.get("/api/sessions").json()["sessions"]
        assert {s["principal"] for s in both if s["id"] == squatted} == {"agent-1", "agent-2"}
        assert_error(ops.post(f"/api/sessions/{squatted}/rollback"), 409, "conflict")
        named = ops.post(f"/api/sessions/{squatted}/rollback", params={"principal": "agent-2"})
        assert named.status_code == 200 and named.json()["changes"] == 1, named.text
    assert not guarded.committed(theirs, "other")


def test_an_agent_is_not_told_why_a_session_ended(guarded: Proxy) -> None:
    """An ended session's owner is not kept, so its reason is for orchestrators only."""

    async def handshake_session() -> str:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['agent-1']}"}, timeout=60) as http,
            Client(streamable_http_client(f"{guarded.base}/mcp", http_client=http), mode="legacy") as client,
        ):
            result = await client.call_tool("put_note", {"id": new_note(), "body": "x", "status": "draft"})
            assert result.meta is not None
            session = str(result.meta[OUTCOME_META_KEY]["session"])
            assert guarded.proxy.sessions.named(session)
        return session  # the client's DELETE /mcp rolled it back and closed it

    session = anyio.run(handshake_session)
    assert not guarded.proxy.sessions.named(session)
    with guarded.http("agent-1") as agent:
        assert assert_error(agent.get(f"/api/sessions/{session}"), 404, "not_found") == (
            f"no open session {session!r}"
        )
    with guarded.http("ops") as ops:
        message = assert_error(ops.post(f"/api/sessions/{session}/commit"), 404, "not_found")
    assert message == f"no open session {session!r}: it was rolled back and closed (closed)"


# -- orchestrators: every session ---------------------------------------------------------------------


def test_an_orchestrator_sees_and_acts_on_every_session(guarded: Proxy) -> None:
    first, second = new_note(), new_note()
    one = guarded.write("agent-1", first)
    two = guarded.write("agent-2", second, "other")
    with guarded.http("ops") as ops:
        assert {one, two} <= listed(ops.get("/api/sessions"))
        assert ops.get(f"/api/sessions/{two}").json()["principal"] == "agent-2"
        committed = ops.post(f"/api/sessions/{one}/commit").json()
        assert committed == {
            "session": one,
            "committed": True,
            "changes": 1,
            "applied_calls": 0,
            "violations": [],
        }
        rolled = ops.post(f"/api/sessions/{two}/rollback").json()
        assert rolled["rolled_back"] is True and rolled["changes"] == 1
        assert_error(ops.get(f"/api/sessions/s-{uuid.uuid4().hex}"), 404, "not_found")
    assert guarded.committed(first) and not guarded.committed(second, "other")


def test_an_orchestrator_token_does_not_call_tools(guarded: Proxy) -> None:
    initialize = initialize_request()
    with guarded.http("ops") as ops:
        response = ops.post(
            "/mcp", json=initialize, headers={"Accept": "application/json, text/event-stream"}
        )
    assert "orchestrator" in assert_error(response, 401, "unauthorized")


def test_orchestrators_without_agents(orchestrated: Proxy) -> None:
    """/mcp is open (sessions have no principal); only the orchestrator reaches /api/sessions."""
    note = new_note()
    session = orchestrated.write(None, note)
    for who, token, status in ((None, None, 401), (None, TOKENS["agent-1"], 401), ("alice", None, 403)):
        with orchestrated.http(who, token=token) as http:
            for method, route in ROUTES:
                assert call(http, method, route, session).status_code == status
    orchestrated.assert_pending(session, note, None)
    with orchestrated.http("ops") as ops:
        assert session in listed(ops.get("/api/sessions"))
        assert ops.post(f"/api/sessions/{session}/commit").json()["committed"] is True
    assert orchestrated.committed(note)


# -- open: neither agents nor orchestrators -----------------------------------------------------------


def test_open_when_neither_agents_nor_orchestrators(open_proxy: Proxy) -> None:
    kept, dropped = new_note(), new_note()
    one = open_proxy.write(None, kept)
    two = open_proxy.write(None, dropped, "other")
    for token in (None, "any-token-at-all", TOKENS["alice"]):
        with open_proxy.http(token=token) as http:
            assert {one, two} <= listed(http.get("/api/sessions"))
            assert http.get(f"/api/sessions/{one}").json()["in_transaction"] is True
    with open_proxy.http() as http:
        assert http.post(f"/api/sessions/{one}/commit").json()["committed"] is True
        assert http.post(f"/api/sessions/{two}/rollback").json()["rolled_back"] is True
        missing = f"s-{uuid.uuid4().hex[:12]}"
        assert assert_error(http.get(f"/api/sessions/{missing}"), 404, "not_found") == (
            f"no open session {missing!r}"
        )
    assert open_proxy.committed(kept) and not open_proxy.committed(dropped, "other")


# -- startup warning --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth,warned",
    [
        (AuthConfig(reviewers=[ReviewerConfig.model_validate(REVIEWERS[0])]), True),
        (AuthConfig(), False),
        (
            AuthConfig(
                reviewers=[ReviewerConfig.model_validate(REVIEWERS[0])],
                agents=[AgentConfig.model_validate(AGENTS[0])],
            ),
            False,
        ),
        (AuthConfig.model_validate({"reviewers": REVIEWERS, "orchestrators": ORCHESTRATORS}), False),
    ],
    ids=["reviewers-only", "nothing", "with-agents", "with-orchestrators"],
)
def test_startup_warns_when_reviewers_are_set_and_sessions_are_open(
    auth: AuthConfig, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(GuardProxy([], SessionRegistry()), ProxyConfig(auth=auth), lifespan_runs_proxy=False)
    with caplog.at_level(logging.WARNING, logger="proxy.sessions_api"), serving(app):
        pass
    warnings = [r for r in caplog.records if r.name == "proxy.sessions_api" and WARNING in r.getMessage()]
    assert len(warnings) == (1 if warned else 0), caplog.text
    if warned:
        assert warnings[0].levelno == logging.WARNING and "auth.orchestrators" in warnings[0].getMessage()


# -- config and credentials -------------------------------------------------------------------------------


def load(tmp_path: Path, auth: dict[str, Any]) -> ProxyConfig:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"auth": auth}))
    return ProxyConfig.load(path)


def test_the_config_keeps_orchestrator_tokens_apart(tmp_path: Path) -> None:
    same = hash_token("shared")
    other = hash_token("other")
    orchestrator = {"name": "ops", "token_sha256": same}
    cases = [
        (
            {"orchestrators": [orchestrator], "agents": [{"name": "a", "token_sha256": same}]},
            "an agent and an orchestrator share a token",
        ),
        (
            {
                "orchestrators": [orchestrator],
                "reviewers": [{"name": "r", "role": "viewer", "token_sha256": same}],
            },
            "an orchestrator and a reviewer share a token",
        ),
        ({"orchestrators": [orchestrator, {"name": "ops2", "token_sha256": same}]}, "appears twice"),
        (
            {"orchestrators": [orchestrator, {"name": "ops", "token_sha256": other}]},
            "orchestrators: name 'ops' is used twice",
        ),
        ({"orchestrators": [{"name": "", "token_sha256": other}]}, r"auth\.orchestrators\[0\]\.name"),
        (
            {"orchestrators": [{"name": "ops", "token_sha256": "not-a-hash"}]},
            r"auth\.orchestrators\[0\]\.token_sha256",
        ),
    ]
    for auth, message in cases:
        with pytest.raises(ConfigError, match=message) as refused:
            load(tmp_path, auth)
        assert refused.value.field is not None and refused.value.field.startswith("auth")
    loaded = load(
        tmp_path,
        {
            "orchestrators": [orchestrator],
            "agents": [{"name": "ops", "token_sha256": other}],
        },
    ).auth
    assert [o.name for o in loaded.orchestrators] == ["ops"], "a name is unique per list, not across lists"
    assert not loaded.sessions_api_open and AuthConfig().sessions_api_open


def test_who_a_token_names() -> None:
    auth = AuthConfig.model_validate(
        {"agents": AGENTS, "orchestrators": ORCHESTRATORS, "reviewers": REVIEWERS}
    )
    ops = sessions_caller(TOKENS["ops"], auth)
    assert (
        (ops.role, ops.name) == ("orchestrator", "ops") and ops.may_act_on("agent-2") and ops.may_act_on(None)
    )
    agent = sessions_caller(TOKENS["agent-1"], auth)
    assert (agent.role, agent.name) == ("agent", "agent-1")
    assert agent.may_act_on("agent-1") and not agent.may_act_on("agent-2") and not agent.may_act_on(None)
    anyone = sessions_caller(None, AuthConfig.model_validate({"reviewers": REVIEWERS}))
    assert anyone.role == "open" and anyone.may_act_on("agent-1")


def test_the_token_command_makes_an_orchestrator_entry(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_app, ["approvals", "token", "--name", "ops-bot", "--role", "orchestrator"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    token = lines[0].rsplit(" ", 1)[1]
    snippet = "\n".join(lines[2:])
    assert "auth.orchestrators" in lines[1] and token not in snippet
    assert yaml.safe_load(snippet) == {
        "auth": {"orchestrators": [{"name": "ops-bot", "token_sha256": hash_token(token)}]}
    }
    path = tmp_path / "proxy.yaml"
    path.write_text(snippet)
    found = authenticate_orchestrator(token, ProxyConfig.load(path).auth)
    assert found is not None and found.name == "ops-bot"


def test_the_openapi_schema_declares_the_sessions_token(guarded: Proxy) -> None:
    with guarded.http() as http:
        schema = http.get("/api/openapi.json").json()
    assert "sessionsToken" in schema["components"]["securitySchemes"]
    for method, route in ROUTES:
        operation = schema["paths"][route.replace("{id}", "{session_id}")][method.lower()]
        assert operation["security"] == [{"sessionsToken": []}]
        assert {"401", "403"} <= set(operation["responses"])
        assert ("404" in operation["responses"]) == ("{id}" in route)
