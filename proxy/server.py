"""The agent-facing MCP server: the upstreams' tools, guarded, plus ``commit`` and ``rollback``.

Built on the SDK's low-level ``Server`` because it relays tools exactly: every visible upstream
tool is listed with the upstream's own input schema, output schema and annotations (only the name
changes when the upstream has a prefix). Reserved (``__reserved__*``) tools and tools the
upstream's policy pack does not allow are neither listed nor callable.

``tools/call`` resolves the agent's session (see :func:`session_identity`) and hands the call to
that session's guard (:class:`proxy.sessions.ProxySession`, which runs
:class:`guard.session.GuardSession` in a worker thread: argument validation, checks, retries). The
outcome is rendered for the agent:

* allowed: the upstream's answer as it gave it (content, structured content, ``isError``), with
  reserved ``_meta`` keys stripped;
* refused, rolled back, held, failed: ``isError: true``, a text that says what happened and what to
  do, and ``structuredContent`` with the verdict, the violations (rule id, message, hint, policy
  source) and the guard's error hint; a failed call keeps the upstream's own content first.

Every result carries ``_meta["shadowguard/outcome"]`` (verdict, call id, session id) so that an
agent or its orchestrator can name the session to ``POST /api/sessions/{id}/commit``; a call bound to
an approval request adds ``approval_id``, ``approval_state`` and ``approval_expires_at`` there and in
the verdict. An agent may name the approval a call runs under in ``_meta["shadowguard/approval"]``
(docs/approvals.md); sending the same call again finds it too. A 2026-07-28 client that declared the
elicitation capability gets a still-pending call as an input request instead ("awaiting reviewer
approval ...; accept to check again"); its answer is never an approval: the retried call only looks
at the approval store again. The round's ``requestState`` (the request id) is sealed by the SDK's
:class:`~mcp.server.request_state.RequestStateBoundary` (a per-process key: retries must reach the
same replica, as every call of a session does).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from guard.approvals.models import ApprovalStore
from guard.errors import ErrorClass, InvalidArguments
from guard.limits import DEFAULT_LIMITS, ArgumentLimits, check_arguments
from guard.models import CommitOutcome, EffectClass, ErrorHint, ToolCall, ToolOutcome, Verdict, Violation
from guard.session import RESERVED_PREFIX
from guard.steps import unknown_tool
from proxy import telemetry
from proxy.commits import INCOMPLETE_RULES, entry_outcome
from proxy.config import ConfigError, ProxyConfig
from proxy.dropin import commit_description, default_session, rollback_description, upstream_label
from proxy.held import APPROVAL_META_KEY, HeldCalls
from proxy.ledger import LedgerEntry
from proxy.registry import SessionLimitError, SessionRegistry
from proxy.relay import Relay, RelayServer
from proxy.sessions import SESSION_META_KEY, ProxySession, RollbackOutcome, lost_message
from proxy.stdio import stdio_streams
from proxy.upstreams import ToolRoute, Upstream, UpstreamError, build_catalog, strip_reserved_meta

logger = logging.getLogger(__name__)

OUTCOME_META_KEY = "shadowguard/outcome"
APPROVAL_STORE_READY = "approval store"
"""The ``/readyz`` entry of the approval queue (no upstream can have this name: it has a space)."""
PRINCIPAL_PREFIX = "principal:"
"""The session of an authenticated principal that names none is ``principal:<name>``; no other
caller may name it (it would squat on the principal's sessionless calls)."""
MAX_SESSION_ID = 256
MAX_APPROVAL_ID = 128
APPROVAL_INPUT_KEY = "shadowguard/approval"
"""The key of the input request a still-pending call asks a 2026-07-28 client to answer."""
_STATE_PREFIX = "approval:"
MAX_INPUT_ROUNDS = 3
"""Input requests one held call makes before it answers with the held result (``approval_pending``):
fewer than the SDK client's limit (10 rounds, then ``InputRequiredRoundsExceededError``)."""
MAX_VIOLATION_ROWS = 5
ROLLBACK_TOOL = "rollback"

Ctx = ServerRequestContext[Any, Any]
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _unicode(text: str) -> bool:
    """No lone surrogates: the id is written to the audit log and answered in JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def principal_of(ctx: Ctx) -> str | None:
    """The authenticated caller of an HTTP request (set by an auth middleware), else None."""
    request = ctx.request
    return None if request is None else principal_of_scope(request.scope)


def principal_of_scope(scope: Mapping[str, Any]) -> str | None:
    """The authenticated caller of an HTTP request's ASGI scope, else None."""
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    token = getattr(user, "access_token", None)
    client_id = getattr(token, "client_id", None)
    if isinstance(client_id, str) and client_id:
        return client_id
    name = getattr(user, "display_name", None)
    return name if isinstance(name, str) and name else None


def session_identity(ctx: Ctx, stdio_session: str) -> tuple[str | None, str | None]:
    """(session id, principal) of a request; see docs/proxy.md "Sessions and protocol eras".

    In order: ``_meta["shadowguard/session"]`` (any era, any transport); on stdio the connection
    (one per proxy process); in the handshake era over HTTP the ``Mcp-Session-Id``; in the
    sessionless 2026-07-28 era over HTTP the authenticated principal. Otherwise the request names no
    session: ``(None, None)``, and the proxy applies the default (docs/adr/008-default-sessions.md).
    A malformed ``_meta["shadowguard/session"]`` is refused with ``-32602``.
    """
    principal = principal_of(ctx)
    meta: Mapping[str, Any] = ctx.meta or {}
    if SESSION_META_KEY in meta:
        value = meta[SESSION_META_KEY]
        if not isinstance(value, str) or not value or len(value) > MAX_SESSION_ID or not _unicode(value):
            raise _invalid(
                f"_meta[{SESSION_META_KEY!r}] must be a non-empty string of valid Unicode "
                f"of at most {MAX_SESSION_ID} characters"
            )
        if value.startswith(PRINCIPAL_PREFIX) and value != f"{PRINCIPAL_PREFIX}{principal}":
            raise _invalid(
                f"_meta[{SESSION_META_KEY!r}]: ids starting with {PRINCIPAL_PREFIX!r} are reserved for the "
                "sessions of authenticated principals (a caller's own is used when it sends no id); "
                "choose another id"
            )
        return value, principal
    if ctx.request is None:
        return stdio_session, principal
    header = ctx.request.headers.get("mcp-session-id")
    if header and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return str(header), principal
    if principal is not None:
        return f"{PRINCIPAL_PREFIX}{principal}", principal
    return None, None


def approval_of(ctx: Ctx) -> str | None:
    """The approval id the agent runs a call under (``_meta["shadowguard/approval"]``), if it names one."""
    meta: Mapping[str, Any] = ctx.meta or {}
    if APPROVAL_META_KEY not in meta:
        return None
    value = meta[APPROVAL_META_KEY]
    if not isinstance(value, str) or not value or len(value) > MAX_APPROVAL_ID or not _unicode(value):
        raise _invalid(
            f"_meta[{APPROVAL_META_KEY!r}] must be an approval request id: a non-empty string "
            f"of at most {MAX_APPROVAL_ID} characters"
        )
    return value


def _approval_in_state(state: str | None) -> tuple[str | None, int]:
    """(request id, rounds asked so far) a retried round carries in its (verified, unsealed)
    ``requestState``: ``approval:<id>:<rounds>``."""
    if state is None or not state.startswith(_STATE_PREFIX):
        return None, 0
    approval_id, _, rounds = state.removeprefix(_STATE_PREFIX).rpartition(":")
    if not approval_id or not rounds.isdigit():
        return None, 0
    return approval_id, int(rounds)


def _asks_input(ctx: Ctx, outcome: ToolOutcome) -> bool:
    """A held call for a client that can answer an input request (2026-07-28, elicitation declared)."""
    if outcome.verdict is not Verdict.HELD or outcome.approval_id is None:
        return False
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def render_input_required(
    outcome: ToolOutcome, session_id: str | None, tool: str, rounds: int = 1
) -> types.InputRequiredResult:
    """A still-pending call as an input request: the client checks back by answering it (any answer).
    ``rounds``: how many times the call has been asked so far, this one included (at most
    ``MAX_INPUT_ROUNDS``: then the held result answers, before the client's own limit of rounds)."""
    assert outcome.approval_id is not None
    expires = outcome.approval_expires_at.isoformat() if outcome.approval_expires_at is not None else "?"
    message = (
        f"{tool} is awaiting reviewer approval {outcome.approval_id} (it expires at {expires}); "
        "nothing was done yet. Accept to check again. Answering does not approve it: only a reviewer can."
    )
    form = types.ElicitRequestFormParams(
        message=message, requested_schema={"type": "object", "properties": {}}
    )
    stamp: dict[str, Any] = {"verdict": outcome.verdict.value, "call_id": outcome.call.id}
    if session_id is not None:
        stamp["session"] = session_id
    stamp.update(_approval_json(outcome))
    return types.InputRequiredResult(
        input_requests={APPROVAL_INPUT_KEY: types.ElicitRequest(params=form)},
        request_state=f"{_STATE_PREFIX}{outcome.approval_id}:{rounds}",
        _meta={OUTCOME_META_KEY: stamp},
    )


# -- rendering ------------------------------------------------------------------------------------


def _violation_json(violation: Violation) -> dict[str, Any]:
    out = violation.model_dump(mode="json", exclude={"rows"}, exclude_none=True)
    if violation.rows:
        out["rows"] = violation.rows[:MAX_VIOLATION_ROWS]
    return out


def _violation_text(violation: Violation) -> str:
    parts = [f"- {violation.message} [rule {violation.rule_id}]"]
    if violation.hint:
        parts.append(f"  What to do: {violation.hint.strip()}")
    if violation.source is not None:
        quote = f': "{violation.source.quote}"' if violation.source.quote else ""
        parts.append(f"  Policy: {violation.source.ref}{quote}")
    return "\n".join(parts)


def _hint_text(hint: ErrorHint) -> str:
    parts = [f"- {hint.message} [{hint.error_class}]", f"  What to do: {hint.next_step}"]
    for problem in hint.fields:
        example = f"; for example {json.dumps(problem.example)}" if problem.example is not None else ""
        where = problem.field or "(the call)"
        parts.append(f"  {where}: {problem.problem}; expected {problem.expected}{example}")
    return "\n".join(parts)


_HEADLINES = {
    Verdict.REFUSED: "Refused by the guard: {tool} did not run and nothing changed.",
    Verdict.ROLLED_BACK: "Rolled back by the guard: {tool} ran but broke a rule, so its changes were undone.",
    Verdict.HELD: "Held by the guard: {tool} needs a human approval; nothing was changed.",
    Verdict.FAILED: "{tool} failed; nothing of it was kept.",
}
_UNKNOWN_HEADLINE = "{tool} failed, and its outcome is unknown: it may have been applied."


def _verdict_json(outcome: ToolOutcome, tool: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "verdict": outcome.verdict.value,
        "tool": tool,
        "effect": outcome.effect.value,
        "violations": [_violation_json(v) for v in outcome.violations],
    }
    if outcome.error_class is not None:
        out["error_class"] = outcome.error_class
    if outcome.hint is not None:
        out["hint"] = outcome.hint.model_dump(mode="json", exclude_none=True)
    if outcome.retries:
        out["retries"] = outcome.retries
    out.update(_approval_json(outcome))
    return out


def _approval_json(outcome: ToolOutcome) -> dict[str, Any]:
    if outcome.approval_id is None:
        return {}
    out: dict[str, Any] = {"approval_id": outcome.approval_id, "approval_state": outcome.approval_state}
    if outcome.approval_expires_at is not None:
        out["approval_expires_at"] = outcome.approval_expires_at.isoformat()
    return out


def render_outcome(
    outcome: ToolOutcome,
    upstream_result: types.CallToolResult | None,
    session_id: str | None,
    *,
    tool: str | None = None,
    applied_by: str | None = None,
    stamp_extra: Mapping[str, Any] | None = None,
) -> types.CallToolResult:
    """The agent's view of a guarded call (see the module docstring); ``tool`` is the exposed name.

    Allowed: the upstream's answer as it came. Anything else: ``isError`` with the guard's verdict in
    text and ``structuredContent``; for a failed call the upstream's own content comes first (its
    error text), then the guard's classification and what to do next.

    ``applied_by``: the journaled upstream an allowed write went to (it is real already: the stamp
    says ``applied: true`` and a line of text says so); None for a transactional one (a write is
    pending until commit: ``applied: false``). ``stamp_extra`` is added to ``_meta["shadowguard/outcome"]``.
    """
    tool = tool or outcome.call.tool
    stamp: dict[str, Any] = {"verdict": outcome.verdict.value, "call_id": outcome.call.id}
    if session_id is not None:
        stamp["session"] = session_id
    stamp.update(stamp_extra or {})
    stamp.update(_approval_json(outcome))
    writes = outcome.effect is not EffectClass.READ
    if outcome.verdict is Verdict.ALLOWED and writes:
        stamp["applied"] = applied_by is not None
    if outcome.verdict is Verdict.ALLOWED and upstream_result is not None:
        meta = strip_reserved_meta(upstream_result.meta)
        meta[OUTCOME_META_KEY] = stamp
        update: dict[str, Any] = {"meta": meta}
        if writes and applied_by is not None:
            update["content"] = [*upstream_result.content, _applied_note(tool, applied_by)]
        return upstream_result.model_copy(update=update)
    if outcome.verdict is Verdict.ALLOWED:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.result or "")],
            _meta={OUTCOME_META_KEY: stamp},
        )
    headline = _UNKNOWN_HEADLINE if outcome.outcome_unknown else _HEADLINES[outcome.verdict]
    lines = [headline.format(tool=tool)]
    lines += [_violation_text(v) for v in outcome.violations]
    if outcome.hint is not None and not outcome.violations:
        lines.append(_hint_text(outcome.hint))
    content: list[types.ContentBlock] = []
    if outcome.verdict is Verdict.FAILED and upstream_result is not None:
        content += upstream_result.content
    content.append(types.TextContent(type="text", text="\n".join(lines)))
    return types.CallToolResult(
        content=content,
        structured_content=_verdict_json(outcome, tool),
        is_error=True,
        _meta={OUTCOME_META_KEY: stamp},
    )


