"""Policy pack format v2: one entry per tool, table aliases, rules written the way the policy reads.

::

    version: 2
    name: shop
    tables: {orders: shop_orders_v3}              # alias -> physical table
    surface: listed                               # listed (default) | all
    tools:
      get_order: read                             # a bare string is the effect
      cancel_order:
        effect: irreversible
        retry: {max_attempts: 1, idempotent: false}
        approval: {when: "args.amount > 500", source: {ref: ..., quote: ...}}
      delete_order: {effect: irreversible, visible: false}
    rules:
      - id: shop.cancel.open_only
        phase: before                             # before | after | commit
        tools: [cancel_order]
        source: {ref: ..., quote: ...}            # required
        message: Only open orders can be cancelled.
        require: {from: orders o, where: o.id = args.order_id, that: o.status = 'open'}

A rule's body is exactly one of ``forbid: {from?, where}`` (a violation for every row matching),
``require: {from?, where?, that}`` (a violation for every row in scope where ``that`` is not TRUE;
NULL fails), ``python:`` (as v1) or ``sql:`` (a raw SELECT returning the violating rows, the escape
hatch). Expressions are compiled by :mod:`guard.ruleexpr` (aliases, typed ``args``, money helpers,
type checks). The pack is lowered into the v1 model (:class:`~guard.policy.PolicyPackModel`, version 2)
so that everything downstream (session, proxy, journal, pack tests) reads one shape.

Visibility: with ``surface: listed`` only the tools listed under ``tools:`` and not ``visible: false``
are on the agent's surface (deny by default); with ``surface: all`` every upstream tool is, except
those marked ``visible: false``. Errors are :class:`~guard.policy.PolicyError` naming file, rule, line.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from guard.checks import RuleText, SqlCheck
from guard.models import EffectClass, PolicySource
from guard.policy import (
    ApprovalRule,
    CheckRule,
    Compensation,
    ErrorRules,
    PolicyError,
    PolicyPack,
    PolicyPackModel,
    RetryRule,
    ToolRules,
    compile_pack,
    model_error,
)
from guard.ruleexpr import Compiled, ExprError, Scope, compile_check, compile_condition, compile_raw

PHASES: dict[str, Literal["before_call", "after_call", "at_commit"]] = {
    "before": "before_call",
    "after": "after_call",
    "commit": "at_commit",
}
_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Retry(_Strict):
    max_attempts: int = Field(ge=1, le=10)
    idempotent: bool | None = None


class ToolApproval(_Strict):
    """The tool's calls wait for a person (when ``when`` holds on the call and the shadow state)."""

    id: str | None = None
    """Default: ``<tool>.approval``."""
    when: str | None = None
    source: PolicySource


class ToolEntry(_Strict):
    effect: EffectClass | None = None
    visible: bool = True
    retry: Retry | None = None
    approval: ToolApproval | None = None
    compensation: Compensation | None = None


class Forbid(_Strict):
    from_: str | None = Field(default=None, alias="from")
    where: str


class Require(_Strict):
    from_: str | None = Field(default=None, alias="from")
    where: str | None = None
    that: str


class Rule(_Strict):
    id: str = Field(min_length=1)
    phase: Literal["before", "after", "commit"]
    tools: list[str] | None = None
    source: PolicySource
    message: str
    hint: str | None = None
    forbid: Forbid | None = None
    require: Require | None = None
    python: str | None = None
    sql: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> Rule:
        bodies = [b for b in (self.forbid, self.require, self.python, self.sql) if b is not None]
        if len(bodies) != 1:
            raise ValueError("a rule needs exactly one of 'forbid', 'require', 'python' or 'sql'")
        if self.phase == "commit" and self.tools is not None:
            raise ValueError("a commit rule runs once per commit, not per tool: remove 'tools'")
        return self


class Approval(_Strict):
    id: str = Field(min_length=1)
    tools: list[str] | None = None
    effect: EffectClass | None = None
    when: str | None = None
    source: PolicySource

    @model_validator(mode="after")
    def _matches_something(self) -> Approval:
        if self.tools is None and self.effect is None and self.when is None:
            raise ValueError("an approval rule needs 'tools', 'effect' or 'when'")
        return self


