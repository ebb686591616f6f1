"""How a guarded call, a commit and a rollback are answered to the agent (``CallToolResult`` and,
for a held call a 2026-07-28 client can be asked about, ``InputRequiredResult``).

See :mod:`proxy.server` for what each verdict looks like. Every result carries
``_meta["shadowguard/outcome"]`` (:data:`OUTCOME_META_KEY`). These functions are pure: the same
outcome always renders the same result, whichever transport (SDK handler or the lean relay) asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import mcp.types as types

from guard.errors import ErrorClass
from guard.models import CommitOutcome, EffectClass, ErrorHint, ToolCall, ToolOutcome, Verdict, Violation
from proxy.commits import INCOMPLETE_RULES
from proxy.sessions import SESSION_META_KEY, RollbackOutcome
from proxy.upstreams import strip_reserved_meta

OUTCOME_META_KEY = "shadowguard/outcome"
APPROVAL_INPUT_KEY = "shadowguard/approval"
"""The key of the input request a still-pending call asks a 2026-07-28 client to answer."""
APPROVAL_STATE_PREFIX = "approval:"
"""A guard input round's ``requestState`` is ``approval:<request id>:<rounds asked>``."""
MAX_INPUT_ROUNDS = 3
"""Input requests one held call makes before it answers with the held result (``approval_pending``):
fewer than the SDK client's limit (10 rounds, then ``InputRequiredRoundsExceededError``)."""
MAX_VIOLATION_ROWS = 5


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
        request_state=f"{APPROVAL_STATE_PREFIX}{outcome.approval_id}:{rounds}",
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


def no_session_named(tool: str) -> types.CallToolResult:
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


__all__ = [
    "APPROVAL_INPUT_KEY",
    "APPROVAL_STATE_PREFIX",
    "MAX_INPUT_ROUNDS",
    "OUTCOME_META_KEY",
    "no_session_named",
    "render_commit",
    "render_input_required",
    "render_outcome",
    "render_rollback",
]
