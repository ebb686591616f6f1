"""JournalBackend under GuardSession, against an in-process upstream that cannot transact.

The upstream is a small points ledger whose every call takes effect at once; it counts the calls it
receives, so each test can see exactly what was forwarded and which compensations ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from guard.backend import BackendError, NotReversibleError
from guard.checks import CheckContext, PythonCheck, RuleText
from guard.effects import ToolInfo
from guard.journal import JournalBackend, NotCompensatedError
from guard.models import ChangeSet, EffectClass, RowChange, Verdict
from guard.policy import PolicyPack, load_policy
from guard.session import GuardSession, ToolResult

POLICY = """\
version: 1
name: points
tools:
  compensations:
    add_points:
      tool: remove_points
      arguments: {amount: amount}
approvals:
  - id: large_grant
    source: {ref: "points policy §2", quote: "Grants above 100 points need a manager's approval."}
    tools: [add_points]
    argument: amount
    above: 100
"""

TOOLS = {
    "get_points": ToolInfo(name="get_points", annotations={"readOnlyHint": True}),
    "add_points": ToolInfo(name="add_points", annotations={"destructiveHint": False}),
    "remove_points": ToolInfo(name="remove_points", annotations={"destructiveHint": False}),
    "set_flag": ToolInfo(name="set_flag", annotations={"destructiveHint": False}),
    "send_email": ToolInfo(name="send_email", annotations={"destructiveHint": True}),
}
ARGUMENTS = {
    "get_points": ["account"],
    "add_points": ["amount"],
    "remove_points": ["amount"],
    "set_flag": ["flag"],
    "send_email": ["to"],
}


class Ledger:
    """The fake upstream: applies every call immediately and records it."""

    def __init__(self) -> None:
        self.points = 0
        self.flags: set[str] = set()
        self.sent: list[str] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refuse_removal_of: set[int] = set()

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append((tool, dict(arguments)))
        amount = arguments.get("amount", arguments.get("points", 0))  # 'points' is an accepted alias
        if tool == "get_points":
            return ToolResult(str(self.points))
        if tool == "add_points":
            if amount <= 0:
                return ToolResult("amount must be positive", is_error=True)
            self.points += amount
        elif tool == "remove_points":
            if amount in self.refuse_removal_of:
                return ToolResult("ledger locked", is_error=True)
            self.points -= amount
        elif tool == "set_flag":
            self.flags.add(arguments["flag"])
        elif tool == "send_email":
            self.sent.append(arguments["to"])
        return ToolResult(f"ok points={self.points}")

    def forwarded(self) -> list[str]:
        return [tool for tool, _ in self.calls]


@pytest.fixture
def policy(tmp_path: Path) -> PolicyPack:
    path = tmp_path / "points.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return load_policy(path, tools=list(TOOLS), tool_arguments=ARGUMENTS)


def no_thirteen(ctx: CheckContext) -> list[str]:
    if ctx.call is not None and ctx.call.arguments.get("amount") == 13:
        return ["13 points are never granted"]
    if ctx.call is not None and ctx.call.arguments.get("flag") == "vip":
        return ["vip is not set by hand"]
    return []


UNLUCKY = PythonCheck(id="no_thirteen", phase="after_call", function=no_thirteen, text=RuleText(message="-"))


def session_on(ledger: Ledger, policy: PolicyPack) -> tuple[GuardSession, JournalBackend]:
    journal = JournalBackend(ledger, TOOLS, policy, session_id="s1")
    return GuardSession(journal, journal.execute, TOOLS, policy, extra_checks=[UNLUCKY]), journal


def test_writes_are_journaled_and_compensated_newest_first(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    assert journal.transactional is False
    assert session.call("get_points", {"account": "a"}).verdict is Verdict.ALLOWED
    assert session.call("add_points", {"amount": 5}).verdict is Verdict.ALLOWED
    assert session.call("add_points", {"amount": 7}).verdict is Verdict.ALLOWED
    assert ledger.points == 12
    assert [(e.call.tool, e.call.arguments) for e in journal.entries] == [
        ("add_points", {"amount": 5}),
        ("add_points", {"amount": 7}),
    ]
    assert [e.compensation.arguments for e in journal.entries if e.compensation] == [
        {"amount": 5},
        {"amount": 7},
    ]
    assert all(e.call.session_id == "s1" for e in journal.entries)

    session.rollback()
    assert ledger.calls[-2:] == [("remove_points", {"amount": 7}), ("remove_points", {"amount": 5})]
    assert ledger.points == 0
    assert journal.entries == []
    assert session.closed


def test_after_call_violation_compensates_only_that_call(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    session.call("add_points", {"amount": 5})
    outcome = session.call("add_points", {"amount": 13})
    assert outcome.verdict is Verdict.ROLLED_BACK
    assert [v.rule_id for v in outcome.violations] == ["no_thirteen"]
    assert ledger.forwarded() == ["add_points", "add_points", "remove_points"]
    assert ledger.calls[-1] == ("remove_points", {"amount": 13})
    assert ledger.points == 5
    assert [e.call.arguments for e in journal.entries] == [{"amount": 5}]
    assert session.commit().committed
    assert ledger.points == 5


def test_write_without_compensation_raises_and_claims_nothing(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    session.call("add_points", {"amount": 5})
    session.call("set_flag", {"flag": "gold"})
    session.call("add_points", {"points": 3})  # no 'amount': the compensation cannot be built
    before = list(ledger.calls)

    with pytest.raises(NotCompensatedError) as info:
        session.rollback()
    assert isinstance(info.value, NotReversibleError)
    message = str(info.value)
    assert "cannot undo 2 of 3" in message and "none was undone" in message
    assert "set_flag" in message and "the policy names no compensating tool" in message
    assert "lacks argument(s) ['amount']" in message
    assert [e.call.tool for e in info.value.entries] == ["add_points", "set_flag", "add_points"]
    assert ledger.calls == before  # no compensation ran
    assert ledger.points == 8 and ledger.flags == {"gold"}
    assert len(journal.entries) == 3
    assert not session.closed
    assert session.commit().committed  # the caller may accept what was done instead


def test_violation_on_an_uncompensable_write_is_not_reported_as_rolled_back(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    with pytest.raises(NotReversibleError, match="set_flag"):
        session.call("set_flag", {"flag": "vip"})
    assert ledger.flags == {"vip"}
    assert ledger.forwarded() == ["set_flag"]
    assert [e.call.tool for e in journal.entries] == ["set_flag"]
    assert session.outcomes == []


def test_failed_compensation_stops_and_lists_what_remains(policy: PolicyPack) -> None:
    ledger = Ledger()
    ledger.refuse_removal_of = {5}
    session, journal = session_on(ledger, policy)
    session.call("add_points", {"amount": 5})
    session.call("add_points", {"amount": 7})
    with pytest.raises(NotCompensatedError) as info:
        session.rollback()
    assert "compensation remove_points for add_points" in str(info.value)
    assert "ledger locked" in str(info.value)
    assert [e.call.arguments for e in info.value.entries] == [{"amount": 5}]
    assert [e.call.arguments for e in journal.entries] == [{"amount": 5}]
    assert ledger.calls[-2:] == [("remove_points", {"amount": 7}), ("remove_points", {"amount": 5})]
    assert ledger.points == 5
    assert not session.closed


def test_irreversible_and_approval_calls_are_held_before_forwarding(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    email = session.call("send_email", {"to": "a@example.com"})
    assert email.effect is EffectClass.IRREVERSIBLE
    assert email.verdict is Verdict.HELD
    assert [v.rule_id for v in email.violations] == ["irreversible_unrehearsed"]
    large = session.call("add_points", {"amount": 500})
    assert large.verdict is Verdict.HELD
    assert large.violations[0].rule_id == "large_grant"
    assert large.violations[0].source is not None and large.violations[0].source.ref == "points policy §2"
    assert email.changes == ChangeSet() and large.changes == ChangeSet()
    assert ledger.calls == [] and ledger.sent == [] and ledger.points == 0
    assert journal.entries == []


def test_failed_calls_and_reads_are_not_journaled(policy: PolicyPack) -> None:
    ledger = Ledger()
    session, journal = session_on(ledger, policy)
    assert session.call("add_points", {"amount": -1}).verdict is Verdict.FAILED
    assert session.call("get_points", {"account": "a"}).verdict is Verdict.ALLOWED
    assert journal.entries == []
    session.rollback()
    assert ledger.forwarded() == ["add_points", "get_points"]


def test_changes_are_what_the_upstream_reports_and_query_is_refused(policy: PolicyPack) -> None:
    ledger = Ledger()

    def reported(tool: str, arguments: Mapping[str, Any], result: ToolResult) -> ChangeSet:
        change = RowChange(table="ledger", key="a", op="update", after={"points": ledger.points})
        return ChangeSet(changes=[change])

    plain = JournalBackend(ledger, TOOLS, policy)
    plain.begin()
    plain.execute("add_points", {"amount": 1})
    assert plain.changes() == ChangeSet()
    with pytest.raises(BackendError, match="no shadow state to query"):
        plain.query("SELECT 1")

    journal = JournalBackend(ledger, TOOLS, policy, reported_changes=reported)
    journal.begin()
    journal.execute("add_points", {"amount": 2})
    sp = journal.savepoint()
    journal.execute("add_points", {"amount": 3})
    assert [c.after for c in journal.changes()] == [{"points": 3}, {"points": 6}]
    assert [c.after for c in journal.changes(sp)] == [{"points": 6}]
    journal.rollback_to(sp)
    assert ledger.points == 3
    assert [c.after for c in journal.changes()] == [{"points": 3}]


def test_savepoints_nest_and_bad_use_is_refused(policy: PolicyPack) -> None:
    ledger = Ledger()
    journal = JournalBackend(ledger, TOOLS, policy)
    with pytest.raises(BackendError, match="begin"):
        journal.execute("add_points", {"amount": 1})
    assert ledger.calls == []
    journal.begin()
    with pytest.raises(BackendError, match="already begun"):
        journal.begin()
    outer = journal.savepoint()
    journal.execute("add_points", {"amount": 1})
    inner = journal.savepoint()
    journal.execute("add_points", {"amount": 2})
    journal.release(outer)  # closes inner too; entries stay
    for closed in (outer, inner, "nope"):
        with pytest.raises(BackendError, match="unknown or closed savepoint"):
            journal.rollback_to(closed)
    assert ledger.points == 3 and len(journal.entries) == 2
    journal.commit()
    with pytest.raises(BackendError, match="begin"):
        journal.rollback()
    assert ledger.points == 3
