"""Conformance of the environments against the reference: hashes, golden responses and probe vectors.

For every task of the selected domains: the init hash, every golden call's response and hash, the
golden hash; then every read, error and write probe of the vectors (vectors/README §6). Probes that
share a starting state run on one environment, each inside a savepoint that is rolled back after it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.envs.hashing import state_delta
from benchmark.tasks import BenchData, Task

PROBE_FILES = ("read_probes.jsonl", "error_probes.jsonl", "write_probes.jsonl")


@dataclass
class Mismatch:
    domain: str
    check: str  # init | golden | response | probe
    task_id: str | None
    detail: str
    diff: dict[str, Any] | None = None

    def render(self) -> str:
        lines = [f"[{self.domain}] {self.check} {self.task_id or ''}: {self.detail}"]
        for table, entry in (self.diff or {}).items():
            for row in entry.get("added", []):
                lines.append(f"    {table} +{json.dumps(row, sort_keys=True)[:300]}")
            for row in entry.get("removed", []):
                lines.append(f"    {table} -{json.dumps(row, sort_keys=True)[:300]}")
            for change in entry.get("changed", []):
                for fname, (ours, ref) in change["changes"].items():
                    lines.append(f"    {table} key={change['key']} {fname}: ours={ours!r} reference={ref!r}")
        return "\n".join(lines)


@dataclass
class DomainResult:
    domain: str
    tasks: int = 0
    init_ok: int = 0
    golden_ok: int = 0
    responses: int = 0
    responses_ok: int = 0
    probes: int = 0
    probes_ok: int = 0
    seconds: float = 0.0
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            self.init_ok == self.tasks
            and self.golden_ok == self.tasks
            and self.responses_ok == self.responses
            and self.probes_ok == self.probes
        )


def _iter_jsonl(path: Path, domain: str) -> Iterator[dict[str, Any]]:
    needle = f'"domain": "{domain}"'
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if needle in line:
                row = json.loads(line)
                if row.get("domain") == domain:
                    yield row


def _apply(env: Environment, calls: Sequence[Mapping[str, Any]]) -> None:
    for call in calls:
        env.call_tool(call["tool"], call.get("parameters") or {})


def _diff(env: Environment, reference_state: Mapping[str, Any]) -> dict[str, Any]:
    return state_delta(env.stable_state(), reference_state, env.domain.tables)


class ConformanceRun:
    def __init__(
        self,
        data: BenchData,
        database: Database,
        tools: set[str] | None = None,
        on_progress: Callable[[str, int], None] | None = None,
        max_mismatches: int = 50,
    ) -> None:
        self.data = data
        self.database = database
        self.tools = tools
        self.on_progress = on_progress or (lambda _domain, _n: None)
        self.max_mismatches = max_mismatches

    def _wanted(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def _fail(self, result: DomainResult, mismatch: Mismatch) -> None:
        if len(result.mismatches) < self.max_mismatches:
            result.mismatches.append(mismatch)

    def run_domain(self, domain_name: str, tasks: Sequence[Task]) -> DomainResult:
        import time

        started = time.perf_counter()
        domain = load_domain(domain_name, self.data.bundle)
        result = DomainResult(domain=domain_name, tasks=len(tasks))
        by_id = {t.id: t for t in tasks}
        vectors = self.data.bundle / "vectors"
        golden_rows = {r["task_id"]: r for r in _iter_jsonl(vectors / "golden_calls.jsonl", domain_name)}
        for task in tasks:
            self._golden(domain, task, golden_rows.get(task.id), result)
            self.on_progress(domain_name, 1)
        probes: dict[tuple[str | None, str, int], list[dict[str, Any]]] = defaultdict(list)
        for name in PROBE_FILES:
            for row in _iter_jsonl(vectors / name, domain_name):
                if not self._wanted(row["tool"]):
                    continue
                if row.get("task_id") is not None and row["task_id"] not in by_id:
                    continue
                probes[_probe_state(name, row)].append(row)
        for (task_id, _kind, prefix), rows in probes.items():
            self._probe_group(domain, by_id.get(task_id) if task_id else None, prefix, rows, result)
        result.seconds = time.perf_counter() - started
        return result

    def _golden(
        self, domain: Domain, task: Task, vector: dict[str, Any] | None, result: DomainResult
    ) -> None:
        expected = task.answer.expected
        with Environment(domain, self.database) as env:
            env.apply_patch(task.data_patch)
            init_hash = env.state_hash()
            if expected is None or init_hash == expected.init_db_hash:
                result.init_ok += 1
            else:
                diff = _diff(env, vector["init_state"]) if vector else None
                self._fail(result, Mismatch(domain.name, "init", task.id, "init hash differs", diff))
            calls = (
                vector["calls"] if vector else [i.model_dump() for i in task.answer.golden_tool_interactions]
            )
            for call in calls:
                response = env.call_tool(call["tool"], call["parameters"])
                if vector is None or not self._wanted(call["tool"]):
                    continue
                result.responses += 1
                if response == call["response"]:
                    result.responses_ok += 1
                else:
                    self._fail(
                        result,
                        Mismatch(
                            domain.name,
                            "response",
                            task.id,
                            f"call {call['index']} {call['tool']}({json.dumps(call['parameters'])[:200]})\n"
                            f"    ours:      {response[:600]}\n    reference: {call['response'][:600]}",
                        ),
                    )
            golden_hash = env.state_hash()
            want = expected.golden_db_hash if expected else (vector or {}).get("golden_hash")
            if golden_hash == want:
                result.golden_ok += 1
            else:
                diff = _diff(env, vector["golden_state"]) if vector else None
                self._fail(result, Mismatch(domain.name, "golden", task.id, "golden hash differs", diff))

    def _probe_group(
        self, domain: Domain, task: Task | None, prefix: int, rows: list[dict[str, Any]], result: DomainResult
    ) -> None:
        with Environment(domain, self.database) as env:
            if task is not None:
                env.apply_patch(task.data_patch)
                golden = [i.model_dump() for i in task.answer.golden_tool_interactions]
                _apply(env, golden if prefix < 0 else golden[:prefix])
            base_hash: str | None = None
            for row in rows:
                result.probes += 1
                savepoint = env.connection.begin_nested()
                try:
                    _apply(env, row.get("extra_prefix") or [])
                    if row.get("hash_before") is not None:
                        if row.get("extra_prefix"):
                            before = env.state_hash()  # this row's own state; the group's base is unchanged
                        else:
                            if base_hash is None:
                                base_hash = env.state_hash()
                            before = base_hash
                        if before != row["hash_before"]:
                            self._fail(
                                result,
                                Mismatch(
                                    domain.name,
                                    "probe",
                                    row.get("task_id"),
                                    f"{row['tool']}: state before the probe differs",
                                ),
                            )
                            continue
                    response = env.call_tool(row["tool"], row["parameters"])
                    ok = response == row["response"]
                    detail = ""
                    if not ok:
                        detail = (
                            f"{row['tool']}({json.dumps(row['parameters'])[:200]})\n"
                            f"    ours:      {response[:600]}\n    reference: {row['response'][:600]}"
                        )
                    elif row.get("hash_after") is not None:
                        after = env.state_hash()
                        if after != row["hash_after"]:
                            ok = False
                            detail = (
                                f"{row['tool']}({json.dumps(row['parameters'])[:200]}): state after differs"
                            )
                    elif (
                        row.get("state_changed") is False
                        and row.get("hash_before") is not None
                        and env.state_hash() != row["hash_before"]
                    ):
                        ok = False
                        detail = f"{row['tool']}: changed state, the reference did not"
                    if ok:
                        result.probes_ok += 1
                    else:
                        self._fail(result, Mismatch(domain.name, "probe", row.get("task_id"), detail))
                finally:
                    savepoint.rollback()


def _probe_state(file_name: str, row: Mapping[str, Any]) -> tuple[str | None, str, int]:
    """Group key: (task, kind of state, golden prefix length; -1 = the whole golden trajectory)."""
    if file_name == "read_probes.jsonl":
        return row["task_id"], "read", -1 if row["state"] == "golden_final" else 0
    if file_name == "error_probes.jsonl":
        if row["state"] == "defaults":
            return None, "defaults", 0
        return row["task_id"], "prefix", int(row["golden_call_index"])
    return row["task_id"], "prefix", int(row["prefix_len"])


def select_tasks(data: BenchData, domains: Sequence[str]) -> dict[str, list[Task]]:
    grouped: dict[str, list[Task]] = {d: [] for d in domains}
    for task in data.tasks(domains):
        grouped[task.domain].append(task)
    return grouped
