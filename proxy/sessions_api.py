"""``/api/sessions``: orchestrators (and agents, for their own sessions) commit, roll back and inspect
guard sessions over HTTP.

* ``POST /api/sessions/{id}/commit`` -> ``{"session", "committed", "changes", "applied_calls", "violations"}``
  (200 whether committed or refused: a refusal is an answer, not an error; 404 for an unknown id)
* ``POST /api/sessions/{id}/rollback`` -> ``{"session", "rolled_back", "changes", "undone_calls",
  "not_undone_calls", "not_reversed"}``
* ``GET /api/sessions`` and ``GET /api/sessions/{id}`` -> the open sessions' status

With several replicas (docs/deploy.md) a request for a session another replica holds is answered by
that replica (proxy/replica_api.py); the list is this replica's sessions and says which replica.

With ``auth.agents`` or ``auth.orchestrators`` configured these need a bearer token: an orchestrator's
(every session) or an agent's (its own sessions; another's is 404). Without either they are open.

``{id}`` is the guard session id (docs/proxy.md): the ``_meta["shadowguard/session"]`` value, the
``Mcp-Session-Id``, ``principal:<name>``, or the stdio session's id; every tool result names it in
``_meta["shadowguard/outcome"].session``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.requests import Request

from guard.models import CommitOutcome
from proxy import telemetry
from proxy.approvals.api import ApiError, ApprovalsRoute, ErrorBody
from proxy.approvals.auth import SessionsCaller, api_sessions_caller
from proxy.commits import entry_outcome
from proxy.config import ProxyConfig
from proxy.registry import ANY
from proxy.replica_api import ReplicaSessions
from proxy.server import GuardProxy
from proxy.sessions import ProxySession, RollbackOutcome

logger = logging.getLogger(__name__)

_Caller = Annotated[SessionsCaller, Depends(api_sessions_caller)]
_SESSION_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No token, or one that is no orchestrator's or agent's"},
    403: {"model": ErrorBody, "description": "A reviewer's token"},
}
_NO_SESSION: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No open session with this id that the caller may see"},
    410: {"model": ErrorBody, "description": "Several replicas: the session's replica died (code lost)"},
    503: {
        "model": ErrorBody,
        "description": "Several replicas: the session's replica or the directory does not answer "
        "(code unavailable; Retry-After)",
    },
}


@asynccontextmanager
async def _warn_if_sessions_open(app: FastAPI) -> AsyncIterator[None]:
    """At startup: a config that sets up reviewers but leaves /api/sessions open likely forgot it."""
    config: ProxyConfig = app.state.config
    if config.auth.reviewers and config.auth.sessions_api_open:
        logger.warning(
            "auth.reviewers is set but auth.agents and auth.orchestrators are empty, so /api/sessions "
            "takes no token: anyone who reaches this port can commit or roll back any session. "
            "Configure auth.orchestrators (docs/proxy.md, 'Commit and rollback')."
        )
    yield


class _Lookup:
    """Which of ``proxy``'s sessions an API caller may act on, and, with ``replicas``, the answer of
    the replica that holds a session this one does not."""

    def __init__(self, proxy: GuardProxy, replicas: ReplicaSessions | None) -> None:
        self.proxy = proxy
        self.replicas = replicas

    def visible(self, session_id: str, caller: SessionsCaller, principal: str | None) -> list[ProxySession]:
        found = self.proxy.sessions.named(session_id)
        if caller.role == "agent":
            return [s for s in found if s.principal == caller.name]
        return [s for s in found if principal is None or s.principal == principal]

    def find(self, session_id: str, caller: SessionsCaller, principal: str | None) -> ProxySession:
        """The one open session of this id the caller may act on; 404 when none (another principal's
        is not told apart from an unknown id), 409 when several principals' share it."""
        sessions = self.visible(session_id, caller, principal)
        if len(sessions) == 1:
            return sessions[0]
        if len(sessions) > 1:
            raise ApiError(
                409,
                "conflict",
                f"sessions of {len(sessions)} principals have the id {session_id!r}; "
                "name one with ?principal=",
            )
        why = ""
        if caller.role != "agent":
            ended = (
                self.proxy.sessions.ended_any(session_id)
                if principal is None
                else self.proxy.sessions.ended(session_id, principal)
            )
            why = f": it was rolled back and closed ({ended})" if ended is not None else ""
        raise ApiError(404, "not_found", f"no open session {session_id!r}{why}")

    async def elsewhere(
        self, request: Request, session_id: str, caller: SessionsCaller, principal: str | None
    ) -> Response | None:
        """The owner replica's answer for a session not held here (None: answer here)."""
        if self.replicas is None or self.visible(session_id, caller, principal):
            return None
        if caller.role == "agent":
            return await self.replicas.answer(request, session_id, [caller.name])
        return await self.replicas.answer(request, session_id, None if principal is None else [principal])

    async def status(
        self, request: Request, session_id: str, caller: SessionsCaller, principal: str | None
    ) -> Response:
        """``GET /api/sessions/{id}``: the session's status, from its replica, the open session or
        the ledger's record of it."""
        if (answer := await self.elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        if not self.visible(session_id, caller, principal):
            body = await self.recorded(session_id, caller, principal)
            if body is not None:
                return JSONResponse(body)
        return JSONResponse(self.find(session_id, caller, principal).describe())

    async def recorded(
        self, session_id: str, caller: SessionsCaller, principal: str | None
    ) -> dict[str, Any] | None:
        """The commit record the ledger holds of a session no longer open (a commit that did not finish)."""
        sessions = self.proxy.sessions
        if caller.role == "agent":
            found = await sessions.peek_lost(session_id, caller.name)
        else:
            found = await sessions.peek_lost(session_id, ANY if principal is None else principal)
        found = [(who, entry) for who, entry in found if entry.commit is not None]
        if not found:
            return None
        if len(found) > 1:
            raise ApiError(
                409,
                "conflict",
                f"the ledger holds sessions of {len(found)} principals with the id {session_id!r}; "
                "name one with ?principal=",
            )
        ((who, entry),) = found
        answer = entry_outcome(entry)
        assert answer is not None
        return {
            "id": session_id,
            "principal": who,
            "open": False,
            "state": entry.state,
            "committed": answer.committed,
            "upstreams": answer.upstreams,
            "violations": [v.model_dump(mode="json") for v in answer.violations],
        }


def _commit_body(session_id: str, outcome: CommitOutcome) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session": session_id,
        "committed": outcome.committed,
        "changes": len(outcome.changes),
        "applied_calls": len(outcome.applied),
        "violations": [v.model_dump(mode="json") for v in outcome.violations],
    }
    if outcome.upstreams is not None:
        body["upstreams"] = outcome.upstreams
    return body


