"""Outcome classification (docs/architecture.md#outcomes) and the state-based failure signature, on
hand-made facts."""

from __future__ import annotations

import pytest

from benchmark.campaign.arms import ARMS
from benchmark.campaign.outcomes import classify_outcome, state_signature
from benchmark.campaign.results import DecodeResult, GuardFacts, ParallelToolCall, ToolCall, ToolResponse

GUARD, OFF = ARMS["guard"], ARMS["off"]


def _facts(**kw: object) -> GuardFacts:
    return GuardFacts.model_validate(kw)


@pytest.mark.parametrize(
    ("arm", "passed", "facts", "twin", "expected"),
    [
        (OFF, True, None, None, "success"),
        (OFF, False, None, None, "wrong_commit"),
        (GUARD, True, _facts(intervened=True), True, "success"),
        (GUARD, False, _facts(intervened=True), True, "false_block"),
        # a call failed upstream: the twin met another upstream, so it cannot tell a false block
        (GUARD, False, _facts(intervened=True, failed_calls=1), True, "held"),
        (GUARD, False, _facts(intervened=True, committed=True, committed_changes=2), False, "wrong_commit"),
        (GUARD, False, _facts(intervened=True, committed=True, committed_changes=0), None, "held"),
        (GUARD, False, _facts(intervened=True, commit_refused=True), False, "held"),
        (GUARD, False, _facts(committed=True, committed_changes=0), True, "wrong_commit"),
        (GUARD, False, _facts(committed=True, committed_changes=3), True, "wrong_commit"),
    ],
)
def test_outcome(
    arm: object, passed: bool, facts: GuardFacts | None, twin: bool | None, expected: str
) -> None:
    assert classify_outcome(arm, passed, facts, twin) == expected  # type: ignore[arg-type]


def _row(*messages: object, finish: str = "done") -> DecodeResult:
    return DecodeResult.model_validate({"uid": "a.py:test_x", "messages": messages, "finish_reason": finish})


GOLDEN = {"t": {"added": [{"id": "1"}], "changed": [{"key": "2", "changes": {"s": ["a", "b"]}}]}}
CALL = ParallelToolCall(tool_calls=[ToolCall(name="w", arguments={}, id="c0")])


def test_state_signature_in_order() -> None:
    ok = ToolResponse(name="w", content="{}", id="c0")
    refused = ToolResponse(name="w", content="Refused by the guard", id="c0", metadata={"is_error": True})
    assert state_signature(_row(CALL, refused), GOLDEN, GOLDEN) == "tool_usage"
    assert state_signature(_row(CALL, ok), {}, GOLDEN) == "no_state_change"
    half = {"t": {"added": [{"id": "1"}]}}
    assert state_signature(_row(CALL, ok), half, GOLDEN) == "incomplete_resolution"
    assert state_signature(_row(CALL, ok, finish="agent_limit"), GOLDEN, GOLDEN) == "incomplete_resolution"
    wrong = {"t": {"added": [{"id": "9"}]}}
    assert state_signature(_row(CALL, ok), wrong, GOLDEN) == "wrong_state_update"
    extra = {"t": {**GOLDEN["t"], "removed": [{"id": "3"}]}}
    assert state_signature(_row(CALL, ok), extra, GOLDEN) == "wrong_state_update"
