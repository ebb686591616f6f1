"""Policy packs: YAML (+ an optional Python module) saying what a domain's tools may do.

A pack names the tool allowlist and effect classes, the checks (SQL or Python), approval rules, retry
overrides and compensating tools. Every rule cites the policy text it enforces (``source``). Rules
read state, never the agent's call history, and never name a benchmark task or a record id.

Loading validates everything up front: YAML syntax, the model, SQL (one read-only SELECT whose tables
and columns exist in the domain), Python references. Errors name the file, the rule and the line.
See docs/policies.md for the format.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from guard.checks import Check, PythonCheck, RuleText, SqlCheck
from guard.models import EffectClass, PolicySource
from guard.sqltext import SqlTextError


class PolicyError(ValueError):
    """A policy pack that cannot be loaded; the message names file, rule and line."""


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
        return self


class ApprovalRule(_Rule):
    """Calls that wait for a human: by tool, by effect class, or by an argument above a threshold."""

    tools: list[str] | None = None
    effect: EffectClass | None = None
    argument: str | None = None
    above: float | None = None

    @model_validator(mode="after")
    def _threshold_pairs(self) -> ApprovalRule:
        if (self.argument is None) != (self.above is None):
            raise ValueError("'argument' and 'above' go together")
        if self.tools is None and self.effect is None and self.argument is None:
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


class ToolRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] | None = None
    """None: every upstream tool is allowed."""
    effects: dict[str, EffectClass] = Field(default_factory=dict)
    compensations: dict[str, Compensation] = Field(default_factory=dict)


class PolicyPackModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    name: str
    domain: str | None = None
    description: str | None = None
    module: str | None = None
    """A Python file beside the YAML (or an importable module) holding the Python checks."""
    tools: ToolRules = Field(default_factory=ToolRules)
    checks: list[CheckRule] = Field(default_factory=list)
    approvals: list[ApprovalRule] = Field(default_factory=list)
    retry: list[RetryRule] = Field(default_factory=list)


@dataclass
class PolicyPack:
    """A loaded, validated pack: the model plus its compiled checks."""

    model: PolicyPackModel
    checks: list[Check] = field(default_factory=list)
    path: Path | None = None

    @property
    def name(self) -> str:
        return self.model.name

    def allows(self, tool: str) -> bool:
        return self.model.tools.allow is None or tool in self.model.tools.allow

    def effect_of(self, tool: str) -> EffectClass | None:
        return self.model.tools.effects.get(tool)

    def approval_for(
        self, tool: str, effect: EffectClass, arguments: Mapping[str, Any]
    ) -> ApprovalRule | None:
        return next((r for r in self.model.approvals if r.matches(tool, effect, arguments)), None)


EMPTY = PolicyPack(model=PolicyPackModel(name="empty"))


# -- loading --------------------------------------------------------------------------------------
class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers where each mapping and sequence item starts."""


