"""The retail pack (policies/sandbox_external_retail): it loads against its domain and quotes the
policy verbatim; it refuses real faults (state unchanged) while every golden trajectory still commits.

The fault tests start from golden calls (tests may read the answer key; the pack never does) and
change one thing about them, the way a wrong agent would. They run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, column_types, executor_for, tool_infos
from benchmark.replay import replay
from benchmark.tasks import BenchData, Task
from guard.models import EffectClass, ToolOutcome, Verdict
from guard.policy import PolicyPack, load_policy
from guard.session import GuardSession

ROOT = Path(__file__).resolve().parents[2]
RETAIL_PACK = ROOT / "policies" / "sandbox_external_retail" / "policy.yaml"
EXAMPLE_PACK = ROOT / "policies" / "example" / "policy.yaml"
RETAIL = "sandbox_external_retail"


def _domain_refs(domain: Domain) -> dict[str, Any]:
    return {
        "schema": {name: list(spec.field_names) for name, spec in domain.tables.items()},
        "tools": list(domain.tools),
        "tool_arguments": {n: set(t.input_schema.get("properties", {})) for n, t in domain.tools.items()},
        "domain": domain.name,
        "tool_schemas": {n: t.input_schema for n, t in domain.tools.items()},
        "column_types": column_types(domain),
    }


@pytest.fixture(scope="module")
def retail_pack(retail: Domain) -> PolicyPack:
    return load_policy(RETAIL_PACK, **_domain_refs(retail))


def test_retail_pack_loads_against_its_domain(retail_pack: PolicyPack, retail: Domain) -> None:
    model = retail_pack.model
    assert model.domain == RETAIL
    assert not retail_pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(retail.tools)
    writes = {name for name, tool in retail.tools.items() if tool.writes and name != "search_policy"}
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    assert not model.approvals  # approvals turn calls into held verdicts; see docs/policies.md
    assert len(retail_pack.checks) >= 30


def _policy_corpus(bench: BenchData, retail: Domain) -> str:
    """The retail policy texts a rule may quote: the KB, the system prompt and the Zendesk articles."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{RETAIL}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{RETAIL}.system_prompt.md").read_text(encoding="utf-8")
    with Environment(retail, Database()) as env:
        for article in env.table("zendesk_articles").all():
            text += "\n" + re.sub(r"<[^>]+>", " ", html.unescape(str(getattr(article, "body", ""))))
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return _normalise(text)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def test_retail_rules_quote_the_policy_and_name_no_records(
    bench: BenchData, retail: Domain, retail_pack: PolicyPack
) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench, retail)
    for rule in retail_pack.model.checks:
        assert rule.source.quote, rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(
        r"\b(?:ORD|CUS|JOB|INST|LIN|LI|RMA|TXN|RFD|WCT|WCL|MEM|SHP|TRK|THD)-\w|test_case|ST\d{3}"
    )
    for path in (RETAIL_PACK, RETAIL_PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"


# -- the retail pack on real faults -----------------------------------------------------------------
@contextmanager
def _session(
    retail: Domain,
    database: Database,
    pack: PolicyPack,
    task: Task,
    upto: Callable[[Any], bool] | None = None,
) -> Iterator[tuple[Environment, GuardSession]]:
    """A guarded session on the task's initial state, with its golden calls replayed up to ``upto``."""
    with Environment(retail, database) as env:
        env.apply_patch(task.data_patch)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id="test")
        for call in task.answer.golden_tool_interactions:
            if upto is not None and upto(call):
                break
            outcome = session.call(call.tool, call.parameters)
            assert outcome.verdict is Verdict.ALLOWED, outcome.violations
        yield env, session
        if not session.closed:
            session.rollback()


def _golden(tasks: list[Task], tool: str, **where: Any) -> tuple[Task, dict[str, Any]]:
    for task in tasks:
        for call in task.answer.golden_tool_interactions:
            if call.tool == tool and all(call.parameters.get(k) == v for k, v in where.items()):
                return task, dict(call.parameters)
    raise LookupError(f"no golden {tool} call with {where}")


