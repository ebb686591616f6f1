"""Which effect class a tool call has, decided before it runs.

Order of authority: the policy pack, then the MCP tool annotations the upstream declares, then SQL
analysis of a SQL argument (for tools that take SQL), then the safe default: ``write`` (rehearsed in a
savepoint and checked; never assumed harmless).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guard.models import EffectClass
from guard.sqltext import SqlTextError, classify_statement

SQL_ARGUMENTS = ("sql", "query", "statement")


@dataclass(frozen=True)
class ToolInfo:
    """What the guard knows about a tool: its name, JSON input schema and MCP annotations."""

    name: str
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)
    """MCP annotations, wire names: readOnlyHint, destructiveHint, idempotentHint, openWorldHint."""
    sql_dialect: str | None = None
    """Set for tools whose SQL argument should be analysed (the tool runs SQL it is given); ``""``:
    analyse it in sqlglot's generic dialect."""
    sql_argument: str | None = None
    """The argument holding the SQL (None: the first of ``SQL_ARGUMENTS`` the call has)."""


def classify(
    tool: ToolInfo, arguments: Mapping[str, Any], policy_effect: EffectClass | None = None
) -> tuple[EffectClass, str]:
    """(effect, why) for one call."""
    if policy_effect is not None:
        return policy_effect, "policy pack"
    hints = tool.annotations
    if hints.get("readOnlyHint") is True:
        return EffectClass.READ, "readOnlyHint"
    if hints.get("destructiveHint") is True:
        return EffectClass.IRREVERSIBLE, "destructiveHint"
    if hints.get("destructiveHint") is False:
        return EffectClass.WRITE, "destructiveHint=false"
    if tool.sql_dialect is not None:
        names = (tool.sql_argument,) if tool.sql_argument is not None else SQL_ARGUMENTS
        dialect = tool.sql_dialect or None
        for name in names:
            value = arguments.get(name)
            if isinstance(value, str):
                try:
                    return classify_statement(value, dialect), f"SQL analysis of {name!r}"
                except SqlTextError:
                    return EffectClass.IRREVERSIBLE, f"unparseable SQL in {name!r}"
    return EffectClass.WRITE, "default"


def detected_sql_argument(input_schema: Mapping[str, Any], about: str = "") -> str | None:
    """The SQL argument of a tool that, by its shape, runs the SQL it is given: exactly one property,
    a string named one of ``SQL_ARGUMENTS``, and either that name is ``sql`` or ``about`` (the tool's
    name and description) says SQL (``read_query(query)``: "Execute a SELECT query on the SQLite
    database"). None for any other shape: ``search_nodes(query)`` takes words, not SQL, and a tool
    with more arguments is configured explicitly."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping) or len(properties) != 1:
        return None
    name, spec = next(iter(properties.items()))
    if name not in SQL_ARGUMENTS or not isinstance(spec, Mapping) or spec.get("type") != "string":
        return None
    if name != "sql" and "sql" not in about.lower():
        return None
    return str(name)
