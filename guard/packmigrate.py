"""Format v1 → v2 migration of a policy pack (``shadowguard check PACK --migrate``).

The migration is mechanical and keeps behaviour: every table a SQL check reads gets an alias (the part
of its name after ``_models_`` when that is unique, else the whole name), each tool's effect,
visibility, retry override and compensation become one ``tools:`` entry, checks become ``rules`` with
the v2 phase names, and SQL checks are kept as raw ``sql:`` rules (their ``:parameters`` are bound as
before, untyped) with the physical table names replaced by the aliases. Rewriting them as
``require``/``forbid`` expressions is left to the author: it is where the casts and tolerances go away,
and it needs a person to read the policy text. ``argument``/``above`` approvals become ``when``
conditions. YAML comments are not carried over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from guard.policy import PolicyPack, PolicyPackModel
from guard.sqltext import parse_select, referenced_tables

_PHASES = {"before_call": "before", "after_call": "after", "at_commit": "commit"}


class MigrationError(ValueError):
    """A pack that cannot be migrated (it is already v2)."""


def migrate(pack: PolicyPack) -> str:
    """The v2 YAML text of a loaded v1 pack."""
    model = pack.model
    if model.version != 1:
        raise MigrationError(f"pack {model.name!r} is already format v{model.version}")
    aliases = _aliases(model)
    physical = {table: alias for alias, table in aliases.items()}
    doc: dict[str, Any] = {"version": 2, "name": model.name}
    for key in ("domain", "description", "module"):
        if getattr(model, key) is not None:
            doc[key] = getattr(model, key)
    if aliases:
        doc["tables"] = aliases
    doc["surface"] = "listed" if model.tools.allow is not None else "all"
    doc["tools"] = _tools(model)
    doc["rules"] = [_rule(check, physical) for check in model.checks]
    approvals = [_approval(rule) for rule in model.approvals]
    if approvals:
        doc["approvals"] = approvals
    errors = model.errors.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if errors:
        doc["errors"] = errors
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def _aliases(model: PolicyPackModel) -> dict[str, str]:
    tables: list[str] = []
    for check in model.checks:
        if check.sql is not None:
            for table in sorted(referenced_tables(parse_select(check.sql))):
                if table not in tables:
                    tables.append(table)
    short = {t: t.split("_models_", 1)[1] if "_models_" in t else t for t in tables}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    out: dict[str, str] = {}
    for table in tables:
        alias = short[table] if counts[short[table]] == 1 and short[table] != "args" else table
        out[alias] = table
    return out


def _tools(model: PolicyPackModel) -> dict[str, Any]:
    allow = model.tools.allow
    names = list(allow or [])
    names += [t for t in model.tools.effects if t not in names]
    names += [t for t in model.tools.compensations if t not in names]
    names += [r.tool for r in model.retry if r.tool not in names]
    retry = {r.tool: r for r in model.retry}
    out: dict[str, Any] = {}
    for tool in names:
        entry: dict[str, Any] = {}
        effect = model.tools.effects.get(tool)
        if effect is not None:
            entry["effect"] = effect.value
        if allow is not None and tool not in allow:
            entry["visible"] = False
        if tool in retry:
            r = retry[tool]
            entry["retry"] = {"max_attempts": r.max_attempts}
            if r.idempotent is not None:
                entry["retry"]["idempotent"] = r.idempotent
        compensation = model.tools.compensations.get(tool)
        if compensation is not None:
            entry["compensation"] = compensation.model_dump(mode="json")
        out[tool] = entry["effect"] if set(entry) == {"effect"} else entry
    return out


def _rule(check: Any, physical: Mapping[str, str]) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": check.id, "phase": _PHASES[check.phase]}
    if check.tools is not None:
        rule["tools"] = list(check.tools)
    rule["source"] = check.source.model_dump(mode="json", exclude_none=True)
    rule["message"] = check.message
    if check.hint is not None:
        rule["hint"] = check.hint
    if check.python is not None:
        rule["python"] = check.python
    else:
        rule["sql"] = _renamed(check.sql, physical)
    return rule


def _renamed(sql: str, physical: Mapping[str, str]) -> str:
    """``sql`` with each physical table name replaced by its alias (a table the pack reads)."""
    for table, alias in sorted(physical.items(), key=lambda item: -len(item[0])):
        if table != alias:
            sql = re.sub(rf"(?<![\w.\"]){re.escape(table)}(?![\w\"])", alias, sql)
    parse_select(sql)  # still one read-only SELECT
    return sql if sql.endswith("\n") else sql + "\n"


def _approval(rule: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rule.id}
    if rule.tools is not None:
        out["tools"] = list(rule.tools)
    if rule.effect is not None:
        out["effect"] = rule.effect.value
    if rule.argument is not None:
        above = int(rule.above) if float(rule.above).is_integer() else rule.above
        out["when"] = f"args.{rule.argument} > {above!r}"
    out["source"] = rule.source.model_dump(mode="json", exclude_none=True)
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (SQL) as ``|`` blocks, so error lines point inside them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)
