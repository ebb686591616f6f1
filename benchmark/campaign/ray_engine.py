"""``bench run --engine ray``: a campaign's units sharded over Ray tasks (docs/deploy.md).

The driver (``bench run``) stays the only writer of the results file: it submits batches of units as
Ray tasks, takes each batch's rows back as soon as it finishes (``ray.wait``) and appends them, so
``--resume`` works as with the in-process engine. A Ray worker process builds one
:class:`~benchmark.campaign.runner.Worker` (data, domains, packs, agent) the first time it gets a batch
of a campaign and reuses it for the next ones. Units are seeded from (seed, uid, case, repetition), so
which process runs a unit changes nothing in its rows' outcomes.

Every node must have shadowguard installed (the same version) and see the benchmark data and policy
packs at the same absolute paths as the driver (a shared volume on a cluster); the driver passes those
paths resolved. Ray is an optional dependency: ``pip install 'shadowguard[ray]'``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmark.campaign.runner import AttemptSummary, CampaignConfig, UnitKey, Worker
from benchmark.tasks import BUNDLE_ENV_VAR, resolve_data

Job = tuple[UnitKey, tuple[str, ...]]

BATCH_UNITS = 8
"""Units per Ray task: enough to amortise a task's scheduling, few enough to stream rows back often."""


class RayEngineError(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


_WORKERS: dict[CampaignConfig, Worker] = {}


def _run_batch(config: CampaignConfig, jobs: Sequence[Job]) -> list[list[AttemptSummary]]:
    """A Ray task: the rows of each job, in order, from this process's Worker for ``config``."""
    worker = _WORKERS.get(config)
    if worker is None:
        for old in _WORKERS.values():
            old.close()
        _WORKERS.clear()
        worker = _WORKERS[config] = Worker(config)
    return [worker.run_unit(key, arms) for key, arms in jobs]


def portable(config: CampaignConfig) -> tuple[CampaignConfig, dict[str, str]]:
    """``config`` with every path absolute (Ray workers do not share the driver's working directory),
    and the environment variables a worker needs to find the data bundle."""
    bench = resolve_data(config.data)

    def absolute(path: str | None) -> str | None:
        return str(Path(path).resolve()) if path is not None and Path(path).exists() else path

    shipped = dataclasses.replace(
        config,
        data=str(bench.tasks_root),
        policy_dir=str(Path(config.policy_dir).resolve()),
        trajectories=absolute(config.trajectories),
        profile=absolute(config.profile),
    )
    return shipped, {BUNDLE_ENV_VAR: str(bench.bundle)}


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayEngineError(
            "--engine ray needs Ray: pip install 'shadowguard[ray]' (or the dev extra)"
        ) from exc
    return ray


def run_units_ray(
    config: CampaignConfig, jobs: Sequence[Job], *, address: str | None, cpus: int
) -> Iterator[list[AttemptSummary]]:
    """The rows of each job, as the batches finish (not in job order).

    ``address``: a running cluster (``host:port`` of its head, or ``auto``); None starts a local one
    for this run with ``cpus`` CPUs and stops it after.
    """
    ray = _ray()
    shipped, env = portable(config)
    env_vars = env | ({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})
    try:
        ray.init(
            address=address,
            num_cpus=None if address else cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="WARNING",
            runtime_env={"env_vars": env_vars},
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayEngineError(f"--address {address}: cannot join the Ray cluster: {exc}") from exc
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_run_batch)
        config_ref = ray.put(shipped)
        batches = [list(jobs[i : i + BATCH_UNITS]) for i in range(0, len(jobs), BATCH_UNITS)]
        in_flight_max = max(2, 2 * int(ray.cluster_resources().get("CPU", cpus)))
        waiting: list[Any] = []
        next_batch = 0
        while next_batch < len(batches) or waiting:
            while next_batch < len(batches) and len(waiting) < in_flight_max:
                waiting.append(task.remote(config_ref, batches[next_batch]))
                next_batch += 1
            done, waiting = ray.wait(waiting, num_returns=1)
            yield from ray.get(done[0])
    finally:
        ray.shutdown()
