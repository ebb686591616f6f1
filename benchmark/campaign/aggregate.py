"""``bench agg``: per-arm and per-arm × domain figures of a campaign (or of plain ``tb infer`` rows).

:func:`aggregate` turns rows into an :class:`~benchmark.campaign.agg_types.Aggregate`;
:func:`render_table`, :func:`render_markdown`, :func:`to_json` and :func:`summary_line` (from
:mod:`benchmark.campaign.agg_render`, re-exported here) only format it, so every output shows the same
numbers. Definitions (docs/lift.md
has the long form):

- **Groups.** Rows are grouped by (agent, arm). A group's label is its arm, or ``agent/arm`` when the
  input holds more than one agent. ``oracle-ceiling`` (or any row with ``upper_bound``) is labelled
  ``(upper bound)`` and an agent whose name starts with ``simulated`` is labelled ``(simulated)``,
  wherever its figures appear.
- **Attempts and tasks.** An attempt is a row; a task is a uid. As ``tb agg`` does, ``n`` per task is the
  number of rows with that uid *including errors*, and an error counts as a failure; a duplicated
  (uid, repetition) row is counted again (and reported in the notes).
- **pass@1** = passes ÷ attempts, with the equal-tailed 95% Jeffreys interval.
- **pass@k** (unbiased, ``1 − C(n−c,k)/C(n,k)``), **pass^k** twice — ``(c/n)^k`` as ``tb agg`` prints
  it and ``C(c,k)/C(n,k)`` as τ-bench defines it — and **observed k/k** (tasks passing all their
  attempts), for k ∈ {1, 5, 10, 20} with k ≤ n, each a plain mean over tasks. All omitted when the
  tasks do not all have the same n, as ``tb agg`` does, with the reason in ``passk.omitted``.
- **Outcomes** (our rows only): success, wrong commit and held rates over all attempts; system errors
  (``outcome`` null) counted separately; false-block rate over the attempts where a false block is
  knowable (an unguarded twin was judged: ``twin_passed`` or ``open_loop`` set). For plain ``tb`` rows
  the success rate is pass@1 and the other rates are n/a.
- **Failure signatures**: shares among failed attempts that are not errors; a row without a signature
  gets one from :mod:`benchmark.campaign.signatures`.
- **Open loop**: the 2 × 2 of replayed trajectories; catch rate = caught ÷ (caught + missed),
  false-block rate = false block ÷ (false block + clean pass).
- **Cost** (with a price table, :mod:`benchmark.campaign.prices`): total USD of the group's agent
  tokens; per successful attempt = total ÷ (attempts × pass@1); per dependable task = total ÷ observed
  k/k.
- **Lift**: per agent with an ``off`` arm, each other arm's pass@1 and wrong-commit rate minus
  ``off``'s, both over the (uid, repetition) pairs the two arms share (first row of a duplicated pair).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from benchmark.campaign import metrics
from benchmark.campaign.agg_render import render_markdown, render_table, summary_line, to_json
from benchmark.campaign.agg_types import (
    Aggregate,
    ArmStats,
    Cost,
    DomainStats,
    Interval,
    KValue,
    LiftRow,
    OpenLoopCounts,
    Outcomes,
    PassK,
    SignatureShare,
    Stats,
)
from benchmark.campaign.base_lift import base_notes
from benchmark.campaign.prices import PriceTable, price_key, row_cost
from benchmark.campaign.results import (
    CampaignFacts,
    DecodeResult,
    ResultsError,
    arm_of,
    domain_of,
    facts_of,
    passed,
)
from benchmark.campaign.signatures import failure_signature, is_error

__all__ = [
    "ARM_ORDER",
    "K_VALUES",
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
    "aggregate",
    "render_markdown",
    "render_table",
    "summary_line",
    "to_json",
]

ARM_ORDER = (
    "off",
    "base",
    "validation",
    "retries",
    "checks",
    "approvals",
    "surface",
    "guard",
    "oracle-ceiling",
)
"""Display order of the known arms; other arms (``tb``...) follow, by name."""
K_VALUES = (1, 5, 10, 20)
UPPER_BOUND = "upper bound"
SIMULATED = "simulated"


# -- computing -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Row:
    row: DecodeResult
    facts: CampaignFacts | None
    uid: str
    repetition: int | None
    domain: str
    passed: bool
    error: bool
    signature: str | None
    cost: float | None


def _prepare(row: DecodeResult, prices: PriceTable | None) -> _Row:
    try:
        facts = facts_of(row)
        signature = failure_signature(row)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ResultsError(f"row {row.uid}: field metadata.{where}: {first['msg']}") from None
    rep = row.metadata.get("repetition")
    error = facts.outcome is None if facts is not None else is_error(row)
    return _Row(
        row=row,
        facts=facts,
        uid=row.uid,
        repetition=rep if isinstance(rep, int) and not isinstance(rep, bool) else None,
        domain=domain_of(row),
        passed=passed(row),
        error=error,
        signature=signature,
        cost=row_cost(row, prices) if prices is not None else None,
    )


def _agent(r: _Row) -> str:
    if r.facts is not None:
        return r.facts.agent
    agent = r.row.metadata.get("agent")
    return agent if isinstance(agent, str) and agent else "tb"


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _passk(rows: Sequence[_Row]) -> PassK:
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        counts = per_task[r.uid]
        counts[0] += 1
        counts[1] += r.passed
    ns = {n for n, _ in per_task.values()}
    if len(ns) != 1:
        return PassK(
            n=None,
            omitted=f"tasks have unequal attempt counts (n from {min(ns)} to {max(ns)}): pass@k, pass^k "
            "and observed k/k are omitted, as tb agg does",
            pass_at_k=[],
            pass_power_k=[],
            pass_hat_k=[],
            observed_k_of_k=None,
        )
    (n,) = ns
    tasks = [(tn, tc) for tn, tc in per_task.values()]
    ks = [k for k in K_VALUES if k <= n]

    def mean(f: Callable[[int, int, int], float], k: int) -> KValue:
        return KValue(k=k, value=sum(f(tn, tc, k) for tn, tc in tasks) / len(tasks))

    return PassK(
        n=n,
        pass_at_k=[mean(metrics.pass_at_k, k) for k in ks],
        pass_power_k=[mean(metrics.pass_power_k, k) for k in ks],
        pass_hat_k=[mean(metrics.pass_hat_k, k) for k in ks],
        observed_k_of_k=metrics.observed_k_of_k(tasks),
    )


def _knowable(f: CampaignFacts) -> bool:
    return f.outcome == "false_block" or f.twin_passed is not None or f.open_loop is not None


def _outcomes(rows: Sequence[_Row]) -> Outcomes:
    n = len(rows)
    errors = sum(r.error for r in rows)
    facts = [r.facts for r in rows if r.facts is not None]
    if len(facts) != n:
        passes = sum(r.passed for r in rows)
        return Outcomes(
            known=False,
            success=passes,
            success_rate=passes / n,
            system_errors=errors,
            system_error_rate=errors / n,
        )
    counts = Counter(f.outcome for f in facts)
    knowable = sum(_knowable(f) for f in facts)
    return Outcomes(
        known=True,
        success=counts["success"],
        success_rate=counts["success"] / n,
        wrong_commit=counts["wrong_commit"],
        wrong_commit_rate=counts["wrong_commit"] / n,
        held=counts["held"],
        held_rate=counts["held"] / n,
        false_block=counts["false_block"],
        false_block_knowable=knowable,
        false_block_rate=_rate(counts["false_block"], knowable),
        system_errors=counts[None],
        system_error_rate=counts[None] / n,
    )


def _open_loop(rows: Sequence[_Row]) -> OpenLoopCounts | None:
    cells = Counter(r.facts.open_loop for r in rows if r.facts is not None and r.facts.open_loop is not None)
    if not cells:
        return None
    return OpenLoopCounts(
        caught=cells["caught"],
        missed=cells["missed"],
        false_block=cells["false_block"],
        clean_pass=cells["clean_pass"],
        catch_rate=_rate(cells["caught"], cells["caught"] + cells["missed"]),
        false_block_rate=_rate(cells["false_block"], cells["false_block"] + cells["clean_pass"]),
    )


def _cost(rows: Sequence[_Row], passes: int, dependable: int | None) -> Cost:
    unpriced = sorted({"/".join(price_key(r.row)) or "(no agent name)" for r in rows if r.cost is None})
    if unpriced:
        return Cost(
            total_usd=None,
            per_successful_attempt=None,
            per_dependable_task=None,
            note=f"no price for {', '.join(unpriced)} (name it, or `default`, in the price file)",
        )
    total = sum(r.cost or 0.0 for r in rows)
    return Cost(
        total_usd=total,
        per_successful_attempt=metrics.cost_per_successful_attempt(total, len(rows), passes / len(rows)),
        per_dependable_task=metrics.cost_per_dependable_task(total, dependable)
        if dependable is not None
        else None,
        note=None if dependable is not None else "per dependable task needs equal attempts per task",
    )


def _duplicates(rows: Sequence[_Row]) -> int:
    seen: set[tuple[str, int]] = set()
    dup = 0
    for r in rows:
        if r.repetition is None:
            continue
        key = (r.uid, r.repetition)
        dup += key in seen
        seen.add(key)
    return dup


def _stats(rows: Sequence[_Row], priced: bool) -> Stats:
    n = len(rows)
    passes = sum(r.passed for r in rows)
    low, high = metrics.jeffreys_interval(passes, n)
    passk = _passk(rows)
    ours = all(r.facts is not None for r in rows)
    guards = [r.facts.guard for r in rows if r.facts is not None and r.facts.guard is not None]
    failed = [r for r in rows if not r.passed and not r.error]
    sig_counts = Counter(r.signature or "unclassified" for r in failed)
    signatures = [
        SignatureShare(signature=s, count=c, share=c / len(failed))
        for s, c in sorted(sig_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return Stats(
        attempts=n,
        tasks=len({r.uid for r in rows}),
        passes=passes,
        errors=sum(r.error for r in rows),
        duplicates=_duplicates(rows),
        pass1=passes / n,
        pass1_ci95=Interval(low=low, high=high),
        passk=passk,
        outcomes=_outcomes(rows),
        approvals_per_attempt=sum(g.approvals.get("requested", 0) for g in guards) / n if ours else None,
        guard_added_ms_per_attempt=sum(g.added_ms for g in guards) / n if ours else None,
        failures=len(failed),
        signatures=signatures,
        open_loop=_open_loop(rows),
        cost=_cost(rows, passes, passk.observed_k_of_k) if priced else None,
    )


def _arm_key(agent: str, arm: str) -> tuple[str, int, str]:
    return (agent, ARM_ORDER.index(arm) if arm in ARM_ORDER else len(ARM_ORDER), arm)


def _labelled(name: str, upper_bound: bool, simulated: bool) -> str:
    tags = [t for t, on in ((SIMULATED, simulated), (UPPER_BOUND, upper_bound)) if on]
    return f"{name} ({', '.join(tags)})" if tags else name


def _pair_rates(rows: Sequence[_Row], keys: set[tuple[str, int]]) -> tuple[float | None, float | None]:
    chosen: dict[tuple[str, int], _Row] = {}
    for r in rows:
        if r.repetition is not None and (r.uid, r.repetition) in keys:
            chosen.setdefault((r.uid, r.repetition), r)
    picked = list(chosen.values())
    if not picked:
        return None, None
    pass1 = sum(r.passed for r in picked) / len(picked)
    if any(r.facts is None for r in picked):
        return pass1, None
    wrong = sum(r.facts is not None and r.facts.outcome == "wrong_commit" for r in picked)
    return pass1, wrong / len(picked)


def _sub(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def aggregate(rows: Iterable[DecodeResult], prices: PriceTable | None = None) -> Aggregate:
    """Every figure of ``bench agg`` for ``rows`` (see the module docstring for the definitions).

    ``prices`` adds the cost figures. Raises :class:`ValueError` on no rows and
    :class:`~benchmark.campaign.results.ResultsError` on a row whose ``metadata`` facts do not validate
    (rows read with :func:`~benchmark.campaign.results.read_campaign_results` never do).
    """
    prepared = [_prepare(row, prices) for row in rows]
    if not prepared:
        raise ValueError("no rows to aggregate")
    groups: dict[tuple[str, str], list[_Row]] = defaultdict(list)
    for r in prepared:
        groups[(_agent(r), arm_of(r.row))].append(r)
    agents = {agent for agent, _ in groups}
    priced = prices is not None
    notes: list[str] = []
    arms: list[ArmStats] = []
    for agent, arm in sorted(groups, key=lambda g: _arm_key(*g)):
        members = groups[(agent, arm)]
        upper = arm == "oracle-ceiling" or any(r.facts is not None and r.facts.upper_bound for r in members)
        simulated = agent.startswith(SIMULATED)
        name = arm if len(agents) == 1 else f"{agent}/{arm}"
        by_domain: dict[str, list[_Row]] = defaultdict(list)
        for r in members:
            by_domain[r.domain].append(r)
        overall = _stats(members, priced)
        arms.append(
            ArmStats(
                arm=arm,
                agent=agent,
                name=name,
                label=_labelled(name, upper, simulated),
                upper_bound=upper,
                simulated=simulated,
                overall=overall,
                domains=[
                    DomainStats(domain=d, **_stats(by_domain[d], priced).model_dump())
                    for d in sorted(by_domain)
                ],
            )
        )
        label = arms[-1].label
        if overall.passk.omitted:
            notes.append(f"{label}: {overall.passk.omitted}.")
        if overall.duplicates:
            notes.append(
                f"{label}: {overall.duplicates} rows repeat an earlier (uid, repetition) and are counted "
                "as extra attempts, as tb agg does."
            )
        if not overall.outcomes.known:
            notes.append(f"{label}: plain tb rows: success = passed test; other outcome rates are n/a.")
        if overall.cost is not None and overall.cost.note and overall.cost.total_usd is None:
            notes.append(f"{label}: cost: {overall.cost.note}.")
    lift = _lift(groups, arms)
    if not any(a.arm == "off" for a in arms):
        notes.append("no `off` arm: lift is not computed.")
    notes += base_notes(lift)
    parameters = list(
        dict.fromkeys(
            r.facts.simulated.parameters() for r in prepared if r.facts is not None and r.facts.simulated
        )
    )
    if any(a.simulated for a in arms) and not parameters:
        notes.append("simulated rows that state no parameters (no `metadata.simulated`).")
    return Aggregate(
        rows=len(prepared), priced=priced, arms=arms, lift=lift, notes=notes, simulated=parameters
    )


def _pair_keys(rows: Sequence[_Row]) -> set[tuple[str, int]]:
    return {(r.uid, r.repetition) for r in rows if r.repetition is not None}


def _lift(groups: dict[tuple[str, str], list[_Row]], arms: list[ArmStats]) -> list[LiftRow]:
    lift: list[LiftRow] = []
    for a in arms:
        off = groups.get((a.agent, "off"))
        if off is None or a.arm == "off":
            continue
        mine = groups[(a.agent, a.arm)]
        keys = _pair_keys(mine) & _pair_keys(off)
        p1, wc = _pair_rates(mine, keys)
        off_p1, off_wc = _pair_rates(off, keys)
        lift.append(
            LiftRow(
                arm=a.arm,
                agent=a.agent,
                label=a.label,
                upper_bound=a.upper_bound,
                simulated=a.simulated,
                pairs=len(keys),
                pass1=p1,
                off_pass1=off_p1,
                pass1_change=_sub(p1, off_p1),
                wrong_commit_rate=wc,
                off_wrong_commit_rate=off_wc,
                wrong_commit_change=_sub(wc, off_wc),
            )
        )
    return lift