@contextmanager
def _before_golden(
    retail: Domain, database: Database, pack: PolicyPack, tasks: list[Task], tool: str, **where: Any
) -> Iterator[tuple[Environment, GuardSession, dict[str, Any]]]:
    """A ``_session`` on the first task with a golden ``tool`` call matching ``where``, replayed up to
    the task's first ``tool`` call; yields the environment, the session and that golden call's arguments."""
    task, args = _golden(tasks, tool, **where)
    with _session(retail, database, pack, task, upto=_is(tool)) as (env, session):
        yield env, session, args


def _is(tool: str, **where: Any) -> Callable[[Any], bool]:
    return lambda call: call.tool == tool and all(call.parameters.get(k) == v for k, v in where.items())


def _refused_unchanged(
    env: Environment, session: GuardSession, tool: str, args: Mapping[str, Any]
) -> ToolOutcome:
    before_hash, before_changes = env.state_hash(), session.pending_changes()
    outcome = session.call(tool, args)
    assert env.state_hash() == before_hash
    assert session.pending_changes() == before_changes
    return outcome


def _rule_ids(outcome: ToolOutcome) -> set[str]:
    return {v.rule_id for v in outcome.violations}


def _matching(task: Task, table: str, **where: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in task.data_patch.get(table, []) if all(r.get(k) == v for k, v in where.items())]


def _row(task: Task, table: str, **where: Any) -> dict[str, Any]:
    """The first ``table`` row of the task's data matching ``where``; LookupError if there is none."""
    rows = _matching(task, table, **where)
    if not rows:
        raise LookupError(f"no {table} row with {where}")
    return rows[0]


def _task_with(tasks: list[Task], table: str, **where: Any) -> tuple[Task, dict[str, Any]]:
    """The first of ``tasks`` whose data has a ``table`` row matching ``where``, and that row."""
    task = next(t for t in tasks if _matching(t, table, **where))
    return task, _row(task, table, **where)


ORDERS = "external_retail_toolset_oms_models_orders"
JOBS = "external_retail_toolset_jobber_models_installation_jobs"
LINE_ITEMS = "external_retail_toolset_oms_models_order_line_items"


def test_cancel_of_a_shipped_order_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, order = _task_with(retail_tasks, ORDERS, status="shipped")
    with _session(retail, database, retail_pack, task, upto=lambda _call: True) as (env, session):
        outcome = _refused_unchanged(
            env, session, "cancel_order", {"order_id": order["id"], "cancellation_reason": "customer_request"}
        )
        assert outcome.verdict is Verdict.REFUSED and outcome.result is None
        assert _rule_ids(outcome) == {"retail.cancel_order.eligible_status"}
        violation = outcome.violations[0]
        assert violation.rows == [{"o.id": order["id"], "o.status": "shipped", "args.order_id": order["id"]}]
        assert violation.source is not None and "§8.1" in violation.source.ref


def test_golden_cancel_passes_and_a_second_cancel_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    """The rule reads the shadow state: after the first cancel the order is cancelled, so no second one."""
    with _before_golden(retail, database, retail_pack, retail_tasks, "cancel_order") as (env, session, args):
        assert session.call("cancel_order", args).verdict is Verdict.ALLOWED
        outcome = _refused_unchanged(env, session, "cancel_order", args)
        assert _rule_ids(outcome) == {"retail.cancel_order.eligible_status"}


def test_refund_above_what_was_paid_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    with _before_golden(
        retail, database, retail_pack, retail_tasks, "create_refund", refund_reason="order_cancelled"
    ) as (env, session, args):
        for amount in (100_000.0, 0, -5):
            outcome = _refused_unchanged(env, session, "create_refund", {**args, "amount": amount})
            assert outcome.verdict is Verdict.REFUSED
            assert "retail.refund.within_paid" in _rule_ids(outcome)
        assert session.call("create_refund", args).verdict is Verdict.ALLOWED


