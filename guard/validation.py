"""Check a call's arguments against the tool's JSON input schema before the call is forwarded.

An invalid call never reaches the upstream: the agent gets :class:`~guard.errors.InvalidArguments`
with one :class:`~guard.models.FieldProblem` per wrong argument — which field, what was wrong, what
was expected (type, allowed values, required) and an example taken from the schema.

Modes (``errors.validation`` in the policy pack):

* ``lax`` (default): JSON Schema as the tool declares it, except that a string holding a number is
  accepted where a number or integer is expected, and ``"true"``/``"false"``/``"1"``/``"0"`` (etc.) or
  0/1 where a boolean is, because the servers agents talk to (pydantic in its default lax mode,
  FastMCP, most web frameworks) accept these. The guard must never refuse a call its upstream would
  run correctly: ThinkingBox's golden trajectories send amounts as strings (``"680.00"``).
* ``strict``: JSON Schema as written (for upstreams that validate strictly themselves).
* ``off``: nothing is checked before forwarding.

``format`` is an annotation, not an assertion (the JSON Schema 2020-12 default): upstreams parse
dates more leniently than any format checker. Remote ``$ref`` are never fetched.

Valid arguments cost one compiled check (:mod:`guard.fast_validity`, jsonschema-rs) where the schema
allows it; the python-``jsonschema`` pass below runs only when that check does not say valid, so
every problem, message and hint comes from it alone.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from guard.errors import InternalError, InvalidArguments
from guard.fast_validity import Declined, FastValidity, compile_validity
from guard.models import FieldProblem

Mode = Literal["lax", "strict", "off"]

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")
_BOOLEAN_STRINGS = frozenset({"true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"})
_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}
MAX_ENUM_SHOWN = 30
MAX_PROBLEMS = 20
"""At most this many problems are listed for one call (then one line counts the rest): the agent
needs the first few to fix its call, and the guard's work must not grow with what was sent."""


class InvalidSchemaError(ValueError):
    """The tool's own input schema is not valid JSON Schema; the message says where."""


def _lax_number(checker: Any, instance: Any) -> bool:
    if Draft202012Validator.TYPE_CHECKER.is_type(instance, "number"):
        return True
    if isinstance(instance, str):
        try:
            return math.isfinite(float(instance))
        except ValueError:
            return False
    return False


def _lax_integer(checker: Any, instance: Any) -> bool:
    if Draft202012Validator.TYPE_CHECKER.is_type(instance, "integer"):
        return True
    return isinstance(instance, str) and _INTEGER.match(instance) is not None


def _lax_boolean(checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool):
        return True
    if isinstance(instance, int):
        return instance in (0, 1)
    return isinstance(instance, str) and instance.strip().lower() in _BOOLEAN_STRINGS


def _validator_class(schema: Mapping[str, Any], mode: Mode) -> type[Validator]:
    base: type[Validator] = validators.validator_for(schema, default=Draft202012Validator)
    return base if mode == "strict" else _lax_class(base)


_LAX: dict[str, type[Validator]] = {}


_NUMERIC_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _as_number(instance: Any) -> Any:
    """A numeric string as the number it holds (what lax mode reads it as); anything else unchanged."""
    if isinstance(instance, str):
        if _INTEGER.match(instance) is not None:
            return int(instance)
        try:
            number = float(instance)
        except ValueError:
            return instance
        return number if math.isfinite(number) else instance
    return instance


