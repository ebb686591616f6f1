"""Failure signatures for rows that do not carry one (plain ``tb infer`` rows, or ours left unset).

ThinkingBox assigns no signature (docs/benchmark.md#failure-signatures). Our campaign rows carry
``metadata.signature``, set by the runner from the full rules. A row without one only has what ``tb infer``
records by default, so this module applies the subset of those rules that needs nothing else, in this order:

1. ``harness_error`` — the attempt is an error as ``tb agg`` counts one (``is_system_error``, no test
   result, or a test error); counted in ``n`` but kept out of the failure categories.
2. ``tool_usage`` — tool error evidence in ``messages``: a ``ToolCall`` with ``metadata.error`` set
   (also inside a ``ParallelToolCall``), or a ``ToolResponse`` whose content starts with ``Error:``
   (ThinkingBox's own text for an unknown tool, after leading whitespace) or is a JSON object with a
   top-level ``"error"`` key (the benchmark servers' in-band tool errors), or one our campaign marked
   ``metadata.is_error`` (an error the agent was answered with, e.g. a guard refusal).
3. ``incomplete_resolution`` — ``finish_reason`` is ``user_limit``, ``agent_limit`` or ``no_user_llm``
   (the conversation was cut off, not ended by the agent).
4. ``unclassified`` — anything else: telling *no state change* from *wrong state update* needs the
   effects (``--dump testcontext``), which a default row does not have.

Rule 2 before rule 3 is the brief's order; the harness sketch evaluates error evidence first too.
"""

from __future__ import annotations

import json

from benchmark.campaign.results import (
    DecodeResult,
    ParallelToolCall,
    ToolCall,
    ToolResponse,
    facts_of,
    passed,
)

__all__ = ["CUT_OFF", "failure_signature", "is_error", "tool_error_evidence"]

CUT_OFF = frozenset({"user_limit", "agent_limit", "no_user_llm"})
"""Finish reasons that mean the conversation was stopped by a limit, not concluded."""


def is_error(row: DecodeResult) -> bool:
    """An error as ``tb agg`` classifies one: a system error, a missing test result, or a test error."""
    return row.is_system_error or row.test_result is None or row.test_result.is_system_error


def _error_response(content: str) -> bool:
    text = content.lstrip()
    if text.startswith("Error:"):
        return True
    if not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False  # not JSON: a tool's plain-text reply, which is no error evidence
    return isinstance(value, dict) and "error" in value


def _call_errored(call: ToolCall) -> bool:
    return bool(call.metadata.get("error"))


def tool_error_evidence(row: DecodeResult) -> bool:
    """Whether any message shows a tool error (rule 2 above)."""
    for message in row.messages:
        if isinstance(message, ToolResponse) and (
            message.metadata.get("is_error") is True or _error_response(message.content)
        ):
            return True
        if isinstance(message, ToolCall) and _call_errored(message):
            return True
        if isinstance(message, ParallelToolCall) and any(_call_errored(c) for c in message.tool_calls):
            return True
    return False


def failure_signature(row: DecodeResult) -> str | None:
    """The row's failure signature: None when it passed (:func:`~benchmark.campaign.results.passed`);
    ``metadata.signature`` when the row carries our facts and a signature; otherwise the rules of this
    module's docstring. Raises pydantic's ``ValidationError`` when the row's facts do not validate."""
    if passed(row):
        return None
    facts = facts_of(row)
    if facts is not None and facts.signature:
        return facts.signature
    if is_error(row) or (facts is not None and facts.outcome is None):
        return "harness_error"
    if tool_error_evidence(row):
        return "tool_usage"
    if row.finish_reason in CUT_OFF:
        return "incomplete_resolution"
    return "unclassified"
