"""Table schemas of a benchmark domain, generated from the bundle's ``models.json``.

The reference environments keep their state in pydantic v2 models; the stable-state hash depends on
exactly how pydantic validates (lax coercion, dropped unknown fields, defaults) and how it renders
values in ``mode="json"`` (floats keep ``.0``, Decimals keep their scale, UTC datetimes end in ``Z``).
Rather than re-implementing those rules, each table gets a pydantic model generated from the field
list in ``models.json``; the SQL store keeps the model's JSON-mode rendering column by column.
"""

from __future__ import annotations

import ast
import datetime as dt
import enum
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from benchmark.envs.errors import DataError

# Python type names used in models.json -> the storage kind of the JSON-mode value.
_SCALARS: dict[str, type] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "datetime": dt.datetime,
    "date": dt.date,
    "Decimal": Decimal,
}

# The instant the reference's datetime default factories are stamped with (agent-facing "now").
FROZEN_NOW = dt.datetime(2025, 10, 1, 13, 0, 0, tzinfo=dt.UTC)

_ENUM_DEFAULT = re.compile(r"^<(\w+)\.(\w+): (.+)>$")
_FSTRING_FIELD = re.compile(r"\{self\.(\w+)(\.value)?\}")


class FieldSpec(BaseModel):
    """One column: its Python type string as models.json spells it, and what the hash does with it."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    kind: str  # str | int | float | bool | datetime | date | Decimal | enum | list
    optional: bool
    required: bool
    unstable: bool
    enum_values: tuple[str, ...] | None = None


class TableSpec:
    """A domain table: name, fields, key function and the generated row model."""

    def __init__(
        self,
        name: str,
        model_name: str,
        module: str,
        fields: list[FieldSpec],
        key: Callable[[Mapping[str, Any]], str],
        key_fields: tuple[str, ...],
        has_id_field: bool,
        row_model: type[BaseModel],
        default_rows: int,
    ) -> None:
        self.name = name
        self.model_name = model_name
        self.module = module
        self.fields = fields
        self.field_names = tuple(f.name for f in fields)
        self.unstable = frozenset(f.name for f in fields if f.unstable)
        self.key = key
        self.key_fields = key_fields
        self.has_id_field = has_id_field
        self.row_model = row_model
        self.default_rows = default_rows

    def validate_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Validate one input row as the reference's model does; return its JSON-mode rendering."""
        return self.row_model.model_validate(row).model_dump(mode="json")

    def __repr__(self) -> str:
        return f"TableSpec({self.name!r}, {len(self.fields)} fields)"


def _split_optional(type_str: str) -> tuple[str, bool]:
    if type_str.startswith("Optional[") and type_str.endswith("]"):
        return type_str[len("Optional[") : -1], True
    return type_str, False


def _enum_class(name: str, values: tuple[str, ...], member_names: Mapping[str, str]) -> type[enum.Enum]:
    members = {member_names.get(v, _member_name(v)): v for v in values}
    return enum.Enum(name, members, type=str)  # type: ignore[return-value]


def _member_name(value: str) -> str:
    name = re.sub(r"\W+", "_", value).strip("_").upper()
    return name or "EMPTY"


def _parse_default(
    raw: str, table: str, field: str
) -> tuple[Any, Callable[[], Any] | None, tuple[str, str] | None]:
    """Decode a models.json default (a Python repr) into (value, factory, enum member)."""
    match = _ENUM_DEFAULT.match(raw)
    if match:
        return ast.literal_eval(match.group(3)), None, (match.group(1), match.group(2))
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError) as exc:
        raise DataError(f"models.json: {table}.{field}: unreadable default {raw!r}") from exc
    if isinstance(value, str) and value.startswith("factory:"):
        body = value[len("factory:") :]
        if body == "[]":
            return None, list, None
        if body == "{}":
            return None, dict, None
        if body.startswith("datetime.datetime("):
            return None, lambda: FROZEN_NOW, None
        raise DataError(f"models.json: {table}.{field}: unsupported default factory {body!r}")
    return value, None, None


def _key_function(id_field: str, table: str) -> tuple[Callable[[Mapping[str, Any]], str], tuple[str, ...]]:
    """The reference's ``get_id()``: a field name, or the source of an f-string over fields."""
    if id_field.isidentifier():
        return (lambda row, f=id_field: str(row.get(f))), (id_field,)
    match = re.fullmatch(r'return f"(.*)"', id_field.strip())
    if not match:
        raise DataError(f"models.json: {table}: unsupported id_field {id_field!r}")
    template = match.group(1)
    names = tuple(m.group(1) for m in _FSTRING_FIELD.finditer(template))

    def key(row: Mapping[str, Any]) -> str:
        # Rows are JSON-mode renderings, so an enum's `.value` is already the stored string.
        return _FSTRING_FIELD.sub(lambda m: str(row.get(m.group(1))), template)

    return key, names


def build_table(
    name: str, raw: Mapping[str, Any], enum_member_names: Mapping[str, Mapping[str, str]] | None = None
) -> TableSpec:
    """Build one TableSpec from its models.json entry."""
    enum_member_names = enum_member_names or {}
    field_defs: dict[str, Any] = {}
    specs: list[FieldSpec] = []
    for fname, f in raw["fields"].items():
        base, optional = _split_optional(f["type"])
        enum_values = tuple(f["enum"]) if f.get("enum") else None
        default_value, factory, enum_member = (None, None, None)
        if f.get("default") is not None:
            default_value, factory, enum_member = _parse_default(f["default"], name, fname)
        if base in _SCALARS:
            kind, py_type = base, _SCALARS[base]
        elif base in ("List[str]", "list[str]"):
            kind, py_type = "list", list[str]
        elif enum_values is not None:
            names = dict(enum_member_names.get(base, {}))
            if enum_member is not None:
                names.setdefault(str(default_value), enum_member[1])
            kind, py_type = "enum", _enum_class(base, enum_values, names)
            if default_value is not None:
                default_value = py_type(default_value)
        else:
            raise DataError(f"models.json: {name}.{fname}: unsupported type {f['type']!r}")
        annotation: Any = Optional[py_type] if optional else py_type  # noqa: UP045 - built at run time
        if f["required"]:
            field_defs[fname] = (annotation, ...)
        elif factory is not None:
            field_defs[fname] = (annotation, Field(default_factory=factory))
        else:
            field_defs[fname] = (annotation, default_value)
        specs.append(
            FieldSpec(
                name=fname,
                type=f["type"],
                kind=kind,
                optional=optional,
                required=bool(f["required"]),
                unstable=bool(f["unstable"]),
                enum_values=enum_values,
            )
        )
    extra: Literal["forbid", "ignore"] = "forbid" if raw.get("extra") == "forbid" else "ignore"
    model = create_model(raw["model"], __config__=ConfigDict(extra=extra), **field_defs)
    key, key_fields = _key_function(raw["id_field"], name)
    return TableSpec(
        name=name,
        model_name=raw["model"],
        module=raw["module"],
        fields=specs,
        key=key,
        key_fields=key_fields,
        has_id_field=bool(raw["has_id_field"]),
        row_model=model,
        default_rows=int(raw.get("default_rows", 0)),
    )
