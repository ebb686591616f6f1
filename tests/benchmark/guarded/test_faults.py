"""Fault injection: the spec, reproducibility, what each kind does, and golden replays under faults —
through the guard every task still reaches its golden state with no write applied twice; straight to
the tools the same faults leave tasks short of it."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from benchmark.envs import DOMAINS, Database, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, tool_infos
from benchmark.replay import ReplayResult, Through, replay
from benchmark.tasks import BenchData, Task
from guard.classifier import Classifier
from guard.errors import ErrorClass
from guard.faults import KINDS, TRANSIENT, FaultInjector, FaultPlan, FaultSpecError
from guard.models import Verdict
from guard.retry import RetryPolicy, VirtualClock
from guard.session import GuardSession, ToolResult


class Upstream:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(tool)
        return ToolResult(f"ok {tool}")


# -- the spec ------------------------------------------------------------------------------------
def test_transient_is_spread_over_its_kinds() -> None:
    plan = FaultPlan.parse("transient=0.2,429=0.05", seed=3)
    assert plan.rates == pytest.approx({**{k: 0.04 for k in TRANSIENT}, "429": 0.05})
    assert plan.seed == 3
    assert plan.describe() == "timeout=0.04,drop=0.04,refused=0.04,5xx=0.04,503=0.04,429=0.05"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty fault spec"),
        ("transient", "expected kind=rate"),
        ("gremlins=0.1", "unknown fault kind 'gremlins'"),
        ("timeout=lots", "rate 'lots' is not a number"),
        ("timeout=1.5", "between 0 and 1"),
        ("transient=-0.1", "between 0 and 1"),
        ("timeout=0.6,drop=0.6", "add up to 1.2"),
        ("429=0.1,429=0.2", "given twice"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message):
        FaultPlan.parse(spec)


# -- behaviour -----------------------------------------------------------------------------------
def test_the_same_seed_injects_the_same_faults() -> None:
    def run(seed: int) -> list[tuple[str, str]]:
        injector = FaultInjector(
            Upstream(), FaultPlan.parse("transient=0.5,429=0.1", seed=seed), clock=VirtualClock()
        )
        out = []
        for i in range(200):
            try:
                injector(f"t{i}", {})
                out.append((f"t{i}", "ok"))
            except Exception as exc:
                out.append((f"t{i}", type(exc).__name__))
        return out

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_rates_are_honoured() -> None:
    plan = FaultPlan.parse("transient=0.2,429=0.05,slow=0.05", seed=11)
    injector = FaultInjector(Upstream(), plan, clock=VirtualClock())
    n = 20_000
    for _ in range(n):
        try:
            injector("t", {})
        except Exception:
            continue
    counts = injector.counts
    for kind, rate in plan.rates.items():
        assert abs(counts[kind] / n - rate) < 0.01, kind


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_runs_or_not_and_is_classified(kind: str) -> None:
    classifier = Classifier()
    seen: Counter[str] = Counter()
    for seed in range(12):
        upstream = Upstream()
        clock = VirtualClock()
        injector = FaultInjector(upstream, FaultPlan({kind: 1.0}, seed=seed), clock=clock)
        try:
            result = injector("tool", {})
        except Exception as exc:
            failure = classifier.exception("tool", exc)
            assert failure.classified, exc
            seen[failure.error_class.value] += 1
            if kind in ("429", "503"):
                assert failure.retry_after == 1.0
            assert kind != "slow"
        else:
            assert kind == "slow" and result.text == "ok tool" and clock.now() == 2.0
        ran = kind in ("timeout", "drop", "5xx", "slow")
        assert upstream.calls == (["tool"] if ran else [])
        assert injector.injected[0].ran is ran
    expected = {"429": ErrorClass.RATE_LIMITED}.get(kind, ErrorClass.TRANSIENT)
    assert set(seen) <= {expected.value}


def test_a_slow_answer_past_the_timeout_is_a_timeout_after_the_call_ran() -> None:
    upstream = Upstream()
    clock = VirtualClock()
    injector = FaultInjector(upstream, FaultPlan({"slow": 1.0}, slow_s=9.0, timeout_s=5.0), clock=clock)
    with pytest.raises(Exception) as info:
        injector("tool", {})
    assert Classifier().exception("tool", info.value).error_class is ErrorClass.TRANSIENT
    assert upstream.calls == ["tool"] and clock.now() == 5.0


def test_no_fault_forwards_untouched() -> None:
    upstream = Upstream()
    injector = FaultInjector(upstream, FaultPlan({"timeout": 0.0}), rng=random.Random(0))
    assert injector("tool", {"a": 1}).text == "ok tool" and injector.injected == []


# -- golden replays under faults -----------------------------------------------------------------
def faulty_replay(
    bench: BenchData, db: Database, domain: str, through: Through
) -> tuple[list[Task], ReplayResult]:
    """Every 4th golden task of ``domain`` replayed ``through`` the guard or not (``off``), with 30%
    transient faults and 5% rate limits (seed 5)."""
    tasks = bench.tasks([domain])[::4]
    plan = FaultPlan.parse("transient=0.3,429=0.05", seed=5)
    return tasks, replay(bench, db, domain, tasks, through, faults=plan)


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_through_the_guard_faults_cost_nothing_and_no_write_is_applied_twice(
    bench: BenchData, sqlite_db: Database, domain: str
) -> None:
    tasks, result = faulty_replay(bench, sqlite_db, domain, "guard")
    not_golden = [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)]
    assert not_golden == []
    assert result.changes_accounted == len(tasks), "the change log holds each kept call's changes once"
    assert result.failed_calls == 0 and result.faults > 0 and result.retries >= result.faults
    matches = [t.delta_matches for t in result.tasks if t.delta_matches is not None]
    assert sum(matches) >= 0.9 * len(matches)


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_straight_to_the_tools_the_same_faults_fail_visibly(
    bench: BenchData, sqlite_db: Database, domain: str
) -> None:
    tasks, result = faulty_replay(bench, sqlite_db, domain, "off")
    assert result.failed_calls == result.faults > 0
    assert result.committed_golden < len(tasks)
    assert all(t.messages for t in result.tasks if not t.golden)


def test_faults_on_postgresql_too(bench: BenchData, database: Database) -> None:
    tasks = bench.tasks(["external_booking_v1"])[:12]
    result = replay(
        bench, database, "external_booking_v1", tasks, "guard", faults=FaultPlan.parse("transient=0.3")
    )
    assert result.committed_golden == len(tasks) and result.changes_accounted == len(tasks)
    assert result.faults > 0


def test_lost_answers_of_writes_are_rolled_back_and_redone_once(
    bench: BenchData, sqlite_db: Database
) -> None:
    """Timeouts after the write ran: the attempt's rows were captured, rolled back, and redone once."""
    dom = load_domain("sandbox_external_retail", bench.bundle)
    redone = []
    for task in bench.tasks(["sandbox_external_retail"])[:30]:
        with Environment(dom, sqlite_db) as env:
            env.apply_patch(task.data_patch)
            clock = VirtualClock()
            injector = FaultInjector(executor_for(env), FaultPlan({"timeout": 0.5}, seed=2), clock=clock)
            retry = RetryPolicy(clock=clock, rng=random.Random(0))
            session = GuardSession(backend_for(env), injector, tool_infos(env), retry=retry)
            for call in task.answer.golden_tool_interactions:
                outcome = session.call(call.tool, call.parameters)
                assert outcome.verdict is Verdict.ALLOWED
                redone += [a for a in outcome.attempts if a.changes]
                assert all(a.rolled_back for a in outcome.attempts)
            kept = [c for o in session.outcomes for c in o.changes]
            assert session.backend.changes().changes == kept
            session.commit()
            assert task.answer.expected is not None
            assert env.state_hash() == task.answer.expected.golden_db_hash
    assert len(redone) > 5