class PackV2(_Strict):
    version: Literal[2]
    name: str
    domain: str | None = None
    description: str | None = None
    module: str | None = None
    tables: dict[str, str] = Field(default_factory=dict)
    surface: Literal["listed", "all"] = "listed"
    tools: dict[str, EffectClass | ToolEntry] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    approvals: list[Approval] = Field(default_factory=list)
    errors: ErrorRules = Field(default_factory=ErrorRules)

    def entries(self) -> dict[str, ToolEntry]:
        """Every tool entry in its long form."""
        return {t: e if isinstance(e, ToolEntry) else ToolEntry(effect=e) for t, e in self.tools.items()}


_Loc = tuple[Any, ...]


@dataclass
class _Where:
    """Where things are in the YAML: the file, each key's line, block scalars' first content lines."""

    file: str
    lines: Mapping[_Loc, int]
    blocks: Mapping[_Loc, int]

    def line(self, loc: Sequence[Any]) -> int | None:
        path = tuple(loc)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def start(self, loc: _Loc) -> int | None:
        """The line a scalar's text starts on (a ``|`` block's first content line, else the key's)."""
        return self.blocks.get(loc, self.lines.get(loc))

    def fail(self, loc: Sequence[Any], rule: str, message: str, line: int | None = None) -> PolicyError:
        line = line if line is not None else self.line(loc)
        return PolicyError(
            f"{self.file}: line {line}: rule {rule}: {message}", file=self.file, rule=rule, line=line
        )

    def expr_error(self, exc: ExprError, rule: str, pieces: Mapping[str, tuple[_Loc, str]]) -> PolicyError:
        """``exc`` located: the failing piece's line, or the first line of a piece naming its token."""
        message = str(exc)
        if exc.piece is not None and exc.piece in pieces:
            loc, _text = pieces[exc.piece]
            start = self.start(loc)
            line = start + (exc.line or 1) - 1 if start is not None else None
            return self.fail(loc, rule, message, line)
        if exc.token:
            pattern = re.compile(rf"(?<![\w$]){re.escape(exc.token.lower())}(?!\w)")
            for loc, text in pieces.values():
                for number, content in enumerate(text.splitlines(), start=0):
                    if pattern.search(content.lower()):
                        start = self.start(loc)
                        return self.fail(loc, rule, message, start + number if start is not None else None)
        first = next(iter(pieces.values()), ((), ""))[0]
        return self.fail(first, rule, message)


