"""Performance benchmarks. ``envs``: the grading step per task (init + golden replay + hash).

Reported beside the reference implementation's published anchor (data README: init ≈ 2.0 ms, full
grading step ≈ 4.5–4.9 ms per task on 2 vCPU, Python 3.11), since the reference code is not available
to run in the same process. Medians over repeats; the first pass (warm-up) is discarded.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmark.envs import Database, Environment, load_domain
from benchmark.tasks import BenchData, Task

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
