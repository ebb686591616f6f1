"""The cross-references of a policy pack, checked at load time, and what it refers to, resolved.

A pack names tools (allowlist, effects, compensations, per-rule lists, retry overrides, error rules),
compensating arguments, call arguments bound as SQL ``:parameters``, a Python module and its check
functions. :func:`_cross_check` refuses a pack whose names do not resolve (unknown tools, duplicate ids
or retry overrides, a pack for another domain) before any check is compiled; :func:`_load_module`,
:func:`_python_function` and :func:`_sql_error` resolve the Python references and point a SQL error
at its line. Every error is a :class:`~guard.policy_yaml.PolicyError` built by the caller's ``fail``
(which knows the file and the lines).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlglot.errors import ParseError

from guard.checks import PythonPredicate
from guard.policy_yaml import PolicyError, _line, _Loc
from guard.sqltext import SqlTextError

if TYPE_CHECKING:
    from guard.policy import CheckRule, PolicyPackModel

_Fail = Callable[[_Loc, str, str], PolicyError]


def _refuse_v1_conditions(model: PolicyPackModel, lines: Mapping[_Loc, int], where: str) -> None:
    """A format v1 pack cannot have ``when`` conditions on approvals (they need ``version: 2``)."""
    for i, approval in enumerate(model.approvals):
        if approval.when is not None:
            line = _line(lines, ("approvals", i, "when"))
            raise PolicyError(
                f"{where}: line {line}: rule {approval.id}: 'when' conditions need 'version: 2'",
                file=where,
                rule=approval.id,
                line=line,
            )


def _cross_check(
    model: PolicyPackModel,
    *,
    domain: str | None,
    tools: Sequence[str] | None,
    tool_arguments: Mapping[str, Collection[str]] | None,
    fail: _Fail,
) -> None:
    """The pack is for ``domain``, its rule ids and retry overrides are unique, and the tools and
    compensating arguments it names exist (when ``tools`` / ``tool_arguments`` are known)."""
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


def _load_module(spec: str, base: Path | None, fail: Callable[[str], PolicyError]) -> Any:
    """The pack's Python module: a ``.py`` file beside the YAML, or an importable module name.

    The file may be a package's ``__init__.py`` (``checks/__init__.py``), whose modules import each
    other relatively. Every load runs the files as they are now: the package's modules from an earlier
    load of the same file are dropped first, as the single file is run again.
    """
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
        _forget_module(name)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            _forget_module(name)
            raise fail(f"module {spec!r} failed to import: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise fail(f"module {spec!r} not found ({exc})") from exc


def _forget_module(name: str) -> None:
    """Drop the module ``name`` and, for a package, its modules from ``sys.modules``."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]


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
