"""Rule expressions of policy pack format v2: SQL expressions over typed ``args`` and table aliases.

A v2 rule is written as SQL expressions (parsed by sqlglot): a ``from`` clause naming the pack's table
aliases, and boolean conditions in which ``args.<name>`` is the call's argument ``name``. This module
turns them into the one read-only ``SELECT`` a :class:`~guard.checks.SqlCheck` runs, in four steps:

1. **aliases**: every table is a pack alias (``tables:``), rewritten to its physical name; a table that
   is not an alias is an error (:class:`ExprError`).
2. **typed arguments**: ``args.x`` becomes ``CAST(:x AS <type>)`` with the type taken from the JSON
   input schema of every tool the rule applies to (number → DOUBLE, integer → BIGINT, boolean →
   BOOLEAN, string → TEXT); at run time the value is coerced the same way in Python and an absent
   argument takes the schema's ``default`` (:class:`ArgSpec`). An object or array argument, one whose
   type differs between the rule's tools, or one a tool does not have is an error. Without tool
   schemas the arguments are bound untyped (loose typing; the caller says so).
3. **money helpers**: ``same_amount(a, b)`` is ``ABS(a - b) < 0.0101`` (equal within a cent, the
   tolerance policy examples round to) and ``amount_at_most(a, b)`` is ``a < b + 0.0101``. Any other
   function sqlglot does not know is an error (it would not run on both databases).
4. **types**: with column types, a comparison or arithmetic that mixes text with a number (a string
   argument or column against a number, a number against a string literal) is an error.

Errors carry the offending ``token`` so the loader can point at its line in the YAML text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

ArgType = Literal["number", "integer", "boolean", "string"]
CENT = 0.0101
"""Money tolerance: equal within a cent (amounts in policies and by people are rounded to cents)."""

_SQL_TYPES: dict[str, str] = {"number": "DOUBLE", "integer": "BIGINT", "boolean": "BOOLEAN", "string": "TEXT"}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MACROS = {"same_amount", "amount_at_most"}
_COMPARED = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
)
_STATEMENTS = (exp.Query, exp.DML, exp.DDL, exp.Command, exp.Block)


class ExprError(ValueError):
    """A rule expression that cannot be compiled; ``token`` is text to find its line by."""

    def __init__(self, message: str, token: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.token = token
        self.line = line
        """Line within the expression text, when the parser knows it."""
        self.piece: str | None = None
        """Which text failed to parse (``from``, ``where``, ``that``, ``when``, ``sql``), if one did."""


class ArgumentValueError(ValueError):
    """A call argument whose value does not have the type the tool's schema declares."""


