"""The runner's attempt memo (benchmark/campaign/memo.py): a simulated campaign's rows are byte-identical
with and without it, and it does spare real attempts. Real environments, packs and guard sessions."""

from __future__ import annotations

import fnmatch

from benchmark.campaign.memo import AttemptMemo
from benchmark.campaign.runner import CampaignConfig, Worker, run_units

TASKS = "*ST01[0-2]*"
"""6 retail tasks."""
ARM_NAMES = ("off", "approvals", "guard")
"""No guard; held calls (approval ids); every lever (retries, checks, refusals, rollbacks)."""


def _lines(memo: bool, feedback: float) -> tuple[list[str], AttemptMemo | None]:
    pairs = tuple((k, feedback) for k in ("classified_hint", "policy_violation", "commit_refused", "held"))
    config = CampaignConfig(
        agent="simulated", arms=ARM_NAMES, repeat=5, seed=3, profile="kimi-k3", feedback=pairs
    )
    worker = Worker(config)
    try:
        chosen = tuple(uid for uid in worker.tasks if fnmatch.fnmatchcase(uid, TASKS))
        config = CampaignConfig(**{**config.__dict__, "task_ids": chosen})
        worker.config = config
        if not memo:
            worker.memo = None
        jobs = [(key, config.arms) for key in worker.units()]
        lines = [s.line for rows in run_units(config, jobs, 1, worker=worker) for s in rows]
        return lines, worker.memo
    finally:
        worker.close()


def test_rows_are_byte_identical_with_and_without_the_memo() -> None:
    with_memo, memo = _lines(True, 0.5)
    without, _ = _lines(False, 0.5)
    assert memo is not None
    assert len(with_memo) == 6 * 5 * len(ARM_NAMES)
    assert with_memo == without
    assert memo.hits > memo.runs > 0  # repetitions of a task share most plans
    joined = "\n".join(with_memo)
    # the sample must exercise what the memo keys on: failures, reactions to feedback, guard stops
    assert '"intent":"success"' in joined and '"intent":"tool_usage"' in joined
    assert '"reactions":["' in joined
    assert '"outcome":"held"' in joined or '"intervened":true' in joined
