"""Policy packs: YAML (+ an optional Python module) saying what a domain's tools may do.

A pack names the tool allowlist and effect classes, the checks (SQL or Python), approval rules, retry
overrides and compensating tools. Every rule cites the policy text it enforces (``source``). Rules
read state, never the agent's call history, and never name a benchmark task or a record id.

Loading validates everything up front, so that a typo fails at load time rather than turning a rule
into one that silently never fires: YAML syntax (duplicate keys included), the model, SQL (one
read-only SELECT whose tables and columns exist in the domain; every ``:parameter`` an argument of
each tool the check lists), tool names, Python references. Errors name the file, the rule and the
line (inside a ``sql: |`` block, the line of the offending table or column). See docs/policies.md.

This module holds the pack's model and :func:`load_policy`; reading the YAML with its lines and the
error type are :mod:`guard.policy_yaml`, the cross-reference checks and the resolution of Python and
SQL references :mod:`guard.policy_refs`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from guard.checks import Check, CheckContext, PythonCheck, RuleText, SqlCheck
from guard.errors import ErrorClass
from guard.models import EffectClass, PolicySource, ToolCall
from guard.policy_refs import (
    _check_parameters,
    _cross_check,
    _load_module,
    _python_function,
    _refuse_v1_conditions,
    _sql_error,
)
from guard.policy_yaml import PolicyError, _line, _Loc, _read_pack, model_error
from guard.sqltext import SqlTextError

__all__ = [
    "EMPTY",
    "ApprovalRule",
    "CheckRule",
    "Compensation",
    "ErrorRule",
    "ErrorRules",
    "PolicyError",
    "PolicyPack",
    "PolicyPackModel",
    "RetryRule",
    "ToolRules",
    "compile_pack",
    "load_policy",
    "model_error",
]

logger = logging.getLogger(__name__)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    source: PolicySource


class CheckRule(_Rule):
    phase: Literal["before_call", "after_call", "at_commit"]
    tools: list[str] | None = None
    sql: str | None = None
    python: str | None = None
    message: str
    hint: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> CheckRule:
        if (self.sql is None) == (self.python is None):
            raise ValueError("a check needs exactly one of 'sql' or 'python'")
        if self.phase == "at_commit" and self.tools is not None:
            raise ValueError("an at_commit check runs once per commit, not per tool: remove 'tools'")
        return self


class ApprovalRule(_Rule):
    """Calls that wait for a human: by tool, by effect class, by an argument above a threshold, or
    (format v2) by a condition on the call and the shadow state (``when``, compiled into the pack's
    ``conditions``)."""

    tools: list[str] | None = None
    effect: EffectClass | None = None
    argument: str | None = None
    above: float | None = None
    when: str | None = None

    @model_validator(mode="after")
    def _threshold_pairs(self) -> ApprovalRule:
        if (self.argument is None) != (self.above is None):
            raise ValueError("'argument' and 'above' go together")
        if self.tools is None and self.effect is None and self.argument is None and self.when is None:
            raise ValueError("an approval rule needs 'tools', 'effect' or 'argument'/'above'")
        return self

    def matches(self, tool: str, effect: EffectClass, arguments: Mapping[str, Any]) -> bool:
        if self.tools is not None and tool not in self.tools:
            return False
        if self.effect is not None and effect != self.effect:
            return False
        if self.argument is not None and self.above is not None:
            value = arguments.get(self.argument)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= self.above:
                return False
        return True


class RetryRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    max_attempts: int = Field(ge=1, le=10)
    idempotent: bool | None = None


class Compensation(BaseModel):
    """The tool that undoes a reversible call on an upstream that cannot transact (saga)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, str] = Field(default_factory=dict)
    """Compensating argument -> the original call's argument it is taken from."""


class ErrorRule(BaseModel):
    """An upstream's own error text -> error class (matched before the built-in rules; guard.classifier)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    match: str = Field(min_length=1)
    """A regular expression searched (case-insensitively) in the error message."""
    error_class: ErrorClass = Field(alias="class")
    tools: list[str] | None = None
    hint: str | None = None
    """The next step the agent is told, replacing the class's default."""
    source: PolicySource | None = None

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


