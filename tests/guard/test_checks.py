"""Checks on their own, on the guard-core shop schema (tests.support.guardcore): compiling SQL
assertions, Python predicates, phases, tool filters, fail closed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from guard.checks import Check, CheckContext, Phase, PythonCheck, RuleText, SqlCheck, run_checks
from guard.models import ChangeSet, PolicySource, RowChange, ToolCall, Violation
from guard.sql_backend import SqlBackend
from guard.sqltext import SqlTextError
from tests.support.guardcore import SCHEMA, customers, metadata, orders

TEXT = RuleText("Orders over 100 need a manager.", "Ask a manager.", PolicySource(ref="p#1", quote="q"))


@pytest.fixture
def backend() -> Iterator[SqlBackend]:
    engine = sa.create_engine("sqlite://", poolclass=StaticPool)
    with engine.connect() as conn:
        metadata.create_all(conn)
        conn.execute(customers.insert(), [{"id": "C1", "name": "Ada"}])
        conn.execute(
            orders.insert(),
            [
                {"id": "A", "customer_id": "C1", "status": "open", "total": 50.0},
                {"id": "B", "customer_id": "C1", "status": "open", "total": 150.0},
            ],
        )
        conn.commit()
        backend = SqlBackend(conn, [customers, orders])
        backend.begin()
        yield backend
        backend.rollback()
    engine.dispose()


def context(backend: SqlBackend, phase: Phase, tool: str | None = None, **arguments: Any) -> CheckContext:
    call = ToolCall(tool=tool, arguments=arguments) if tool else None
    return CheckContext(phase=phase, query=backend.query, call=call)


def test_sql_check_compiles_once_for_each_dialect() -> None:
    check = SqlCheck.compile(
        "big",
        "before_call",
        "SELECT id FROM orders WHERE id = :order_id AND total > :limit",
        TEXT,
        schema=SCHEMA,
    )
    assert check.parameters == ("limit", "order_id")
    assert check.dialect_sql == {
        "sqlite": "SELECT id FROM orders WHERE id = :order_id AND total > :limit",
        "postgresql": "SELECT id FROM orders WHERE id = %(order_id)s AND total > %(limit)s",
    }


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DELETE FROM orders", "only SELECT is allowed"),
        ("SELECT id FROM orders; SELECT 1", "exactly one statement"),
        ("SELECT id FROM invoices", "unknown table 'invoices'"),
        ("SELECT colour FROM orders", "Column 'colour' could not be resolved"),
    ],
)
def test_sql_check_refuses_bad_sql_when_it_loads(sql: str, message: str) -> None:
    with pytest.raises(SqlTextError, match=message):
        SqlCheck.compile("bad", "at_commit", sql, TEXT, schema=SCHEMA)


def test_sql_check_returns_the_violating_rows_with_the_rule_text(backend: SqlBackend) -> None:
    check = SqlCheck.compile(
        "big", "before_call", "SELECT id, total FROM orders WHERE id = :order_id AND total > 100", TEXT
    )
    assert check.run(context(backend, "before_call", "pay", order_id="A")) == []
    (violation,) = check.run(context(backend, "before_call", "pay", order_id="B"))
    assert violation == Violation(
        rule_id="big",
        message=TEXT.message,
        hint=TEXT.hint,
        source=TEXT.source,
        rows=[{"id": "B", "total": 150.0}],
    )
    assert check.run(context(backend, "before_call", "pay")) == [], "a missing argument binds NULL"


def test_python_check_accepts_violations_messages_and_rows(backend: SqlBackend) -> None:
    own = Violation(rule_id="custom", message="built by the check")

    def predicate(ctx: CheckContext) -> Iterator[Violation | str | dict[str, Any]]:
        yield own
        yield "plain message"
        yield from ctx.query("SELECT id FROM orders WHERE total > 100", {})
        yield {"id": "extra"}

    found = PythonCheck("mixed", "at_commit", predicate, TEXT).run(context(backend, "at_commit"))
    assert found[0] == own
    assert found[1] == Violation(rule_id="mixed", message="plain message", hint=TEXT.hint, source=TEXT.source)
    assert found[2].message == TEXT.message and found[2].rows == [{"id": "B"}, {"id": "extra"}]
    assert len(found) == 3
    assert PythonCheck("none", "at_commit", lambda ctx: None, TEXT).run(context(backend, "at_commit")) == []


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (
            "order ORD-1 is shipped",
            [Violation(rule_id="one", message="order ORD-1 is shipped", hint=TEXT.hint, source=TEXT.source)],
        ),
        (
            {"id": "ORD-1"},
            [
                Violation(
                    rule_id="one",
                    message=TEXT.message,
                    hint=TEXT.hint,
                    source=TEXT.source,
                    rows=[{"id": "ORD-1"}],
                )
            ],
        ),
        (Violation(rule_id="own", message="m"), [Violation(rule_id="own", message="m")]),
        ([], []),
    ],
)
def test_python_check_takes_a_single_finding_as_one(
    backend: SqlBackend, returned: Any, expected: list[Violation]
) -> None:
    check = PythonCheck("one", "at_commit", lambda ctx: returned, TEXT)
    assert check.run(context(backend, "at_commit")) == expected


def test_python_check_sees_the_change_set(backend: SqlBackend) -> None:
    backend.connection.execute(orders.update().where(orders.c.id == "A").values(status="cancelled"))
    seen: list[ChangeSet] = []

    def predicate(ctx: CheckContext) -> list[str]:
        seen.append(ctx.changes)
        return []

    ctx = CheckContext(phase="at_commit", query=backend.query, changes=backend.changes().net())
    PythonCheck("spy", "at_commit", predicate, TEXT).run(ctx)
    assert seen[0].changes == [
        RowChange(
            table="orders",
            key="A",
            op="update",
            before={"id": "A", "customer_id": "C1", "status": "open", "total": 50.0},
            after={"id": "A", "customer_id": "C1", "status": "cancelled", "total": 50.0},
        )
    ]


def test_run_checks_filters_by_phase_and_tool(backend: SqlBackend) -> None:
    always = PythonCheck("always", "after_call", lambda ctx: ["hit"], TEXT)
    pay_only = PythonCheck("pay_only", "after_call", lambda ctx: ["hit"], TEXT, frozenset({"pay"}))
    commit = PythonCheck("commit", "at_commit", lambda ctx: ["hit"], TEXT, frozenset({"pay"}))
    checks: list[Check] = [always, pay_only, commit]

    def rule_ids(ctx: CheckContext) -> list[str]:
        return [v.rule_id for v in run_checks(checks, ctx)]

    assert rule_ids(context(backend, "after_call", "pay")) == ["always", "pay_only"]
    assert rule_ids(context(backend, "after_call", "refund")) == ["always"]
    assert rule_ids(context(backend, "before_call", "pay")) == []
    assert rule_ids(context(backend, "at_commit")) == ["commit"], "tool filters do not hide commit checks"


def test_run_checks_fails_closed_and_logs(backend: SqlBackend, caplog: pytest.LogCaptureFixture) -> None:
    def raises(ctx: CheckContext) -> list[str]:
        raise KeyError("status")

    checks: list[Check] = [
        PythonCheck("raises", "at_commit", raises, TEXT),
        PythonCheck("not_iterable", "at_commit", lambda ctx: 42, TEXT),  # type: ignore[arg-type,return-value]
        SqlCheck.compile("db_error", "at_commit", "SELECT nope FROM orders", TEXT),
        PythonCheck("passes", "at_commit", lambda ctx: [], TEXT),
    ]
    with caplog.at_level(logging.ERROR, logger="guard.checks"):
        found = run_checks(checks, context(backend, "at_commit"))
    assert [v.rule_id for v in found] == ["raises", "not_iterable", "db_error"]
    assert "(KeyError: 'status')" in found[0].message
    assert all("could not be evaluated" in v.message and v.hint for v in found)
    assert [r.getMessage() for r in caplog.records] == [
        "check raises failed",
        "check not_iterable failed",
        "check db_error failed",
    ]
    assert all(r.exc_info for r in caplog.records)
    assert backend.query("SELECT count(*) AS n FROM orders") == [{"n": 2}]
