"""What the approval-store trial of ``bench chaos`` found: a commit refused because the approval queue
cannot be read is a transient refusal (retry later), not a rule to fix."""

from __future__ import annotations

from guard.models import CommitOutcome, Violation
from proxy.server import render_commit


def test_a_commit_refused_while_the_approval_store_is_away_is_transient_and_retryable() -> None:
    outcome = CommitOutcome(
        committed=False,
        violations=[
            Violation(
                rule_id="approvals_unavailable",
                message="Not committed: the approval queue cannot be read (connection refused).",
                hint="Try the commit again later.",
            )
        ],
    )
    answer = render_commit(outcome, "s1")
    verdict = answer.structured_content
    assert answer.is_error and verdict is not None
    assert verdict["committed"] is False
    assert verdict["error_class"] == "transient"
    assert verdict["hint"]["retryable"] is True
    text = answer.content[0].text  # type: ignore[union-attr]
    assert "Fix what the rules below name" not in text
    assert "call commit again" in text and "still pending" in text


def test_a_commit_refused_by_a_rule_is_not_marked_transient() -> None:
    outcome = CommitOutcome(
        committed=False,
        violations=[Violation(rule_id="notes.body_not_empty", message="A note needs a body.")],
    )
    verdict = render_commit(outcome, "s1").structured_content
    assert verdict is not None and "error_class" not in verdict and "hint" not in verdict
