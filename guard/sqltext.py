"""SQL text the guard reads: read-only SELECT validation and statement analysis (sqlglot).

Used by :meth:`Backend.query`, by SQL checks when a policy pack loads, and by effect classification of
tools that take SQL.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from guard.models import EffectClass

_READ_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except)
_WRITE_NODES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
)

DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres"}


class SqlTextError(ValueError):
    """SQL that the guard refuses to run or to load."""


def _parse(sql: str, dialect: str | None) -> list[exp.Expression]:
    read = DIALECTS.get(dialect, dialect) if dialect is not None else None
    try:
        parsed: list[Any] = list(sqlglot.parse(sql, read=read))
    except SqlglotError as exc:  # ParseError, TokenError (e.g. an unterminated quote)
        raise SqlTextError(f"SQL does not parse: {exc}") from exc
    statements: list[exp.Expression] = [s for s in parsed if isinstance(s, exp.Expression)]
    if not statements:
        raise SqlTextError("SQL is empty")
    return statements


def parse_select(sql: str, dialect: str | None = None) -> exp.Expression:
    """The single read-only SELECT in ``sql``; anything else raises :class:`SqlTextError`."""
    statements = _parse(sql, dialect)
    if len(statements) != 1:
        raise SqlTextError(f"exactly one statement is allowed, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, _READ_ROOTS):
        raise SqlTextError(f"only SELECT is allowed, found {tree.key.upper()}")
    writer = _first_writer(tree)
    if writer is not None:
        raise SqlTextError(f"only read-only SELECT is allowed, found {type(writer).__name__.upper()}")
    return tree


def _first_writer(tree: exp.Expression) -> exp.Expression | None:
    """A node that writes (DML, DDL, SELECT ... INTO), anywhere in the tree."""
    for node in tree.walk():
        if isinstance(node, _WRITE_NODES) or (isinstance(node, exp.Select) and node.args.get("into")):
            return node
    return None


def referenced_tables(tree: exp.Expression) -> set[str]:
    """Names of the real tables a statement reads (CTE names excluded)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}


def validate_against(tree: exp.Expression, schema: Mapping[str, Collection[str]]) -> None:
    """Every table and (qualified or unambiguous) column must exist in ``schema``."""
    from sqlglot.optimizer.qualify import qualify

    unknown = sorted(referenced_tables(tree) - set(schema))
    if unknown:
        raise SqlTextError(f"unknown table {unknown[0]!r}")
    mapping: dict[str, object] = {t: dict.fromkeys(cols, "TEXT") for t, cols in schema.items()}
    try:
        qualify(tree.copy(), schema=mapping, validate_qualify_columns=True, quote_identifiers=False)
    except sqlglot.errors.OptimizeError as exc:
        raise SqlTextError(str(exc)) from exc


def transpile(tree: exp.Expression, dialect: str) -> str:
    return tree.sql(dialect=DIALECTS.get(dialect, dialect))


def classify_statement(sql: str, dialect: str | None = None) -> EffectClass:
    """SELECT → read; DML → write; DELETE/UPDATE without WHERE, DROP, TRUNCATE, other DDL → irreversible."""
    effects = []
    for tree in _parse(sql, dialect):
        if isinstance(tree, _READ_ROOTS) and _first_writer(tree) is None:
            effects.append(EffectClass.READ)
        elif isinstance(tree, exp.Delete | exp.Update):
            effects.append(EffectClass.IRREVERSIBLE if tree.args.get("where") is None else EffectClass.WRITE)
        elif isinstance(tree, exp.Insert | exp.Merge):
            effects.append(EffectClass.WRITE)
        else:
            effects.append(EffectClass.IRREVERSIBLE)
    order = [EffectClass.READ, EffectClass.WRITE, EffectClass.IRREVERSIBLE]
    return max(effects, key=order.index)
