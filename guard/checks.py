"""Executable end-state checks: SQL assertions and Python predicates over the shadow state.

A check returns the violations it finds; no violations means pass. Phases:

* ``before_call`` — sees the state the call is about to change and the call's arguments (SQL checks
  bind them as ``:name`` parameters). A violation refuses the call before it runs.
* ``after_call`` — sees the shadow state after the call and the call's change set; a violation rolls
  the call back to its savepoint and the agent gets the violation.
* ``at_commit`` — sees the final shadow state and the session's net change set; a violation refuses
  the commit (the agent may fix things and commit again).

A check that raises counts as a violation (fail closed) and is logged with its traceback. A check
that cannot evaluate the call's arguments (a value not of the rule's declared type, or a JSON object
or array bound as one SQL value) is a violation too, saying which argument and why, logged in one line:
that is the agent's input, not a broken check, and nothing is sent to the database for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sqlglot import exp

from guard.models import ChangeSet, PolicySource, ToolCall, Violation
from guard.ruleexpr import ArgSpec, ArgumentValueError
from guard.sqltext import parse_select, transpile, validate_against

log = logging.getLogger(__name__)

Phase = Literal["before_call", "after_call", "at_commit"]
PHASES: tuple[Phase, ...] = ("before_call", "after_call", "at_commit")


@dataclass
class CheckContext:
    """What a check may look at. ``query`` runs a read-only SELECT on the current shadow state."""

    phase: Phase
    query: Callable[[str, Mapping[str, Any]], list[dict[str, Any]]]
    changes: ChangeSet = field(default_factory=ChangeSet)
    call: ToolCall | None = None


class Check(Protocol):
    id: str
    phase: Phase

    def applies_to(self, tool: str | None) -> bool: ...

    def run(self, ctx: CheckContext) -> list[Violation]: ...


@dataclass
class RuleText:
    """The human side of a rule: what is wrong, what to do, which policy text says so."""

    message: str
    hint: str | None = None
    source: PolicySource | None = None


@dataclass
class SqlCheck:
    """A SELECT that returns the violating rows; validated and transpiled once, when the pack loads.

    ``arguments`` types the ``:name`` parameters of a v2 rule (guard.ruleexpr): each is bound as its
    schema type, an absent one as its schema default; untyped parameters are bound as sent (v1).
    """

    id: str
    phase: Phase
    sql: str
    text: RuleText
    tools: frozenset[str] | None = None
    dialect_sql: dict[str, str] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()
    arguments: Mapping[str, ArgSpec] = field(default_factory=dict)

    @classmethod
    def compile(
        cls,
        id: str,
        phase: Phase,
        sql: str,
        text: RuleText,
        *,
        tools: Iterable[str] | None = None,
        schema: Mapping[str, Sequence[str]] | None = None,
        dialects: Sequence[str] = ("sqlite", "postgresql"),
        arguments: Mapping[str, ArgSpec] | None = None,
    ) -> SqlCheck:
        tree = parse_select(sql)
        if schema is not None:
            validate_against(tree, schema)
        parameters = tuple(sorted({p.name for p in tree.find_all(exp.Placeholder) if p.name}))
        return cls(
            id=id,
            phase=phase,
            sql=sql,
            text=text,
            tools=frozenset(tools) if tools is not None else None,
            dialect_sql={d: transpile(tree, d) for d in dialects},
            parameters=parameters,
            arguments=dict(arguments or {}),
        )

    def applies_to(self, tool: str | None) -> bool:
        return self.tools is None or tool is None or tool in self.tools

    def bind(self, call: ToolCall | None) -> dict[str, Any]:
        """The query's ``:name`` parameters from the call's arguments (ArgumentValueError if one
        cannot be bound)."""
        arguments = call.arguments if call is not None else {}
        return {
            name: self.arguments[name].bind(arguments, name)
            if name in self.arguments
            else _scalar(arguments, name)
            for name in self.parameters
        }

    def run(self, ctx: CheckContext) -> list[Violation]:
        rows = ctx.query(self.sql, self.bind(ctx.call))
        if not rows:
            return []
        return [
            Violation(
                rule_id=self.id,
                message=self.text.message,
                hint=self.text.hint,
                source=self.text.source,
                rows=rows,
            )
        ]


def _scalar(arguments: Mapping[str, Any], name: str) -> Any:
    """An untyped (v1) parameter as sent; a JSON object or array is no single SQL value."""
    value = arguments.get(name)
    if isinstance(value, Mapping | list | tuple):
        kind = "object" if isinstance(value, Mapping) else "array"
        raise ArgumentValueError(f"argument {name!r}={value!r} is a JSON {kind}, not a single value")
    return value


def _cannot_check(exc: BaseException) -> str | None:
    """Why a check could not evaluate the call's values, when that is the cause: an argument not of the
    rule's type (:class:`ArgumentValueError`), or a value the database could not use (DB-API's
    ``DataError``, PEP 249: "problems with the processed data", e.g. ``'0 dollars'`` cast to a number
    on PostgreSQL). None: the check itself failed."""
    if isinstance(exc, ArgumentValueError):
        return str(exc)
    if any(cls.__name__ == "DataError" for cls in type(exc).__mro__):
        cause = exc.__cause__ or exc.__context__ or exc
        first = str(getattr(exc, "orig", None) or cause).strip().splitlines()
        return f"the database cannot use a value of the call ({first[0] if first else type(exc).__name__})"
    return None


Finding = Violation | Mapping[str, Any] | str
PythonPredicate = Callable[[CheckContext], Iterable[Finding] | Finding | None]


@dataclass
class PythonCheck:
    """A Python function for what SQL cannot say. It returns violations, row dicts or messages."""

    id: str
    phase: Phase
    function: PythonPredicate
    text: RuleText
    tools: frozenset[str] | None = None

    def applies_to(self, tool: str | None) -> bool:
        return self.tools is None or tool is None or tool in self.tools

    def run(self, ctx: CheckContext) -> list[Violation]:
        out: list[Violation] = []
        rows: list[dict[str, Any]] = []
        found = self.function(ctx) or ()
        # A bare message, row or violation is one finding (iterating it would split it up).
        items = [found] if isinstance(found, str | Mapping | Violation) else found
        for item in items:
            if isinstance(item, Violation):
                out.append(item)
            elif isinstance(item, str):
                out.append(
                    Violation(rule_id=self.id, message=item, hint=self.text.hint, source=self.text.source)
                )
            else:
                rows.append(dict(item))
        if rows:
            out.append(
                Violation(
                    rule_id=self.id,
                    message=self.text.message,
                    hint=self.text.hint,
                    source=self.text.source,
                    rows=rows,
                )
            )
        return out


def queries_ahead(
    checks: Iterable[Check], phase: Phase, call: ToolCall | None
) -> list[tuple[str, dict[str, Any]]]:
    """The SELECTs (text, parameters) the SQL checks of ``phase`` will run for ``call``, to ask for
    ahead (guard.backend.AsksAhead). Their parameters depend only on the call's arguments. A check
    whose arguments cannot be bound is not asked for: it raises the same error when it runs, and
    :func:`run_checks` reports it there."""
    tool = call.tool if call is not None else None
    queries: list[tuple[str, dict[str, Any]]] = []
    for check in checks:
        if isinstance(check, SqlCheck) and check.phase == phase and check.applies_to(tool):
            try:
                queries.append((check.sql, check.bind(call)))
            except ArgumentValueError:
                continue
    return queries


def run_checks(checks: Iterable[Check], ctx: CheckContext) -> list[Violation]:
    """Run every applicable check of ``ctx.phase``; a check that raises is a violation (fail closed)."""
    tool = ctx.call.tool if ctx.call is not None else None
    violations: list[Violation] = []
    for check in checks:
        if check.phase != ctx.phase or not check.applies_to(tool):
            continue
        try:
            violations.extend(check.run(ctx))
        except Exception as exc:  # fail closed: a check that cannot run must not let a write through
            reason = _cannot_check(exc)
            if reason is not None:  # the call's input, not a broken check: one line, no traceback
                log.info("check %s cannot check a call of %s: %s", check.id, tool, reason)
                violations.append(
                    Violation(
                        rule_id=check.id,
                        message=f"{check.id} cannot check this call: {reason}; it is refused until it can be",
                        hint="Send each argument with the type the tool's input schema gives it.",
                    )
                )
                continue
            log.exception("check %s failed", check.id)
            violations.append(
                Violation(
                    rule_id=check.id,
                    message=f"check {check.id} could not be evaluated ({type(exc).__name__}: {exc}); "
                    "the change is refused until it can be",
                    hint="This is a guard configuration problem; report it to the operator.",
                )
            )
    return violations
