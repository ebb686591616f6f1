"""Who may call what: reviewer bearer tokens for the approvals API and page, agent tokens for ``/mcp``,
orchestrator and agent tokens for the sessions API (``/api/sessions``).

Tokens are never stored: the config holds their sha256 (``shadowguard approvals token`` makes a pair)
and a presented token is hashed and compared with every configured hash in constant time. Agent,
reviewer and orchestrator token sets never overlap (the config refuses it), so an agent credential can
never approve, and a reviewer's can never commit.

Errors a caller can rely on (:class:`AuthError`, an ``HTTPException`` carrying the contract's code)::

    401 unauthorized   no token, or a token that is no reviewer's (WWW-Authenticate: Bearer)
    403 forbidden      an agent's token; no reviewers configured; a viewer deciding; a reviewer
                       deciding a request made under their own name

The sessions API (:func:`sessions_caller`) answers 401 for no token or an unknown one, and 403 for a
reviewer's token; it is open to anyone when neither agents nor orchestrators are configured.

The API accepts the ``Authorization`` header only; :func:`reviewer` (the reviewer page) also reads the
``REVIEW_COOKIE`` cookie. A cookie is sent by the browser on its own, so only the page, which guards its
forms itself, takes it; the JSON API never does.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel, ConfigDict
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.config import AgentConfig, AuthConfig, OrchestratorConfig, ProxyConfig

REVIEW_COOKIE = "shadowguard_review"
AGENT_SCOPE = "agent"
ErrorCode = Literal["unauthorized", "forbidden", "not_found", "conflict", "invalid"]


class Reviewer(BaseModel):
    """An authenticated reviewer: a viewer reads the queue, an approver also decides."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: Literal["viewer", "approver"]

    @property
    def can_decide(self) -> bool:
        return self.role == "approver"


class AuthError(HTTPException):
    """A refused credential or decision; ``code`` and ``message`` are the contract's error body."""

    def __init__(self, status_code: Literal[401, 403], code: ErrorCode, message: str) -> None:
        headers = {"WWW-Authenticate": 'Bearer realm="shadowguard"'} if status_code == 401 else None
        super().__init__(status_code=status_code, detail=message, headers=headers)
        self.code = code
        self.message = message


def hash_token(token: str) -> str:
    """sha256 hex of a bearer token, as ``token_sha256`` holds it in the config."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _index_of(token: str | None, hashes: Iterable[str]) -> int | None:
    """Position of the hash matching ``token``; every candidate is compared (no early exit)."""
    if not token:
        return None
    digest = hash_token(token).encode()
    found: int | None = None
    for i, candidate in enumerate(hashes):
        if hmac.compare_digest(digest, candidate.encode()) and found is None:
            found = i
    return found


def authenticate_reviewer(token: str | None, auth: AuthConfig) -> Reviewer | None:
    """The reviewer whose token this is, else None."""
    i = _index_of(token, (r.token_sha256 for r in auth.reviewers))
    if i is None:
        return None
    entry = auth.reviewers[i]
    return Reviewer(name=entry.name, role=entry.role)


def authenticate_agent(token: str | None, auth: AuthConfig) -> AgentConfig | None:
    """The agent whose token this is, else None."""
    i = _index_of(token, (a.token_sha256 for a in auth.agents))
    return auth.agents[i] if i is not None else None


def authenticate_orchestrator(token: str | None, auth: AuthConfig) -> OrchestratorConfig | None:
    """The orchestrator whose token this is, else None."""
    i = _index_of(token, (o.token_sha256 for o in auth.orchestrators))
    return auth.orchestrators[i] if i is not None else None


def is_agent_token(token: str | None, auth: AuthConfig) -> bool:
    return authenticate_agent(token, auth) is not None


def bearer_token(headers: Headers) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def reviewer_for(token: str | None, auth: AuthConfig) -> Reviewer:
    """The reviewer a token names, or :class:`AuthError` (401 unknown/missing, 403 agent or none set up)."""
    if not auth.reviewers:
        raise AuthError(403, "forbidden", "no reviewers are configured (auth.reviewers): nobody may review")
    if token is None:
        raise AuthError(401, "unauthorized", "a reviewer token is required: Authorization: Bearer <token>")
    if is_agent_token(token, auth):
        raise AuthError(403, "forbidden", "an agent's token cannot review approvals")
    found = authenticate_reviewer(token, auth)
    if found is None:
        raise AuthError(401, "unauthorized", "unknown reviewer token")
    return found


def _auth(request: Request) -> AuthConfig:
    config: ProxyConfig = request.app.state.config
    return config.auth


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="reviewerToken",
    description="A reviewer's token (config auth.reviewers); agent tokens are refused.",
)


def api_reviewer(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Reviewer:
    """FastAPI dependency for the JSON API: a reviewer from the Bearer header only (any role).

    Declared through ``HTTPBearer`` so that the OpenAPI schema states the API's security scheme.
    """
    token = credentials.credentials.strip() if credentials is not None else ""
    return reviewer_for(token or None, _auth(request))


def api_approver(who: Annotated[Reviewer, Depends(api_reviewer)]) -> Reviewer:
    """FastAPI dependency for the JSON API: a reviewer who may decide (403 for a viewer)."""
    return require_approver(who)


def reviewer(request: Request) -> Reviewer:
    """FastAPI dependency for the reviewer page: the Bearer header, else the ``REVIEW_COOKIE`` cookie."""
    token = bearer_token(request.headers) or request.cookies.get(REVIEW_COOKIE) or None
    return reviewer_for(token, _auth(request))


def approver(request: Request) -> Reviewer:
    """Like :func:`reviewer`, and the reviewer may decide (403 for a viewer)."""
    return require_approver(reviewer(request))


def require_approver(who: Reviewer) -> Reviewer:
    if not who.can_decide:
        raise AuthError(403, "forbidden", f"reviewer {who.name!r} is a viewer and may not decide approvals")
    return who


def check_not_own(who: Reviewer, principal: str | None) -> None:
    """403 when the approval was requested under the reviewer's own name (nobody approves themselves)."""
    if principal is not None and principal == who.name:
        raise AuthError(
            403, "forbidden", f"reviewer {who.name!r} may not decide a request made under their own name"
        )