def _on_number(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``keyword`` (a numeric bound or ``multipleOf``) applied to a numeric string as to its number:
    lax mode lets such a string pass the type check, and the draft's own keyword would then compare
    a string with a number (a TypeError instead of a verdict)."""

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        return keyword(validator, value, _as_number(instance), schema)

    return check


def _lax_class(base: type[Validator]) -> type[Validator]:
    """The lax variant of a draft's validator class (created once per draft)."""
    key = f"{base.__module__}.{base.__qualname__}"
    if key not in _LAX:
        checker = base.TYPE_CHECKER.redefine_many(
            {"number": _lax_number, "integer": _lax_integer, "boolean": _lax_boolean}
        )
        keywords = {k: _on_number(base.VALIDATORS[k]) for k in _NUMERIC_KEYWORDS if k in base.VALIDATORS}
        _LAX[key] = validators.extend(base, validators=keywords, type_checker=checker)
    return _LAX[key]


def _json(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wrong_type(value: Any) -> str:
    kind = _json_type(value)
    return "wrong type: got null" if value is None else f"wrong type: got {kind} {_json(value)}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def describe(schema: Any) -> str:
    """What a schema accepts, in words an agent can act on."""
    if not isinstance(schema, Mapping) or not schema:
        return "any value"
    if "enum" in schema and isinstance(schema["enum"], list):
        values = schema["enum"]
        shown = ", ".join(_json(v) for v in values[:MAX_ENUM_SHOWN])
        more = f", … ({len(values)} values in all)" if len(values) > MAX_ENUM_SHOWN else ""
        return f"one of {shown}{more}"
    if "const" in schema:
        return f"exactly {_json(schema['const'])}"
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            seen: list[str] = []
            for branch in branches:
                text = describe(branch)
                if text not in seen:
                    seen.append(text)
            return " or ".join(seen)
    kind = schema.get("type")
    if isinstance(kind, list):
        text = " or ".join(_TYPE_NAMES.get(str(k), str(k)) for k in kind)
    elif kind == "array" and isinstance(schema.get("items"), Mapping):
        text = f"an array of ({describe(schema['items'])})"
    elif kind == "object" and schema.get("title"):
        text = f"an object ({schema['title']})"
    else:
        text = _TYPE_NAMES.get(str(kind), "a value") if kind is not None else "a value"
    limits = []
    for key, words in (
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
        ("minimum", ">= {}"),
        ("maximum", "<= {}"),
        ("exclusiveMinimum", "> {}"),
        ("exclusiveMaximum", "< {}"),
        ("minItems", "at least {} items"),
        ("maxItems", "at most {} items"),
        ("pattern", "matching {}"),
        ("format", "in {} format"),
    ):
        if key in schema:
            limits.append(words.format(schema[key]))
    return text + (f" ({', '.join(limits)})" if limits else "")


_TYPE_EXAMPLES: dict[str, Any] = {
    "string": "text",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "array": [],
    "object": {},
}
_FORMAT_EXAMPLES = {
    "date-time": "2025-01-20T17:00:00Z",
    "date": "2025-01-20",
    "time": "17:00:00",
    "email": "name@example.com",
    "uri": "https://example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
}


def example(schema: Any, depth: int = 0) -> Any:
    """An example value: the schema's own ``examples``/``default``/enum first, else one by type."""
    if not isinstance(schema, Mapping) or depth > 6:
        return None
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if schema.get("default") is not None:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            if isinstance(branch, Mapping) and branch.get("type") != "null":
                return example(branch, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "string" and schema.get("format") in _FORMAT_EXAMPLES:
        return _FORMAT_EXAMPLES[str(schema["format"])]
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        required = schema.get("required") or []
        return {name: example(schema["properties"].get(name), depth + 1) for name in required}
    if kind == "array":
        item = example(schema.get("items"), depth + 1)
        return [item] if item is not None else []
    if kind == "integer" and isinstance(schema.get("minimum"), int):
        return schema["minimum"]
    return _TYPE_EXAMPLES.get(str(kind)) if kind is not None else None


def _join(path: Iterable[Any], name: str | None = None) -> str:
    out = ""
    for part in [*path, *([name] if name is not None else [])]:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _branch_errors(error: ValidationError) -> list[ValidationError] | None:
    """For anyOf/oneOf: the errors of the branch the value most nearly fits (None: fits none's type)."""
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context or []:
        branches.setdefault(sub.schema_path[0] if sub.schema_path else None, []).append(sub)
    candidates = [
        errs for errs in branches.values() if not any(e.validator == "type" and not e.path for e in errs)
    ]
    if not candidates:
        return None
    return min(candidates, key=len)


def _problems(error: ValidationError, field_schema: Any = None) -> list[FieldProblem]:
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    shown = field_schema if field_schema is not None and not error.path else schema
    path = list(error.absolute_path)
    if error.validator in ("anyOf", "oneOf"):
        chosen = _branch_errors(error)
        if chosen is not None:
            out: list[FieldProblem] = []
            for sub in chosen:
                out += _problems(sub, schema if not sub.path else None)
            return out
        return [
            FieldProblem(
                field=_join(path),
                problem=_wrong_type(error.instance),
                expected=describe(schema),
                example=example(schema),
            )
        ]
    if error.validator == "required":
        properties = schema.get("properties") or {}
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        return [
            FieldProblem(
                field=_join(path, name),
                problem="missing",
                expected=f"required: {describe(properties.get(name))}",
                example=example(properties.get(name)),
            )
            for name in error.validator_value
            if name not in instance
        ]
    if error.validator == "additionalProperties":
        properties = list((schema.get("properties") or {}).keys())
        patterns = [re.compile(p) for p in (schema.get("patternProperties") or {})]
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        known = frozenset(properties)
        extras = [k for k in instance if k not in known and not any(p.search(k) for p in patterns)]
        allowed = ", ".join(properties) if properties else "none"
        listed = [
            FieldProblem(
                field=_join(path, name), problem="unexpected argument", expected=f"only these: {allowed}"
            )
            for name in extras[:MAX_PROBLEMS]
        ]
        if len(extras) > MAX_PROBLEMS:
            listed.append(_more(path, len(extras) - MAX_PROBLEMS, "unexpected argument(s)", allowed))
        return listed
    if error.validator == "type":
        problem = _wrong_type(error.instance)
    elif error.validator == "enum":
        problem = f"{_json(error.instance)} is not an allowed value"
    else:
        problem = f"{_json(error.instance)} fails {error.validator} {_json(error.validator_value)}"
    return [
        FieldProblem(field=_join(path), problem=problem, expected=describe(shown), example=example(shown))
    ]


class _More(FieldProblem):
    """Stands for problems left unlisted (always kept: it says how many there were)."""


def _more(path: Sequence[Any], count: int, what: str, allowed: str) -> FieldProblem:
    return _More(field=_join(path), problem=f"and {count} more {what}", expected=f"only these: {allowed}")


class ArgumentValidator:
    """A compiled input schema; :meth:`check` returns the failure for invalid arguments, else None."""

    def __init__(self, schema: Mapping[str, Any], mode: Mode = "lax") -> None:
        self.schema = schema
        self.mode = mode
        cls = _validator_class(schema, mode)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            where = _join(exc.absolute_path) or "(root)"
            raise InvalidSchemaError(f"input schema at {where}: {exc.message}") from exc
        self._validator = cls(schema)
        self.fast_path: FastValidity | Declined = (
            Declined("validation is off")
            if mode == "off"
            else compile_validity(schema, cls, lax=mode == "lax")
        )
        """The compiled check that answers for valid arguments, or why this schema has none."""

    def problems(self, arguments: Mapping[str, Any]) -> list[FieldProblem]:
        if self.mode == "off":
            return []
        if isinstance(self.fast_path, FastValidity) and self.fast_path.valid(arguments):
            return []
        out: list[FieldProblem] = []
        seen: set[tuple[str, str, str]] = set()
        hidden = 0
        for error in sorted(
            self._validator.iter_errors(dict(arguments)), key=lambda e: list(map(str, e.path))
        ):
            for problem in _problems(error):
                key = (problem.field, problem.problem, problem.expected)
                if key in seen:
                    continue
                seen.add(key)
                if len(out) < MAX_PROBLEMS or isinstance(problem, _More):
                    out.append(problem)
                else:
                    hidden += 1
        if hidden:
            out.append(_More(field="", problem=f"and {hidden} more problem(s)", expected="see above"))
        return out

    def check(self, tool: str, arguments: Mapping[str, Any]) -> InvalidArguments | None:
        problems = self.problems(arguments)
        if not problems:
            return None
        listed = "; ".join(f"{p.field or '(arguments)'}: {p.problem}" for p in problems)
        return InvalidArguments(
            f"Invalid arguments for {tool}: {listed}",
            tool=tool,
            rule="input_schema",
            source="validation",
            fields=problems,
        )


@functools.lru_cache(maxsize=4096)
def _compile(schema_json: str, mode: Mode) -> ArgumentValidator | InvalidSchemaError:
    """Compiling (checking the schema against its metaschema) costs far more than validating a call,
    so compiled schemas are shared by every session of the process, keyed by their JSON text."""
    try:
        return ArgumentValidator(json.loads(schema_json), mode)
    except InvalidSchemaError as exc:
        return exc


class ToolValidators:
    """The compiled validator of each tool (shared across sessions, see :func:`_compile`)."""

    def __init__(self, mode: Mode = "lax") -> None:
        self.mode = mode
        self._compiled: dict[str, ArgumentValidator | InternalError] = {}

    def check(
        self, tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
    ) -> InvalidArguments | InternalError | None:
        """The failure for this call, or None. A tool whose schema is itself invalid fails closed."""
        if self.mode == "off" or not schema:
            return None
        compiled = self._compiled.get(tool)
        if compiled is None:
            shared = _compile(json.dumps(schema, sort_keys=True), self.mode)
            if isinstance(shared, ArgumentValidator):
                compiled = shared
            else:
                compiled = InternalError(
                    f"The tool {tool} declares an invalid {shared}; the call was not forwarded.",
                    tool=tool,
                    rule="invalid_input_schema",
                    source="validation",
                    next_step="Tell the user the tool is misconfigured; it cannot be called until fixed.",
                )
            self._compiled[tool] = compiled
        if isinstance(compiled, InternalError):
            return compiled
        return compiled.check(tool, arguments)


def problems_for(
    schema: Mapping[str, Any], arguments: Mapping[str, Any], mode: Mode = "lax"
) -> Sequence[FieldProblem]:
    """One-off validation (tests, tools): the problems of ``arguments`` under ``schema``."""
    return ArgumentValidator(schema, mode).problems(arguments)
