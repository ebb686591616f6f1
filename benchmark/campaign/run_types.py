"""The campaign's contract: what decides a run (:class:`CampaignConfig`), its unit of work
(:class:`UnitKey` and its seed), what an attempt produced (``_Attempt``, judged by ``_Judged``), the
summary of a row the main process keeps (:class:`AttemptSummary`) and the running figures per arm
(:class:`Tally`). The runner (:mod:`benchmark.campaign.runner`) re-exports them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.campaign.agents import Transcript
from benchmark.campaign.arms import Arm
from benchmark.campaign.results import DecodeResult, GuardFacts, Outcome, passed
from benchmark.campaign.surfaces import Reviewer


@dataclass(frozen=True)
class CampaignConfig:
    """Everything that decides a campaign's rows (recorded in the run metadata; holds no secret)."""

    agent: str
    arms: tuple[str, ...]
    repeat: int = 1
    domains: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    """The tasks to run, resolved from --domain/--tasks (the runner does not re-filter)."""
    seed: int = 0
    faults: str | None = None
    policy_dir: str = "policies"
    reviewer: Reviewer = "approve-matching"
    trajectories: str | None = None
    data: str | None = None
    db: str | None = None
    profile: str | None = None
    """--agent simulated: the profile's name or file."""
    feedback: tuple[tuple[str, float], ...] = ()
    """--agent simulated: feedback probabilities replacing the profile's."""
    llm_config: str | None = None
    """--agent llm: the endpoints file (benchmark.llm.config; holds key variable names, never keys)."""
    through_proxy: bool = False
    """The agent's calls go through a real ``shadowguard serve`` (benchmark.llm.proxied)."""
    proxy_era: str = "2026-07-28"
    """--through-proxy: the MCP protocol era the agent's client speaks (legacy or 2026-07-28)."""


@dataclass(frozen=True)
class UnitKey:
    uid: str
    case: str | None
    repetition: int


@dataclass
class AttemptSummary:
    """What the main process needs of a row without parsing it (progress, the last line)."""

    uid: str
    case: str | None
    repetition: int
    arm: str
    passed: bool
    outcome: Outcome | None
    system_error: bool
    line: str


def summary_of(row: DecodeResult, line: str) -> AttemptSummary:
    """The summary of a row read back from a results file (``--resume``)."""
    md = row.metadata
    trajectory = md.get("trajectory")
    return AttemptSummary(
        row.uid,
        trajectory if isinstance(trajectory, str) else None,
        int(md["repetition"]),
        str(md["arm"]),
        passed(row),
        md.get("outcome"),
        row.is_system_error,
        line,
    )


def unit_seed(seed: int, key: UnitKey) -> int:
    """The unit's seed, from the campaign's: every arm, a subset and a resumed run see the same faults."""
    text = f"{seed}:{key.uid}:{key.case or ''}:{key.repetition}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@dataclass
class _Judged:
    """The judge's grading of an attempt's end state (golden-state hash equality, then rubrics)."""

    passed: bool
    result_hash: str
    golden_hash: str
    rubrics: dict[str, Any] | None = None
    """The agent's rubric grading (``grade_rubrics`` hook), when it has one and the DB check passed."""


@dataclass
class _Attempt:
    """One arm's attempt of a unit: what the agent did, how it was judged, what the guard did."""

    arm: Arm
    transcript: Transcript
    judged: _Judged
    guard: GuardFacts | None
    faults: int
    result_delta: dict[str, Any] | None
    seconds: float


@dataclass
class Tally:
    """Running figures per arm (for the progress bar and the last line)."""

    arms: Sequence[str]
    attempts: Counter[str] = field(default_factory=Counter)
    passed: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, s: AttemptSummary) -> None:
        self.attempts[s.arm] += 1
        self.passed[s.arm] += int(s.passed)
        self.errors[s.arm] += int(s.system_error)
        self.outcomes.setdefault(s.arm, Counter())[s.outcome or "system_error"] += 1

    def pass1(self, arm: str) -> float:
        return 100.0 * self.passed[arm] / self.attempts[arm] if self.attempts[arm] else 0.0

    def brief(self) -> str:
        return " ".join(f"{a}={self.pass1(a):.1f}%" for a in self.arms)

    def last_line(self) -> str:
        total = sum(self.attempts.values())

        def per(kind: str) -> str:
            return " ".join(f"{a}={self.outcomes.get(a, Counter())[kind]}" for a in self.arms)

        line = (
            f"run: attempts {total} arms {len(self.arms)} pass@1 {self.brief()} "
            f"wrong-commits {per('wrong_commit')} held {per('held')} false-blocks {per('false_block')}"
        )
        if sum(self.errors.values()):
            line += f" system-errors {per('system_error')}"
        return line
