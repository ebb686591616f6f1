"""The approvals REST API (``/api/approvals``): the queue for reviewers, and their decisions.

Routes (``Authorization: Bearer <reviewer token>``; viewers read, approvers also decide)::

    GET  /api/approvals?state=&session_id=&principal=&tool=&limit=&offset=  -> {"items", "count"}
    GET  /api/approvals/{id}                  -> the approval and its "history"         (404)
    POST /api/approvals/{id}/approve  {"reason": str | null}  -> the approval     (403 404 409)
    POST /api/approvals/{id}/reject   {"reason": str}         -> the approval     (403 404 409)
    POST /api/approvals/bulk  {"ids", "decision", "reason"}   -> {"results": [per id]}

Every refusal has the body ``{"error": {"code", "message"}}`` with code ``unauthorized`` (401),
``forbidden`` (403), ``not_found`` (404), ``conflict`` (409: not pending, or expired), ``invalid``
(422: a malformed id, query or body) or ``unavailable`` (503: the store cannot be reached, or there is
no audit log to record a decision in). A refused request changes nothing.

A decision is recorded twice: in the store's history (the store does it, atomically with the
transition) and in the proxy's audit log (an ``approval_decision`` record). A bulk decision is taken
id by id, and every id gets its own result (200, 403 own request, 404, 409, 503), so a batch never
half-fails silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping
from functools import partial
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException

from guard.approvals.models import (
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalState,
    ApprovalStore,
    ApprovalStoreUnavailable,
)
from proxy import telemetry
from proxy.approvals.auth import (
    AuthError,
    ErrorCode,
    Reviewer,
    api_approver,
    api_reviewer,
    check_not_own,
    require_approver,
)
from proxy.audit import AuditLog

PREFIX = "/api/approvals"
MAX_REASON = 2000
MAX_BULK = 100
MAX_OFFSET = 1_000_000
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""What an approval id may look like (``new_approval_id`` makes ``apr_`` + URL-safe base64)."""
_TEXT = r"^[^\x00]*$"
_REASON = r"[^\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
"""A reason must hold something other than whitespace. The characters are spelled out, not ``\\s``: each
engine that reads the rule has its own ``\\s`` (Python's counts ``\x1c``-``\x1f`` and ``\x85``, pydantic's
Rust engine ``\x85`` but not ``\x1c``-``\x1f``, the schema's ECMAScript engine ``\ufeff`` but neither of
the others), and the rule must read the same in all of them: this is the union of the three."""

ApiErrorCode = ErrorCode | Literal["unavailable", "lost"]


class ApiError(Exception):
    """A refusal the API answers with the contract's error body."""

    def __init__(self, status_code: int, code: ApiErrorCode, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message


# -- request and response models (they make the OpenAPI schema exact) ---------------------------------


class ErrorDetail(BaseModel):
    code: ApiErrorCode
    message: str


class ErrorBody(BaseModel):
    """Every refusal: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class ApprovalList(BaseModel):
    items: list[Approval]
    """Newest first."""
    count: int
    """How many items this page holds."""


class ApprovalDetail(Approval):
    history: list[ApprovalEvent]
    """The approval's audited transitions, oldest first."""


class ApproveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=MAX_REASON, pattern=_REASON)] | None = None
    """Optional; when given it must say something (not only whitespace)."""


class RejectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=_REASON)
    """Required: it is sent back to the agent."""


def _unique(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    for approval_id in ids:
        if approval_id in seen:
            raise ValueError(f"id {approval_id!r} is given twice")
        seen.add(approval_id)
    return ids


_Ids = Annotated[
    list[Annotated[str, Field(pattern=ID_PATTERN)]],
    Field(min_length=1, max_length=MAX_BULK, json_schema_extra={"uniqueItems": True}),
]


class BulkApprove(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: _Ids
    decision: Literal["approve"]
    reason: Annotated[str, Field(min_length=1, max_length=MAX_REASON, pattern=_REASON)] | None = None

    _ids_unique = field_validator("ids")(_unique)


class BulkReject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: _Ids
    decision: Literal["reject"]
    reason: str = Field(min_length=1, max_length=MAX_REASON, pattern=_REASON)

    _ids_unique = field_validator("ids")(_unique)


BulkBody = Annotated[BulkApprove | BulkReject, Field(discriminator="decision")]


class BulkResult(BaseModel):
    id: str
    status: Literal[200, 403, 404, 409, 503]
    approval: Approval | None
    """The approval as decided (200), or as it is (409); None otherwise."""
    error: str | None
    """Why this id was not decided; None on success."""


class BulkResults(BaseModel):
    results: list[BulkResult]
    """One per id, in the order given."""


# -- errors ---------------------------------------------------------------------------------------------


def error_response(
    status_code: int, code: ApiErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        ErrorBody(error=ErrorDetail(code=code, message=message)).model_dump(),
        status_code=status_code,
        headers=headers,
    )


def _describe(errors: Any) -> str:
    """FastAPI's validation errors as one line: ``body.reason: String should have at least 1 character``."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg")))
    return "; ".join(parts) or "invalid request"


class ApprovalsRoute(APIRoute):
    """Renders every refusal of these routes (auth, store, validation) as the contract's error body.

    FastAPI's own 422 body (``{"detail": [...]}``) is replaced here, not app-wide, so the other
    routers keep theirs; a body FastAPI cannot even decode (its 400) is a 422 ``invalid`` too.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return error_response(422, "invalid", _describe(exc.errors()))
            except AuthError as exc:
                return error_response(exc.status_code, exc.code, exc.message, headers=exc.headers)
            except ApiError as exc:
                return error_response(exc.status_code, exc.code, exc.message)
            except HTTPException as exc:
                if exc.status_code != 400:
                    raise
                return error_response(422, "invalid", f"the request body cannot be read: {exc.detail}")

        return route


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No reviewer token, or an unknown one"},
    403: {"model": ErrorBody, "description": "An agent's token, a viewer deciding, or one's own request"},
    404: {"model": ErrorBody, "description": "No approval has this id"},
    409: {"model": ErrorBody, "description": "The approval is not pending (decided, expired, cancelled)"},
    422: {"model": ErrorBody, "description": "A malformed id, query or body"},
    503: {"model": ErrorBody, "description": "The approval store cannot be reached"},
}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: _ERRORS[code] for code in codes}


