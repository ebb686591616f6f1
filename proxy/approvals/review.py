"""The reviewer page ``/review``: a server-rendered queue, each request's rehearsed diff, approve/reject.

Routes (HTML; no JavaScript, no build step)::

    GET  /review/login             the token form          POST /review/login   token -> cookie, 303 /review
    POST /review/logout            forget the cookie       GET  /review         the queue (?state=, filters)
    GET  /review/{id}              one request             POST /review/{id}/approve | /reject   (forms)

Who: the same reviewer tokens as the REST API (:mod:`proxy.approvals.auth`). Logging in stores the token
in the ``REVIEW_COOKIE`` cookie (HttpOnly, SameSite=Strict, path ``/review``); a page request without a
valid one is redirected to the login form. Every form post carries a CSRF token, an HMAC keyed with the
reviewer's own token over the approval id (or ``logout``): another site can neither read nor compute it,
and no server-side secret or session table is needed, so any replica accepts a form another rendered.

What callers may rely on: a decision goes through :func:`proxy.approvals.api.decide`, the REST API's
code path (roles, own-request rule, reason rules, audit), so the page cannot decide anything the API
would refuse. Refusals render a page saying why and change nothing: 403 (bad CSRF token, viewer, own
request), 404 (unknown id), 409 (already decided, expired), 400 (reject without a reason, reason too
long). Everything shown is escaped (Jinja2 autoescape); responses carry a strict Content-Security-Policy.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import anyio.to_thread
import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException
from starlette.templating import Jinja2Templates

from guard.approvals import (
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalState,
    ApprovalStore,
    utcnow,
)
from guard.approvals.models import ApprovalStoreUnavailable
from proxy.approvals.api import decide
from proxy.approvals.auth import (
    REVIEW_COOKIE,
    AuthError,
    Reviewer,
    authenticate_reviewer,
    bearer_token,
    reviewer_for,
)
from proxy.approvals.diff import change_diffs
from proxy.audit import AuditLog
from proxy.config import ProxyConfig

PREFIX = "/review"
MAX_REASON = 2000
QUEUE_PAGE = 100
"""Rows per page of a state's queue (the default view shows every pending request, up to ``PENDING_MAX``)."""
PENDING_MAX = 500
RECENT_DECIDED = 50

_HERE = Path(__file__).parent
_CSS = (_HERE / "static" / "review.css").read_bytes()
_CSS_URL = f"{PREFIX}/static/review.css?v={hashlib.sha256(_CSS).hexdigest()[:12]}"
_templates = Jinja2Templates(
    env=jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
)
_NEXT = re.compile(r"^/review(/[A-Za-z0-9_-]+)?$")
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_FLASHES: Mapping[str, tuple[Literal["ok", "info"], str]] = {
    "approved": ("ok", "Approved. The held call runs when the agent's session picks it up."),
    "rejected": ("info", "Rejected. The agent receives your reason."),
}
_STATES = [s.value for s in ApprovalState]


# -- auth and CSRF ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Login:
    who: Reviewer
    token: str


def csrf_token(token: str, purpose: str) -> str:
    """HMAC-SHA256 keyed with the reviewer's token over what the form does (``decide:<id>``, ``logout``)."""
    return hmac.new(token.encode(), f"shadowguard-review:{purpose}".encode(), hashlib.sha256).hexdigest()


def _csrf_ok(login: _Login, purpose: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token(login.token, purpose), presented)


def _presented_token(request: Request) -> str | None:
    return bearer_token(request.headers) or request.cookies.get(REVIEW_COOKIE) or None


def _login(request: Request) -> _Login:
    """The logged-in reviewer, or :class:`AuthError` (401: none or unknown; 403: no reviewers, agent)."""
    config: ProxyConfig = request.app.state.config
    token = _presented_token(request)
    who = reviewer_for(token, config.auth)
    if token is None:
        raise AuthError(401, "unauthorized", "log in with a reviewer token")
    return _Login(who, token)


def _store(request: Request) -> ApprovalStore:
    store: ApprovalStore | None = getattr(request.app.state.proxy, "approvals", None)
    if store is None:
        raise ApprovalStoreUnavailable("this proxy has no approval store")
    return store


# -- rendering ----------------------------------------------------------------------------------------


def _secure(response: Response) -> Response:
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _page(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    login: _Login | None,
    status_code: int = 200,
) -> Response:
    base = {
        "static_css": _CSS_URL,
        "who": login.who if login else None,
        "logout_csrf": csrf_token(login.token, "logout") if login else "",
        "flash": None,
        "error": None,
    }
    response = _templates.TemplateResponse(request, template, {**base, **context}, status_code=status_code)
    return _secure(response)