class ErrorRules(BaseModel):
    """How the guard recognises an upstream's errors and checks arguments before forwarding."""

    model_config = ConfigDict(extra="forbid")

    validation: Literal["lax", "strict", "off"] = "lax"
    """lax: JSON Schema, accepting what lenient servers coerce (numeric/boolean strings); strict: as
    written; off: arguments are not checked before forwarding (docs/errors.md)."""
    rules: list[ErrorRule] = Field(default_factory=list)


class ToolRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] | None = None
    """None: every upstream tool is allowed."""
    effects: dict[str, EffectClass] = Field(default_factory=dict)
    compensations: dict[str, Compensation] = Field(default_factory=dict)


class PolicyPackModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1, 2] = 1
    """1 for packs written in format v1; a v2 pack is loaded into this model with version 2."""
    name: str
    domain: str | None = None
    description: str | None = None
    module: str | None = None
    """A Python file beside the YAML (or an importable module) holding the Python checks."""
    tools: ToolRules = Field(default_factory=ToolRules)
    checks: list[CheckRule] = Field(default_factory=list)
    approvals: list[ApprovalRule] = Field(default_factory=list)
    retry: list[RetryRule] = Field(default_factory=list)
    errors: ErrorRules = Field(default_factory=ErrorRules)


@dataclass
class PolicyPack:
    """A loaded, validated pack: the model plus its compiled checks.

    A v2 pack (guard.packv2) is loaded into the same model; ``hidden`` holds its ``visible: false``
    tools, ``conditions`` its compiled approval conditions (approval id → query), ``typed`` whether
    call arguments were typed from tool schemas, and ``document`` the v2 model as written.
    """

    model: PolicyPackModel
    checks: list[Check] = field(default_factory=list)
    path: Path | None = None
    hidden: frozenset[str] = frozenset()
    conditions: dict[str, SqlCheck] = field(default_factory=dict)
    typed: bool = False
    document: Any = None

    @property
    def name(self) -> str:
        return self.model.name

    def allows(self, tool: str) -> bool:
        if tool in self.hidden:
            return False
        return self.model.tools.allow is None or tool in self.model.tools.allow

    def effect_of(self, tool: str) -> EffectClass | None:
        return self.model.tools.effects.get(tool)

    def approval_for(
        self,
        tool: str,
        effect: EffectClass,
        arguments: Mapping[str, Any],
        query: Callable[[str, Mapping[str, Any]], list[dict[str, Any]]] | None = None,
    ) -> ApprovalRule | None:
        """The first approval rule the call matches. A rule with a ``when`` condition is evaluated with
        ``query`` on the shadow state before the call; without ``query``, or when the condition cannot
        be evaluated, it matches (fail closed: a person decides)."""
        for rule in self.model.approvals:
            if not rule.matches(tool, effect, arguments):
                continue
            condition = self.conditions.get(rule.id)
            if condition is None or query is None:
                return rule
            ctx = CheckContext(
                phase="before_call", query=query, call=ToolCall(tool=tool, arguments=dict(arguments))
            )
            try:
                if condition.run(ctx):
                    return rule
            except Exception:  # fail closed: an approval condition that cannot be evaluated holds the call
                logger.exception("approval condition %s could not be evaluated", rule.id)
                return rule
        return None

    def body_counts(self) -> dict[str, int]:
        """How many rules have each body (``forbid``, ``require``, ``python``, ``sql``); v1 packs have
        only ``sql`` and ``python``."""
        counts = dict.fromkeys(("forbid", "require", "python", "sql"), 0)
        rules = getattr(self.document, "rules", None)
        if rules is None:
            for check in self.model.checks:
                counts["python" if check.python is not None else "sql"] += 1
            return counts
        for rule in rules:
            kind = next(k for k in counts if getattr(rule, k) is not None)
            counts[kind] += 1
        return counts

    def retry_for(self, tool: str) -> RetryRule | None:
        return next((r for r in self.model.retry if r.tool == tool), None)

    def compensation_for(self, tool: str) -> Compensation | None:
        return self.model.tools.compensations.get(tool)


EMPTY = PolicyPack(model=PolicyPackModel(name="empty"))


