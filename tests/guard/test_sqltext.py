"""SQL text analysis: read-only SELECT validation, schema references, statement effect classes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.models import EffectClass
from guard.sqltext import SqlTextError, classify_statement, parse_select, transpile, validate_against

READ, WRITE, IRREVERSIBLE = EffectClass.READ, EffectClass.WRITE, EffectClass.IRREVERSIBLE
DIALECTS = [None, "sqlite", "postgresql", "postgres"]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("sql", "effect"),
    [
        ("SELECT 1", READ),
        ("SELECT * FROM t WHERE a = 1;", READ),
        ("SELECT a FROM t UNION SELECT a FROM u", READ),
        ("WITH x AS (SELECT a FROM t) SELECT * FROM x", READ),
        ("SELECT 1; SELECT 2", READ),
        ("INSERT INTO t VALUES (1)", WRITE),
        ("INSERT INTO t SELECT * FROM u", WRITE),
        ("INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET a = 2", WRITE),
        ("UPDATE t SET a = 1 WHERE id = 2", WRITE),
        ("DELETE FROM t WHERE id = 1", WRITE),
        ("MERGE INTO t USING u ON t.id = u.id WHEN MATCHED THEN UPDATE SET a = 1", WRITE),
        ("UPDATE t SET a = 1", IRREVERSIBLE),
        ("DELETE FROM t", IRREVERSIBLE),
        ("DROP TABLE t", IRREVERSIBLE),
        ("TRUNCATE TABLE t", IRREVERSIBLE),
        ("CREATE TABLE x (a INT)", IRREVERSIBLE),
        ("ALTER TABLE t ADD COLUMN b INT", IRREVERSIBLE),
        ("CREATE INDEX i ON t (a)", IRREVERSIBLE),
        ("GRANT ALL ON t TO bob", IRREVERSIBLE),
        ("COMMIT", IRREVERSIBLE),
        ("SELECT * INTO n FROM t", IRREVERSIBLE),
        ("WITH d AS (DELETE FROM t WHERE id = 1 RETURNING *) SELECT * FROM d", IRREVERSIBLE),
        ("SELECT 1; DELETE FROM t WHERE id = 1", WRITE),
        ("DELETE FROM t WHERE id = 1; DROP TABLE t", IRREVERSIBLE),
        ("SELECT 1; UPDATE t SET a = 1", IRREVERSIBLE),
    ],
)
def test_classify_statement(sql: str, effect: EffectClass, dialect: str | None) -> None:
    assert classify_statement(sql, dialect) is effect


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncate_in_both_spellings(dialect: str | None) -> None:
    assert classify_statement("TRUNCATE t", dialect) is IRREVERSIBLE


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("", "SQL is empty"),
        ("-- only a comment", "SQL is empty"),
        ("SELEC 1", "SQL does not parse"),
        ("SELECT 1; SELECT 2", "exactly one statement is allowed, found 2"),
        ("SELECT 1; DELETE FROM t", "exactly one statement is allowed, found 2"),
        ("DELETE FROM t WHERE id = 1", "only SELECT is allowed, found DELETE"),
        ("INSERT INTO t VALUES (1)", "only SELECT is allowed, found INSERT"),
        ("DROP TABLE t", "only SELECT is allowed, found DROP"),
        ("PRAGMA writable_schema = 1", "only SELECT is allowed"),
        ("SELECT * INTO n FROM t", "only read-only SELECT is allowed"),
        (
            "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
            "only read-only SELECT is allowed, found DELETE",
        ),
    ],
)
def test_parse_select_refuses_anything_but_one_read_only_select(sql: str, message: str) -> None:
    with pytest.raises(SqlTextError, match=message):
        parse_select(sql)


def test_parse_select_takes_the_backend_dialect_names() -> None:
    assert parse_select("SELECT a::int FROM t", "postgresql").sql() == "SELECT CAST(a AS INT) FROM t"
    assert parse_select("SELECT 1", "sqlite").sql() == "SELECT 1"


def test_transpile_to_driver_parameter_styles() -> None:
    tree = parse_select("SELECT a FROM t WHERE b = :p LIMIT 1")
    assert transpile(tree, "postgresql") == "SELECT a FROM t WHERE b = %(p)s LIMIT 1"
    assert transpile(tree, "sqlite") == "SELECT a FROM t WHERE b = :p LIMIT 1"


SCHEMA = {"t": ["a", "b"], "u": ["a", "c"]}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t",
        "SELECT x.a FROM t AS x",
        "SELECT c FROM t JOIN u ON t.a = u.a",
        "WITH w AS (SELECT a FROM t) SELECT a FROM w",
        "SELECT a FROM t WHERE a IN (SELECT a FROM u WHERE c = 1)",
        "SELECT a FROM t WHERE b = :p",
        "SELECT count(*) AS n FROM t",
    ],
)
def test_validate_against_accepts_known_references(sql: str) -> None:
    validate_against(parse_select(sql), SCHEMA)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM v", "unknown table 'v'"),
        ("SELECT a FROM t JOIN v ON t.a = v.a", "unknown table 'v'"),
        ("SELECT nope FROM t", "Column 'nope' could not be resolved"),
        ("SELECT t.nope FROM t", "Unknown column: nope"),
        ("SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.zz = t.a)", "Unknown column: zz"),
        ("SELECT a FROM t JOIN u ON t.a = u.a", "Column 'a' could not be resolved"),
    ],
)
def test_validate_against_names_the_unknown_reference(sql: str, message: str) -> None:
    with pytest.raises(SqlTextError, match=message):
        validate_against(parse_select(sql), SCHEMA)


# -- property: parse_select and classify_statement agree on single statements -------------------------
names = st.sampled_from(["t", "u", "orders", "items"])
columns = st.sampled_from(["a", "b", "id", "status"])
literals = st.integers(-5, 5).map(str) | st.sampled_from(["'x'", "NULL", "TRUE"])
conditions = st.builds(lambda c, op, v: f"{c} {op} {v}", columns, st.sampled_from(["=", "<", "<>"]), literals)
wheres = st.none() | conditions


def _where(w: str | None) -> str:
    return f" WHERE {w}" if w else ""


selects = st.builds(lambda c, t, w: f"SELECT {c} FROM {t}{_where(w)}", columns, names, wheres)
statements = st.one_of(
    selects.map(lambda s: (s, READ)),
    st.builds(lambda a, b: (f"{a} UNION ALL {b}", READ), selects, selects),
    st.builds(lambda s: (f"WITH q AS ({s}) SELECT * FROM q", READ), selects),
    st.builds(lambda t, c, v: (f"INSERT INTO {t} ({c}) VALUES ({v})", WRITE), names, columns, literals),
    st.builds(
        lambda t, c, v, w: (f"UPDATE {t} SET {c} = {v}{_where(w)}", WRITE if w else IRREVERSIBLE),
        names,
        columns,
        literals,
        wheres,
    ),
    st.builds(lambda t, w: (f"DELETE FROM {t}{_where(w)}", WRITE if w else IRREVERSIBLE), names, wheres),
    st.builds(lambda t: (f"DROP TABLE {t}", IRREVERSIBLE), names),
    st.builds(lambda t: (f"TRUNCATE TABLE {t}", IRREVERSIBLE), names),
)


@settings(max_examples=150, deadline=None)
@given(statements, st.sampled_from(DIALECTS))
def test_single_statements_read_iff_parse_select_accepts(
    statement: tuple[str, EffectClass], dialect: str | None
) -> None:
    sql, effect = statement
    assert classify_statement(sql, dialect) is effect
    if effect is READ:
        parse_select(sql, dialect)
    else:
        with pytest.raises(SqlTextError):
            parse_select(sql, dialect)


@settings(max_examples=100, deadline=None)
@given(st.lists(statements, min_size=1, max_size=4))
def test_a_script_is_as_dangerous_as_its_worst_statement(script: list[tuple[str, EffectClass]]) -> None:
    order = [READ, WRITE, IRREVERSIBLE]
    worst = max((e for _, e in script), key=order.index)
    assert classify_statement("; ".join(s for s, _ in script)) is worst
    if len(script) > 1:
        with pytest.raises(SqlTextError, match="exactly one statement"):
            parse_select("; ".join(s for s, _ in script))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_is_parsed_or_refused_with_a_clear_error(text: str) -> None:
    try:
        classify_statement(text)
    except SqlTextError as exc:
        assert str(exc)
    try:
        parse_select(text)
    except SqlTextError as exc:
        assert str(exc)