_GONE_RULES = frozenset({"changes_lost", "session_rolled_back", "commit_failed", "partial_commit"})
_TRANSIENT_COMMIT_RULES = frozenset({"approvals_unavailable"})
"""Commit refusals that say nothing about the changes, only that a part the commit needs is away:
the same commit may pass later (issue 15: the approval store going away)."""
"""Refusals after which the refused changes are not pending any more (they were rolled back)."""


def _applied_note(tool: str, upstream: str) -> types.TextContent:
    text = (
        f"[shadowguard] {tool} is already applied: the upstream {upstream!r} cannot hold changes until "
        "commit. A rollback can undo it only through a compensating call its policy names."
    )
    return types.TextContent(type="text", text=text)


def _calls_text(calls: Sequence[ToolCall]) -> str:
    return "; ".join(f"{c.tool} (call {c.id})" for c in calls)


def render_commit(outcome: CommitOutcome, session_id: str | None) -> types.CallToolResult:
    """A commit's answer: the row changes it made durable and, apart, the calls of journaled upstreams
    that were already applied when they ran (``applied_calls``)."""
    stamp: dict[str, Any] = {"verdict": "committed" if outcome.committed else "refused"}
    if session_id is not None:
        stamp["session"] = session_id
    structured: dict[str, Any] = {
        "committed": outcome.committed,
        "changes": len(outcome.changes),
        "applied_calls": len(outcome.applied),
        "violations": [_violation_json(v) for v in outcome.violations],
    }
    if outcome.upstreams is not None:
        structured["upstreams"] = outcome.upstreams
    text = _committed_text(outcome) if outcome.committed else _refused_text(outcome, structured)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=not outcome.committed,
        _meta={OUTCOME_META_KEY: stamp},
    )


