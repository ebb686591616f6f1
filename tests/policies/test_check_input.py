"""A pack check that cannot evaluate a call's arguments gives a clear verdict and changes nothing.

Two real cases from the fault corpus's ``bad_argument`` family, through a real GuardSession with the
domain's pack cut to its checks (the ``checks`` arm: schema validation off, so the mistyped value
reaches the checks), on SQLite and PostgreSQL:

* retail ``create_rma`` with ``removal_fee: "0 dollars"``: the v2 rule ``retail.rma.fee_amounts``
  types ``args.removal_fee`` as a number;
* consulting ``approval_create_request`` with a JSON object for ``amount``: the v1 SQL rules bind it
  untyped, and an object is no single SQL value.

Each is refused with the check's rule id and the argument named, no traceback is logged, the shadow
state and the session's pending changes are unchanged, and the golden call still goes through after.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from benchmark.campaign.arms import ARMS
from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from benchmark.tasks import BenchData, Task
from guard.models import Verdict
from guard.session import GuardSession

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def _first_call(tasks: list[Task], tool: str) -> tuple[Task, int, dict[str, Any]]:
    for task in tasks:
        for index, call in enumerate(task.answer.golden_tool_interactions):
            if call.tool == tool:
                return task, index, dict(call.parameters)
    raise LookupError(f"no golden {tool} call")


def _refused_cleanly(
    domain: Domain,
    database: Database,
    task: Task,
    index: int,
    tool: str,
    wrong: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> list[str]:
    """Play the golden calls before ``index``, then ``tool`` with ``wrong``: refused, nothing changed,
    no traceback logged; the golden call then goes through. Returns the violations' messages."""
    pack = ARMS["checks"].pack(load_domain_policy(POLICIES / domain.name / "policy.yaml", domain))
    with Environment(domain, database) as env:
        env.apply_patch(task.data_patch)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id="t")
        golden = task.answer.golden_tool_interactions
        for call in golden[:index]:
            assert session.call(call.tool, call.parameters).verdict is Verdict.ALLOWED
        before_hash, before_changes = env.state_hash(), session.pending_changes()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="guard.checks"):
            outcome = session.call(tool, {**golden[index].parameters, **wrong})
        assert outcome.verdict is Verdict.REFUSED, outcome
        assert env.state_hash() == before_hash
        assert session.pending_changes() == before_changes
        assert caplog.records, "the refusal is logged"
        assert not [r for r in caplog.records if r.exc_info], "no traceback for the agent's input"
        assert not [v for v in outcome.violations if "configuration problem" in (v.hint or "")]
        after = session.call(golden[index].tool, golden[index].parameters)
        assert after.verdict is Verdict.ALLOWED, after.violations
        session.rollback()
    return [v.message for v in outcome.violations]


def test_retail_fee_in_words_cannot_be_checked(
    retail: Domain, database: Database, retail_tasks: list[Task], caplog: pytest.LogCaptureFixture
) -> None:
    task, index, _ = _first_call(retail_tasks, "create_rma")
    messages = _refused_cleanly(
        retail, database, task, index, "create_rma", {"removal_fee": "0 dollars"}, caplog
    )
    fee = [m for m in messages if m.startswith("retail.rma.fee_amounts cannot check this call")]
    assert fee, messages
    assert "argument 'removal_fee'='0 dollars' is not a number" in fee[0]


def test_consulting_object_for_a_scalar_cannot_be_checked(
    bench: BenchData, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    domain = load_domain("sandbox_consulting", bench.bundle)
    task, index, args = _first_call(bench.tasks(["sandbox_consulting"]), "approval_create_request")
    assert "amount" in domain.tools["approval_create_request"].input_schema["properties"]
    wrong = {"amount": {"value": args.get("amount") or 100, "currency": "USD"}}
    messages = _refused_cleanly(domain, database, task, index, "approval_create_request", wrong, caplog)
    cannot = [m for m in messages if "cannot check this call" in m]
    assert cannot, messages
    assert all("argument 'amount'=" in m and "is a JSON object, not a single value" in m for m in cannot)
