"""Policy packs: load errors name file, rule and line; valid packs load; ``shadowguard check``; and the
retail pack refuses real faults (state unchanged) while every golden trajectory still commits.

The fault tests start from golden calls (tests may read the answer key; the pack never does) and
change one thing about them, the way a wrong agent would. They run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, column_types, executor_for, tool_infos
from benchmark.replay import replay
from benchmark.tasks import BenchData, Task
from guard.models import EffectClass, ToolOutcome, Verdict
from guard.policy import PolicyError, PolicyPack, load_policy
from guard.session import GuardSession
from proxy.cli import _mount_benchmark, app

ROOT = Path(__file__).resolve().parents[2]
RETAIL_PACK = ROOT / "policies" / "sandbox_external_retail" / "policy.yaml"
EXAMPLE_PACK = ROOT / "policies" / "example" / "policy.yaml"
RETAIL = "sandbox_external_retail"

SCHEMA = {"orders": ["id", "status", "customer_id", "total"], "refunds": ["id", "order_id", "amount"]}
ARGUMENTS = {
    "get_order": {"order_id"},
    "cancel_order": {"order_id", "reason"},
    "create_refund": {"order_id", "amount"},
    "void_refund": {"refund_id"},
}


def _write(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def _error(path: Path, **kwargs: Any) -> PolicyError:
    options: dict[str, Any] = {"schema": SCHEMA, "tools": list(ARGUMENTS), "tool_arguments": ARGUMENTS}
    options.update(kwargs)
    with pytest.raises(PolicyError) as info:
        load_policy(path, **options)
    error = info.value
    assert error.file == str(path)
    assert str(error).startswith(f"{path}: line {error.line}: "), str(error)
    if error.rule is not None:
        assert f"rule {error.rule}: " in str(error)
    return error


# -- load errors ------------------------------------------------------------------------------------
# Each case is a whole pack; the expected line is counted in the text as written.
BAD_PACKS: dict[str, tuple[str, str | None, int, str]] = {
    "malformed yaml": (
        """
        name: broken
        checks:
          - id: a
            phase: before_call
           message: not aligned
        """,
        None,
        5,
        "invalid YAML",
    ),
    "duplicate key": (
        """
        name: dup
        checks:
          - id: a
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
            sql: SELECT 2 AS x
            source: {ref: s}
        """,
        None,
        7,
        "duplicate key 'checks.0.sql'",
    ),
    "unknown top-level key": (
        """
        name: extra
        checkz: []
        """,
        "checkz",
        2,
        "Extra inputs are not permitted",
    ),
    "unknown key in a rule": (
        """
        name: extra
        checks:
          - id: refund-cap
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
            source: {ref: s}
            severity: high
        """,
        "refund-cap",
        8,
        "checks.0.severity: Extra inputs are not permitted",
    ),
    "missing message": (
        """
        name: missing
        checks:
          - id: first
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
            source: {ref: s}
          - id: second
            phase: at_commit
            sql: SELECT 1 AS x
            source: {ref: s}
        """,
        "second",
        8,
        "checks.1.message: Field required",
    ),
    "missing source": (
        """
        name: missing
        checks:
          - id: unsourced
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
        """,
        "unsourced",
        3,
        "checks.0.source: Field required",
    ),
    "bad effect class": (
        """
        name: effects
        tools:
          effects:
            get_order: read
            cancel_order: dangerous
        """,
        "tools.effects",
        5,
        "tools.effects.cancel_order",
    ),
    "both sql and python": (
        """
        name: two-bodies
        checks:
          - id: both
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
            python: mod:f
            source: {ref: s}
        """,
        "both",
        3,
        "exactly one of 'sql' or 'python'",
    ),
    "at_commit limited to tools": (
        """
        name: commit-tools
        checks:
          - id: per-tool-commit
            phase: at_commit
            tools: [cancel_order]
            message: m
            sql: SELECT 1 AS x
            source: {ref: s}
        """,
        "per-tool-commit",
        3,
        "an at_commit check runs once per commit",
    ),
    "duplicate rule ids": (
        """
        name: dup-ids
        checks:
          - id: same
            phase: at_commit
            message: m
            sql: SELECT 1 AS x
            source: {ref: s}
        approvals:
          - id: same
            tools: [create_refund]
            source: {ref: s}
        """,
        "same",
        9,
        "duplicate rule id",
    ),
    "unknown table": (
        """
        name: tables
        checks:
          - id: no-such-table
            phase: at_commit
            message: m
            source: {ref: s}
            sql: |
              SELECT o.id
              FROM orders AS o
              JOIN shipments AS s ON s.order_id = o.id
        """,
        "no-such-table",
        10,
        "unknown table 'shipments'",
    ),
    "unknown qualified column": (
        """
        name: columns
        checks:
          - id: no-such-column
            phase: at_commit
            message: m
            source: {ref: s}
            sql: |
              SELECT o.id
              FROM orders AS o
              WHERE o.state = 'shipped'
        """,
        "no-such-column",
        10,
        "Unknown column: state",
    ),
    "unknown bare column": (
        """
        name: columns
        checks:
          - id: bare
            phase: at_commit
            message: m
            source: {ref: s}
            sql: |
              SELECT id
              FROM orders
              WHERE
                shipped_at IS NULL
        """,
        "bare",
        11,
        "Column 'shipped_at' could not be resolved",
    ),
    "not a select": (
        """
        name: writes
        checks:
          - id: deleter
            phase: at_commit
            message: m
            source: {ref: s}
            sql: |
              DELETE FROM refunds WHERE amount > 100
        """,
        "deleter",
        8,
        "only SELECT is allowed, found DELETE",
    ),
    "two statements": (
        """
        name: writes
        checks:
          - id: piggyback
            phase: at_commit
            message: m
            source: {ref: s}
            sql: "SELECT id FROM orders; DROP TABLE orders"
        """,
        "piggyback",
        7,
        "exactly one statement is allowed, found 2",
    ),
    "sql that does not parse": (
        """
        name: syntax
        checks:
          - id: broken-sql
            phase: at_commit
            message: m
            source: {ref: s}
            sql: |
              SELECT o.id
              FROM orders AS o
              WHERE o.status IN ('a',
        """,
        "broken-sql",
        10,
        "SQL does not parse",
    ),
    "parameter that is not an argument": (
        """
        name: params
        checks:
          - id: wrong-arg
            phase: before_call
            tools: [cancel_order]
            message: m
            source: {ref: s}
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order
        """,
        "wrong-arg",
        8,
        "tool 'cancel_order' has no argument 'order'",
    ),
    "parameter without tools": (
        """
        name: params
        checks:
          - id: any-call
            phase: before_call
            message: m
            source: {ref: s}
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order_id
        """,
        "any-call",
        7,
        "must list its 'tools'",
    ),
    "parameter at commit": (
        """
        name: params
        checks:
          - id: commit-param
            phase: at_commit
            message: m
            source: {ref: s}
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order_id
        """,
        "commit-param",
        7,
        "an at_commit check sees no call",
    ),
    "unknown tool in a check": (
        """
        name: tools
        checks:
          - id: typo
            phase: before_call
            tools:
              - cancel_order
              - cancel_ordr
            message: m
            source: {ref: s}
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order_id
        """,
        "typo",
        7,
        "unknown tool 'cancel_ordr'",
    ),
    "unknown tool in effects": (
        """
        name: tools
        tools:
          effects:
            get_order: read
            delete_everything: irreversible
        """,
        "tools.effects",
        5,
        "unknown tool 'delete_everything'",
    ),
    "unknown tool in the allowlist": (
        """
        name: tools
        tools:
          allow: [get_order, cancel_order,
                  refund_order]
        """,
        "tools.allow",
        4,
        "unknown tool 'refund_order'",
    ),
    "unknown tool in an approval": (
        """
        name: tools
        approvals:
          - id: big-refunds
            tools: [issue_refund]
            argument: amount
            above: 500
            source: {ref: s}
        """,
        "big-refunds",
        4,
        "unknown tool 'issue_refund'",
    ),
    "unknown tool in retry": (
        """
        name: tools
        retry:
          - tool: get_order
            max_attempts: 3
          - tool: get_orders
            max_attempts: 3
        """,
        "retry[1]",
        5,
        "unknown tool 'get_orders'",
    ),
    "compensation argument the tool lacks": (
        """
        name: saga
        tools:
          compensations:
            create_refund:
              tool: void_refund
              arguments:
                refund: order_id
        """,
        "tools.compensations",
        7,
        "void_refund has no argument 'refund'",
    ),
    "approval without a target": (
        """
        name: approvals
        approvals:
          - id: nothing
            source: {ref: s}
        """,
        "nothing",
        3,
        "an approval rule needs",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKS))
def test_bad_pack_names_file_rule_and_line(tmp_path: Path, case: str) -> None:
    text, rule, line, fragment = BAD_PACKS[case]
    path = _write(tmp_path, text)
    error = _error(path)
    assert error.line == line, str(error)
    if rule is not None:
        assert error.rule == rule, str(error)
    assert fragment in str(error)
    assert "\x1b[" not in str(error)


def test_python_function_missing_or_unusable(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text(
        "def ok(ctx):\n    return []\n\ndef two(ctx, extra):\n    return []\n\nNOT_CALLABLE = 3\n",
        encoding="utf-8",
    )
    pack = """
        name: python
        module: rules.py
        checks:
          - id: fine
            phase: at_commit
            message: m
            source: {ref: s}
            python: ok
          - id: absent
            phase: at_commit
            message: m
            source: {ref: s}
            python: {function}
        """
    expectations = {
        "missing": "function 'missing' not found",
        "two": "'two' must take one argument",
        "NOT_CALLABLE": "'NOT_CALLABLE' is not a function",
        "no_such_module_xyz:check": "module 'no_such_module_xyz' not found",
    }
    for function, fragment in expectations.items():
        path = _write(tmp_path, pack.replace("{function}", function))
        error = _error(path)
        assert (error.rule, error.line) == ("absent", 13), str(error)
        assert fragment in str(error)


def test_python_module_missing_or_broken(tmp_path: Path) -> None:
    pack = """
        name: python
        description: a pack whose module is {state}
        module: {module}
        checks:
          - id: c
            phase: at_commit
            message: m
            source: {ref: s}
            python: f
        """
    path = _write(tmp_path, pack.replace("{module}", "absent.py").replace("{state}", "missing"))
    error = _error(path)
    assert error.line == 3
    assert "module file" in str(error) and "absent.py" in str(error)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n", encoding="utf-8")
    path = _write(tmp_path, pack.replace("{module}", "broken.py").replace("{state}", "broken"))
    error = _error(path)
    assert error.line == 3
    assert "RuntimeError: boom at import" in str(error)


def test_file_level_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError, match="cannot read") as info:
        load_policy(missing)
    assert info.value.file == str(missing)
    error = _error(_write(tmp_path, "- just\n- a list\n"))
    assert error.line == 1 and "a policy pack is a YAML mapping" in str(error)


def test_pack_for_another_domain_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        name: wrong-domain
        description: d
        domain: external_booking_v1
        """,
    )
    error = _error(path, domain=RETAIL)
    assert error.line == 3
    assert "for domain 'external_booking_v1', not 'sandbox_external_retail'" in str(error)


