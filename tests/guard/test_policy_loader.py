"""Loading a policy pack: a bad pack is refused naming its file, rule and line (the table of bad
packs). Bundle-free: the packs are written for a small shop schema (tests/support/packs.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.packs import pack_error, write_pack

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
    path = write_pack(tmp_path, text)
    error = pack_error(path)
    assert error.line == line, str(error)
    if rule is not None:
        assert error.rule == rule, str(error)
    assert fragment in str(error)
    assert "\x1b[" not in str(error)