# -- the routes -------------------------------------------------------------------------------------------


def _store(request: Request) -> ApprovalStore:
    store: ApprovalStore | None = getattr(request.app.state.proxy, "approvals", None)
    if store is None:
        raise ApiError(503, "unavailable", "this proxy has no approval store")
    return store


def _audit(request: Request) -> AuditLog:
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is None:
        raise ApiError(503, "unavailable", "this proxy has no audit log, so it cannot record decisions")
    return audit


def _unavailable(exc: ApprovalStoreUnavailable) -> ApiError:
    return ApiError(503, "unavailable", f"the approval store cannot be reached: {exc}")


def _conflict_message(exc: ApprovalConflict) -> str:
    return f"{exc} (the approval is {exc.approval.state.value})"


async def decide(
    store: ApprovalStore,
    audit: AuditLog,
    who: Reviewer,
    approval_id: str,
    *,
    approve: bool,
    reason: str | None,
) -> Approval:
    """One reviewer decision, as every surface (this API, the reviewer page) takes it: the role and
    reason rules, the own-request rule, the store's compare-and-set, then the audit record.

    Raises :class:`AuthError` (403: a viewer, or the reviewer's own request), :class:`ValueError` (a
    rejection without a reason, a blank or over-long reason), :class:`ApprovalNotFound`,
    :class:`ApprovalConflict` or :class:`ApprovalStoreUnavailable`; nothing is changed when it raises.

    Traced as ``shadowguard.approval.decide`` (approval id, reviewer name, decision; a refusal is
    recorded on the span as its exception; never the call's arguments nor the reason); a decision
    taken is counted in ``shadowguard_approvals_decided_total``.
    """
    attributes = {
        "shadowguard.approval.id": approval_id,
        "shadowguard.reviewer": who.name,
        "shadowguard.approval.decision": "approved" if approve else "rejected",
    }
    with telemetry.span("shadowguard.approval.decide", **attributes):
        require_approver(who)
        if reason is not None and (re.search(_REASON, reason) is None or len(reason) > MAX_REASON):
            raise ValueError(f"a reason must say something, in at most {MAX_REASON} characters")
        if not approve and reason is None:
            raise ValueError("a rejection needs a reason: the agent is told why")
        current = await anyio.to_thread.run_sync(store.get, approval_id)
        check_not_own(who, current.principal)
        decided = await anyio.to_thread.run_sync(
            partial(store.decide, approval_id, approve=approve, reviewer=who.name, reason=reason)
        )
        audit.record_approval_decision(
            approval_id=decided.id,
            session_id=decided.session_id,
            principal=decided.principal,
            tool=decided.tool,
            reviewer=who.name,
            role=who.role,
            decision="approve" if approve else "reject",
            reason=reason,
            arguments_digest=decided.arguments_digest,
            at=decided.decided_at if decided.decided_at is not None else decided.created_at,
        )
    telemetry.record_approval_decided(decided)
    return decided


async def _decide_one(
    request: Request, who: Reviewer, approval_id: str, *, approve: bool, reason: str | None
) -> Approval:
    store, audit = _store(request), _audit(request)
    try:
        return await decide(store, audit, who, approval_id, approve=approve, reason=reason)
    except ApprovalNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from exc
    except ApprovalConflict as exc:
        raise ApiError(409, "conflict", _conflict_message(exc)) from exc
    except ApprovalStoreUnavailable as exc:
        raise _unavailable(exc) from exc
    except ValueError as exc:
        raise ApiError(422, "invalid", str(exc)) from exc