def load_policy(
    path: str | Path,
    *,
    schema: Mapping[str, Sequence[str]] | None = None,
    tools: Sequence[str] | None = None,
    tool_arguments: Mapping[str, Collection[str]] | None = None,
    domain: str | None = None,
    tool_schemas: Mapping[str, Mapping[str, Any]] | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
) -> PolicyPack:
    """Load and validate a pack (format v1, or v2: guard.packv2); ``path`` is its YAML file or folder.

    ``schema`` (table -> columns) checks every SQL table and column, ``tools`` every tool name, and
    ``tool_arguments`` (tool -> input argument names) every ``:parameter`` a SQL check binds. Without
    them the pack is checked for everything else (syntax, model, read-only SQL, Python references).
    ``domain`` is the domain the pack is loaded for; a pack that names another one is refused.
    ``tool_schemas`` (tool -> JSON input schema) types a v2 pack's ``args`` (and gives the argument
    names when ``tool_arguments`` is not passed); ``column_types`` (table -> column -> SQL type name)
    lets v2 expressions be type-checked against columns.
    """
    path, data, located = _read_pack(Path(path))
    where = str(path)
    if tool_arguments is None and tool_schemas is not None:
        tool_arguments = {t: set(s.get("properties") or {}) for t, s in tool_schemas.items()}
    if data.get("version") == 2:
        from guard.packv2 import load_v2

        return load_v2(
            data,
            path=path,
            lines=located.lines,
            blocks=located.blocks,
            schema=schema,
            column_types=column_types,
            tools=tools,
            tool_schemas=tool_schemas,
            tool_arguments=tool_arguments,
            domain=domain,
        )
    try:
        model = PolicyPackModel.model_validate(data)
    except ValidationError as exc:
        raise model_error(exc, data, located.lines, where) from exc
    _refuse_v1_conditions(model, located.lines, where)
    return compile_pack(
        model,
        path=path,
        lines=located.lines,
        blocks=located.blocks,
        schema=schema,
        tools=tools,
        tool_arguments=tool_arguments,
        domain=domain,
    )


def compile_pack(
    model: PolicyPackModel,
    *,
    path: Path | None = None,
    lines: Mapping[_Loc, int] | None = None,
    blocks: Mapping[_Loc, int] | None = None,
    schema: Mapping[str, Sequence[str]] | None = None,
    tools: Sequence[str] | None = None,
    tool_arguments: Mapping[str, Collection[str]] | None = None,
    domain: str | None = None,
) -> PolicyPack:
    """Cross-reference checks and compile the checks of a validated model (see :func:`load_policy`)."""
    where = str(path) if path is not None else model.name
    lines = lines or {}
    blocks = blocks or {}

    def fail(loc: _Loc, rule: str, message: str, line: int | None = None) -> PolicyError:
        line = line if line is not None else _line(lines, loc)
        return PolicyError(f"{where}: line {line}: rule {rule}: {message}", file=where, rule=rule, line=line)

    _cross_check(model, domain=domain, tools=tools, tool_arguments=tool_arguments, fail=fail)
    module = None
    if model.module is not None:
        module = _load_module(
            model.module,
            path.parent if path is not None else None,
            functools.partial(fail, ("module",), "module"),
        )
    checks: list[Check] = []
    for i, rule in enumerate(model.checks):
        text = RuleText(message=rule.message, hint=rule.hint, source=rule.source)
        if rule.sql is not None:
            loc = ("checks", i, "sql")
            try:
                sql_check = SqlCheck.compile(
                    rule.id, rule.phase, rule.sql, text, tools=rule.tools, schema=schema
                )
            except SqlTextError as exc:
                message, sql_line = _sql_error(exc, rule.sql)
                line = blocks[loc] + sql_line - 1 if loc in blocks and sql_line is not None else None
                raise fail(loc, rule.id, message, line) from exc
            _check_parameters(
                rule, sql_check.parameters, tool_arguments, functools.partial(fail, loc, rule.id)
            )
            checks.append(sql_check)
        else:
            assert rule.python is not None
            function = _python_function(
                rule.python, module, functools.partial(fail, ("checks", i, "python"), rule.id)
            )
            checks.append(
                PythonCheck(
                    rule.id, rule.phase, function, text, frozenset(rule.tools) if rule.tools else None
                )
            )
    return PolicyPack(model=model, checks=checks, path=path)