def _committed_text(outcome: CommitOutcome) -> str:
    """What a commit that went through says it made final."""
    parts = []
    if outcome.changes:
        parts.append(f"{len(outcome.changes)} row change(s) are now durable")
    if outcome.applied:
        parts.append(
            f"{len(outcome.applied)} call(s) to upstreams that cannot transact were already applied "
            f"when they ran, and are now final (no rollback will compensate them): "
            f"{_calls_text(outcome.applied)}"
        )
    text = (
        "Committed: " + "; ".join(parts) + "."
        if parts
        else "Committed: there were no changes to make durable."
    )
    return text


def _refused_text(outcome: CommitOutcome, structured: dict[str, Any]) -> str:
    """What a commit that did not go through says, by why (``structured`` gets the error class and
    hint of a transient refusal)."""
    if any(v.rule_id in INCOMPLETE_RULES for v in outcome.violations):
        text = "\n".join(
            [
                "Commit incomplete: it was not applied on every upstream (see below which upstreams "
                "applied it, which did not, and which are unknown).",
                *(_violation_text(v) for v in outcome.violations),
            ]
        )
    elif outcome.violations and all(v.rule_id in _TRANSIENT_COMMIT_RULES for v in outcome.violations):
        step = "Nothing changed; call commit again later (or roll back)."
        text = "\n".join(
            [
                "Commit refused for now: nothing was committed; the session's changes are still pending. "
                "A part the commit needs is unavailable (see below): call commit again later.",
                *(_violation_text(v) for v in outcome.violations),
            ]
        )
        structured["error_class"] = ErrorClass.TRANSIENT.value
        structured["hint"] = ErrorHint(
            error_class=ErrorClass.TRANSIENT.value,
            message=outcome.violations[0].message,
            next_step=step,
            retryable=True,
        ).model_dump(mode="json", exclude_none=True)
    elif any(v.rule_id in _GONE_RULES for v in outcome.violations):
        text = "\n".join(
            [
                "Commit refused: nothing was committed, and changes of this session were lost (see below).",
                *(_violation_text(v) for v in outcome.violations),
            ]
        )
    else:
        text = "\n".join(
            [
                "Commit refused: nothing was committed; the session's changes are still pending. "
                "Fix what the rules below name and call commit again (or roll back).",
                *(_violation_text(v) for v in outcome.violations),
            ]
        )
    return text