ApprovalId = Annotated[str, Path(pattern=ID_PATTERN, description="The approval's id (``apr_...``).")]
Filter = Annotated[str | None, Query(min_length=1, max_length=256, pattern=_TEXT)]


def approvals_router() -> APIRouter:
    """``/api/approvals``: list, inspect and decide held calls (see the module docstring)."""
    router = APIRouter(prefix=PREFIX, tags=["approvals"], route_class=ApprovalsRoute)

    @router.get("", response_model=ApprovalList, responses=_responses(401, 403, 422, 503))
    async def list_approvals(
        request: Request,
        who: Annotated[Reviewer, Depends(api_reviewer)],
        state: Annotated[
            list[ApprovalState] | None, Query(description="Only these states (repeatable).")
        ] = None,
        session_id: Filter = None,
        principal: Filter = None,
        tool: Filter = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    ) -> ApprovalList:
        """The queue, newest first; ``?state=pending`` for what awaits a decision."""
        store = _store(request)
        query = ApprovalQuery(
            states=state, session_id=session_id, principal=principal, tool=tool, limit=limit, offset=offset
        )
        try:
            items = list(await anyio.to_thread.run_sync(store.list, query))
        except ApprovalStoreUnavailable as exc:
            raise _unavailable(exc) from exc
        return ApprovalList(items=items, count=len(items))

    @router.get(
        "/{approval_id}", response_model=ApprovalDetail, responses=_responses(401, 403, 404, 422, 503)
    )
    async def get_approval(
        request: Request, approval_id: ApprovalId, who: Annotated[Reviewer, Depends(api_reviewer)]
    ) -> ApprovalDetail:
        """One approval: the call, its rehearsed change set, the checks, and its history."""
        store = _store(request)

        def read() -> ApprovalDetail:
            approval = store.get(approval_id)
            return ApprovalDetail(**approval.model_dump(), history=list(store.history(approval_id)))

        try:
            return await anyio.to_thread.run_sync(read)
        except ApprovalNotFound as exc:
            raise ApiError(404, "not_found", str(exc)) from exc
        except ApprovalStoreUnavailable as exc:
            raise _unavailable(exc) from exc

    @router.post(
        "/{approval_id}/approve", response_model=Approval, responses=_responses(401, 403, 404, 409, 422, 503)
    )
    async def approve(
        request: Request,
        approval_id: ApprovalId,
        who: Annotated[Reviewer, Depends(api_approver)],
        body: Annotated[ApproveBody | None, Body()] = None,
    ) -> Approval:
        """Approve a pending request: the held call may then run, once, before the approval expires."""
        reason = body.reason if body is not None else None
        return await _decide_one(request, who, approval_id, approve=True, reason=reason)

    @router.post(
        "/{approval_id}/reject", response_model=Approval, responses=_responses(401, 403, 404, 409, 422, 503)
    )
    async def reject(
        request: Request,
        approval_id: ApprovalId,
        body: RejectBody,
        who: Annotated[Reviewer, Depends(api_approver)],
    ) -> Approval:
        """Reject a pending request; the reason is sent back to the agent."""
        return await _decide_one(request, who, approval_id, approve=False, reason=body.reason)

    @router.post("/bulk", response_model=BulkResults, responses=_responses(401, 403, 422, 503))
    async def bulk(
        request: Request, body: Annotated[BulkBody, Body()], who: Annotated[Reviewer, Depends(api_approver)]
    ) -> BulkResults:
        """Decide several requests the same way; each id gets its own result."""
        store, audit = _store(request), _audit(request)
        approve = body.decision == "approve"
        results: list[BulkResult] = []
        for approval_id in body.ids:
            try:
                decided = await decide(store, audit, who, approval_id, approve=approve, reason=body.reason)
            except AuthError as exc:
                results.append(BulkResult(id=approval_id, status=403, approval=None, error=exc.message))
            except ApprovalNotFound as exc:
                results.append(BulkResult(id=approval_id, status=404, approval=None, error=str(exc)))
            except ApprovalConflict as exc:
                message = _conflict_message(exc)
                results.append(BulkResult(id=approval_id, status=409, approval=exc.approval, error=message))
            except ApprovalStoreUnavailable as exc:
                results.append(BulkResult(id=approval_id, status=503, approval=None, error=str(exc)))
            except ValueError as exc:
                # the reason is the same for every id and is checked before the store is asked
                raise ApiError(422, "invalid", str(exc)) from exc
            else:
                results.append(BulkResult(id=approval_id, status=200, approval=decided, error=None))
        return BulkResults(results=results)

    return router


__all__ = [
    "ID_PATTERN",
    "PREFIX",
    "ApiError",
    "ApprovalDetail",
    "ApprovalList",
    "ApprovalsRoute",
    "ApproveBody",
    "BulkApprove",
    "BulkReject",
    "BulkResult",
    "BulkResults",
    "ErrorBody",
    "ErrorDetail",
    "RejectBody",
    "approvals_router",
    "decide",
    "error_response",
]