@dataclass(frozen=True)
class ArgSpec:
    """How one ``args.<name>`` is bound: its schema type (None: untyped) and default."""

    type: ArgType | None = None
    default: Any = None

    def bind(self, arguments: Mapping[str, Any], name: str) -> Any:
        """The value to bind: the argument (or the default when absent), coerced to the type."""
        value = arguments.get(name, self.default)
        if value is None or self.type is None:
            return value
        try:
            return _COERCE[self.type](value)
        except (TypeError, ValueError) as exc:
            raise ArgumentValueError(f"argument {name!r}={value!r} is not a {self.type}") from exc


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    return float(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("a boolean is not an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not a whole number")
        return int(value)
    return int(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError("not a boolean")


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise TypeError("not a string")


_COERCE: dict[str, Any] = {"number": _number, "integer": _integer, "boolean": _boolean, "string": _string}


def schema_type(prop: Mapping[str, Any]) -> str | None:
    """The JSON type of one input-schema property: number/integer/boolean/string, ``object``/``array``,
    ``mixed`` (several), or None (the schema does not say). ``null`` alternatives are ignored."""
    found: set[str] = set()

    def collect(node: Mapping[str, Any]) -> None:
        kind = node.get("type")
        if isinstance(kind, str):
            found.add(kind)
        elif isinstance(kind, list):
            found.update(k for k in kind if isinstance(k, str))
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or ():
                if isinstance(sub, Mapping):
                    collect(sub)
        if "type" not in node and isinstance(node.get("enum"), list):
            for value in node["enum"]:
                found.add(
                    "boolean"
                    if isinstance(value, bool)
                    else "number"
                    if isinstance(value, int | float)
                    else "string"
                )

    collect(prop)
    found.discard("null")
    if found == {"integer", "number"}:
        return "number"
    if not found:
        return None
    return found.pop() if len(found) == 1 else "mixed"


@dataclass(frozen=True)
class Scope:
    """What an expression may name.

    ``aliases``: pack alias → physical table. ``columns``: physical table → column → SQL type name
    (``TEXT``, ``DOUBLE``, ``BIGINT``, ``BOOLEAN``; anything else is not type-checked); None: tables
    and columns are not checked. ``tools``: the tools whose calls the rule sees (None: no call, as at
    commit). ``tool_schemas``: tool → JSON input schema; None: arguments are untyped.
    """

    aliases: Mapping[str, str]
    columns: Mapping[str, Mapping[str, str]] | None = None
    tools: Sequence[str] | None = None
    tool_schemas: Mapping[str, Mapping[str, Any]] | None = None
    typed_schema: MappingSchema | None = None
    """sqlglot's schema of ``columns``, built once (``dataclasses.replace`` keeps it)."""

    def __post_init__(self) -> None:
        if self.typed_schema is None and self.columns is not None:
            mapping: dict[str, object] = {t: dict(cols) for t, cols in self.columns.items()}
            object.__setattr__(self, "typed_schema", MappingSchema(mapping))


@dataclass
class Compiled:
    """The SELECT to run (sqlglot's dialect, transpiled by the backend) and how to bind its arguments."""

    sql: str
    arguments: dict[str, ArgSpec] = field(default_factory=dict)


def parse_condition(text: str) -> exp.Expr:
    """One SQL boolean expression (not a statement)."""
    try:
        parsed = [p for p in sqlglot.parse(text) if p is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = first.get("line")
        raise ExprError(
            f"expression does not parse: {first.get('description', exc)}",
            line=line if isinstance(line, int) else None,
        ) from exc
    except SqlglotError as exc:
        raise ExprError(f"expression does not parse: {exc}") from exc
    if len(parsed) != 1 or isinstance(parsed[0], _STATEMENTS):
        raise ExprError("expected one SQL expression (a condition), not a statement")
    return parsed[0]


def parse_from(text: str) -> exp.Select:
    """A ``from`` clause (tables, joins) as the SELECT it starts."""
    try:
        parsed = sqlglot.parse_one(f"SELECT 1 FROM {text}")  # noqa: S608 - parsed and validated, not run
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = first.get("line")
        raise ExprError(
            f"'from' does not parse: {first.get('description', exc)}",
            line=line if isinstance(line, int) else None,
        ) from exc
    except SqlglotError as exc:
        raise ExprError(f"'from' does not parse: {exc}") from exc
    if not isinstance(parsed, exp.Select) or parsed.args.get("where") or parsed.args.get("group"):
        raise ExprError("'from' names tables and joins only; conditions go in 'where'")
    return parsed


def compile_check(
    scope: Scope,
    *,
    source: str | None,
    where: str | None,
    that: str | None = None,
) -> Compiled:
    """``forbid`` (``that`` None: a violation per row matching ``where``) or ``require`` (a violation per
    row in scope, matching ``where`` if given, for which ``that`` is not TRUE: NULL fails)."""
    select = _parsed("from", parse_from, source) if source is not None else exp.select()
    conditions: list[exp.Expr] = []
    if where is not None:
        conditions.append(exp.paren(_parsed("where", parse_condition, where), copy=False))
    if that is not None:
        held = exp.func(
            "COALESCE", exp.paren(_parsed("that", parse_condition, that), copy=False), exp.false()
        )
        conditions.append(exp.not_(held))
    if not conditions:
        raise ExprError("a rule needs a condition ('where' or 'that')")
    tops = _top_sources(select)
    select = select.where(*conditions, copy=False)
    arguments = _rewrite(select, scope)
    shown = _shown_columns(select, tops)
    shown += [_shown_argument(name, spec) for name, spec in arguments.items()]
    if not shown:
        shown = [exp.alias_(exp.true(), "violated")]
    select.set("expressions", shown)
    _validate(select, scope)
    return Compiled(sql=select.sql(), arguments=arguments)


def compile_condition(scope: Scope, when: str) -> Compiled:
    """An approval condition: one row when ``when`` holds or is NULL (undecidable: a person decides)."""
    held = exp.func("COALESCE", exp.paren(_parsed("when", parse_condition, when), copy=False), exp.true())
    select = exp.select(exp.alias_(exp.true(), "held")).where(held, copy=False)
    arguments = _rewrite(select, scope)
    _validate(select, scope)
    return Compiled(sql=select.sql(), arguments=arguments)


def compile_raw(scope: Scope, sql: str) -> Compiled:
    """A raw ``sql:`` rule (the escape hatch): one read-only SELECT returning the violating rows, with
    table aliases and ``args.x`` rewritten as in expressions; ``:name`` parameters are bound untyped."""
    from guard.sqltext import SqlTextError, parse_select, validate_against

    try:
        tree = parse_select(sql)
    except SqlTextError as exc:
        cause = exc.__cause__
        line = None
        if isinstance(cause, ParseError) and cause.errors:
            found = cause.errors[0].get("line")
            line = found if isinstance(found, int) else None
        error = ExprError(str(exc).splitlines()[0], line=line)
        error.piece = "sql"
        raise error from exc
    arguments = _rewrite(tree, scope)
    if isinstance(tree, exp.Select):
        _validate(tree, scope)
    elif scope.columns is not None:
        try:
            validate_against(tree, scope.columns)
        except SqlTextError as exc:
            message = str(exc).splitlines()[0]
            raise ExprError(message, _token(message)) from exc
    return Compiled(sql=tree.sql(), arguments=arguments)


def _parsed(piece: str, parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except ExprError as exc:
        exc.piece = piece
        raise


def _top_sources(select: exp.Select) -> list[str]:
    sources = []
    from_ = select.args.get("from_")
    if from_ is not None:
        sources.append(from_.this)
    sources += [j.this for j in select.args.get("joins") or ()]
    return [s.alias_or_name for s in sources if isinstance(s, exp.Table)]


def _shown_columns(select: exp.Select, tops: Sequence[str]) -> list[exp.Expr]:
    """The top-level tables' columns the rule reads, as ``alias.column`` result columns."""
    seen: list[tuple[str, str]] = []
    for column in select.find_all(exp.Column, bfs=False):
        pair = (column.table, column.name)
        if column.table in tops and column.name and pair not in seen:
            seen.append(pair)
    return [exp.alias_(exp.column(c, table=t), f"{t}.{c}", quoted=True) for t, c in seen]


def _shown_argument(name: str, spec: ArgSpec) -> exp.Expr:
    return exp.alias_(_argument(name, spec), f"args.{name}", quoted=True)


def _argument(name: str, spec: ArgSpec) -> exp.Expr:
    placeholder = exp.Placeholder(this=name)
    if spec.type is None:
        return placeholder
    cast = exp.Cast(this=placeholder, to=exp.DataType.build(_SQL_TYPES[spec.type]))
    cast.meta["arg"] = name
    return cast


def _rewrite(tree: exp.Expr, scope: Scope) -> dict[str, ArgSpec]:
    """Aliases → physical tables, ``args.x`` → typed parameters, macros expanded (in place)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        name = table.name
        if name in ctes:
            continue
        if table.alias == "args":
            raise ExprError("'args' names the call's arguments; use another table alias", "args")
        if name not in scope.aliases:
            raise ExprError(f"unknown table alias {name!r} (declare it under 'tables:')", name)
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
        table.set("this", exp.to_identifier(scope.aliases[name]))
    call = tree.find(exp.Anonymous)
    while call is not None:
        tree = _expand(call, tree)
        call = tree.find(exp.Anonymous)
    arguments: dict[str, ArgSpec] = {}
    for column in list(tree.find_all(exp.Column)):
        if column.table != "args":
            continue
        name = column.name
        spec = arguments.get(name) or _arg_spec(name, scope)
        arguments[name] = spec
        column.replace(_argument(name, spec))
    return arguments


def _expand(call: exp.Anonymous, tree: exp.Expr) -> exp.Expr:
    name = str(call.name).lower()
    if name not in _MACROS:
        raise ExprError(
            f"unknown function {call.name}() (not portable to SQLite and PostgreSQL; "
            "see docs/policies.md for same_amount and amount_at_most)",
            str(call.name),
        )
    if len(call.expressions) != 2:
        raise ExprError(f"{name}() takes two amounts, got {len(call.expressions)}", name)
    a, b = (exp.paren(e.copy(), copy=False) for e in call.expressions)
    cent = exp.Literal.number(CENT)
    if name == "same_amount":
        body: exp.Expr = exp.LT(this=exp.func("ABS", exp.Sub(this=a, expression=b)), expression=cent)
    else:
        body = exp.LT(this=a, expression=exp.Add(this=b, expression=cent))
    replaced = exp.paren(body, copy=False)
    if call is tree:
        return replaced
    call.replace(replaced)
    return tree


def _arg_spec(name: str, scope: Scope) -> ArgSpec:
    if not _IDENTIFIER.match(name):
        raise ExprError(f"argument {name!r} cannot be named in SQL; use a python check", name)
    if scope.tools is None:
        raise ExprError(f"args.{name}: a commit rule sees no call, so it has no arguments", name)
    if not scope.tools:
        raise ExprError(f"args.{name}: a rule that reads call arguments must list its 'tools'", name)
    if scope.tool_schemas is None:
        return ArgSpec()
    specs: dict[str, ArgSpec] = {}
    for tool in scope.tools:
        schema = scope.tool_schemas.get(tool)
        if schema is None:
            continue
        prop = (schema.get("properties") or {}).get(name)
        if not isinstance(prop, Mapping):
            raise ExprError(f"unknown argument args.{name}: tool {tool!r} has no argument {name!r}", name)
        kind = schema_type(prop)
        if kind in ("object", "array"):
            raise ExprError(
                f"args.{name} is an {kind} in {tool}'s input schema and cannot be used in SQL: "
                "use a python check",
                name,
            )
        if kind == "mixed":
            raise ExprError(
                f"args.{name} has more than one type in {tool}'s input schema: use a python check", name
            )
        specs[tool] = ArgSpec(type=kind, default=prop.get("default"))  # type: ignore[arg-type]
    kinds = {tool: spec.type for tool, spec in specs.items()}
    if len(set(kinds.values())) > 1:
        described = ", ".join(f"{t}: {k or 'untyped'}" for t, k in kinds.items())
        raise ExprError(
            f"type mismatch: args.{name} has different types in the rule's tools ({described})", name
        )
    defaults = {repr(s.default) for s in specs.values()}
    first = next(iter(specs.values()), ArgSpec())
    return first if len(defaults) <= 1 else ArgSpec(type=first.type)


def _validate(select: exp.Select, scope: Scope) -> None:
    """Tables and columns exist (with ``scope.columns``); no text is compared with a number."""
    mapping = scope.typed_schema
    if scope.columns is not None and mapping is not None:
        ctes = {c.alias_or_name for c in select.find_all(exp.CTE)}
        missing = sorted({t.name for t in select.find_all(exp.Table)} - ctes - set(scope.columns))
        if missing:
            alias = next((a for a, p in scope.aliases.items() if p == missing[0]), missing[0])
            raise ExprError(f"table alias {alias!r} names {missing[0]!r}, which does not exist", alias)
        try:
            typed = qualify(
                select.copy(), schema=mapping, validate_qualify_columns=True, quote_identifiers=False
            )
        except OptimizeError as exc:
            message = str(exc).splitlines()[0]
            raise ExprError(message, _token(message)) from exc
    else:
        typed = select.copy()
    annotated = annotate_types(typed, schema=mapping)
    for node in annotated.find_all(*_COMPARED, exp.In, exp.Between):
        if isinstance(node, exp.In):
            pairs = [(node.this, e) for e in node.expressions]
        elif isinstance(node, exp.Between):
            pairs = [(node.this, node.args["low"]), (node.this, node.args["high"])]
        else:
            pairs = [(node.this, node.expression)]
        for left, right in pairs:
            kinds = {_kind(left.type), _kind(right.type)}
            if kinds == {"text", "number"}:
                raise ExprError(
                    f"type mismatch: {_shown(left)} is {_kind(left.type)}, {_shown(right)} is "
                    f"{_kind(right.type)} in {_shown(node)}",
                    _first_token(node),
                )


def _kind(data_type: exp.DataType | None) -> str | None:
    if data_type is None:
        return None
    if data_type.is_type(*exp.DataType.TEXT_TYPES):
        return "text"
    if data_type.is_type(*exp.DataType.NUMERIC_TYPES):
        return "number"
    return None


def _author_view(node: exp.Expr) -> exp.Expr:
    def back(n: exp.Expr) -> exp.Expr:
        name = n.meta.get("arg") if isinstance(n, exp.Cast) else None
        if name is not None:
            return exp.column(name, table="args")
        if isinstance(n, exp.Placeholder) and n.name:
            return exp.column(n.name, table="args")
        return n

    return node.copy().transform(back)


def _shown(node: exp.Expr) -> str:
    return _author_view(node).sql()


def _first_token(node: exp.Expr) -> str | None:
    view = _author_view(node)
    for n in view.walk():
        if isinstance(n, exp.Column):
            return n.name
        if isinstance(n, exp.Literal):
            return str(n.this)
    return None


_QUOTED = re.compile(r"'([^']+)'|: (\w+)$")


def _token(message: str) -> str | None:
    found = _QUOTED.search(message)
    if not found:
        return None
    token = found.group(1) or found.group(2)
    return token.rsplit(".", 1)[-1]