def _compose_lines(text: str, path: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    lines: dict[tuple[Any, ...], int] = {}
    try:
        node = yaml.compose(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise PolicyError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from exc

    def walk(n: yaml.Node, at: tuple[Any, ...]) -> None:
        lines[at] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                lines[(*at, key)] = k.start_mark.line + 1
                walk(v, (*at, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*at, i))

    if node is not None:
        walk(node, ())
    data = yaml.safe_load(text)
    return data, lines


def _line(lines: Mapping[tuple[Any, ...], int], loc: Sequence[Any]) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _rule_name(data: Any, loc: Sequence[Any]) -> str:
    if len(loc) >= 2 and loc[0] in ("checks", "approvals") and isinstance(loc[1], int):
        try:
            return f"rule {data[loc[0]][loc[1]].get('id', '#' + str(loc[1]))}"
        except (IndexError, KeyError, TypeError, AttributeError):
            return f"{loc[0]}[{loc[1]}]"
    return ".".join(str(p) for p in loc) or "pack"


def _load_module(spec: str, base: Path | None, where: str) -> Any:
    candidate = (base / spec) if base is not None else None
    if candidate is not None and candidate.suffix == ".py" and candidate.is_file():
        name = f"shadowguard_policy_{abs(hash(str(candidate.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(name, candidate)
        if module_spec is None or module_spec.loader is None:
            raise PolicyError(f"{where}: cannot load module {spec}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise PolicyError(f"{where}: module {spec!r} not found ({exc})") from exc


def load_policy(
    path: str | Path,
    *,
    schema: Mapping[str, Sequence[str]] | None = None,
    tools: Sequence[str] | None = None,
) -> PolicyPack:
    """Load and validate a pack. ``schema`` (table -> columns) and ``tools`` enable reference checks."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{where}: cannot read: {exc.strerror}") from exc
    data, lines = _compose_lines(text, where)
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: line 1: a policy pack is a YAML mapping")
    try:
        model = PolicyPackModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err["loc"]
        line = _line(lines, loc)
        raise PolicyError(
            f"{where}: line {line}: {_rule_name(data, loc)}: {'.'.join(map(str, loc))}: {err['msg']}"
        ) from exc
    return compile_pack(model, path=path, lines=lines, schema=schema, tools=tools)


def compile_pack(
    model: PolicyPackModel,
    *,
    path: Path | None = None,
    lines: Mapping[tuple[Any, ...], int] | None = None,
    schema: Mapping[str, Sequence[str]] | None = None,
    tools: Sequence[str] | None = None,
) -> PolicyPack:
    where = str(path) if path is not None else model.name
    lines = lines or {}

    def fail(loc: tuple[Any, ...], rule: str, message: str) -> PolicyError:
        return PolicyError(f"{where}: line {_line(lines, loc)}: rule {rule}: {message}")

    seen: set[str] = set()
    for section in ("checks", "approvals"):
        for i, rule in enumerate(getattr(model, section)):
            if rule.id in seen:
                raise fail((section, i, "id"), rule.id, "duplicate rule id")
            seen.add(rule.id)
    if tools is not None:
        known = set(tools)
        named: list[tuple[tuple[Any, ...], str, str]] = []
        for i, t in enumerate(model.tools.allow or []):
            named.append((("tools", "allow", i), "tools.allow", t))
        named += [(("tools", "effects", t), "tools.effects", t) for t in model.tools.effects]
        for i, c in enumerate(model.checks):
            named += [(("checks", i, "tools"), c.id, t) for t in c.tools or []]
        for i, a in enumerate(model.approvals):
            named += [(("approvals", i, "tools"), a.id, t) for t in a.tools or []]
        for loc, rule, tool in named:
            if tool not in known:
                raise fail(loc, rule, f"unknown tool {tool!r}")
    module = None
    if model.module is not None:
        module = _load_module(
            model.module, path.parent if path else None, f"{where}: line {_line(lines, ('module',))}"
        )
    checks: list[Check] = []
    for i, rule in enumerate(model.checks):
        text = RuleText(message=rule.message, hint=rule.hint, source=rule.source)
        if rule.sql is not None:
            try:
                checks.append(
                    SqlCheck.compile(rule.id, rule.phase, rule.sql, text, tools=rule.tools, schema=schema)
                )
            except SqlTextError as exc:
                raise fail(("checks", i, "sql"), rule.id, str(exc)) from exc
        else:
            assert rule.python is not None
            function = _python_function(
                rule.python, module, lambda m, i=i, r=rule.id: fail(("checks", i, "python"), r, m)
            )
            checks.append(
                PythonCheck(
                    rule.id, rule.phase, function, text, frozenset(rule.tools) if rule.tools else None
                )
            )
    return PolicyPack(model=model, checks=checks, path=path)


def _python_function(ref: str, module: Any, fail: Any) -> Any:
    module_name, _, attr = ref.rpartition(":")
    target = module
    if module_name:
        try:
            target = importlib.import_module(module_name)
        except ImportError as exc:
            raise fail(f"module {module_name!r} not found") from exc
    if target is None:
        raise fail(f"{ref!r} names no module and the pack has no 'module'")
    function = getattr(target, attr, None)
    if not callable(function):
        raise fail(f"{ref!r} is not a function")
    return function