# -- valid packs ------------------------------------------------------------------------------------
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


def test_example_pack_loads_alone_and_against_the_demo_app() -> None:
    """The quickstart's pack is written for the demo accounts app (proxy/demo/server.py)."""
    from proxy.demo.server import TOOLS, metadata

    alone = load_policy(EXAMPLE_PACK)
    assert alone.name == "example" and alone.model.domain is None
    checked = load_policy(
        EXAMPLE_PACK,
        schema={name: [c.name for c in table.columns] for name, table in metadata.tables.items()},
        tools=[t.name for t in TOOLS],
        tool_arguments={t.name: set(t.input_schema.get("properties", {})) for t in TOOLS},
    )
    assert [c.id for c in checked.checks] == [
        "example.frozen_accounts",
        "example.no_overdraft",
        "example.accounts_named",
    ]
    assert checked.effect_of("transfer_funds") is EffectClass.IRREVERSIBLE
    assert not checked.allows("close_account")
    rule = checked.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": 1500})
    assert rule is not None and rule.id == "example.large_transfers"
    assert checked.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": 80}) is None
    retry = checked.retry_for("list_accounts")
    assert retry is not None and (retry.max_attempts, retry.idempotent) == (3, True)
    assert checked.retry_for("rename_account") is None


def test_a_pack_with_every_section_loads(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("def nothing(ctx):\n    return []\n", encoding="utf-8")
    path = _write(
        tmp_path,
        """
        version: 1
        name: full
        domain: shop
        description: every key once
        module: rules.py
        tools:
          allow: [get_order, cancel_order, create_refund, void_refund]
          effects: {get_order: read, cancel_order: irreversible, create_refund: write}
          compensations:
            create_refund:
              tool: void_refund
              arguments: {refund_id: order_id}
        checks:
          - id: open-orders-only
            phase: before_call
            tools: [cancel_order]
            source: {ref: "Shop policy §1", quote: "Only open orders can be cancelled."}
            message: Only open orders can be cancelled.
            hint: Check the order status first.
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order_id AND o.status <> 'open'
          - id: python-after
            phase: after_call
            tools: [create_refund]
            source: {ref: "Shop policy §2"}
            message: m
            python: nothing
          - id: refunds-cover
            phase: at_commit
            source: {ref: "Shop policy §3"}
            message: m
            sql: SELECT r.order_id FROM refunds AS r GROUP BY r.order_id HAVING SUM(r.amount) < 0
        approvals:
          - id: big
            tools: [create_refund]
            argument: amount
            above: 100
            source: {ref: "Shop policy §4"}
          - id: all-irreversible
            effect: irreversible
            source: {ref: "Shop policy §5"}
        retry:
          - {tool: get_order, max_attempts: 3, idempotent: true}
        """,
    )
    pack = load_policy(path, schema=SCHEMA, tools=list(ARGUMENTS), tool_arguments=ARGUMENTS, domain="shop")
    assert [(c.id, c.phase) for c in pack.checks] == [
        ("open-orders-only", "before_call"),
        ("python-after", "after_call"),
        ("refunds-cover", "at_commit"),
    ]
    compensation = pack.compensation_for("create_refund")
    assert compensation is not None and compensation.tool == "void_refund"
    assert compensation.arguments == {"refund_id": "order_id"}
    big = pack.approval_for("create_refund", EffectClass.WRITE, {"amount": 150})
    assert big is not None and big.id == "big"
    held = pack.approval_for("cancel_order", EffectClass.IRREVERSIBLE, {"order_id": "o1"})
    assert held is not None and held.id == "all-irreversible"
    assert pack.approval_for("create_refund", EffectClass.WRITE, {"amount": True}) is None


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


# -- shadowguard check --------------------------------------------------------------------------------
def _check(*args: str) -> Any:
    _mount_benchmark()
    return CliRunner().invoke(app, ["check", *args])


def test_cli_check_valid_packs(bench: BenchData) -> None:
    result = _check(str(RETAIL_PACK), "--domain", RETAIL, "--data", str(bench.bundle))
    assert result.exit_code == 0, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{RETAIL_PACK}: ok: pack 'sandbox_external_retail' (format v2): ")
    assert f"checked against {RETAIL}" in line
    result = _check(str(EXAMPLE_PACK))
    assert result.exit_code == 0, result.output
    (line,) = result.output.strip().splitlines()
    assert "pack 'example': 3 checks (1 before_call, 1 after_call, 1 at_commit)" in line
    assert "no --domain" in line


def test_cli_check_invalid_pack_exits_1_with_the_spot(tmp_path: Path, bench: BenchData) -> None:
    text = RETAIL_PACK.read_text(encoding="utf-8")
    broken = text.replace(
        "that: o.status IN ('pending_payment'",
        "that: o.state IN ('pending_payment'",
        1,
    )
    assert broken != text
    line = broken.splitlines().index("      that: o.state IN ('pending_payment', 'processing')") + 1
    path = tmp_path / "policy.yaml"
    path.write_text(broken, encoding="utf-8")
    (tmp_path / "checks.py").write_text(
        RETAIL_PACK.with_name("checks.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    result = _check(str(path), "--domain", RETAIL, "--data", str(bench.bundle))
    assert result.exit_code == 1
    assert f"error: {path}: line {line}: rule retail.cancel_order.eligible_status: Unknown column: state" in (
        result.output
    )
    assert _check(str(path)).exit_code == 0  # without --domain the columns are not known


def test_cli_check_usage_errors(bench: BenchData, tmp_path: Path) -> None:
    result = _check(str(RETAIL_PACK), "--domain", "nope", "--data", str(bench.bundle))
    assert result.exit_code == 2 and "unknown domain" in result.output
    result = _check(str(RETAIL_PACK), "--domain", "external_booking_v1", "--data", str(bench.bundle))
    assert result.exit_code == 1 and "the pack is for domain 'sandbox_external_retail'" in result.output
    result = _check(str(tmp_path / "absent.yaml"))
    assert result.exit_code == 1 and "cannot read" in result.output


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


def _row(task: Task, table: str, **where: Any) -> dict[str, Any]:
    for row in task.data_patch.get(table, []):
        if all(row.get(k) == v for k, v in where.items()):
            return dict(row)
    raise LookupError(f"no {table} row with {where}")


ORDERS = "external_retail_toolset_oms_models_orders"
JOBS = "external_retail_toolset_jobber_models_installation_jobs"


def test_cancel_of_a_shipped_order_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task = next(
        t for t in retail_tasks if any(r["status"] == "shipped" for r in t.data_patch.get(ORDERS, []))
    )
    order = _row(task, ORDERS, status="shipped")
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
    task, args = _golden(retail_tasks, "cancel_order")
    with _session(retail, database, retail_pack, task, upto=_is("cancel_order")) as (env, session):
        assert session.call("cancel_order", args).verdict is Verdict.ALLOWED
        outcome = _refused_unchanged(env, session, "cancel_order", args)
        assert _rule_ids(outcome) == {"retail.cancel_order.eligible_status"}


def test_refund_above_what_was_paid_is_refused(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, args = _golden(retail_tasks, "create_refund", refund_reason="order_cancelled")
    with _session(retail, database, retail_pack, task, upto=_is("create_refund")) as (env, session):
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
        task, args = _golden(retail_tasks, "create_refund", refund_reason=reason)
        with _session(retail, database, retail_pack, task, upto=_is("create_refund")) as (env, session):
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
    shipped_task = next(
        t
        for t in retail_tasks
        if any(r["status"] == "shipped" for r in t.data_patch.get(ORDERS, []))
        and t.data_patch.get("external_retail_toolset_oms_models_order_line_items")
    )
    shipped = _row(shipped_task, ORDERS, status="shipped")
    line = _row(shipped_task, "external_retail_toolset_oms_models_order_line_items", order_id=shipped["id"])
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
    task = next(
        t for t in retail_tasks if any(r["status"] == "completed" for r in t.data_patch.get(JOBS, []))
    )
    job = _row(task, JOBS, status="completed")
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
    task, args = _golden(retail_tasks, "update_membership_status", action="cancel")
    with _session(retail, database, retail_pack, task, upto=_is("update_membership_status")) as (
        env,
        session,
    ):
        upgrade = {"customer_id": args["customer_id"], "action": "upgrade", "membership_type": "plus"}
        outcome = _refused_unchanged(env, session, "update_membership_status", upgrade)
        assert _rule_ids(outcome) == {"retail.membership.upgrade_without_active"}
        assert session.call("update_membership_status", args).verdict is Verdict.ALLOWED
        outcome = _refused_unchanged(env, session, "update_membership_status", args)
        assert _rule_ids(outcome) == {"retail.membership.cancel_only_active"}

    task, args = _golden(retail_tasks, "create_refund", refund_reason="order_cancelled")
    with _session(retail, database, retail_pack, task, upto=_is("create_refund")) as (env, session):
        outcome = _refused_unchanged(env, session, "create_refund", {**args, "customer_id": "CUS-00000000"})
        assert _rule_ids(outcome) == {"retail.records.order_customer"}


def test_ticket_rules_roll_back_and_hold_the_commit(
    retail: Domain, database: Database, retail_tasks: list[Task], retail_pack: PolicyPack
) -> None:
    task, args = _golden(retail_tasks, "zendesk_create_item", table="tickets")
    with _session(retail, database, retail_pack, task, upto=_is("zendesk_create_item")) as (env, session):
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
