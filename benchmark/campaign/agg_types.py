"""The figures ``bench agg`` computes (:func:`benchmark.campaign.aggregate.aggregate`): the contract
between computing them and every way of printing them. Field docstrings state each definition; the
long form is docs/lift.md."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = [
    "Aggregate",
    "ArmStats",
    "Cost",
    "DomainStats",
    "Interval",
    "KValue",
    "LiftRow",
    "OpenLoopCounts",
    "Outcomes",
    "PassK",
    "SignatureShare",
    "Stats",
]


class Interval(BaseModel):
    low: float
    high: float


class KValue(BaseModel):
    k: int
    value: float


class PassK(BaseModel):
    """Per-task estimators, each a plain mean over tasks; empty with ``omitted`` saying why."""

    n: int | None
    """Attempts per task when every task has the same number, else None."""
    omitted: str | None = None
    pass_at_k: list[KValue]
    """Unbiased ``1 − C(n−c,k)/C(n,k)``."""
    pass_power_k: list[KValue]
    """Plug-in ``(c/n)^k``, as ``tb agg`` prints pass^k."""
    pass_hat_k: list[KValue]
    """``C(c,k)/C(n,k)``, pass^k as τ-bench defines it."""
    observed_k_of_k: int | None
    """Tasks that passed all of their ``n`` attempts."""


class Outcomes(BaseModel):
    """Counts and rates of what attempts ended as. ``known`` false (plain ``tb`` rows): only
    ``success``/``success_rate`` (= passes, pass@1) are set."""

    known: bool
    success: int
    success_rate: float
    wrong_commit: int | None = None
    wrong_commit_rate: float | None = None
    held: int | None = None
    held_rate: float | None = None
    false_block: int | None = None
    false_block_knowable: int | None = None
    """Attempts where a false block is knowable (an unguarded twin was judged)."""
    false_block_rate: float | None = None
    """false_block ÷ false_block_knowable; None when nothing is knowable."""
    system_errors: int
    system_error_rate: float


class SignatureShare(BaseModel):
    signature: str
    count: int
    share: float


class OpenLoopCounts(BaseModel):
    caught: int
    missed: int
    false_block: int
    clean_pass: int
    catch_rate: float | None
    """caught ÷ (caught + missed)."""
    false_block_rate: float | None
    """false_block ÷ (false_block + clean_pass)."""


class Cost(BaseModel):
    total_usd: float | None
    """None when some attempt has tokens and no price (see ``note``)."""
    per_successful_attempt: float | None
    per_dependable_task: float | None
    note: str | None = None


class Stats(BaseModel):
    attempts: int
    tasks: int
    passes: int
    errors: int
    """Errors as ``tb agg`` counts them (our rows: ``outcome`` null); failures in pass@1."""
    duplicates: int
    """Rows repeating an earlier row's (uid, repetition); counted as attempts, as ``tb agg`` does."""
    pass1: float
    pass1_ci95: Interval
    """Equal-tailed Jeffreys interval."""
    passk: PassK
    outcomes: Outcomes
    approvals_per_attempt: float | None
    """Approval requests per attempt (None for plain ``tb`` rows)."""
    guard_added_ms_per_attempt: float | None
    """Mean wall time the guard added per attempt (None for plain ``tb`` rows)."""
    failures: int
    """Failed attempts that are not errors: the base of ``signatures``."""
    signatures: list[SignatureShare]
    open_loop: OpenLoopCounts | None
    cost: Cost | None


class DomainStats(Stats):
    domain: str


class ArmStats(BaseModel):
    arm: str
    agent: str
    name: str
    """The arm, or ``agent/arm`` when the input holds more than one agent."""
    label: str
    """The group's name with its labels, e.g. ``oracle-ceiling (upper bound)``."""
    upper_bound: bool
    simulated: bool
    overall: Stats
    domains: list[DomainStats]


class LiftRow(BaseModel):
    arm: str
    agent: str
    label: str
    upper_bound: bool
    simulated: bool
    pairs: int
    """(uid, repetition) pairs present in both this arm and ``off``."""
    pass1: float | None
    off_pass1: float | None
    pass1_change: float | None
    wrong_commit_rate: float | None
    off_wrong_commit_rate: float | None
    wrong_commit_change: float | None


class Aggregate(BaseModel):
    rows: int
    priced: bool
    arms: list[ArmStats]
    lift: list[LiftRow]
    notes: list[str]
    simulated: list[str] = Field(default_factory=list)
    """The distinct simulated-agent parameters the rows state (``profile: feedback k=v ...``)."""