def test_refund_amounts_follow_the_policy_formulas(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    cases = [
        ("late_delivery_compensation", "retail.refund.late_delivery_amount"),
        ("partial_refund_minor_defect", "retail.refund.minor_defect_amount"),
        ("order_cancelled", "retail.refund.order_cancelled_amount"),
    ]
    for reason, rule in cases:
        with _before_golden(
            retail, database, retail_pack, retail_tasks, "create_refund", refund_reason=reason
        ) as (env, session, args):
            outcome = _refused_unchanged(
                env, session, "create_refund", {**args, "amount": args["amount"] - 1}
            )
            assert rule in _rule_ids(outcome), (reason, outcome.violations)
            assert session.call("create_refund", args).verdict is Verdict.ALLOWED


def test_manual_refund_of_a_cancelled_order_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, args = _golden(retail_tasks, "cancel_order")
    with _session(retail, database, retail_pack, task, upto=_is("cancel_order")) as (env, session):
        assert session.call("cancel_order", args).verdict is Verdict.ALLOWED
        order = _row(task, ORDERS, id=args["order_id"])
        refund = {
            "order_id": order["id"],
            "customer_id": order["customer_id"],
            "amount": 1.0,
            "refund_reason": "order_cancelled",
        }
        outcome = _refused_unchanged(env, session, "create_refund", refund)
        assert "retail.refund.not_for_cancelled_order" in _rule_ids(outcome)


def test_rma_faults_are_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, args = _golden(
        retail_tasks, "create_rma", return_reason="changed_mind", restocking_fee=0, removal_fee=0
    )
    assert args["return_shipping_cost"] > 0 and not args["is_defective"]
    with _session(retail, database, retail_pack, task, upto=_is("create_rma")) as (env, session):
        wrong = {
            "retail.rma.refund_formula": {"refund_amount": args["refund_amount"] + 10},
            "retail.rma.no_fees_when_defective": {"is_defective": True, "return_reason": "defective"},
            "retail.rma.fee_amounts": {
                "return_shipping_cost": 12.5,
                "refund_amount": args["refund_amount"] + args["return_shipping_cost"] - 12.5,
            },
        }
        for rule, change in wrong.items():
            outcome = _refused_unchanged(env, session, "create_rma", {**args, **change})
            assert outcome.verdict is Verdict.REFUSED
            assert rule in _rule_ids(outcome), (rule, outcome.violations)
        assert session.call("create_rma", args).verdict is Verdict.ALLOWED


def test_return_of_a_shipped_order_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    with_lines = [t for t in retail_tasks if t.data_patch.get(LINE_ITEMS)]
    shipped_task, shipped = _task_with(with_lines, ORDERS, status="shipped")
    line = _row(shipped_task, LINE_ITEMS, order_id=shipped["id"])
    rma = {
        "order_id": shipped["id"],
        "line_item_id": line["id"],
        "customer_id": shipped["customer_id"],
        "return_reason": "changed_mind",
        "is_defective": False,
        "refund_amount": line["final_price"],
        "restocking_fee": 0,
        "return_shipping_cost": 0,
        "removal_fee": 0,
    }
    with _session(retail, database, retail_pack, shipped_task, upto=lambda _call: True) as (env, session):
        outcome = _refused_unchanged(env, session, "create_rma", rma)
        assert _rule_ids(outcome) == {"retail.rma.eligible_status"}


def test_installation_and_replacement_faults_are_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, job = _task_with(retail_tasks, JOBS, status="completed")
    with _session(retail, database, retail_pack, task, upto=lambda _call: True) as (env, session):
        args = {
            "job_id": job["id"],
            "order_id": job["order_id"],
            "cancellation_reason": "customer_cancelled_order",
        }
        outcome = _refused_unchanged(env, session, "cancel_installation", args)
        assert _rule_ids(outcome) == {"retail.installation.cancel_eligible"}

    task, args = _golden(retail_tasks, "create_replacement_order")
    flipped = "standard" if args["shipping_speed"] == "expedited" else "expedited"
    with _session(retail, database, retail_pack, task, upto=_is("create_replacement_order")) as (
        env,
        session,
    ):
        outcome = _refused_unchanged(
            env, session, "create_replacement_order", {**args, "shipping_speed": flipped}
        )
        assert _rule_ids(outcome) == {"retail.replacement.shipping_speed_by_tier"}
        outcome = _refused_unchanged(env, session, "create_replacement_order", {**args, "quantity": 10_000})
        assert _rule_ids(outcome) == {"retail.replacement.in_stock"}
        assert session.call("create_replacement_order", args).verdict is Verdict.ALLOWED


def test_membership_and_record_mismatches_are_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    with _before_golden(
        retail, database, retail_pack, retail_tasks, "update_membership_status", action="cancel"
    ) as (env, session, args):
        upgrade = {"customer_id": args["customer_id"], "action": "upgrade", "membership_type": "plus"}
        outcome = _refused_unchanged(env, session, "update_membership_status", upgrade)
        assert _rule_ids(outcome) == {"retail.membership.upgrade_without_active"}
        assert session.call("update_membership_status", args).verdict is Verdict.ALLOWED
        outcome = _refused_unchanged(env, session, "update_membership_status", args)
        assert _rule_ids(outcome) == {"retail.membership.cancel_only_active"}

    with _before_golden(
        retail, database, retail_pack, retail_tasks, "create_refund", refund_reason="order_cancelled"
    ) as (env, session, args):
        outcome = _refused_unchanged(env, session, "create_refund", {**args, "customer_id": "CUS-00000000"})
        assert _rule_ids(outcome) == {"retail.records.order_customer"}


def test_ticket_rules_roll_back_and_hold_the_commit(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    with _before_golden(
        retail, database, retail_pack, retail_tasks, "zendesk_create_item", table="tickets"
    ) as (env, session, args):
        comment = {
            "table": "comments",
            "item": {"ticket_id": "1", "author_id": "2", "body": "note", "public": True},
        }
        wrong = {
            "retail.tickets.no_comments": comment,
            "retail.tickets.no_system_statuses": {**args, "item": {**args["item"], "status": "new"}},
            "retail.tickets.assignee_is_agent": {**args, "item": {**args["item"], "assignee_id": "7"}},
        }
        for rule, call in wrong.items():
            outcome = _refused_unchanged(env, session, "zendesk_create_item", call)
            assert outcome.verdict is Verdict.ROLLED_BACK, rule
            assert _rule_ids(outcome) == {rule}
        created = session.call("zendesk_create_item", args)
        assert created.verdict is Verdict.ALLOWED
        ticket = created.changes.changes[0].key
        refused = session.commit()
        assert not refused.committed
        assert [(v.rule_id, v.rows) for v in refused.violations] == [
            ("retail.tickets.resolved_before_commit", [{"ticket_id": ticket, "status": "open"}])
        ]
        solved = session.call(
            "zendesk_update_item", {"table": "tickets", "id": ticket, "item": {"status": "solved"}}
        )
        assert solved.verdict is Verdict.ALLOWED
        assert session.commit().committed


# -- golden trajectories: no false blocks -------------------------------------------------------------
def test_every_golden_trajectory_commits_through_the_retail_pack(
    bench: BenchData, sqlite_db: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    result = replay(bench, sqlite_db, RETAIL, retail_tasks, "guard", retail_pack)
    problems = [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)]
    assert problems == []
    assert result.committed_golden == len(retail_tasks) == 98
    assert result.violations == 0 and result.rolled_back == 0
    assert all(t.delta_matches is not False for t in result.tasks)


def test_golden_sample_commits_through_the_retail_pack_on_both_databases(
    bench: BenchData, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    """Every 5th task, plus every task whose golden calls exercise a SQL rule with amounts."""
    sample = [
        t
        for i, t in enumerate(retail_tasks)
        if i % 5 == 0
        or any(c.tool in ("create_refund", "charge_customer") for c in t.answer.golden_tool_interactions)
    ]
    result = replay(bench, database, RETAIL, sample, "guard", retail_pack)
    assert [t.messages for t in result.tasks if t.messages] == []
    assert result.committed_golden == len(sample)
