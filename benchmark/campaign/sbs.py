"""``bench sbs``: a candidate run against a base run, task by task (ThinkingBox's ``tb sbs``,
docs/benchmark.md#estimators).

Definitions (docs/lift.md has the long form):

- **Pairing.** Rows pair by uid; both runs must hold the same set of uids (:class:`SbsError` otherwise,
  naming both sides and some uids found in only one). Each side must be one (agent, arm) group —
  :func:`select_group` picks one out of a campaign file.
- **Errors are left out of n**, as ``tb sbs`` does (and unlike ``tb agg`` and ``bench agg``, which count
  them as failures): a row is an error when it is a system error, has no test result or its test
  errored (our rows: ``outcome`` null). The error counts are reported beside.
- **Per task**, P(p_cand > p_base) under independent Beta(0.5 + c, 0.5 + n − c) posteriors
  (:func:`benchmark.campaign.metrics.prob_cand_better`, deterministic quadrature).
- **Lift** = cand pass@1 − base pass@1, each pooled over the side's non-error attempts (Σc ÷ Σn). Its
  95% interval is a **percentile bootstrap over tasks** (tasks resampled with replacement, both sides
  together so the pairing is kept; 4000 resamples from a fixed seed, so the interval is reproducible).
- **Worse tasks**: the candidate's mean is lower, or P(cand > base) < 0.05; listed by P(cand > base),
  then uid. ``significant`` marks P(cand > base) < 0.05.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel
from rich.console import Group
from rich.table import Table
from rich.text import Text

from benchmark.campaign import metrics
from benchmark.campaign.results import DecodeResult, arm_of, facts_of, passed
from benchmark.campaign.signatures import is_error
from benchmark.campaign.tables import Section, ci, pct, pp

__all__ = [
    "RESAMPLES",
    "SEED",
    "SbsError",
    "SideBySide",
    "TaskComparison",
    "render_markdown",
    "render_table",
    "select_group",
    "side_by_side",
    "summary_line",
    "to_json",
]

RESAMPLES = 4000
SEED = 0
WORSE_P = 0.05
INTERVAL = f"percentile bootstrap over tasks, {RESAMPLES} resamples, seed {SEED}"


class SbsError(ValueError):
    """Two runs that cannot be compared; the message names both sides."""


class TaskComparison(BaseModel):
    uid: str
    base_passes: int
    base_n: int
    """Non-error attempts."""
    base_errors: int
    cand_passes: int
    cand_n: int
    cand_errors: int
    base_pass1: float | None
    """None when every base attempt of the task errored."""
    cand_pass1: float | None
    p_cand_better: float
    worse: bool
    significant: bool
    """P(cand > base) < 0.05."""


class SideBySide(BaseModel):
    base: str
    """The base side's label (file, arm, and ``simulated`` / ``upper bound`` where they apply)."""
    cand: str
    labels: list[str]
    """``simulated`` and/or ``upper bound`` when either side is; printed with every figure."""
    tasks: int
    base_attempts: int
    """Non-error attempts."""
    cand_attempts: int
    base_errors: int
    cand_errors: int
    base_pass1: float
    cand_pass1: float
    lift: float
    lift_ci95_low: float
    lift_ci95_high: float
    interval: str
    """How the lift interval was computed."""
    better: int
    """Tasks with P(cand > base) > 0.95."""
    worse: list[TaskComparison]
    per_task: list[TaskComparison]
    """Every task, by uid."""


def _error(row: DecodeResult) -> bool:
    facts = facts_of(row)
    return facts.outcome is None if facts is not None else is_error(row)


def _agent(row: DecodeResult) -> str:
    agent = row.metadata.get("agent")
    return agent if isinstance(agent, str) and agent else "tb"


def select_group(
    rows: Sequence[DecodeResult], arm: str | None, label: str, option: str
) -> list[DecodeResult]:
    """The rows of one side: those of ``arm`` when given, which must then be one agent's; without
    ``arm``, all rows, which must be one (agent, arm) group. ``label`` (the file) and ``option`` (the
    flag that picks an arm) name the side in the :class:`SbsError` raised otherwise."""
    chosen = [r for r in rows if arm is None or arm_of(r) == arm]
    groups = sorted({(_agent(r), arm_of(r)) for r in chosen})
    if not chosen:
        arms = ", ".join(sorted({arm_of(r) for r in rows}))
        raise SbsError(f"{label}: no rows of arm {arm!r} (it holds {arms})")
    if len(groups) > 1:
        names = ", ".join(f"{g[1]} ({g[0]})" for g in groups)
        hint = f"choose one with {option}" if arm is None else "give one agent's rows per side"
        raise SbsError(f"{label}: holds several agent/arm groups: {names}; {hint}")
    return chosen


