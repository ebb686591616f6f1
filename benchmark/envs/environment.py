"""A domain (tables, default rows, tools) and an Environment: one isolated attempt's state.

Tools see the state through :class:`Table`, which hands out pydantic row models (typed values:
``datetime``, ``Decimal``, enums) and stores their JSON-mode rendering in SQL.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, cast, overload

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError

from benchmark.envs.errors import DataError, ToolError, UnknownTableError
from benchmark.envs.hashing import StableState, stable_state, state_hash
from benchmark.envs.records import R, Record, TableRef
from benchmark.envs.schema import TableSpec, build_table
from benchmark.envs.store import Database, SqlState, build_metadata
from benchmark.envs.tools import SchemaModels, Tool, ToolFn, invoke

_DOMAIN_IDS = itertools.count(1)
RESERVED_PREFIX = "__reserved__"


@dataclass
class DomainDef:
    """What a domain module contributes: its tool implementations and naming specifics."""

    name: str
    tools: dict[str, ToolFn]
    read_only: frozenset[str] = frozenset()
    enum_names: dict[str, dict[str, str]] = field(default_factory=dict)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    input_models: dict[str, Callable[[SchemaModels, dict[str, Any]], type[BaseModel]]] = field(
        default_factory=dict
    )


class Domain:
    """A domain built from the bundle (models.json, default rows, tool_schemas.json) and its DomainDef."""

    def __init__(self, definition: DomainDef, bundle: Path) -> None:
        self.name = definition.name
        self.definition = definition
        self.bundle = bundle
        self.id = next(_DOMAIN_IDS)
        models = _read_json(bundle / "models.json")
        if self.name not in models:
            raise DataError(f"{bundle / 'models.json'}: no domain {self.name!r}")
        self.tables: dict[str, TableSpec] = {
            name: build_table(name, raw, definition.enum_names) for name, raw in models[self.name].items()
        }
        self.metadata, self.sql_tables = build_metadata(list(self.tables.values()))
        self.defaults = self._load_defaults()
        self.tools = self._load_tools()

    def _load_defaults(self) -> dict[str, list[dict[str, Any]]]:
        """Default rows per table, validated through the row models (unknown fields dropped)."""
        root = (
            self.bundle
            / "data"
            / "servers"
            / "tb_business_ops_servers_202606"
            / "tb_business_ops_servers_202606"
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for name, spec in self.tables.items():
            package = spec.module.removesuffix(".models").replace(".", "/")
            folder = root / "toolslib" / package / "initial_data"
            stems = sorted(
                (p.stem for p in folder.glob("*.json") if name.endswith("_" + p.stem)), key=len, reverse=True
            )
            if not stems:
                if spec.default_rows:
                    raise DataError(f"{folder}: no default file for table {name}")
                out[name] = []
                continue
            path = folder / f"{stems[0]}.json"
            raw = _read_json(path)
            if not isinstance(raw, list):  # the reference loads 0 rows from a non-list file
                out[name] = []
                continue
            rows = []
            for i, row in enumerate(raw):
                try:
                    rows.append(spec.validate_row(row))
                except ValidationError as exc:
                    raise DataError(f"{path}: row {i}: {exc}") from exc
            out[name] = rows
        return out

    def _load_tools(self) -> dict[str, Tool]:
        schemas = _read_json(self.bundle / "tool_schemas.json").get(self.name)
        if schemas is None:
            raise DataError(f"{self.bundle / 'tool_schemas.json'}: no domain {self.name!r}")
        factory = SchemaModels(self.definition.enum_names, self.definition.aliases)
        tools: dict[str, Tool] = {}
        implemented = dict(self.definition.tools)
        for entry in schemas:
            name = entry["name"]
            if name not in implemented:
                raise DataError(f"domain {self.name}: tool {name} has a schema but no implementation")
            make_model = self.definition.input_models.get(name)
            schema = entry["input_schema"]
            model = (
                make_model(factory, schema)
                if make_model
                else factory.model(f"{name}_input", schema, f"{self.name}.{name}")
            )
            tools[name] = Tool(
                name=name,
                description=entry["description"],
                input_schema=schema,
                input_model=model,
                run=implemented.pop(name),
                writes=name not in self.definition.read_only,
            )
        if implemented:
            raise DataError(f"domain {self.name}: implementations without a schema: {sorted(implemented)}")
        return tools

    def load_defaults_into(self, connection: sa.Connection) -> None:
        state = SqlState(connection, self.tables, self.sql_tables)
        for name, rows in self.defaults.items():
            state.append_many(name, rows)


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: file not found") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: invalid JSON: {exc}") from exc


class Table(Generic[R]):
    """Typed access to one table for tool code. Records are instances of the table's row model, typed
    as the row Protocol ``R`` of the :class:`~benchmark.envs.records.TableRef` they were fetched by."""

    def __init__(self, state: SqlState, spec: TableSpec) -> None:
        self._state = state
        self.spec = spec
        self.name = spec.name

    def record(self, data: Mapping[str, Any]) -> R:
        # The row model is built from the same models.json entry the Protocol R is generated from.
        return cast(R, self.spec.row_model.model_validate(data))

    def all(self) -> list[R]:
        return [self.record(r) for r in self._state.rows(self.name)]

    def where(self, **equals: Any) -> list[R]:
        """Rows whose stored (JSON-mode) values equal the given ones, in store order."""
        return [self.record(r) for r in self._state.rows_where(self.name, **equals)]

    def get(self, key: Any) -> R | None:
        row = self._state.by_key(self.name, str(key))
        return None if row is None else self.record(row)

    def exists(self, key: Any) -> bool:
        return self._state.has_key(self.name, str(key))

    def count(self) -> int:
        return self._state.count(self.name)

    def create(self, record: R) -> R:
        """Append a new record; refuse a duplicate key as the reference's ``create`` does."""
        row = record.model_dump(mode="json")
        key = self.spec.key(row)
        if self._state.has_key(self.name, key):
            raise ToolError(f"Object with ID {key} already exists")
        self._state.append(self.name, row)
        return record

    def save(self, record: R, key: Any | None = None) -> None:
        """Replace the stored row with this record's key (or ``key``) in place."""
        row = record.model_dump(mode="json")
        target = self.spec.key(row) if key is None else str(key)
        if not self._state.replace(self.name, target, row):
            raise ToolError(f"Object with ID {target} not found")

    def delete(self, key: Any) -> bool:
        return self._state.delete(self.name, str(key))


