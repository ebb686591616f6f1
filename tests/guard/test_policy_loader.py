"""Loading a policy pack: a bad pack is refused naming its file, rule and line; a valid one loads with
every section. Bundle-free: the packs here are written for a small shop schema or the demo app.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from guard.models import EffectClass
from guard.policy import PolicyError, load_policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PACK = ROOT / "policies" / "example" / "policy.yaml"

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


PYTHON_PACK = """
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


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        ("missing", "function 'missing' not found"),
        ("two", "'two' must take one argument"),
        ("NOT_CALLABLE", "'NOT_CALLABLE' is not a function"),
        ("no_such_module_xyz:check", "module 'no_such_module_xyz' not found"),
    ],
)
def test_python_function_missing_or_unusable(tmp_path: Path, function: str, fragment: str) -> None:
    (tmp_path / "rules.py").write_text(
        "def ok(ctx):\n    return []\n\ndef two(ctx, extra):\n    return []\n\nNOT_CALLABLE = 3\n",
        encoding="utf-8",
    )
    error = _error(_write(tmp_path, PYTHON_PACK.replace("{function}", function)))
    assert (error.rule, error.line) == ("absent", 13), str(error)
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("module", "fragments"),
    [("absent.py", ("module file", "absent.py")), ("broken.py", ("RuntimeError: boom at import",))],
)
def test_python_module_missing_or_broken(tmp_path: Path, module: str, fragments: tuple[str, ...]) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n", encoding="utf-8")
    pack = """
        name: python
        description: a pack whose module is missing or broken
        module: {module}
        checks:
          - id: c
            phase: at_commit
            message: m
            source: {ref: s}
            python: f
        """
    error = _error(_write(tmp_path, pack.replace("{module}", module)))
    assert error.line == 3
    assert all(fragment in str(error) for fragment in fragments), str(error)


def test_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError, match="cannot read") as info:
        load_policy(missing)
    assert info.value.file == str(missing)


def test_pack_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, "- just\n- a list\n"))
    assert error.line == 1 and "a policy pack is a YAML mapping" in str(error)


def test_pack_folder_loads_its_policy_yaml() -> None:
    assert load_policy(EXAMPLE_PACK.parent).name == load_policy(EXAMPLE_PACK).name == "example"


def test_pack_for_another_domain_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        name: wrong-domain
        description: d
        domain: external_booking_v1
        """,
    )
    error = _error(path, domain="sandbox_external_retail")
    assert error.line == 3
    assert "for domain 'external_booking_v1', not 'sandbox_external_retail'" in str(error)


# -- valid packs ------------------------------------------------------------------------------------
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
