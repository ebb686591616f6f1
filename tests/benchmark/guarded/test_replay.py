"""The golden trajectories through the guard: the guard must not change what a correct trajectory does.

With the empty pack every task commits exactly the reference golden state, and the session's own
change set is the task's ``golden_delta``. The golden judge, as an at_commit check, refuses a wrong
trajectory. (Tests may read the answer key; the guard never does.)
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmark.envs import DOMAINS, Database, Environment, load_domain
from benchmark.guarded import GoldenStateCheck, backend_for, delta_of, executor_for, tool_infos
from benchmark.replay import ReplayResult, replay
from benchmark.tasks import BenchData, Task
from guard.models import Verdict
from guard.session import GuardSession


def canonical(delta: dict[str, Any] | None) -> dict[str, Any]:
    """A delta as sets: golden_delta lists rows in store order, a change set in the order they changed."""
    out: dict[str, Any] = {}
    for table, entry in (delta or {}).items():
        out[table] = {kind: sorted(rows, key=repr) for kind, rows in entry.items()}
    return out


def session_delta(data: BenchData, database: Database, task: Task) -> dict[str, Any]:
    with Environment(load_domain(task.domain, data.bundle), database) as env:
        env.apply_patch(task.data_patch)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env))
        for call in task.answer.golden_tool_interactions:
            session.call(call.tool, call.parameters)
        outcome = session.commit()
        assert outcome.committed
        return delta_of(env, outcome.changes)


def assert_replay_is_golden(
    data: BenchData, database: Database, tasks: list[Task], result: ReplayResult
) -> None:
    assert len(result.tasks) == len(tasks)
    not_golden = [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)]
    assert not_golden == []
    assert (result.rolled_back, result.violations) == (0, 0)
    by_id = {t.id: t for t in tasks}
    for report in result.tasks:
        golden_delta = by_id[report.task_id].answer.golden_delta
        assert report.delta_matches is (None if golden_delta is None else report.delta_matches)
        if report.delta_matches is False:
            got = session_delta(data, database, by_id[report.task_id])
            assert canonical(got) == canonical(golden_delta), report.task_id


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_every_golden_trajectory_commits_the_golden_state_on_sqlite(
    bench: BenchData, sqlite_db: Database, domain: str
) -> None:
    tasks = bench.tasks([domain])
    result = replay(bench, sqlite_db, domain, tasks, "guard")
    assert_replay_is_golden(bench, sqlite_db, tasks, result)
    assert sum(t.delta_matches is not None for t in result.tasks) > 0.9 * len(tasks)


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
@pytest.mark.parametrize("domain", list(DOMAINS))
def test_a_sample_of_golden_trajectories_on_postgresql(
    bench: BenchData, database: Database, domain: str
) -> None:
    tasks = bench.tasks([domain])[::7]
    result = replay(bench, database, domain, tasks, "guard")
    assert_replay_is_golden(bench, database, tasks, result)


def wrong_trajectory(data: BenchData, domain: str) -> tuple[Task, int]:
    """The first task whose last golden write changes the state, and that write's index."""
    for task in data.tasks([domain]):
        effects = task.answer.golden_call_effects or []
        writes = [i for i, e in enumerate(effects) if e.get("writes") and e.get("tables_changed")]
        expected = task.answer.expected
        if writes and expected is not None and expected.golden_db_hash != expected.init_db_hash:
            return task, writes[-1]
    raise AssertionError(f"no task with a state-changing write in {domain}")


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_the_golden_judge_refuses_a_trajectory_missing_its_last_write(
    bench: BenchData, database: Database, domain: str
) -> None:
    task, last_write = wrong_trajectory(bench, domain)
    assert task.answer.expected is not None
    golden_hash = task.answer.expected.golden_db_hash
    calls = task.answer.golden_tool_interactions
    dom = load_domain(domain, bench.bundle)
    with Environment(dom, database) as env:
        env.apply_patch(task.data_patch)
        start = env.state_hash()
        judge = GoldenStateCheck(env, golden_hash)
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), extra_checks=[judge])
        for i, call in enumerate(calls):
            if i != last_write:
                assert session.call(call.tool, call.parameters).verdict is Verdict.ALLOWED
        refused = session.commit()
        assert not refused.committed
        assert [v.rule_id for v in refused.violations] == ["golden_state"]
        session.call(calls[last_write].tool, calls[last_write].parameters)
        done = session.commit()
        assert done.committed, done.violations
        assert env.state_hash() == golden_hash != start