def render_rollback(outcome: RollbackOutcome | None, session_id: str | None) -> types.CallToolResult:
    """A rollback's answer: pending row changes discarded, applied calls undone by compensations, and
    (then ``rolled_back: false``) the applied calls that stay in effect, each with the id the agent saw."""
    structured: dict[str, Any]
    if outcome is None or outcome.empty:
        text = "Nothing to roll back: this session has no open changes."
        structured = {"rolled_back": True, "changes": 0, "undone_calls": [], "not_undone_calls": []}
    else:
        structured = {
            "rolled_back": outcome.rolled_back,
            "changes": len(outcome.changes),
            "undone_calls": [c.id for c in outcome.undone],
            "not_undone_calls": [c.id for c in outcome.not_undone],
        }
        done = [f"{len(outcome.changes)} pending row change(s) were discarded"]
        if outcome.undone:
            done.append(f"applied call(s) undone by compensating calls: {_calls_text(outcome.undone)}")
        if outcome.rolled_back:
            text = "Rolled back: " + "; ".join(done) + ". Nothing was committed."
        else:
            stays = _calls_text(outcome.not_undone) or "; ".join(outcome.not_reversed)
            text = (
                f"Rollback incomplete: these applied calls remain in effect: {stays}. "
                f"Otherwise: {'; '.join(done)}. Why: {'; '.join(outcome.not_reversed)}"
            )
            structured["not_reversed"] = outcome.not_reversed
    stamp: dict[str, Any] = {"verdict": "rolled_back" if structured["rolled_back"] else "failed"}
    if session_id is not None:
        stamp["session"] = session_id
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=not structured["rolled_back"],
        _meta={OUTCOME_META_KEY: stamp},
    )


