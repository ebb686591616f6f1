"""Replay each task's golden calls, straight to the environment (``off``) or through a GuardSession.

``guard`` with an empty pack must commit exactly the reference golden state for every task: the
guard adds savepoints, change capture and checks, and must not change what a correct trajectory does.

With a :class:`~guard.faults.FaultPlan` the upstream misbehaves (timeouts, dropped connections, 5xx,
429, ...), seeded per task. ``off`` is a plain passthrough: a fault is an exception the trajectory
carries on past, so a write lost before it ran, or never confirmed, leaves the task short of its golden
state. ``guard`` classifies and retries what is safe on a virtual clock (delays are accounted, not
slept), and the report proves from the change log that no write was applied twice: the transaction's
raw change log equals the changes of the calls the guard kept, each exactly once.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmark.envs import Database, Environment, load_domain
from benchmark.guarded import backend_for, delta_of, executor_for, tool_infos
from benchmark.tasks import BenchData, Task
from guard.faults import FaultInjector, FaultPlan
from guard.models import ChangeSet, Verdict
from guard.policy import EMPTY, PolicyPack
from guard.retry import RetryPolicy, VirtualClock
from guard.session import Executor, GuardSession, ToolResult

Through = Literal["guard", "off"]


@dataclass
class TaskReplay:
    task_id: str
    committed: bool
    golden: bool
    rolled_back: int = 0
    violations: int = 0
    delta_matches: bool | None = None
    messages: list[str] = field(default_factory=list)
    faults: int = 0
    """Faults injected into this task's upstream calls."""
    retries: int = 0
    failed_calls: int = 0
    """Calls that ended failed: an exception (``off``) or a FAILED outcome (``guard``)."""
    changes_accounted: bool | None = None
    """guard only: the raw change log equals the kept calls' changes (no write applied twice)."""
    virtual_s: float = 0.0
    """Virtual time the task's calls took (retry delays, timeouts, slow answers)."""


@dataclass
class ReplayResult:
    tasks: list[TaskReplay] = field(default_factory=list)

    @property
    def committed_golden(self) -> int:
        return sum(1 for t in self.tasks if t.committed and t.golden)

    @property
    def rolled_back(self) -> int:
        return sum(t.rolled_back for t in self.tasks)

    @property
    def violations(self) -> int:
        return sum(t.violations for t in self.tasks)

    @property
    def faults(self) -> int:
        return sum(t.faults for t in self.tasks)

    @property
    def retries(self) -> int:
        return sum(t.retries for t in self.tasks)

    @property
    def failed_calls(self) -> int:
        return sum(t.failed_calls for t in self.tasks)

    @property
    def changes_accounted(self) -> int:
        return sum(1 for t in self.tasks if t.changes_accounted)


def task_seed(seed: int, task_id: str) -> int:
    """A per-task seed independent of task order, so a subset replays the same faults."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:8], "big")


def _canonical(delta: Mapping[str, Mapping[str, Sequence[Any]]]) -> dict[str, dict[str, list[str]]]:
    def rows(items: Sequence[Any]) -> list[str]:
        return sorted(json.dumps(item, sort_keys=True) for item in items)

    return {table: {kind: rows(items) for kind, items in entry.items()} for table, entry in delta.items()}


def same_delta(ours: Mapping[str, Mapping[str, Sequence[Any]]], golden: Mapping[str, Any]) -> bool:
    """Deltas are equal as sets of rows per table and kind; the order of rows within a kind is not graded."""
    return _canonical(ours) == _canonical(golden)


def replay_task(
    env: Environment,
    task: Task,
    through: Through,
    policy: PolicyPack = EMPTY,
    faults: FaultPlan | None = None,
) -> TaskReplay:
    env.apply_patch(task.data_patch)
    expected = task.answer.expected
    calls = task.answer.golden_tool_interactions
    clock = VirtualClock()
    seed = task_seed(faults.seed if faults is not None else 0, task.id)
    injector: FaultInjector | None = None
    if through == "off":

        def direct(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
            return ToolResult(env.call_tool(tool, arguments))

        run: Executor = direct
        if faults is not None:
            injector = FaultInjector(direct, faults, clock=clock, rng=random.Random(seed))  # noqa: S311
            run = injector
        report = TaskReplay(task.id, committed=True, golden=False)
        for call in calls:
            try:
                run(call.tool, call.parameters)
            except Exception as exc:  # a plain passthrough has no recovery: count it and carry on
                report.failed_calls += 1
                report.messages.append(f"{call.tool}: {type(exc).__name__}: {exc}")
        report.golden = expected is not None and env.state_hash() == expected.golden_db_hash
        report.faults = len(injector.injected) if injector is not None else 0
        report.virtual_s = clock.now()
        return report
    execute: Executor = executor_for(env)
    if faults is not None:
        injector = FaultInjector(execute, faults, clock=clock, rng=random.Random(seed))  # noqa: S311
        execute = injector
    retry = RetryPolicy(clock=clock, rng=random.Random(seed + 1))  # noqa: S311
    session = GuardSession(
        backend_for(env), execute, tool_infos(env), policy, session_id=task.id, retry=retry
    )
    report = TaskReplay(task.id, committed=False, golden=False)
    for call in calls:
        outcome = session.call(call.tool, call.parameters)
        if outcome.verdict in (Verdict.ROLLED_BACK, Verdict.REFUSED, Verdict.HELD):
            report.rolled_back += 1
        if outcome.verdict is Verdict.FAILED:
            report.failed_calls += 1
            hint = outcome.hint.message if outcome.hint is not None else outcome.result
            report.messages.append(f"{call.tool}: failed ({outcome.error_class}): {hint}")
        report.retries += outcome.retries
        report.violations += len(outcome.violations)
        report.messages += [f"{call.tool}: {v.rule_id}: {v.message}" for v in outcome.violations]
    kept = ChangeSet(changes=[c for o in session.outcomes if o.verdict is Verdict.ALLOWED for c in o.changes])
    report.changes_accounted = session.backend.changes().changes == kept.changes
    if not report.changes_accounted:
        report.messages.append("change log differs from the kept calls' changes")
    commit = session.commit()
    report.violations += len(commit.violations)
    report.messages += [f"commit: {v.rule_id}: {v.message}" for v in commit.violations]
    if not commit.committed:
        session.rollback()
    report.committed = commit.committed
    report.golden = expected is not None and env.state_hash() == expected.golden_db_hash
    if task.answer.golden_delta is not None and commit.committed:
        report.delta_matches = same_delta(delta_of(env, commit.changes), task.answer.golden_delta)
    report.faults = len(injector.injected) if injector is not None else 0
    report.virtual_s = clock.now()
    return report


def replay(
    data: BenchData,
    database: Database,
    domain: str,
    tasks: Sequence[Task],
    through: Through,
    policy: PolicyPack = EMPTY,
    on_task: Callable[[TaskReplay], None] | None = None,
    faults: FaultPlan | None = None,
) -> ReplayResult:
    dom = load_domain(domain, data.bundle)
    result = ReplayResult()
    for task in tasks:
        with Environment(dom, database) as env:
            report = replay_task(env, task, through, policy, faults)
        result.tasks.append(report)
        if on_task is not None:
            on_task(report)
    return result
