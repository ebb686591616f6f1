"""Performance benchmarks. ``envs``: the grading step per task (init + golden replay + hash).
``guard core``: what the guard adds to each tool call (savepoint, change extraction, checks), against
the same call made directly, measured in the same run (:func:`measure_guard_core`).

The grading step is reported beside the reference implementation's published anchor (data README:
init ≈ 2.0 ms, full grading step ≈ 4.5–4.9 ms per task on 2 vCPU, Python 3.11), since the reference
code is not available to run in the same process. Medians over repeats; the first pass (warm-up) is
discarded.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmark.envs import Database, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, tool_infos
from benchmark.tasks import BenchData, Task
from guard.models import Verdict
from guard.policy import EMPTY, PolicyPack
from guard.session import GuardSession

REFERENCE_MS_PER_TASK = (4.5, 4.9)
REFERENCE_INIT_MS = 2.0


@dataclass
class EnvPerf:
    domain: str
    tasks: int
    init_ms: float
    replay_ms: float
    hash_ms: float

    @property
    def total_ms(self) -> float:
        return self.init_ms + self.replay_ms + self.hash_ms

    @property
    def tasks_per_s(self) -> float:
        return 1000.0 / self.total_ms if self.total_ms else 0.0

    @property
    def ratio_to_reference(self) -> float:
        return self.total_ms / (sum(REFERENCE_MS_PER_TASK) / 2)


def measure_envs(
    data: BenchData, database: Database, domain: str, tasks: Sequence[Task], repeat: int = 3
) -> EnvPerf:
    dom = load_domain(domain, data.bundle)
    passes: list[tuple[float, float, float]] = []
    for _ in range(repeat + 1):
        init = replay = hashing = 0.0
        for task in tasks:
            t0 = time.perf_counter()
            env = Environment(dom, database)
            env.apply_patch(task.data_patch)
            t1 = time.perf_counter()
            for call in task.answer.golden_tool_interactions:
                env.call_tool(call.tool, call.parameters)
            t2 = time.perf_counter()
            env.state_hash()
            t3 = time.perf_counter()
            env.close()
            init += t1 - t0
            replay += t2 - t1
            hashing += t3 - t2
        passes.append((init, replay, hashing))
    warm = passes[1:]
    n = max(len(tasks), 1)
    return EnvPerf(
        domain=domain,
        tasks=len(tasks),
        init_ms=statistics.median(p[0] for p in warm) / n * 1000,
        replay_ms=statistics.median(p[1] for p in warm) / n * 1000,
        hash_ms=statistics.median(p[2] for p in warm) / n * 1000,
    )


# -- guard core -------------------------------------------------------------------------------------
VARIANTS = ("direct", "shadow", "guard", "pack")
"""direct: ``env.call_tool`` alone. shadow: savepoint + call + change extraction + release on the
SqlBackend. guard: a GuardSession with the empty pack. pack: a GuardSession with the domain's pack."""


@dataclass
class CallKindPerf:
    """Per-call medians (µs) of one kind of call (write or read) under each variant.

    Every golden call is timed under every variant in the same state; a call's time is its median over
    the measured passes; the figures below are medians over calls, and overheads and ratios are medians
    of the per-call differences and ratios against ``direct`` (paired, so a slow tool does not hide a
    fast one's overhead).
    """

    calls: int
    us: dict[str, float]
    overhead_us: dict[str, float]
    ratio: dict[str, float]


@dataclass
class GuardCorePerf:
    domain: str
    dialect: str
    tasks: int
    pack: str | None
    checks: int
    write: CallKindPerf
    read: CallKindPerf
    session_us: float
    """Median per task: GuardSession begin (capture triggers installed) + commit (removed)."""
    pack_not_allowed: int
    """Golden calls the pack did not allow in the last pass (each a false block, or a held approval)."""