def _no_session_named(tool: str) -> types.CallToolResult:
    """commit/rollback from a client that names no session: there is nothing to guess from."""
    message = (
        f"{tool}: this request names no guard session, so there is nothing to {tool}. Every write you "
        f"made without one opened a session and named it in its result's _meta[{OUTCOME_META_KEY!r}] "
        f'"session"; send that id as _meta[{SESSION_META_KEY!r}] with this call (and with the calls of '
        "that session). A session nobody names again is rolled back when its lease or idle timeout runs out."
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)],
        structured_content={"error_class": ErrorClass.INVALID_ARGUMENTS.value, "message": message},
        is_error=True,
        _meta={OUTCOME_META_KEY: {"verdict": "refused"}},
    )


def _unknown_tool(tool: str, arguments: Mapping[str, Any]) -> ToolOutcome:
    """Refused without a session: the name is not one of the listed tools (reserved, hidden, unknown)."""
    return unknown_tool(ToolCall(tool=tool, arguments=dict(arguments)))


def _refused_arguments(
    tool: str,
    arguments: Mapping[str, Any],
    session_id: str | None,
    principal: str | None,
    failure: InvalidArguments,
) -> ToolOutcome:
    """Refused before a session or a worker thread is involved: the arguments pass a limit (their
    digest is still computed for the audit record: bounded by the transport's body limit)."""
    call = ToolCall(session_id=session_id, principal=principal, tool=tool, arguments=dict(arguments))
    return ToolOutcome.of(call, EffectClass.WRITE, Verdict.REFUSED, failure, violations=[])


