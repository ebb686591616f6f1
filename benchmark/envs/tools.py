"""Tools of a benchmark environment: name, schema and description as data, behaviour as code.

A tool's agent-facing interface (name, description, JSON input schema) is loaded from the bundle's
``tool_schemas.json``. Its arguments are validated by a pydantic model generated from that schema, so
validation errors read exactly like the reference's (which validates with the pydantic model the
schema was exported from). The response text is what the reference's FastMCP wrapper returns:

* success: ``json.dumps(result)`` of the output dict with top-level ``None`` values removed;
* failure: ``json.dumps({"error": "Tool execution failed: <msg>", "tool": name})``.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, create_model

from benchmark.envs.errors import DataError, ToolError

if TYPE_CHECKING:
    from benchmark.envs.environment import Environment

ToolFn = Callable[["Environment", Any], Mapping[str, Any]]
"""A tool implementation: ``(env, args) -> output``. ``args`` is the instance of the input model built from
the tool's schema; each implementation annotates it with the tool's generated inputs Protocol
(:mod:`benchmark.envs.typegen`), which ``tests/benchmark/envs/test_typegen.py`` checks."""


def _enum_member_name(value: str) -> str:
    import re

    return re.sub(r"\W+", "_", value).strip("_").upper() or "EMPTY"


class SchemaModels:
    """Turns JSON schemas (as exported by pydantic) back into pydantic models.

    ``enum_names`` maps an enum's title to {value: member name} where the reference's member names are
    not the upper-cased values (they show in messages such as ``'TableName.USERS'``).
    ``aliases`` maps a property name to extra accepted input names (e.g. ``$filter`` also as ``filter``).
    """

    def __init__(
        self,
        enum_names: Mapping[str, Mapping[str, str]] | None = None,
        aliases: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.enum_names = enum_names or {}
        self.aliases = aliases or {}
        self._enums: dict[tuple[str, tuple[str, ...]], type[enum.Enum]] = {}

    def enum(self, title: str, values: tuple[str, ...]) -> type[enum.Enum]:
        cache_key = (title, values)
        if cache_key not in self._enums:
            names = self.enum_names.get(title, {})
            members = {names.get(v, _enum_member_name(v)): v for v in values}
            made: type[enum.Enum] = enum.Enum(title, members, type=str)  # type: ignore[misc]
            self._enums[cache_key] = made
        return self._enums[cache_key]

    def annotation(self, schema: Mapping[str, Any], where: str) -> tuple[Any, dict[str, Any]]:
        """Python type + Field constraints for a property schema."""
        constraints: dict[str, Any] = {}
        if "anyOf" in schema:
            options = [s for s in schema["anyOf"] if s.get("type") != "null"]
            nullable = len(options) < len(schema["anyOf"])
            types = []
            for opt in options:
                t, c = self.annotation(opt, where)
                types.append(t)
                if len(options) == 1:
                    constraints.update(c)
            inner: Any = types[0] if len(types) == 1 else Union[tuple(types)]  # noqa: UP007
            return (Optional[inner] if nullable else inner), constraints  # noqa: UP045
        if "enum" in schema:
            values = tuple(schema["enum"])
            if not all(isinstance(v, str) for v in values):
                raise DataError(f"{where}: non-string enum {values!r}")
            return self.enum(schema.get("title", "Enum"), values), constraints
        kind = schema.get("type")
        for src, dst in (
            ("minLength", "min_length"),
            ("maxLength", "max_length"),
            ("minimum", "ge"),
            ("maximum", "le"),
        ):
            if src in schema:
                constraints[dst] = schema[src]
        if kind == "string":
            fmt = schema.get("format")
            if fmt == "date-time":
                return dt.datetime, constraints
            if fmt == "date":
                return dt.date, constraints
            return str, constraints
        if kind == "integer":
            return int, constraints
        if kind == "number":
            return float, constraints
        if kind == "boolean":
            return bool, constraints
        if kind == "array":
            item_type, _ = (
                self.annotation(schema.get("items", {}), where) if schema.get("items") else (Any, {})
            )
            return list[item_type], constraints  # type: ignore[valid-type]
        if kind == "object":
            if "properties" in schema:
                return self.model(schema.get("title", "Object"), schema, where), constraints
            return dict[str, Any], constraints
        if kind is None and not schema:
            return Any, constraints
        raise DataError(f"{where}: unsupported schema {dict(schema)!r}")

    def model(self, name: str, schema: Mapping[str, Any], where: str) -> type[BaseModel]:
        required = set(schema.get("required", []))
        fields: dict[str, Any] = {}
        for prop, sub in schema.get("properties", {}).items():
            annotation, constraints = self.annotation(sub, f"{where}.{prop}")
            extra_names = self.aliases.get(prop, ())
            py_name = prop if prop.isidentifier() and not prop.startswith("_") else "p_" + prop.strip("$_")
            kwargs: dict[str, Any] = dict(constraints)
            if py_name != prop or extra_names:
                kwargs["validation_alias"] = AliasChoices(prop, *extra_names)
                kwargs["serialization_alias"] = prop
            if prop in required:
                fields[py_name] = (annotation, Field(..., **kwargs))
            else:
                fields[py_name] = (annotation, Field(sub.get("default"), **kwargs))
        forbid = schema.get("additionalProperties") is False
        extra: Literal["forbid", "ignore"] = "forbid" if forbid else "ignore"
        return create_model(name, __config__=ConfigDict(extra=extra, populate_by_name=False), **fields)


@dataclass
class Tool:
    """One agent-visible tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    input_model: type[BaseModel]
    run: ToolFn
    writes: bool = True
    annotations: dict[str, Any] = field(default_factory=dict)


def validation_message(error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        loc = ".".join(str(p) for p in e["loc"])
        parts.append(f"{loc}: {e['msg']}")
    return "Input validation failed: " + "; ".join(parts)


def render_error(tool: str, message: str) -> str:
    return json.dumps({"error": f"Tool execution failed: {message}", "tool": tool})


def render_result(result: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in result.items() if v is not None})


def invoke(tool: Tool, env: Environment, arguments: Mapping[str, Any] | None) -> str:
    """Validate, run and render one call the way the reference server does."""
    try:
        args = tool.input_model.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        return render_error(tool.name, validation_message(exc))
    try:
        result = tool.run(env, args)
    except ToolError as exc:
        return render_error(tool.name, str(exc))
    return render_result(result)