class Environment:
    """One attempt: a fresh database with the domain defaults, the task's patch, and the tools."""

    def __init__(self, domain: Domain, database: Database) -> None:
        self.domain = domain
        self.database = database
        self.connection, self._handle = database.open(
            domain.id, domain.metadata, domain.defaults, domain.load_defaults_into
        )
        self.state = SqlState(self.connection, domain.tables, domain.sql_tables, initial=domain.defaults)
        self._tables: dict[str, Table[Any]] = {
            name: Table(self.state, spec) for name, spec in domain.tables.items()
        }
        self.closed = False

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.database.close(self.connection, self._handle)

    @overload
    def table(self, name: TableRef[R]) -> Table[R]: ...
    @overload
    def table(self, name: str) -> Table[Record]: ...
    def table(self, name: str) -> Table[Any]:
        """The table ``name``; a :class:`TableRef` types its records with the ref's row Protocol."""
        try:
            return self._tables[name]
        except KeyError:
            raise UnknownTableError(f"Unknown table: {name}") from None

    def apply_patch(
        self, data_patch: Mapping[str, Sequence[Mapping[str, Any]]], where: str = "data_patch"
    ) -> None:
        """Upsert the patch rows over the defaults, validated first so bad input changes nothing."""
        if not isinstance(data_patch, Mapping):
            raise DataError(f"{where}: must be a mapping of table -> rows")
        validated: list[tuple[str, dict[str, Any]]] = []
        for table, rows in data_patch.items():
            spec = self.domain.tables.get(table)
            if spec is None:
                raise UnknownTableError(f"{where}: Unknown table: {table}")
            if not isinstance(rows, list):
                raise DataError(f"{where}.{table}: must be a list of rows")
            for i, row in enumerate(rows):
                if not isinstance(row, Mapping):
                    raise DataError(f"{where}.{table}[{i}]: must be an object")
                try:
                    validated.append((table, spec.validate_row(row)))
                except ValidationError as exc:
                    raise DataError(f"{where}.{table}[{i}]: {exc}") from exc
        grouped: dict[str, list[dict[str, Any]]] = {}
        for table, row in validated:
            grouped.setdefault(table, []).append(row)
        for table, rows in grouped.items():
            self.state.upsert_many(table, rows)

    @property
    def tools(self) -> Mapping[str, Tool]:
        return self.domain.tools

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run one tool call and return the MCP text content the reference returns."""
        tool = self.domain.tools.get(name)
        if tool is None:
            return f"Unknown tool: {name}"
        with self.connection.begin_nested():
            return invoke(tool, self, arguments)

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        return self.state.snapshot()

    def stable_state(self) -> StableState:
        return stable_state(self.domain.tables, self.state.snapshot())

    def state_hash(self) -> str:
        return state_hash(self.stable_state())

    def iter_tables(self) -> Iterator[Table[Record]]:
        return iter(self._tables.values())