# -- the proxy --------------------------------------------------------------------------------------


class GuardProxy:
    """The agent-facing server over a set of upstreams and the guard sessions (one per agent session).

    Use :meth:`running` around serving: it connects the upstreams, builds the tool catalog and
    runs the idle-session reaper; leaving it rolls back every open session and closes the
    connections.
    """

    def __init__(
        self,
        upstreams: Sequence[Upstream],
        sessions: SessionRegistry,
        *,
        commit_tool: str | None = "commit",
        rollback_tool: str | None = ROLLBACK_TOOL,
        name: str = "shadowguard",
        instructions: str | None = None,
        limits: ArgumentLimits = DEFAULT_LIMITS,
    ) -> None:
        self.upstreams = list(upstreams)
        self.limits = limits
        self.sessions = sessions
        if commit_tool is not None and commit_tool == rollback_tool:
            raise ConfigError(
                f"commit_tool.name: {commit_tool!r} is the name of the proxy's rollback tool",
                field="commit_tool.name",
            )
        self.commit_tool = commit_tool
        self.rollback_tool = rollback_tool if commit_tool is not None else None
        self.routes: dict[str, ToolRoute] = {}
        self._own_tools = self._proxy_tools()
        self.stdio_session = f"stdio:{uuid.uuid4().hex}"
        self._running = False
        self.server: Server[Any] = RelayServer(
            name,
            version=_version(),
            instructions=instructions,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.relay = Relay(self)
        """Resources, prompts, completion, logging, notifications and the upstreams' requests to
        the agent (proxy/relay.py); registered once the upstreams are connected."""
        self.server.middleware.append(self.relay.middleware)
        self.server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=name)
        )

    @classmethod
    def from_config(
        cls, config: ProxyConfig, sessions: SessionRegistry, *, spare_connections: bool = True
    ) -> GuardProxy:
        """``spare_connections``: keep a connection ready for the next session of each transactional
        upstream (HTTP serves many agents; a stdio proxy serves one and does without)."""
        commit = config.commit_tool.name if config.commit_tool.enabled else None
        upstreams = [Upstream.from_settings(u, keep_spare=spare_connections) for u in config.upstreams]
        return cls(upstreams, sessions, commit_tool=commit, limits=config.limits.arguments())

    def _proxy_tools(self) -> dict[str, types.Tool]:
        """The commit and rollback tools, described for the upstreams as they are (call again once the
        upstreams are started: whether each transacts is known only then)."""
        held = [upstream_label(u) for u in self.upstreams if u.transactional]
        applied = [upstream_label(u) for u in self.upstreams if not u.transactional]
        tools: dict[str, types.Tool] = {}
        if self.commit_tool is not None:
            tools[self.commit_tool] = types.Tool(
                name=self.commit_tool,
                description=commit_description(held, applied),
                input_schema=dict(_EMPTY_SCHEMA),
                annotations=types.ToolAnnotations(
                    read_only_hint=False, destructive_hint=False, idempotent_hint=True
                ),
            )
        if self.rollback_tool is not None:
            tools[self.rollback_tool] = types.Tool(
                name=self.rollback_tool,
                description=rollback_description(held, applied),
                input_schema=dict(_EMPTY_SCHEMA),
                annotations=types.ToolAnnotations(
                    read_only_hint=False, destructive_hint=True, idempotent_hint=True
                ),
            )
        return tools

    # -- lifecycle
    @asynccontextmanager
    async def running(self) -> AsyncIterator[GuardProxy]:
        """Connect the upstreams and serve sessions until the block ends (then roll back all)."""
        if self._running:
            raise RuntimeError("the proxy is already running")
        try:
            async with anyio.create_task_group() as tg:
                try:
                    await self._start_upstreams(tg)
                    self._own_tools = self._proxy_tools()
                    self.rebuild_catalog()
                    await self.relay.install()
                    await tg.start(self.relay.run)
                    await tg.start(self.sessions.run_reaper)
                    self._running = True
                    yield self
                finally:
                    self._running = False
                    with anyio.CancelScope(shield=True):
                        await self.sessions.close_all("shutdown")
                        async with anyio.create_task_group() as closing:
                            for upstream in self.upstreams:
                                closing.start_soon(upstream.aclose)
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The task group wraps whatever left its body; callers expect the error itself.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _start_upstreams(self, task_group: anyio.abc.TaskGroup) -> None:
        """Connect every upstream at once; any that fails fails the start, all failures named."""
        errors: list[UpstreamError] = []

        async def start(upstream: Upstream) -> None:
            try:
                await upstream.start(task_group)
            except UpstreamError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as starting:
            for upstream in self.upstreams:
                starting.start_soon(start, upstream)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise UpstreamError("; ".join(str(e) for e in errors)) from errors[0]

    def rebuild_catalog(self) -> None:
        """The agent-visible tools from the upstreams' current tool lists (UpstreamError on a clash)."""
        self.routes = build_catalog(self.upstreams, reserved=list(self._own_tools))

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def held(self) -> HeldCalls | None:
        """Where held calls wait for reviewers (the sessions' approval queue); None: no queue."""
        return self.sessions.held

    @property
    def approvals(self) -> ApprovalStore | None:
        """The approval store the reviewer API and page read and decide in (None: no queue)."""
        held = self.sessions.held
        return held.store if held is not None else None

    async def readiness(self) -> dict[str, bool]:
        """Upstream name -> ready (connected, tool list loaded), and with an approval queue
        ``"approval store"`` -> it answers a read; for ``/readyz``."""
        ready = {u.name: self._running and u.ready for u in self.upstreams}
        held = self.held
        if held is not None and ready:
            ready[APPROVAL_STORE_READY] = await held.reachable()
        return ready

    async def serve_stdio(self, max_line_bytes: int | None = None) -> None:
        """Serve one agent on stdin/stdout (either era) until stdin closes; its session ends with it.
        A line longer than ``max_line_bytes`` is refused with ``-32600`` (proxy.stdio)."""
        self.relay.sole_agent = True
        try:
            async with stdio_streams(max_line_bytes) as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
        finally:
            with anyio.CancelScope(shield=True):
                await self.sessions.end(self.stdio_session, "closed")

    # -- tools/list
    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        own = self._own_tools.get(name)
        if own is not None:
            return own.input_schema
        route = self.routes.get(name)
        return None if route is None else route.tool.input_schema

    def agent_tools(self) -> list[types.Tool]:
        return [*(route.agent_tool() for route in self.routes.values()), *self._own_tools.values()]

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.agent_tools())

    # -- tools/call
    async def _call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name = params.name
        arguments: dict[str, Any] = dict(params.arguments or {})
        if name == self.commit_tool or name == self.rollback_tool:
            return await self._end_transaction(ctx, name)
        route = self.routes.get(name)
        if route is None or name.startswith(RESERVED_PREFIX):
            refused = _unknown_tool(name, arguments)
            self.sessions.notify_call(refused)
            return render_outcome(refused, None, None)
        session_id, principal = session_identity(ctx, self.stdio_session)
        too_big = check_arguments(name, arguments, self.limits)
        if too_big is not None:
            refused = _refused_arguments(name, arguments, session_id, principal, too_big)
            self.sessions.notify_call(refused)
            return render_outcome(refused, None, session_id, tool=route.exposed)
        stamp_extra: dict[str, Any] = {}
        one_call = False
        if session_id is None:
            session_id, stamp_extra = default_session(route, arguments)
            one_call = stamp_extra.get("sessionless") is True
        try:
            session = self.sessions.open(session_id, principal, leased=session_id != self.stdio_session)
        except SessionLimitError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from exc
        in_state, rounds = _approval_in_state(params.request_state)
        approval_id = approval_of(ctx) or in_state
        meta = strip_reserved_meta(ctx.meta)
        try:
            with telemetry.span(
                "shadowguard.tool_call", tool=name, upstream=route.upstream.name, session=session_id
            ):
                result = await session.call(
                    route.upstream, route.name, arguments, meta, approval_id=approval_id
                )
        finally:
            if one_call:
                with anyio.CancelScope(shield=True):
                    await self.sessions.end(session_id, "read", principal=principal, record_empty=False)
        shown = None if one_call else session_id
        if _asks_input(ctx, result.outcome) and not one_call and rounds < MAX_INPUT_ROUNDS:
            return render_input_required(result.outcome, shown, route.exposed, rounds + 1)
        applied_by = None if route.upstream.transactional else route.upstream.name
        return render_outcome(
            result.outcome,
            result.upstream_result,
            shown,
            tool=route.exposed,
            applied_by=applied_by,
            stamp_extra=stamp_extra,
        )

    async def _end_transaction(self, ctx: Ctx, name: str) -> types.CallToolResult:
        """The commit or rollback tool, on the session the request names."""
        session_id, principal = session_identity(ctx, self.stdio_session)
        if session_id is None:
            return _no_session_named(name)
        session = self._existing(session_id, principal)
        if name == self.commit_tool:
            with telemetry.span("shadowguard.commit", session=session_id):
                if session is not None:
                    outcome = await session.commit()
                else:
                    lost = await self.sessions.take_lost(session_id, principal)
                    outcome = self._commit_without_session(session_id, principal, lost)
                    self.sessions.notify_commit(session_id, outcome)
            return render_commit(outcome, session_id)
        if session is None:
            await self.sessions.take_lost(session_id, principal)
            return render_rollback(None, session_id)
        pending = session.in_transaction
        rollback = await session.rollback("agent")
        return render_rollback(rollback if pending else None, session_id)

    def _commit_without_session(
        self, session_id: str, principal: str | None, entry: LedgerEntry | None
    ) -> CommitOutcome:
        """Nothing is open under this id: fine, unless the session was rolled back behind the agent
        (``entry``: the ledger's, e.g. the proxy restarted since the session wrote), or a commit of
        it did not finish (its commit record says what applied)."""
        recorded = entry_outcome(entry) if entry is not None else None
        if recorded is not None:
            return recorded
        lost = entry.state if entry is not None else None
        ended = self.sessions.ended(session_id, principal)
        if lost is not None and ended not in ("idle", "closed"):
            return CommitOutcome(
                committed=False,
                violations=[
                    Violation(
                        rule_id="changes_lost",
                        message=f"Not committed: {lost_message(lost)}",
                        hint="Redo the changes if they are still needed, then commit.",
                    )
                ],
            )
        if ended is None or ended in ("shutdown", "read"):
            return CommitOutcome(committed=True)
        why = {
            "idle": "it was idle for longer than the idle timeout",
            "lease": "its client sent no request within the session lease (sessions.lease_s)",
            "closed": "its connection was closed",
        }[ended]
        return CommitOutcome(
            committed=False,
            violations=[
                Violation(
                    rule_id="session_rolled_back",
                    message=f"Nothing to commit: this session was rolled back because {why}.",
                    hint="Redo the changes, then commit.",
                )
            ],
        )

    def _existing(self, session_id: str, principal: str | None) -> ProxySession | None:
        """The caller's open session with this id; another principal's is answered as no session at all."""
        return self.sessions.get(session_id, principal)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shadowguard")
    except PackageNotFoundError:
        return "0"


__all__ = [
    "OUTCOME_META_KEY",
    "GuardProxy",
    "UpstreamError",
    "approval_of",
    "principal_of",
    "principal_of_scope",
    "render_commit",
    "render_input_required",
    "render_outcome",
    "render_rollback",
    "session_identity",
]
