"""The campaign runner's per-worker caches and its end-state read (benchmark/campaign/runner.py) change
no row: a small simulated campaign over every domain and every product arm gives byte-identical rows
with the plain per-attempt path (pack cut, classifier and tool infos built per attempt, the whole end
state read back, no attempt memo). Real environments, packs and guard sessions."""

from __future__ import annotations

import pytest

from benchmark.campaign.arms import Arm
from benchmark.campaign.runner import CampaignConfig, Worker, run_units
from benchmark.envs import Environment
from benchmark.envs.hashing import StableState
from benchmark.guarded import tool_infos
from guard.classifier import Classifier
from guard.effects import ToolInfo
from guard.policy import PolicyPack

# 120 attempts twice (about a minute on an idle machine): with the image, Ray and replica tests.
pytestmark = pytest.mark.slow

ARM_NAMES = ("off", "base", "validation", "retries", "checks", "approvals", "surface", "guard")


class ReferenceWorker(Worker):
    """The runner as it was before the caches: everything built and read per attempt."""

    def _arm_pack(self, arm: Arm, domain: str) -> tuple[PolicyPack, Classifier]:
        pack = arm.pack(self.packs[domain])
        return pack, Classifier.for_policy(pack)

    def _infos(self, env: Environment) -> dict[str, ToolInfo]:
        return tool_infos(env)

    @staticmethod
    def _final_state(env: Environment, initial: StableState) -> StableState:
        return env.stable_state()


def _lines(worker_type: type[Worker]) -> list[str]:
    pairs = tuple((k, 0.5) for k in ("classified_hint", "policy_violation", "commit_refused", "held"))
    config = CampaignConfig(
        agent="simulated", arms=ARM_NAMES, repeat=3, seed=5, profile="kimi-k3", feedback=pairs
    )
    worker = worker_type(config)
    try:
        first: dict[str, str] = {}
        for uid, task in worker.tasks.items():
            first.setdefault(task.domain, uid)
        config = CampaignConfig(**{**config.__dict__, "task_ids": tuple(first.values())})
        worker.config = config
        if worker_type is ReferenceWorker:
            worker.memo = None
        jobs = [(key, config.arms) for key in worker.units()]
        return [s.line for rows in run_units(config, jobs, 1, worker=worker) for s in rows]
    finally:
        worker.close()


def test_rows_are_byte_identical_to_the_per_attempt_path() -> None:
    fast = _lines(Worker)
    reference = _lines(ReferenceWorker)
    assert len(fast) == 5 * 3 * len(ARM_NAMES)
    assert fast == reference
    joined = "\n".join(fast)
    # the sample must judge states the attempts changed, pass and fail, and guard interventions
    assert '"db":"pass"' in joined and '"db":"fail"' in joined
    assert '"intervened":true' in joined
