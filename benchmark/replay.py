"""Replay each task's golden calls, straight to the environment (``off``) or through a GuardSession.

``guard`` with an empty pack must commit exactly the reference golden state for every task: the
guard adds savepoints, change capture and checks, and must not change what a correct trajectory does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from benchmark.envs import Database, Environment, load_domain
from benchmark.guarded import backend_for, delta_of, executor_for, tool_infos
from benchmark.tasks import BenchData, Task
from guard.models import Verdict
from guard.policy import EMPTY, PolicyPack
from guard.session import GuardSession

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


def replay_task(env: Environment, task: Task, through: Through, policy: PolicyPack = EMPTY) -> TaskReplay:
    env.apply_patch(task.data_patch)
    expected = task.answer.expected
    calls = task.answer.golden_tool_interactions
    if through == "off":
        for call in calls:
            env.call_tool(call.tool, call.parameters)
        golden = expected is not None and env.state_hash() == expected.golden_db_hash
        return TaskReplay(task.id, committed=True, golden=golden)
    session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), policy, session_id=task.id)
    report = TaskReplay(task.id, committed=False, golden=False)
    for call in calls:
        outcome = session.call(call.tool, call.parameters)
        if outcome.verdict in (Verdict.ROLLED_BACK, Verdict.REFUSED, Verdict.HELD):
            report.rolled_back += 1
        report.violations += len(outcome.violations)
        report.messages += [f"{call.tool}: {v.rule_id}: {v.message}" for v in outcome.violations]
    commit = session.commit()
    report.violations += len(commit.violations)
    report.messages += [f"commit: {v.rule_id}: {v.message}" for v in commit.violations]
    if not commit.committed:
        session.rollback()
    report.committed = commit.committed
    report.golden = expected is not None and env.state_hash() == expected.golden_db_hash
    if task.answer.golden_delta is not None and commit.committed:
        report.delta_matches = delta_of(env, commit.changes) == task.answer.golden_delta
    return report


def replay(
    data: BenchData,
    database: Database,
    domain: str,
    tasks: Sequence[Task],
    through: Through,
    policy: PolicyPack = EMPTY,
    on_task: Callable[[TaskReplay], None] | None = None,
) -> ReplayResult:
    dom = load_domain(domain, data.bundle)
    result = ReplayResult()
    for task in tasks:
        with Environment(dom, database) as env:
            report = replay_task(env, task, through, policy)
        result.tasks.append(report)
        if on_task is not None:
            on_task(report)
    return result