def _rollback_body(session_id: str, outcome: RollbackOutcome) -> dict[str, Any]:
    return {
        "session": session_id,
        "rolled_back": outcome.rolled_back,
        "changes": len(outcome.changes),
        "undone_calls": [c.id for c in outcome.undone],
        "not_undone_calls": [c.id for c in outcome.not_undone],
        "not_reversed": outcome.not_reversed,
    }


def sessions_router(proxy: GuardProxy, replicas: ReplicaSessions | None = None) -> APIRouter:
    """``/api/sessions``: commit, roll back and inspect guard sessions (for orchestrators).

    With ``replicas``, a session this replica does not hold is answered by the replica that does
    (:class:`proxy.replica_api.ReplicaSessions`).

    Who may do what is :func:`proxy.approvals.auth.sessions_caller`: with ``auth.agents`` or
    ``auth.orchestrators`` configured an orchestrator acts on every session and an agent on its own
    only (another's is 404, exactly as an unknown id, and the list leaves it out); with neither, the
    API is open. Refusals have the approvals API's body ``{"error": {"code", "message"}}``.
    """
    router = APIRouter(
        prefix="/api/sessions",
        tags=["sessions"],
        route_class=ApprovalsRoute,
        lifespan=_warn_if_sessions_open,
        responses=_SESSION_ERRORS,
    )
    lookup = _Lookup(proxy, replicas)

    @router.get("")
    async def list_sessions(caller: _Caller) -> JSONResponse:
        """The open sessions the caller may see; with several replicas, this replica's only, and
        ``replica`` names it."""
        visible = [s.describe() for s in proxy.sessions if caller.may_act_on(s.principal)]
        if replicas is None:
            return JSONResponse({"sessions": visible})
        return JSONResponse({"sessions": visible, "replica": replicas.describe()})

    @router.get("/{session_id:path}", responses=_NO_SESSION)
    async def get_session(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        """An open session's status; for one no longer open that the session ledger still holds (a
        commit that did not finish, or writes lost in a restart): ``open: false`` and what it says."""
        return await lookup.status(request, session_id, caller, principal)

    @router.post("/{session_id:path}/commit", responses=_NO_SESSION)
    async def commit(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        if (answer := await lookup.elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        session = lookup.find(session_id, caller, principal)
        with telemetry.span("shadowguard.commit", session=session_id, via="api"):
            outcome = await session.commit()
        return JSONResponse(_commit_body(session_id, outcome))

    @router.post("/{session_id:path}/rollback", responses=_NO_SESSION)
    async def rollback(
        request: Request, session_id: str, caller: _Caller, principal: str | None = None
    ) -> Response:
        if (answer := await lookup.elsewhere(request, session_id, caller, principal)) is not None:
            return answer
        outcome = await lookup.find(session_id, caller, principal).rollback("api")
        return JSONResponse(_rollback_body(session_id, outcome))

    return router


__all__ = ["sessions_router"]
