"""``shadowguard bench chaos [--quick]``: every reliability trial kind in one run, one summary line.

Trial kinds (each its own module; docs/reliability.md says what each checks):

* ``kill-proxy``: kill -9 of ``shadowguard serve`` while sessions write and commit
  (:mod:`benchmark.chaos_kills`), on a SQLite file or a PostgreSQL database (``--upstream``);
* ``upstream-kill``: kill -9 of the upstream mid-session (:mod:`benchmark.chaos_faults`);
* ``approval-store-redis`` / ``-postgresql``: the approval store going away (same module);
* ``isolation``: concurrent sessions writing and reading their own rows
  (:mod:`benchmark.chaos_isolation`), with throughput and p99;
* ``hostile-input``: hostile requests, hypothesis and schemathesis (:mod:`benchmark.chaos_hostile`).

The report (``report.json``, ``report.md`` in ``--out``) lists every trial with its counters, problems
and figures. The last line printed is the sum of the counters:
``chaos: partial-commits P lost-commits L leaks K double-writes D 5xx E hangs H (N trials)``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmark.chaos_faults import run_store_outage, run_upstream_kill
from benchmark.chaos_hostile import run_hostile
from benchmark.chaos_isolation import run_isolation
from benchmark.chaos_kills import Counters, KillTrialError, TrialResult, run_kills
from benchmark.chaos_stack import TrialRecord

DEFAULT_PG = "postgresql://127.0.0.1:5432/test"


@dataclass(frozen=True)
class Plan:
    """How many trials of each kind, and how big."""

    kill_trials: int
    kill_sessions: int
    kill_window_s: tuple[float, float]
    upstream_kills: int
    stores: tuple[str, ...]
    isolation_sessions: int
    hostile_examples: int
    api_examples: int


QUICK = Plan(2, 3, (0.3, 1.0), 1, ("redis",), 10, 60, 3)
"""The default test run's version (tests/benchmark/test_chaos.py): well under 3 minutes."""
FULL = Plan(50, 20, (0.2, 3.0), 5, ("redis", "postgresql"), 200, 1000, 30)


@dataclass
class SuiteResult:
    plan: Plan
    upstream: str
    records: list[TrialRecord] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    wall_s: float = 0.0

    def add(self, record: TrialRecord) -> None:
        self.records.append(record)
        self.counters.add(record.counters)

    def line(self) -> str:
        return self.counters.line(len(self.records))

    def failed(self) -> list[TrialRecord]:
        """Trials with anything wrong: a counter above 0, or another problem."""
        return [r for r in self.records if r.problems or r.counters.total()]


def _kill_record(trial: TrialResult, upstream: str) -> TrialRecord:
    details = {k: v for k, v in asdict(trial).items() if k not in ("trial", "counters", "problems", "wall_s")}
    return TrialRecord(
        f"kill-proxy-{upstream}", trial.trial, trial.counters, trial.problems, details, trial.wall_s
    )


def run_suite(
    *,
    quick: bool,
    out: Path,
    upstream: str = "sqlite",
    seed: int = 0,
    pg_url: str = DEFAULT_PG,
    shadowguard: str | None = None,
    progress: Callable[[TrialRecord], None] | None = None,
) -> SuiteResult:
    """Every trial kind of the plan (:data:`QUICK` or :data:`FULL`), in ``out``; writes the report."""
    if upstream not in ("sqlite", "postgresql"):
        raise KillTrialError(f"unknown upstream {upstream!r}: use sqlite or postgresql")
    plan = QUICK if quick else FULL
    result = SuiteResult(plan, upstream)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def note(record: TrialRecord) -> None:
        result.add(record)
        if progress is not None:
            progress(record)

    run_kills(
        plan.kill_trials,
        plan.kill_sessions,
        out=out / f"kills-{upstream}",
        upstream=upstream,
        seed=seed,
        shadowguard=shadowguard,
        progress=lambda t: note(_kill_record(t, upstream)),
        # PostgreSQL: a round takes longer (a connection per session, writes over the network), so
        # the kill comes later
        kill_window_s=plan.kill_window_s if upstream == "sqlite" else (2.0, 4 * plan.kill_window_s[1]),
        pg_url=pg_url,
    )
    for n in range(plan.upstream_kills):
        note(run_upstream_kill(n, out / f"upstream-kill-{n}", shadowguard))
    for store in plan.stores:
        note(run_store_outage(0, out / f"store-{store}", store, pg_url=pg_url, shadowguard=shadowguard))
    note(run_isolation(0, plan.isolation_sessions, out / "isolation", seed=seed, shadowguard=shadowguard))
    note(
        run_hostile(
            0,
            out / "hostile",
            examples=plan.hostile_examples,
            api_examples=plan.api_examples,
            seed_value=seed,
            shadowguard=shadowguard,
        )
    )
    result.wall_s = round(time.perf_counter() - started, 1)
    write_report(result, out)
    return result


def _conditions() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in load],
        "python": platform.python_version(),
    }


def write_report(result: SuiteResult, out: Path) -> None:
    data = {
        "summary": result.line(),
        "upstream": result.upstream,
        "plan": asdict(result.plan),
        "wall_s": result.wall_s,
        "conditions": _conditions(),
        "counters": asdict(result.counters),
        "trials": [r.record() for r in result.records],
    }
    (out / "report.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = [
        "# bench chaos report",
        "",
        f"`{result.line()}`",
        "",
        f"upstream {result.upstream}; wall {result.wall_s:.0f} s; "
        f"conditions {json.dumps(data['conditions'])}",
        "",
        "| kind | trial | partial | lost | leaks | double | 5xx | hangs | problems | s | figures |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.records:
        c = r.counters
        plain = {k: v for k, v in r.details.items() if not isinstance(v, dict | list | str)}
        figures = json.dumps(plain)
        lines.append(
            f"| {r.kind} | {r.trial} | {c.partial_commits} | {c.lost_commits} | {c.leaks} "
            f"| {c.double_writes} | {c.http_5xx} | {c.hangs} | {len(r.problems)} | {r.wall_s:.0f} "
            f"| {figures} |"
        )
    problems = [f"- {r.kind} {r.trial}: {p}" for r in result.records for p in r.problems]
    lines += ["", "## Problems", "", *(problems or ["none"]), ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
