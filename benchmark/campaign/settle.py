"""How a guarded attempt ends, and what its guard did, as :class:`~benchmark.campaign.results.GuardFacts`.

After the agent's run the orchestrator commits the session when the agent asked for it (the at-commit
checks decide) and rolls it back otherwise. An agent that reacts to a refused commit
(``after_commit_refused``, given the text the proxy would render) gets one more commit. The facts then
count the session's verdicts, violations (with their phase), retries and approvals, and name the first
intervention.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmark.campaign.agents import Agent, AgentView, Transcript
from benchmark.campaign.outcomes import phase_of
from benchmark.campaign.results import GuardFacts
from benchmark.campaign.surfaces import GuardedTools
from guard.approvals.gate import ApprovalGate
from guard.models import Verdict
from guard.session import GuardSession


def settle(
    session: GuardSession,
    tools: GuardedTools,
    gate: ApprovalGate | None,
    agent: Agent,
    view: AgentView,
    transcript: Transcript,
) -> GuardFacts:
    """Commit or roll back ``session`` after the agent's ``transcript``; the facts of what the guard did."""
    facts = GuardFacts()
    commit_violations: list[dict[str, Any]] = []
    refused_once = False
    if transcript.commit:
        commit_violations, refused_once = _commit(session, agent, view, transcript, facts)
    else:
        session.rollback()
    _count(session, facts, commit_violations)
    if gate is not None:
        requested = {o.approval_id for o in session.outcomes if o.verdict is Verdict.HELD and o.approval_id}
        facts.approvals = {
            "requested": len(requested),
            "approved": tools.decisions["approved"],
            "rejected": tools.decisions["rejected"],
            "pending": sum(1 for i in requested if gate.store.get(i).state.value == "pending"),
        }
    _first_intervention(tools, facts, commit_violations, refused_once)
    return facts


def _commit(
    session: GuardSession, agent: Agent, view: AgentView, transcript: Transcript, facts: GuardFacts
) -> tuple[list[dict[str, Any]], bool]:
    """Commit (once more after a refusal the agent reacted to); roll back a refused commit. Returns the
    at-commit violations and whether a first commit was refused and retried."""
    commit_violations: list[dict[str, Any]] = []
    refused_once = False
    commit = session.commit()
    react = getattr(agent, "after_commit_refused", None)
    if not commit.committed and react is not None:
        from proxy.server import render_commit

        rendered = render_commit(commit, session.session_id)
        text = "\n".join(block.text for block in rendered.content if block.type == "text")
        if react(view, transcript, text):
            refused_once = True
            commit_violations = [
                {"rule_id": v.rule_id, "tool": None, "phase": "at_commit"} for v in commit.violations
            ]
            commit = session.commit()
    facts.committed = commit.committed
    facts.committed_changes = len(commit.changes) if commit.committed else 0
    facts.commit_refused = not commit.committed
    commit_violations += [
        {"rule_id": v.rule_id, "tool": None, "phase": "at_commit"} for v in commit.violations
    ]
    if not commit.committed:
        session.rollback()
    return commit_violations, refused_once


def _count(session: GuardSession, facts: GuardFacts, commit_violations: list[dict[str, Any]]) -> None:
    """The session's verdicts, violations (each with its phase) and retries."""
    verdicts: Counter[str] = Counter(o.verdict.value for o in session.outcomes)
    facts.verdicts = dict(sorted(verdicts.items()))
    facts.violations = [
        {"rule_id": v.rule_id, "tool": o.call.tool, "phase": phase_of(o.verdict)}
        for o in session.outcomes
        for v in o.violations
    ] + commit_violations
    facts.retries = sum(o.retries for o in session.outcomes)


def _first_intervention(
    tools: GuardedTools, facts: GuardFacts, commit_violations: list[dict[str, Any]], refused_once: bool
) -> None:
    """Whether the guard intervened (a call stopped or a commit refused) and its first intervention."""
    stops = [o for o in tools.final if o.verdict in (Verdict.REFUSED, Verdict.ROLLED_BACK, Verdict.HELD)]
    facts.intervened = bool(stops) or facts.commit_refused or refused_once
    facts.failed_calls = sum(1 for o in tools.final if o.verdict is Verdict.FAILED)
    if stops:
        first = stops[0]
        rule = first.violations[0].rule_id if first.violations else first.error_class
        facts.first_intervention = f"{first.call.tool}: {first.verdict.value} ({rule})"
    elif facts.commit_refused or refused_once:
        facts.first_intervention = f"commit: refused ({commit_violations[0]['rule_id']})"