def _message(request: Request, status_code: int, heading: str, text: str, login: _Login | None) -> Response:
    return _page(
        request, "message.html", {"heading": heading, "text": text}, login=login, status_code=status_code
    )


def _refused(request: Request, exc: AuthError) -> Response:
    """401: to the login form (forgetting a stale cookie); 403: a page that says why."""
    if exc.status_code == 401:
        target = request.url.path if request.method == "GET" and _NEXT.match(request.url.path) else PREFIX
        response: Response = RedirectResponse(
            f"{PREFIX}/login?{urlencode({'next': target})}", status_code=303
        )
        if REVIEW_COOKIE in request.cookies:
            response.delete_cookie(REVIEW_COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return _secure(response)
    return _message(request, exc.status_code, "Not allowed", exc.message, None)


def _when(at: datetime) -> str:
    return (
        at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at.utcoffset() is not None else at.isoformat()
    )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def _expires_in(approval: Approval, now: datetime) -> str:
    """Time left for what still waits on the clock (a pending decision, an approved call not yet run)."""
    waiting = approval.state is ApprovalState.PENDING or (
        approval.state is ApprovalState.APPROVED and approval.used_at is None
    )
    if not waiting:
        return "—"
    left = (approval.expires_at - now).total_seconds()
    return _duration(left) if left > 0 else "due"


def _expiry(approval: Approval, now: datetime) -> str:
    at = _when(approval.expires_at)
    if approval.state is ApprovalState.PENDING:
        left = (approval.expires_at - now).total_seconds()
        return f"expires {at} (in {_duration(left)})" if left > 0 else f"expiry due {at}"
    if approval.state is ApprovalState.APPROVED:
        return f"ran at {_when(approval.used_at)}" if approval.used_at else f"approved; must run before {at}"
    return f"expiry {at}"


def _why_not(approval: Approval, who: Reviewer) -> str | None:
    """Why this reviewer cannot decide this request now (None: they can)."""
    if approval.state is not ApprovalState.PENDING:
        if approval.decided_by:
            when = f" at {_when(approval.decided_at)}" if approval.decided_at else ""
            return f"Already {approval.state.value} by {approval.decided_by}{when}; nothing left to decide."
        return f"This request is {approval.state.value}; nothing left to decide."
    if not who.can_decide:
        return f"You ({who.name}) are a viewer: you can read the queue but not decide."
    if approval.principal is not None and approval.principal == who.name:
        return "This request was made under your own name; another approver must decide it."
    return None


def _detail_page(
    request: Request,
    login: _Login,
    approval: Approval,
    history: Sequence[ApprovalEvent],
    *,
    status_code: int = 200,
    flash: str | None = None,
    error: str | None = None,
) -> Response:
    now = utcnow()
    why_not = _why_not(approval, login.who)
    path = f"{PREFIX}/{approval.id}"
    decide = {
        "allowed": why_not is None,
        "why_not": why_not,
        "csrf": csrf_token(login.token, f"decide:{approval.id}"),
        "approve_url": f"{path}/approve",
        "reject_url": f"{path}/reject",
    }
    shown_flash = None
    if flash is not None and flash in _FLASHES:
        kind, text = _FLASHES[flash]
        shown_flash = {"kind": kind, "text": text}
    context = {
        "a": approval,
        "arguments": json.dumps(
            approval.arguments, indent=2, sort_keys=True, default=str, ensure_ascii=False
        ),
        "created": _when(approval.created_at),
        "expiry": _expiry(approval, now),
        "diffs": change_diffs(approval.preview),
        "recorded": len(approval.preview),
        "history": [
            {"at": _when(e.at), "action": e.action, "actor": e.actor, "reason": e.reason} for e in history
        ],
        "decide": decide,
        "flash": shown_flash,
        "error": error,
    }
    return _page(request, "detail.html", context, login=login, status_code=status_code)


# -- the queue ----------------------------------------------------------------------------------------

_FILTERS = (("principal", "principal"), ("tool", "tool"), ("session_id", "session"))


def _queue_url(state: str | None, filters: Mapping[str, str], offset: int = 0) -> str:
    params = {k: v for k, v in filters.items() if v}
    if state:
        params["state"] = state
    if offset:
        params["offset"] = str(offset)
    return f"{PREFIX}?{urlencode(params)}" if params else PREFIX


def _queue_row(approval: Approval, filters: Mapping[str, str], now: datetime) -> dict[str, Any]:
    return {
        "href": f"{PREFIX}/{approval.id}",
        "created": _when(approval.created_at),
        "tool": approval.tool,
        "principal": approval.principal,
        "principal_href": _queue_url(None, {**filters, "principal": approval.principal or ""}),
        "session": approval.session_id,
        "session_href": _queue_url(None, {**filters, "session_id": approval.session_id}),
        "rehearsed": approval.rehearsed,
        "rows_changed": len(approval.preview.net()),
        "expires_in": _expires_in(approval, now),
        "state": approval.state.value,
    }


def _query(
    states: list[ApprovalState], filters: Mapping[str, str], *, limit: int, offset: int = 0
) -> ApprovalQuery:
    return ApprovalQuery(
        states=states,
        principal=filters.get("principal"),
        tool=filters.get("tool"),
        session_id=filters.get("session_id"),
        limit=limit,
        offset=offset,
    )


def _list_queue(
    store: ApprovalStore, state: str | None, filters: Mapping[str, str], offset: int
) -> tuple[list[Approval], bool, str | None]:
    """The rows to show, whether an older page exists, and a note on what was left out."""
    if state:
        found = list(store.list(_query([ApprovalState(state)], filters, limit=QUEUE_PAGE + 1, offset=offset)))
        return found[:QUEUE_PAGE], len(found) > QUEUE_PAGE, None
    pending = list(store.list(_query([ApprovalState.PENDING], filters, limit=PENDING_MAX)))
    decided: list[ApprovalState] = [s for s in ApprovalState if s is not ApprovalState.PENDING]
    recent = list(store.list(_query(decided, filters, limit=RECENT_DECIDED)))
    note = None
    if len(pending) == PENDING_MAX:
        note = f"Showing the {PENDING_MAX} newest pending requests; filter by tool, principal or session."
    elif len(recent) == RECENT_DECIDED:
        note = f"Showing the {RECENT_DECIDED} most recent decided requests; pick a state to see all."
    return pending + recent, False, note


def _problem(who: Reviewer, approve: bool, reason: str | None) -> tuple[int, str] | None:
    """What is wrong with a decision before the store is asked (the API's rules: role, reason)."""
    if not who.can_decide:
        return (403, f"You ({who.name}) are a viewer and may not decide approvals.")
    if not approve and reason is None:
        return (400, "A rejection needs a reason: the agent is told why.")
    if reason is not None and len(reason) > MAX_REASON:
        return (400, f"The reason is {len(reason)} characters long; at most {MAX_REASON} are allowed.")
    return None


async def _attempt(
    request: Request, who: Reviewer, approval_id: str, *, approve: bool, reason: str | None
) -> tuple[int, str] | None:
    """Decide through the REST API's code path; None when decided, else (status, why) with nothing changed.

    Raises :class:`ApprovalNotFound` and :class:`ApprovalStoreUnavailable` (the page has no request to show).
    """
    store = _store(request)
    problem = _problem(who, approve, reason)
    if problem is not None:
        await anyio.to_thread.run_sync(store.get, approval_id)
        return problem
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is None:
        raise ApprovalStoreUnavailable("this proxy has no audit log, so it cannot record decisions")
    try:
        await decide(store, audit, who, approval_id, approve=approve, reason=reason)
    except AuthError as exc:
        return (exc.status_code, exc.message)
    except ApprovalConflict as exc:
        return (409, f"Nothing was changed: {exc} (the request is {exc.approval.state.value}).")
    return None


# -- the router ---------------------------------------------------------------------------------------


async def _form(request: Request) -> FormData | None:
    """The posted form, or None if the body is not a form the page could have sent."""
    try:
        return await request.form(max_files=0, max_fields=10)
    except MultiPartException:
        return None


def _field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def review_router() -> APIRouter:
    """The ``/review`` pages; the app must have ``state.proxy.approvals`` and ``state.config``."""
    router = APIRouter(prefix=PREFIX, include_in_schema=False)

    @router.get("/static/review.css")
    async def stylesheet() -> Response:
        return Response(
            _CSS, media_type="text/css", headers={"Cache-Control": "public, max-age=86400, immutable"}
        )

    @router.get("/login")
    async def login_form(request: Request, next: str = PREFIX) -> Response:
        config: ProxyConfig = request.app.state.config
        if not config.auth.reviewers:
            return _message(
                request, 403, "Review is switched off", "No reviewers are configured (auth.reviewers).", None
            )
        target = next if _NEXT.match(next) else PREFIX
        return _page(request, "login.html", {"next": target}, login=None)

    @router.post("/login")
    async def login(request: Request) -> Response:
        config: ProxyConfig = request.app.state.config
        if not config.auth.reviewers:
            return _message(
                request, 403, "Review is switched off", "No reviewers are configured (auth.reviewers).", None
            )
        form = await _form(request)
        token = (_field(form, "token") or "").strip() if form is not None else ""
        target = (_field(form, "next") or PREFIX) if form is not None else PREFIX
        target = target if _NEXT.match(target) else PREFIX
        if authenticate_reviewer(token or None, config.auth) is None:
            error = "That token is not a reviewer's token." if token else "Enter your reviewer token."
            return _page(request, "login.html", {"next": target, "error": error}, login=None, status_code=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            REVIEW_COOKIE,
            token,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return _secure(response)

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        try:
            who = _login(request)
        except AuthError as exc:
            return _refused(request, exc)
        form = await _form(request)
        if form is None or not _csrf_ok(who, "logout", _field(form, "csrf")):
            return _message(request, 403, "Not allowed", "The form's CSRF token is missing or wrong.", who)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(REVIEW_COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return _secure(response)

    @router.get("")
    async def queue(
        request: Request,
        state: str = "",
        principal: str = "",
        tool: str = "",
        session_id: str = "",
        offset: str = "0",
    ) -> Response:
        try:
            who = _login(request)
        except AuthError as exc:
            return _refused(request, exc)
        if state and state not in _STATES:
            return _message(
                request,
                400,
                "Unknown state",
                f"state must be one of {', '.join(_STATES)}; got {state!r}.",
                who,
            )
        start = int(offset) if re.fullmatch(r"[0-9]{1,7}", offset) else None
        if start is None:
            return _message(
                request, 400, "Bad offset", "offset must be a whole number below 10,000,000.", who
            )
        filters = {"principal": principal, "tool": tool, "session_id": session_id}
        given = {k: v for k, v in filters.items() if v}
        try:
            rows, more, note = await anyio.to_thread.run_sync(
                _list_queue, _store(request), state, given, start
            )
        except ApprovalStoreUnavailable as exc:
            return _message(request, 503, "Approval store unavailable", str(exc), who)
        now = utcnow()
        tabs = [
            {"label": "All, pending first", "href": _queue_url(None, given), "current": not state},
            *(
                {"label": s.capitalize(), "href": _queue_url(s, given), "current": state == s}
                for s in _STATES
            ),
        ]
        context = {
            "tabs": tabs,
            "state": state,
            "rows": [_queue_row(a, given, now) for a in rows],
            "filters": [{"name": label, "value": given[key]} for key, label in _FILTERS if key in given],
            "clear_filters": _queue_url(state or None, {}),
            "older": _queue_url(state, given, start + QUEUE_PAGE) if more else None,
            "note": note,
        }
        return _page(request, "queue.html", context, login=who)

    async def _load(request: Request, approval_id: str) -> tuple[Approval, Sequence[ApprovalEvent]]:
        store = _store(request)

        def read() -> tuple[Approval, Sequence[ApprovalEvent]]:
            return store.get(approval_id), store.history(approval_id)

        return await anyio.to_thread.run_sync(read)

    @router.get("/{approval_id}")
    async def detail(request: Request, approval_id: str, done: str = "") -> Response:
        try:
            who = _login(request)
        except AuthError as exc:
            return _refused(request, exc)
        try:
            approval, history = await _load(request, approval_id)
        except ApprovalNotFound:
            return _message(request, 404, "Not found", f"There is no approval request {approval_id!r}.", who)
        except ApprovalStoreUnavailable as exc:
            return _message(request, 503, "Approval store unavailable", str(exc), who)
        return _detail_page(request, who, approval, history, flash=done or None)

    async def _decide(request: Request, approval_id: str, approve: bool) -> Response:
        try:
            who = _login(request)
        except AuthError as exc:
            return _refused(request, exc)
        form = await _form(request)
        if form is None or not _csrf_ok(who, f"decide:{approval_id}", _field(form, "csrf")):
            text = "The form's CSRF token is missing or wrong; reload the page and try again."
            return _message(request, 403, "Not allowed", text, who)
        reason = (_field(form, "reason") or "").strip() or None
        try:
            refused = await _attempt(request, who.who, approval_id, approve=approve, reason=reason)
            if refused is None:
                done = urlencode({"done": "approved" if approve else "rejected"})
                return _secure(RedirectResponse(f"{PREFIX}/{approval_id}?{done}", status_code=303))
            approval, history = await _load(request, approval_id)
        except ApprovalNotFound:
            return _message(request, 404, "Not found", f"There is no approval request {approval_id!r}.", who)
        except ApprovalStoreUnavailable as exc:
            return _message(request, 503, "Approval store unavailable", str(exc), who)
        status, text = refused
        return _detail_page(request, who, approval, history, status_code=status, error=text)

    @router.post("/{approval_id}/approve")
    async def approve(request: Request, approval_id: str) -> Response:
        return await _decide(request, approval_id, approve=True)

    @router.post("/{approval_id}/reject")
    async def reject(request: Request, approval_id: str) -> Response:
        return await _decide(request, approval_id, approve=False)

    return router


__all__ = ["csrf_token", "review_router"]