def _times_direct(env: Environment, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[int]:
    out = []
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        env.call_tool(tool, arguments)
        out.append(time.perf_counter_ns() - t0)
    return out


def _times_shadow(env: Environment, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[int]:
    backend = backend_for(env)
    backend.begin()
    out = []
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        savepoint = backend.savepoint()
        env.call_tool(tool, arguments)
        backend.changes(savepoint)
        backend.release(savepoint)
        out.append(time.perf_counter_ns() - t0)
    backend.commit()
    return out


def _times_session(
    env: Environment, calls: Sequence[tuple[str, dict[str, Any]]], pack: PolicyPack
) -> tuple[list[int], int, int]:
    """(per-call ns, begin + commit ns, calls not allowed)."""
    t0 = time.perf_counter_ns()
    session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack)
    setup = time.perf_counter_ns() - t0
    out = []
    not_allowed = 0
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        outcome = session.call(tool, arguments)
        out.append(time.perf_counter_ns() - t0)
        not_allowed += outcome.verdict is not Verdict.ALLOWED and outcome.verdict is not Verdict.FAILED
    t0 = time.perf_counter_ns()
    if not session.commit().committed:
        session.rollback()
    return out, setup + time.perf_counter_ns() - t0, not_allowed


def _summarise(samples: Mapping[str, Sequence[list[int]]], variants: Sequence[str]) -> CallKindPerf:
    """``samples[variant][call]`` holds that call's ns per measured pass."""
    per_call = {v: [statistics.median(s) / 1000 for s in samples[v]] for v in variants}
    direct = per_call["direct"]
    us = {v: statistics.median(per_call[v]) if per_call[v] else 0.0 for v in variants}
    overhead, ratio = {}, {}
    for v in variants:
        if v == "direct" or not direct:
            continue
        overhead[v] = statistics.median(t - d for t, d in zip(per_call[v], direct, strict=True))
        ratio[v] = statistics.median(t / d for t, d in zip(per_call[v], direct, strict=True) if d > 0)
    return CallKindPerf(calls=len(direct), us=us, overhead_us=overhead, ratio=ratio)


def measure_guard_core(
    data: BenchData,
    database: Database,
    domain: str,
    tasks: Sequence[Task],
    pack: PolicyPack | None,
    repeat: int = 3,
    pack_name: str | None = None,
) -> GuardCorePerf:
    """Time every golden call directly and through the guard core, interleaved, ``repeat`` + 1 passes.

    Each pass replays every task once per variant, each in a fresh environment, in an order rotated
    per task and pass so that warm caches favour no variant; the first pass is a warm-up. The garbage
    collector runs between replays, not during them.
    """
    dom = load_domain(domain, data.bundle)
    variants = [v for v in VARIANTS if v != "pack" or pack is not None]
    writes_of = {name: tool.writes for name, tool in dom.tools.items()}
    plans = [[(c.tool, dict(c.parameters)) for c in t.answer.golden_tool_interactions] for t in tasks]
    # samples[variant][task][call] -> ns per pass
    samples: dict[str, list[list[list[int]]]] = {v: [[[] for _ in plan] for plan in plans] for v in variants}
    sessions: list[int] = []
    not_allowed = 0
    gc_was_enabled = gc.isenabled()
    try:
        for n in range(repeat + 1):
            not_allowed = 0
            for i, (task, plan) in enumerate(zip(tasks, plans, strict=True)):
                shift = (n + i) % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    with Environment(dom, database) as env:
                        env.apply_patch(task.data_patch)
                        gc.collect()
                        gc.disable()
                        if variant == "direct":
                            times = _times_direct(env, plan)
                        elif variant == "shadow":
                            times = _times_shadow(env, plan)
                        else:
                            chosen = pack if variant == "pack" and pack is not None else EMPTY
                            times, setup, blocked = _times_session(env, plan, chosen)
                            if variant == "guard" and n > 0:
                                sessions.append(setup)
                            if variant == "pack":
                                not_allowed += blocked
                        gc.enable()
                    if n > 0:
                        for j, ns in enumerate(times):
                            samples[variant][i][j].append(ns)
    finally:
        if gc_was_enabled:
            gc.enable()

    def kind(writes: bool) -> CallKindPerf:
        chosen = {
            v: [
                calls[j]
                for plan, calls in zip(plans, samples[v], strict=True)
                for j, (tool, _) in enumerate(plan)
                if writes_of.get(tool, True) is writes
            ]
            for v in variants
        }
        return _summarise(chosen, variants)

    return GuardCorePerf(
        domain=domain,
        dialect=database.dialect,
        tasks=len(tasks),
        pack=pack_name if pack is not None else None,
        checks=len(pack.checks) if pack is not None else 0,
        write=kind(True),
        read=kind(False),
        session_us=statistics.median(sessions) / 1000 if sessions else 0.0,
        pack_not_allowed=not_allowed,
    )