class SessionsCaller(BaseModel):
    """Who calls the sessions API, and so which sessions they may see and act on.

    ``orchestrator``: every session. ``agent``: only sessions whose principal is its name (the
    sessions it opened over ``/mcp`` with its token). ``open``: anyone, every session; the API takes
    no token because neither ``auth.agents`` nor ``auth.orchestrators`` is configured.
    """

    model_config = ConfigDict(frozen=True)

    name: str | None
    role: Literal["orchestrator", "agent", "open"]

    def may_act_on(self, principal: str | None) -> bool:
        """Whether a session run under ``principal`` is this caller's to see, commit or roll back."""
        return self.role != "agent" or principal == self.name


OPEN_SESSIONS = SessionsCaller(name=None, role="open")


def sessions_caller(token: str | None, auth: AuthConfig) -> SessionsCaller:
    """The sessions API's caller a token names, or :class:`AuthError`.

    Open (no agents, no orchestrators configured): anyone, whatever the token. Otherwise 401 for no
    token or an unknown one, 403 for a reviewer's (reviewers decide approvals; they do not commit or
    roll back sessions).
    """
    if auth.sessions_api_open:
        return OPEN_SESSIONS
    if token is None:
        raise AuthError(
            401,
            "unauthorized",
            "a token is required on /api/sessions: Authorization: Bearer <orchestrator or agent token>",
        )
    orchestrator = authenticate_orchestrator(token, auth)
    agent = authenticate_agent(token, auth)
    reviewer = authenticate_reviewer(token, auth)
    if orchestrator is not None:
        return SessionsCaller(name=orchestrator.name, role="orchestrator")
    if agent is not None:
        return SessionsCaller(name=agent.name, role="agent")
    if reviewer is not None:
        raise AuthError(
            403,
            "forbidden",
            "a reviewer's token cannot use the sessions API: reviewers decide approvals, "
            "they do not commit or roll back sessions",
        )
    raise AuthError(401, "unauthorized", "unknown token: it is no orchestrator's or agent's")


_sessions_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="sessionsToken",
    description=(
        "An orchestrator's token (config auth.orchestrators: every session) or an agent's (auth.agents: "
        "its own sessions); not needed when neither is configured. Reviewer tokens are refused."
    ),
)


def api_sessions_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_sessions_bearer)]
) -> SessionsCaller:
    """FastAPI dependency for ``/api/sessions``: the caller from the Bearer header (see
    :func:`sessions_caller`)."""
    token = credentials.credentials.strip() if credentials is not None else ""
    return sessions_caller(token or None, _auth(request))


class AgentAuth:
    """ASGI middleware: ``/mcp`` needs an agent's ``Authorization: Bearer`` token.

    On success the request runs as the agent: ``scope["user"]`` is the MCP SDK's ``AuthenticatedUser``
    whose ``client_id`` is the agent's name, so :func:`proxy.server.principal_of` returns that name and
    the SDK binds each ``Mcp-Session-Id`` to the agent that opened it (another agent gets 404).
    Anything else (no token, a reviewer's or an orchestrator's token, an unknown one) gets 401 with
    ``WWW-Authenticate`` and the contract's error body. Other paths pass through untouched; a websocket
    on ``/mcp`` is closed (MCP has no websocket transport here). Install it only when ``auth.agents``
    is non-empty.
    """

    def __init__(self, app: ASGIApp, auth: AuthConfig, *, path: str = "/mcp") -> None:
        self.app = app
        self.auth = auth
        self.path = path

    def _guarded(self, scope: Scope) -> bool:
        path: str = scope.get("path", "")
        return scope["type"] in ("http", "websocket") and (
            path == self.path or path.startswith(self.path + "/")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._guarded(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        token = bearer_token(Headers(scope=scope))
        agent = authenticate_agent(token, self.auth)
        if agent is None:
            if token is None:
                message = "an agent token is required on /mcp: Authorization: Bearer <token>"
            elif authenticate_reviewer(token, self.auth) is not None:
                message = "a reviewer's token cannot call tools: reviewers are not agents"
            elif authenticate_orchestrator(token, self.auth) is not None:
                message = "an orchestrator's token cannot call tools: use an agent's token on /mcp"
            else:
                message = "unknown agent token"
            response = JSONResponse(
                {"error": {"code": "unauthorized", "message": message}},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="shadowguard", error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
        assert token is not None
        access = AccessToken(token=hash_token(token), client_id=agent.name, scopes=[AGENT_SCOPE])
        scope = {**scope, "user": AuthenticatedUser(access), "auth": AuthCredentials([AGENT_SCOPE])}
        await self.app(scope, receive, send)


__all__ = [
    "AGENT_SCOPE",
    "OPEN_SESSIONS",
    "REVIEW_COOKIE",
    "AgentAuth",
    "AuthError",
    "Reviewer",
    "SessionsCaller",
    "api_approver",
    "api_reviewer",
    "api_sessions_caller",
    "approver",
    "authenticate_agent",
    "authenticate_orchestrator",
    "authenticate_reviewer",
    "bearer_token",
    "check_not_own",
    "hash_token",
    "is_agent_token",
    "require_approver",
    "reviewer",
    "reviewer_for",
    "sessions_caller",
]