def load_v2(
    data: Mapping[str, Any],
    *,
    path: Path,
    lines: Mapping[_Loc, int],
    blocks: Mapping[_Loc, int],
    schema: Mapping[str, Sequence[str]] | None,
    column_types: Mapping[str, Mapping[str, str]] | None,
    tools: Sequence[str] | None,
    tool_schemas: Mapping[str, Mapping[str, Any]] | None,
    tool_arguments: Mapping[str, Collection[str]] | None,
    domain: str | None,
) -> PolicyPack:
    """Validate a v2 pack, compile its expressions and lower it into the v1 model (see the module doc)."""
    where = _Where(str(path), lines, blocks)
    try:
        doc = PackV2.model_validate(data)
    except ValidationError as exc:
        raise model_error(exc, data, lines, str(path)) from exc
    if domain is not None and doc.domain is not None and doc.domain != domain:
        raise where.fail(("domain",), "domain", f"the pack is for domain {doc.domain!r}, not {domain!r}")
    columns = _columns(schema, column_types)
    _check_tables(doc, schema, where)
    entries = doc.entries()
    if tools is not None:
        for tool in entries:
            if tool not in tools:
                raise where.fail(("tools", tool), f"tools.{tool}", f"unknown tool {tool!r}")
    if doc.surface == "listed":
        for i, rule in enumerate(doc.rules):
            for j, tool in enumerate(rule.tools or ()):
                if tool not in entries:
                    raise where.fail(
                        ("rules", i, "tools", j), rule.id, f"tool {tool!r} is not listed under 'tools:'"
                    )

    base = Scope(aliases=doc.tables, columns=columns, tool_schemas=tool_schemas)

    def scope(rule_tools: Sequence[str] | None) -> Scope:
        return dataclasses.replace(base, tools=rule_tools)

    checks: list[CheckRule] = []
    compiled: dict[str, Compiled] = {}
    for i, rule in enumerate(doc.rules):
        rule_scope = scope(None if rule.phase == "commit" else (rule.tools or []))
        sql = None
        if rule.python is None:
            pieces = _pieces(rule, i)
            try:
                if rule.forbid is not None:
                    result = compile_check(rule_scope, source=rule.forbid.from_, where=rule.forbid.where)
                elif rule.require is not None:
                    body = rule.require
                    result = compile_check(rule_scope, source=body.from_, where=body.where, that=body.that)
                else:
                    assert rule.sql is not None
                    result = compile_raw(rule_scope, rule.sql)
            except ExprError as exc:
                raise where.expr_error(exc, rule.id, pieces) from exc
            compiled[rule.id] = result
            sql = result.sql
        checks.append(
            CheckRule(
                id=rule.id,
                phase=PHASES[rule.phase],
                tools=rule.tools,
                sql=sql,
                python=rule.python,
                message=rule.message,
                hint=rule.hint,
                source=rule.source,
            )
        )
    approvals, approval_locs = _approvals(doc, entries)
    conditions: dict[str, Compiled] = {}
    for approval, loc in zip(approvals, approval_locs, strict=True):
        if approval.when is None:
            continue
        try:
            conditions[approval.id] = compile_condition(scope(approval.tools or []), approval.when)
        except ExprError as exc:
            raise where.expr_error(exc, approval.id, {"when": ((*loc, "when"), approval.when)}) from exc
    model = PolicyPackModel(
        version=2,
        name=doc.name,
        domain=doc.domain,
        description=doc.description,
        module=doc.module,
        tools=ToolRules(
            allow=[t for t, e in entries.items() if e.visible] if doc.surface == "listed" else None,
            effects={t: e.effect for t, e in entries.items() if e.effect is not None},
            compensations={t: e.compensation for t, e in entries.items() if e.compensation is not None},
        ),
        checks=checks,
        approvals=approvals,
        retry=[
            RetryRule(tool=t, max_attempts=e.retry.max_attempts, idempotent=e.retry.idempotent)
            for t, e in entries.items()
            if e.retry is not None
        ],
        errors=doc.errors,
    )
    pack = compile_pack(
        model,
        path=path,
        lines=_v1_lines(doc, entries, approval_locs, where),
        blocks={},
        schema=None,  # every SQL text was validated against the schema above (ruleexpr)
        tools=tools,
        tool_arguments=tool_arguments,
        domain=domain,
    )
    for check in pack.checks:
        if isinstance(check, SqlCheck) and check.id in compiled:
            check.arguments = compiled[check.id].arguments
    pack.hidden = frozenset(t for t, e in entries.items() if not e.visible)
    pack.conditions = {
        rule_id: SqlCheck.compile(
            rule_id,
            "before_call",
            c.sql,
            RuleText(message=f"approval condition of {rule_id}"),
            arguments=c.arguments,
        )
        for rule_id, c in conditions.items()
    }
    pack.typed = tool_schemas is not None
    pack.document = doc
    return pack


def _columns(
    schema: Mapping[str, Sequence[str]] | None, column_types: Mapping[str, Mapping[str, str]] | None
) -> dict[str, dict[str, str]] | None:
    """Table → column → SQL type for expressions; columns without a known type are not type-checked."""
    if schema is None and column_types is None:
        return None
    out: dict[str, dict[str, str]] = {}
    for table, names in (schema or {}).items():
        out[table] = dict.fromkeys(names, "UNKNOWN")
    for table, types in (column_types or {}).items():
        out.setdefault(table, {}).update(types)
    return out


