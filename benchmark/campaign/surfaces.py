"""The tool surfaces a campaign's agent calls: straight to the tools (``off``) or through the guard.

:class:`GuardedTools` answers each call with the text the proxy would send a production agent
(``proxy.server.render_outcome``), and plays the campaign's reviewer for held calls.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from benchmark.campaign.agents import Feedback, ToolReply
from benchmark.guarded import is_error_text
from guard.approvals.gate import ApprovalGate
from guard.models import ToolOutcome, Verdict
from guard.session import Executor, GuardSession, ToolResult

Reviewer = Literal["approve-matching", "reject-all", "none"]
REVIEWERS: tuple[Reviewer, ...] = ("approve-matching", "reject-all", "none")


@dataclass
class Clocked:
    """An executor that accounts the wall time spent in the tools (to tell the guard's own time)."""

    execute: Executor
    seconds: float = 0.0

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        started = time.perf_counter()
        try:
            return self.execute(tool, arguments)
        finally:
            self.seconds += time.perf_counter() - started


class DirectTools:
    """``off``: every call goes to the tools and is real at once. A transport failure (an injected
    fault) reaches the agent as an error text, as a plain MCP client would show it."""

    def __init__(self, execute: Executor) -> None:
        self.execute = execute

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolReply:
        try:
            result = self.execute(name, arguments)
        except Exception as exc:  # the plain passthrough has no recovery: the agent reads the error
            return ToolReply(f"Error: {type(exc).__name__}: {exc}", is_error=True, feedback="raw_error")
        return ToolReply(
            result.text, is_error=result.is_error, feedback="raw_error" if result.is_error else None
        )


class GuardedTools:
    """A guarded arm: each call through the GuardSession, answered as the proxy answers it.

    A held call meets the campaign's reviewer at once, as the proxy's ``approvals.wait_s`` would let a
    waiting call meet a person: ``approve-matching`` approves (the gate runs the call again and keeps it
    only if its change set equals the preview), ``reject-all`` rejects, ``none`` leaves it pending.
    """

    def __init__(self, session: GuardSession, reviewer: Reviewer, gate: ApprovalGate | None) -> None:
        self.session = session
        self.reviewer = reviewer
        self.gate = gate
        self.decisions: Counter[str] = Counter()
        self.final: list[ToolOutcome] = []
        """The outcome the agent was answered with, per call (a held call's approved re-run, if any)."""

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolReply:
        from proxy.server import render_outcome

        outcome = self.session.call(name, arguments)
        if (
            outcome.verdict is Verdict.HELD
            and self.gate is not None
            and outcome.approval_id is not None
            and self.reviewer != "none"
        ):
            approve = self.reviewer == "approve-matching"
            self.gate.store.decide(
                outcome.approval_id,
                approve=approve,
                reviewer="campaign-reviewer",
                reason=f"campaign reviewer policy {self.reviewer}",
            )
            self.decisions["approved" if approve else "rejected"] += 1
            outcome = self.session.call(name, arguments, approval_id=outcome.approval_id)
        self.final.append(outcome)
        rendered = render_outcome(outcome, None, self.session.session_id)
        text = "\n".join(block.text for block in rendered.content if block.type == "text")
        is_error = outcome.verdict is not Verdict.ALLOWED or (
            outcome.result is not None and is_error_text(outcome.result)
        )
        return ToolReply(text, is_error=is_error, guard=outcome.verdict.value, feedback=feedback_of(outcome))


def feedback_of(outcome: ToolOutcome) -> Feedback | None:
    """The kind of feedback a guarded call's answer is, read from the guard's real outcome (what
    ``render_outcome`` shows the agent): held; refused or rolled back by a violation that cites a
    policy; any other outcome that is not allowed carries the guard's classification and next step (a
    classified hint — in every guarded arm, whatever its levers: the GuardSession classifies every
    failure); an allowed call whose result is still an error is the tool's error as it came (raw)."""
    if outcome.verdict is Verdict.HELD:
        return "held"
    if outcome.verdict is Verdict.ALLOWED:
        return "raw_error" if outcome.result is not None and is_error_text(outcome.result) else None
    if outcome.verdict in (Verdict.REFUSED, Verdict.ROLLED_BACK) and any(
        v.source is not None for v in outcome.violations
    ):
        return "policy_violation"
    return "classified_hint" if outcome.hint is not None or outcome.violations else "raw_error"