def _tags(rows: Sequence[DecodeResult]) -> list[str]:
    tags = []
    if any(_agent(r).startswith("simulated") for r in rows):
        tags.append("simulated")
    if any(arm_of(r) == "oracle-ceiling" or r.metadata.get("upper_bound") is True for r in rows):
        tags.append("upper bound")
    return tags


def _side(label: str, rows: Sequence[DecodeResult]) -> str:
    arms = ", ".join(sorted({arm_of(r) for r in rows}))
    tags = _tags(rows)
    return f"{label} [{arms}{' (' + ', '.join(tags) + ')' if tags else ''}]"


def _counts(rows: Sequence[DecodeResult]) -> dict[str, list[int]]:
    """uid → [passes, non-error attempts, errors]."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        c = counts[row.uid]
        if _error(row):
            c[2] += 1
        else:
            c[0] += passed(row)
            c[1] += 1
    return counts


def _mismatch(base: set[str], cand: set[str], base_label: str, cand_label: str) -> SbsError:
    parts = []
    for label, only in ((base_label, sorted(base - cand)), (cand_label, sorted(cand - base))):
        if only:
            more = f" and {len(only) - 3} more" if len(only) > 3 else ""
            parts.append(f"{len(only)} only in {label} ({', '.join(only[:3])}{more})")
    return SbsError(f"{base_label} and {cand_label} hold different tasks: " + "; ".join(parts))


def _bootstrap(base: np.ndarray, cand: np.ndarray) -> tuple[float, float]:
    """Percentile 95% interval of the pooled lift, tasks resampled with replacement (fixed seed).
    ``base``/``cand``: (tasks, 2) arrays of [passes, non-error attempts]."""
    rng = np.random.default_rng(SEED)
    idx = rng.integers(0, len(base), size=(RESAMPLES, len(base)))
    b = base[idx].sum(axis=1)
    c = cand[idx].sum(axis=1)
    usable = (b[:, 1] > 0) & (c[:, 1] > 0)
    lift = c[usable, 0] / c[usable, 1] - b[usable, 0] / b[usable, 1]
    low, high = np.percentile(lift, [2.5, 97.5])
    return float(low), float(high)


def side_by_side(
    base_rows: Sequence[DecodeResult],
    cand_rows: Sequence[DecodeResult],
    *,
    base_label: str = "base",
    cand_label: str = "cand",
) -> SideBySide:
    """Compare ``cand_rows`` against ``base_rows`` (see the module docstring for every definition).

    Raises :class:`SbsError` when the uid sets differ or a side has no non-error attempt at all.
    """
    base, cand = _counts(base_rows), _counts(cand_rows)
    if set(base) != set(cand):
        raise _mismatch(set(base), set(cand), base_label, cand_label)
    if not base:
        raise SbsError(f"{base_label} and {cand_label}: no rows")
    for label, counts in ((base_label, base), (cand_label, cand)):
        if not any(c[1] for c in counts.values()):
            raise SbsError(f"{label}: every attempt is an error; nothing to compare")
    tasks: list[TaskComparison] = []
    for uid in sorted(base):
        (bc, bn, be), (cc, cn, ce) = base[uid], cand[uid]
        p = metrics.prob_cand_better(bc, bn, cc, cn)
        b1, c1 = (bc / bn if bn else None), (cc / cn if cn else None)
        lower = b1 is not None and c1 is not None and c1 < b1
        tasks.append(
            TaskComparison(
                uid=uid,
                base_passes=bc,
                base_n=bn,
                base_errors=be,
                cand_passes=cc,
                cand_n=cn,
                cand_errors=ce,
                base_pass1=b1,
                cand_pass1=c1,
                p_cand_better=p,
                worse=lower or p < WORSE_P,
                significant=p < WORSE_P,
            )
        )
    b_arr = np.array([[t.base_passes, t.base_n] for t in tasks], dtype=np.int64)
    c_arr = np.array([[t.cand_passes, t.cand_n] for t in tasks], dtype=np.int64)
    base_pass1 = float(b_arr[:, 0].sum() / b_arr[:, 1].sum())
    cand_pass1 = float(c_arr[:, 0].sum() / c_arr[:, 1].sum())
    low, high = _bootstrap(b_arr, c_arr)
    return SideBySide(
        base=_side(base_label, base_rows),
        cand=_side(cand_label, cand_rows),
        labels=sorted(set(_tags(base_rows)) | set(_tags(cand_rows)), reverse=True),
        tasks=len(tasks),
        base_attempts=int(b_arr[:, 1].sum()),
        cand_attempts=int(c_arr[:, 1].sum()),
        base_errors=sum(t.base_errors for t in tasks),
        cand_errors=sum(t.cand_errors for t in tasks),
        base_pass1=base_pass1,
        cand_pass1=cand_pass1,
        lift=cand_pass1 - base_pass1,
        lift_ci95_low=low,
        lift_ci95_high=high,
        interval=INTERVAL,
        better=sum(t.p_cand_better > 1 - WORSE_P for t in tasks),
        worse=sorted((t for t in tasks if t.worse), key=lambda t: (t.p_cand_better, t.uid)),
        per_task=tasks,
    )


# -- printing --------------------------------------------------------------------------------------
def _sections(s: SideBySide) -> list[Section]:
    tags = f" ({', '.join(s.labels)})" if s.labels else ""
    summary = Section(
        "Side by side (errors left out of n, as tb sbs)" + tags,
        ("", "base", "cand"),
        [
            ["run", s.base, s.cand],
            ["tasks", str(s.tasks), str(s.tasks)],
            ["attempts (non-error)", str(s.base_attempts), str(s.cand_attempts)],
            ["errors (left out)", str(s.base_errors), str(s.cand_errors)],
            ["pass@1", pct(s.base_pass1), pct(s.cand_pass1)],
        ],
    )
    lift = Section(
        "Lift (cand − base)" + tags,
        ("", "value"),
        [
            ["pass@1 lift", pp(s.lift)],
            ["95% interval", ci(s.lift_ci95_low, s.lift_ci95_high, points=True)],
            ["interval method", s.interval],
            ["tasks with P(cand > base) > 0.95", str(s.better)],
            ["tasks worse (lower mean or P(cand > base) < 0.05)", str(len(s.worse))],
            ["of which P(cand > base) < 0.05", str(sum(t.significant for t in s.worse))],
        ],
    )
    worse = Section(
        "Tasks that got worse (by P(cand > base))" + tags,
        ("uid", "base", "cand", "P(cand > base)", "P < 0.05"),
        [
            [
                t.uid,
                f"{t.base_passes}/{t.base_n}",
                f"{t.cand_passes}/{t.cand_n}",
                f"{t.p_cand_better:.3f}",
                "yes" if t.significant else "no",
            ]
            for t in s.worse
        ],
    )
    return [summary, lift, worse]


def render_markdown(s: SideBySide) -> str:
    """Summary, lift and worse-task tables as GitHub Markdown; ends with a newline."""
    return "\n".join(line for section in _sections(s) for line in section.markdown())


def render_table(s: SideBySide) -> Group:
    """The same tables as rich renderables."""
    parts: list[Table | Text] = [section.rich() for section in _sections(s)]
    return Group(*parts)


def to_json(s: SideBySide) -> str:
    """The whole comparison, every task included, as indented JSON with keys in model order."""
    return json.dumps(s.model_dump(mode="json"), indent=2, ensure_ascii=False)


def summary_line(s: SideBySide) -> str:
    """``sbs: tasks T base x.x% cand y.y% lift +z.z pp [a, b] pp worse W (P<0.05 S)``."""
    significant = sum(t.significant for t in s.worse)
    tags = f" ({', '.join(s.labels)})" if s.labels else ""
    return (
        f"sbs: tasks {s.tasks} base {pct(s.base_pass1)} cand {pct(s.cand_pass1)} lift {pp(s.lift)} "
        f"{ci(s.lift_ci95_low, s.lift_ci95_high, points=True)} worse {len(s.worse)} (P<0.05 {significant})"
        + tags
    )