def _check_tables(doc: PackV2, schema: Mapping[str, Sequence[str]] | None, where: _Where) -> None:
    for alias, physical in doc.tables.items():
        loc = ("tables", alias)
        if not _ALIAS.match(alias) or alias.lower() == "args":
            raise where.fail(loc, f"tables.{alias}", f"{alias!r} cannot be a table alias")
        if schema is not None and physical not in schema:
            raise where.fail(loc, f"tables.{alias}", f"table {physical!r} (alias {alias!r}) does not exist")


def _pieces(rule: Rule, i: int) -> dict[str, tuple[_Loc, str]]:
    """The texts of a rule's body, by name, with where each is in the YAML."""
    out: dict[str, tuple[_Loc, str]] = {}
    if rule.forbid is not None:
        if rule.forbid.from_ is not None:
            out["from"] = (("rules", i, "forbid", "from"), rule.forbid.from_)
        out["where"] = (("rules", i, "forbid", "where"), rule.forbid.where)
    elif rule.require is not None:
        if rule.require.from_ is not None:
            out["from"] = (("rules", i, "require", "from"), rule.require.from_)
        if rule.require.where is not None:
            out["where"] = (("rules", i, "require", "where"), rule.require.where)
        out["that"] = (("rules", i, "require", "that"), rule.require.that)
    elif rule.sql is not None:
        out["sql"] = (("rules", i, "sql"), rule.sql)
    return out


def _approvals(doc: PackV2, entries: Mapping[str, ToolEntry]) -> tuple[list[ApprovalRule], list[_Loc]]:
    """Per-tool approvals (first, in tool order), then the pack-level ones; with their YAML paths."""
    rules: list[ApprovalRule] = []
    locs: list[_Loc] = []
    for tool, entry in entries.items():
        if entry.approval is not None:
            rules.append(
                ApprovalRule(
                    id=entry.approval.id or f"{tool}.approval",
                    tools=[tool],
                    when=entry.approval.when,
                    source=entry.approval.source,
                )
            )
            locs.append(("tools", tool, "approval"))
    for i, approval in enumerate(doc.approvals):
        rules.append(
            ApprovalRule(
                id=approval.id,
                tools=approval.tools,
                effect=approval.effect,
                when=approval.when,
                source=approval.source,
            )
        )
        locs.append(("approvals", i))
    return rules, locs


def _v1_lines(
    doc: PackV2, entries: Mapping[str, ToolEntry], approval_locs: Sequence[_Loc], where: _Where
) -> dict[_Loc, int]:
    """The lowered model's paths → lines of the v2 text, for errors :func:`compile_pack` raises."""
    out: dict[_Loc, int] = dict(where.lines)

    def put(v1: _Loc, v2: _Loc) -> None:
        line = where.line(v2)
        if line is not None:
            out[v1] = line

    for key in ("domain", "module", "name"):
        put((key,), (key,))
    visible = [t for t, e in entries.items() if e.visible]
    for k, tool in enumerate(visible):
        put(("tools", "allow", k), ("tools", tool))
    for tool in entries:
        put(("tools", "effects", tool), ("tools", tool))
        put(("tools", "compensations", tool), ("tools", tool, "compensation"))
        put(("tools", "compensations", tool, "tool"), ("tools", tool, "compensation", "tool"))
        entry = entries[tool]
        if entry.compensation is not None:
            for argument in entry.compensation.arguments:
                put(
                    ("tools", "compensations", tool, "arguments", argument),
                    ("tools", tool, "compensation", "arguments", argument),
                )
    for i, rule in enumerate(doc.rules):
        for sub in ("id", "python", "sql", "tools"):
            put(("checks", i, sub), ("rules", i, sub))
        put(("checks", i), ("rules", i))
        for j in range(len(rule.tools or ())):
            put(("checks", i, "tools", j), ("rules", i, "tools", j))
    for k, loc in enumerate(approval_locs):
        put(("approvals", k), loc)
        put(("approvals", k, "id"), (*loc, "id"))
        put(("approvals", k, "tools"), (*loc, "tools") if loc[0] == "approvals" else loc)
    retried = [t for t, e in entries.items() if e.retry is not None]
    for k, tool in enumerate(retried):
        put(("retry", k, "tool"), ("tools", tool, "retry"))
    return out
