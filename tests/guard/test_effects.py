"""Effect classification: policy pack, then MCP annotations, then SQL analysis, then the safe default."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.effects import SQL_ARGUMENTS, ToolInfo, classify
from guard.models import EffectClass

READ, WRITE, IRREVERSIBLE = EffectClass.READ, EffectClass.WRITE, EffectClass.IRREVERSIBLE


def test_unknown_tools_default_to_write() -> None:
    assert classify(ToolInfo("anything"), {}) == (WRITE, "default")
    assert classify(ToolInfo("anything", annotations={"idempotentHint": True}), {}) == (WRITE, "default")


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"readOnlyHint": True}, (READ, "readOnlyHint")),
        ({"readOnlyHint": True, "destructiveHint": True}, (READ, "readOnlyHint")),
        ({"destructiveHint": True}, (IRREVERSIBLE, "destructiveHint")),
        ({"readOnlyHint": False, "destructiveHint": True}, (IRREVERSIBLE, "destructiveHint")),
        ({"destructiveHint": False}, (WRITE, "destructiveHint=false")),
        ({"readOnlyHint": False}, (WRITE, "default")),
    ],
)
def test_annotations(annotations: dict[str, Any], expected: tuple[EffectClass, str]) -> None:
    assert classify(ToolInfo("t", annotations=annotations), {}) == expected


def test_the_policy_pack_overrides_annotations_and_sql() -> None:
    tool = ToolInfo("run_sql", annotations={"readOnlyHint": True}, sql_dialect="sqlite")
    assert classify(tool, {"sql": "DROP TABLE t"}, IRREVERSIBLE) == (IRREVERSIBLE, "policy pack")
    assert classify(tool, {"sql": "DROP TABLE t"}, READ) == (READ, "policy pack")


def test_annotations_override_sql_analysis() -> None:
    tool = ToolInfo("run_sql", annotations={"readOnlyHint": True}, sql_dialect="sqlite")
    assert classify(tool, {"sql": "DELETE FROM t"}) == (READ, "readOnlyHint")


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
@pytest.mark.parametrize(
    ("sql", "effect"),
    [
        ("SELECT * FROM t", READ),
        ("UPDATE t SET a = 1 WHERE id = 1", WRITE),
        ("DELETE FROM t", IRREVERSIBLE),
        ("TRUNCATE TABLE t", IRREVERSIBLE),
        ("DROP TABLE t", IRREVERSIBLE),
    ],
)
def test_sql_analysis_of_sql_tools(sql: str, effect: EffectClass, dialect: str) -> None:
    tool = ToolInfo("run_sql", sql_dialect=dialect)
    for argument in SQL_ARGUMENTS:
        assert classify(tool, {argument: sql}) == (effect, f"SQL analysis of {argument!r}")


@pytest.mark.parametrize("sql", ["SELEC 1", "", '"', "SELECT 'unterminated"])
def test_sql_that_does_not_parse_is_irreversible(sql: str) -> None:
    tool = ToolInfo("run_sql", sql_dialect="sqlite")
    assert classify(tool, {"sql": sql}) == (IRREVERSIBLE, "unparseable SQL in 'sql'")


def test_sql_is_only_analysed_for_tools_that_run_sql() -> None:
    assert classify(ToolInfo("notes"), {"query": "SELECT 1"}) == (WRITE, "default")
    tool = ToolInfo("run_sql", sql_dialect="sqlite")
    assert classify(tool, {"query": 42}) == (WRITE, "default")
    assert classify(tool, {"sql": "SELECT 1", "query": "DROP TABLE t"}) == (READ, "SQL analysis of 'sql'")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]),
        st.booleans() | st.none(),
    ),
    st.sampled_from([None, *EffectClass]),
    st.none() | st.text(max_size=30),
)
def test_classification_is_total_and_follows_the_order_of_authority(
    annotations: dict[str, Any], policy: EffectClass | None, sql: str | None
) -> None:
    tool = ToolInfo("t", annotations=annotations, sql_dialect="sqlite")
    effect, why = classify(tool, {} if sql is None else {"sql": sql}, policy)
    assert isinstance(effect, EffectClass) and why
    if policy is not None:
        assert (effect, why) == (policy, "policy pack")
    elif annotations.get("readOnlyHint") is True:
        assert effect is READ
    elif annotations.get("destructiveHint") is True:
        assert effect is IRREVERSIBLE
    elif annotations.get("destructiveHint") is False or sql is None:
        assert effect is WRITE
    else:
        assert why.startswith(("SQL analysis", "unparseable SQL"))
