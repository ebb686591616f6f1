"""The benchmark environments as guard participants: backend, executor and tool info for GuardSession."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.envs import Domain, Environment
from benchmark.envs.hashing import stable_rows
from benchmark.envs.store import KEY, SEQ
from guard.checks import CheckContext, Phase, RuleText
from guard.effects import ToolInfo
from guard.models import ChangeSet, Violation
from guard.policy import PolicyPack, load_policy
from guard.session import ToolResult
from guard.sql_backend import SqlBackend


def is_error_text(text: str) -> bool:
    """The reference returns tool errors in-band: ``{"error": ..., "tool": ...}`` or ``Unknown tool: X``."""
    if text.startswith("Unknown tool: "):
        return True
    if not text.startswith('{"error": '):
        return False
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(body, dict) and set(body) == {"error", "tool"}


def backend_for(env: Environment) -> SqlBackend:
    domain = env.domain
    return SqlBackend(
        env.connection,
        list(domain.sql_tables.values()),
        keys={name: spec.key for name, spec in domain.tables.items()},
        hidden={SEQ, KEY},
    )


def executor_for(env: Environment) -> Any:
    def execute(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        text = env.call_tool(tool, arguments)
        return ToolResult(text=text, is_error=is_error_text(text))

    return execute


def tool_infos(env: Environment) -> dict[str, ToolInfo]:
    return {
        name: ToolInfo(
            name=name, input_schema=tool.input_schema, annotations={"readOnlyHint": not tool.writes}
        )
        for name, tool in env.tools.items()
    }


def delta_of(env: Environment, changes: ChangeSet) -> dict[str, dict[str, list[Any]]]:
    """A net change set in the form of the tasks' ``golden_delta`` (stable fields only)."""
    delta: dict[str, dict[str, list[Any]]] = {}
    for change in changes.net():
        spec = env.domain.tables[change.table]
        entry = delta.setdefault(change.table, {})
        if change.op == "insert" and change.after is not None:
            entry.setdefault("added", []).extend(stable_rows(spec, [change.after]))
        elif change.op == "delete":
            entry.setdefault("removed", []).append(change.key)
        elif change.before is not None and change.after is not None:
            before, after = stable_rows(spec, [change.before])[0], stable_rows(spec, [change.after])[0]
            diff = {
                k: [before.get(k), after.get(k)]
                for k in sorted(set(before) | set(after))
                if before.get(k) != after.get(k)
            }
            if diff:
                entry.setdefault("changed", []).append({"key": change.key, "changes": diff})
    return {table: entry for table, entry in delta.items() if entry}


class GoldenStateCheck:
    """The benchmark judge as a Check: at commit, the shadow state must hash to the golden state.

    It reads the answer key, so it is only ever enabled in the ``oracle-ceiling`` arm and in tests,
    never in the guard's own arm.
    """

    id = "golden_state"
    phase: Phase = "at_commit"

    def __init__(self, env: Environment, golden_hash: str) -> None:
        self.env = env
        self.golden_hash = golden_hash
        self.text = RuleText(message="The end state differs from the expected end state.")

    def applies_to(self, tool: str | None) -> bool:
        return True

    def run(self, ctx: CheckContext) -> list[Violation]:
        if self.env.state_hash() == self.golden_hash:
            return []
        return [Violation(rule_id=self.id, message=self.text.message)]


# How the environments store each field kind (benchmark.envs.store), as SQL type names.
_SQL_TYPES = {"float": "DOUBLE", "int": "BIGINT", "bool": "BOOLEAN", "list": "JSON"}


def column_types(domain: Domain) -> dict[str, dict[str, str]]:
    """Table -> column -> SQL type name of a domain's stored state (text unless numeric/boolean/JSON)."""
    return {
        name: {f.name: _SQL_TYPES.get(f.kind, "TEXT") for f in spec.fields}
        for name, spec in domain.tables.items()
    }


def load_domain_policy(path: str | Path, domain: Domain) -> PolicyPack:
    """Load a policy pack validated against a domain: tables and columns (with their types), tool names,
    tool arguments (typed from the tools' input schemas)."""
    return load_policy(
        path,
        schema={name: list(spec.field_names) for name, spec in domain.tables.items()},
        tools=list(domain.tools),
        tool_arguments={name: set(t.input_schema.get("properties", {})) for name, t in domain.tools.items()},
        domain=domain.name,
        tool_schemas={name: t.input_schema for name, t in domain.tools.items()},
        column_types=column_types(domain),
    )
