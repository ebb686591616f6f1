"""Policy packs: YAML (+ an optional Python module) saying what a domain's tools may do.

A pack names the tool allowlist and effect classes, the checks (SQL or Python), approval rules, retry
overrides and compensating tools. Every rule cites the policy text it enforces (``source``). Rules
read state, never the agent's call history, and never name a benchmark task or a record id.

Loading validates everything up front, so that a typo fails at load time rather than turning a rule
into one that silently never fires: YAML syntax (duplicate keys included), the model, SQL (one
read-only SELECT whose tables and columns exist in the domain; every ``:parameter`` an argument of
each tool the check lists), tool names, Python references. Errors name the file, the rule and the
line (inside a ``sql: |`` block, the line of the offending table or column). See docs/policies.md.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import logging
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlglot.errors import ParseError

from guard.checks import Check, CheckContext, PythonCheck, PythonPredicate, RuleText, SqlCheck
from guard.errors import ErrorClass
from guard.models import EffectClass, PolicySource, ToolCall
from guard.sqltext import SqlTextError

logger = logging.getLogger(__name__)


class PolicyError(ValueError):
    """A policy pack that cannot be loaded; the message names file, rule and line.

    The same facts are attributes (``file``, ``rule``, ``line``; None when not known) so callers can
    point an editor at the spot without parsing the message.
    """

    def __init__(
        self, message: str, *, file: str | None = None, rule: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.file = file
        self.rule = rule
        self.line = line


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


# -- loading --------------------------------------------------------------------------------------
_Loc = tuple[Any, ...]


@dataclass
class _Located:
    """Where things are in the YAML text: each key's line, and where block scalars' content starts."""

    lines: dict[_Loc, int] = field(default_factory=dict)
    blocks: dict[_Loc, int] = field(default_factory=dict)
    """Path of a literal/folded block scalar (``sql: |``) -> line of its first content line."""


def _compose(text: str, where: str) -> tuple[Any, _Located]:
    located = _Located()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(f"{where}: line {line}: invalid YAML: {problem}", file=where, line=line) from exc

    def walk(n: yaml.Node, at: _Loc) -> None:
        located.lines.setdefault(at, n.start_mark.line + 1)  # a key's own line wins over its value's
        if isinstance(n, yaml.MappingNode):
            seen: set[Any] = set()
            for k, v in n.value:
                key = k.value
                if key in seen:
                    line = k.start_mark.line + 1
                    path = ".".join(str(p) for p in (*at, key))
                    rule = _rule_of_node(root, (*at, key))
                    raise PolicyError(
                        f"{where}: line {line}: rule {rule}: duplicate key {path!r}",
                        file=where,
                        rule=rule,
                        line=line,
                    )
                seen.add(key)
                located.lines[(*at, key)] = k.start_mark.line + 1
                walk(v, (*at, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*at, i))
        elif isinstance(n, yaml.ScalarNode) and n.style in ("|", ">"):
            located.blocks[at] = n.start_mark.line + 2

    if node is not None:
        root: yaml.Node = node
        walk(node, ())
    return data, located


_RULE_SECTIONS = ("checks", "rules", "approvals")


def _rule_of_node(root: yaml.Node, loc: _Loc) -> str:
    """The rule a YAML path belongs to, from the composed nodes (the data is not loaded yet)."""
    if (
        len(loc) >= 2
        and loc[0] in _RULE_SECTIONS
        and isinstance(loc[1], int)
        and isinstance(root, yaml.MappingNode)
    ):
        section = next((v for k, v in root.value if k.value == loc[0]), None)
        if isinstance(section, yaml.SequenceNode) and loc[1] < len(section.value):
            item = section.value[loc[1]]
            if isinstance(item, yaml.MappingNode):
                found = next((v.value for k, v in item.value if k.value == "id"), None)
                if isinstance(found, str) and found:
                    return found
        return f"{loc[0]}[{loc[1]}]"
    return ".".join(str(p) for p in loc[:2])


def _line(lines: Mapping[_Loc, int], loc: Sequence[Any]) -> int | None:
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def _rule_id(data: Any, loc: Sequence[Any]) -> str:
    if len(loc) >= 2 and loc[0] in _RULE_SECTIONS and isinstance(loc[1], int):
        try:
            rule_id = data[loc[0]][loc[1]].get("id")
        except (IndexError, KeyError, TypeError, AttributeError):
            rule_id = None
        return str(rule_id) if rule_id else f"{loc[0]}[{loc[1]}]"
    return ".".join(str(p) for p in loc[:2]) or "pack"


def _load_module(spec: str, base: Path | None, fail: Callable[[str], PolicyError]) -> Any:
    """The pack's Python module: a ``.py`` file beside the YAML, or an importable module name."""
    if spec.endswith(".py"):
        candidate = (base / spec) if base is not None else Path(spec)
        if not candidate.is_file():
            raise fail(f"module file {str(candidate)!r} not found")
        resolved = candidate.resolve()
        name = "shadowguard_policy_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
        module_spec = importlib.util.spec_from_file_location(name, resolved)
        if module_spec is None or module_spec.loader is None:
            raise fail(f"cannot load module file {str(candidate)!r}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise fail(f"module {spec!r} failed to import: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise fail(f"module {spec!r} not found ({exc})") from exc


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
    path = Path(path)
    if path.is_dir():
        path = path / "policy.yaml"
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{where}: cannot read: {exc.strerror}", file=where) from exc
    data, located = _compose(text, where)
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: line 1: a policy pack is a YAML mapping", file=where, line=1)
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
    for i, approval in enumerate(model.approvals):
        if approval.when is not None:
            line = _line(located.lines, ("approvals", i, "when"))
            raise PolicyError(
                f"{where}: line {line}: rule {approval.id}: 'when' conditions need 'version: 2'",
                file=where,
                rule=approval.id,
                line=line,
            )
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


def model_error(exc: ValidationError, data: Any, lines: Mapping[_Loc, int], where: str) -> PolicyError:
    """The first validation error of a pack's model, naming file, rule and line."""
    errors = exc.errors()
    err = errors[0]
    loc = err["loc"]
    line = _line(lines, loc)
    rule = _rule_id(data, loc)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return PolicyError(
        f"{where}: line {line}: rule {rule}: {'.'.join(map(str, loc))}: {err['msg']}{more}",
        file=where,
        rule=rule,
        line=line,
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

    if domain is not None and model.domain is not None and model.domain != domain:
        raise fail(("domain",), "domain", f"the pack is for domain {model.domain!r}, not {domain!r}")
    seen: set[str] = set()
    for section in ("checks", "approvals"):
        for i, rule in enumerate(getattr(model, section)):
            if rule.id in seen:
                raise fail((section, i, "id"), rule.id, "duplicate rule id")
            seen.add(rule.id)
    retried: set[str] = set()
    for i, retry in enumerate(model.retry):
        if retry.tool in retried:
            raise fail(("retry", i, "tool"), f"retry[{i}]", f"duplicate retry override for {retry.tool!r}")
        retried.add(retry.tool)
    if tools is not None:
        _check_tool_names(model, set(tools), fail)
    if tool_arguments is not None:
        _check_compensation_arguments(model, tool_arguments, fail)
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


_Fail = Callable[[_Loc, str, str], PolicyError]


def _check_tool_names(model: PolicyPackModel, known: set[str], fail: _Fail) -> None:
    named: list[tuple[_Loc, str, str]] = []
    named += [(("tools", "allow", i), "tools.allow", t) for i, t in enumerate(model.tools.allow or [])]
    named += [(("tools", "effects", t), "tools.effects", t) for t in model.tools.effects]
    for t, comp in model.tools.compensations.items():
        named += [(("tools", "compensations", t), "tools.compensations", t)]
        named += [(("tools", "compensations", t, "tool"), "tools.compensations", comp.tool)]
    for i, c in enumerate(model.checks):
        named += [(("checks", i, "tools", j), c.id, t) for j, t in enumerate(c.tools or [])]
    for i, a in enumerate(model.approvals):
        named += [(("approvals", i, "tools", j), a.id, t) for j, t in enumerate(a.tools or [])]
    named += [(("retry", i, "tool"), f"retry[{i}]", r.tool) for i, r in enumerate(model.retry)]
    for i, e in enumerate(model.errors.rules):
        named += [
            (("errors", "rules", i, "tools", j), f"errors.rules[{i}]", t) for j, t in enumerate(e.tools or [])
        ]
    for loc, rule, tool in named:
        if tool not in known:
            raise fail(loc, rule, f"unknown tool {tool!r}")


def _check_compensation_arguments(
    model: PolicyPackModel, tool_arguments: Mapping[str, Collection[str]], fail: _Fail
) -> None:
    for original, comp in model.tools.compensations.items():
        for target, taken_from in comp.arguments.items():
            loc = ("tools", "compensations", original, "arguments", target)
            if comp.tool in tool_arguments and target not in tool_arguments[comp.tool]:
                raise fail(loc, "tools.compensations", f"{comp.tool} has no argument {target!r}")
            if original in tool_arguments and taken_from not in tool_arguments[original]:
                raise fail(loc, "tools.compensations", f"{original} has no argument {taken_from!r}")


def _check_parameters(
    rule: CheckRule,
    parameters: Sequence[str],
    tool_arguments: Mapping[str, Collection[str]] | None,
    fail: Callable[[str], PolicyError],
) -> None:
    """``:name`` parameters are bound from the call's arguments, so they need a call and its tools."""
    if not parameters:
        return
    names = ", ".join(f":{p}" for p in parameters)
    if rule.phase == "at_commit":
        raise fail(f"an at_commit check sees no call, so {names} cannot be bound")
    if not rule.tools:
        raise fail(f"a check that binds call arguments ({names}) must list its 'tools'")
    if tool_arguments is None:
        return
    for tool in rule.tools:
        if tool not in tool_arguments:
            continue
        missing = [p for p in parameters if p not in tool_arguments[tool]]
        if missing:
            raise fail(f"tool {tool!r} has no argument {missing[0]!r} (bound as :{missing[0]})")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SQL_LINE = re.compile(r"\.?\s*Line:? (\d+), Col: (\d+)\.?")
_QUOTED = re.compile(r"'([^']+)'|: (\w+)$")


def _sql_error(exc: SqlTextError, sql: str) -> tuple[str, int | None]:
    """A one-line message for a SQL error and the line (1-based, within ``sql``) it points at."""
    cause = exc.__cause__
    if isinstance(cause, ParseError) and cause.errors:
        first = cause.errors[0]
        line = first.get("line")
        return f"SQL does not parse: {first.get('description')}", line if isinstance(line, int) else None
    message = _ANSI.sub("", str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    found = _SQL_LINE.search(message)
    if found:
        return _SQL_LINE.sub("", message).strip(), int(found.group(1))
    name = _QUOTED.search(message)
    if name:
        token = (name.group(1) or name.group(2)).lower()
        pattern = re.compile(rf"(?<![\w.]){re.escape(token)}(?!\w)|\.{re.escape(token)}(?!\w)")
        for number, text in enumerate(sql.splitlines(), start=1):
            if pattern.search(text.lower()):
                return message, number
    return message, 1


def _python_function(ref: str, module: Any, fail: Callable[[str], PolicyError]) -> PythonPredicate:
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
    if function is None:
        raise fail(f"function {attr!r} not found in module {getattr(target, '__name__', module_name)!r}")
    if not callable(function):
        raise fail(f"{ref!r} is not a function")
    try:
        inspect.signature(function).bind(None)
    except (TypeError, ValueError) as exc:
        raise fail(f"{ref!r} must take one argument (the CheckContext): {exc}") from exc
    return cast(PythonPredicate, function)
