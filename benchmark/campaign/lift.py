"""A simulated lift sweep: one campaign per value of a feedback parameter, and the curves over it.

For each value ``v`` of the swept parameter (``feedback`` sets the four guard kinds — classified hint,
policy violation, commit refused, held — at once; a single kind sets that one), the profile's agent runs
every arm over the tasks × repeats with the same campaign seed, so the propensities, the attempt plans
and the reaction draws are the same at every value: the curves differ only by the parameter. The
``off`` arm meets no guard feedback, so it is the same at every value of a guard kind.

Output in ``DIR``: ``<kind>-<v>.jsonl`` (+ run metadata), ``<kind>-<v>/report.md`` (``bench report``),
``prices.yaml`` (the simulated usage's nominal price), and ``summary.md`` + ``curves.png``: per arm and
value, pass@1, pass@20, observed 20/20, wrong-commit rate, held rate and cost per dependable task, and
the change in pass@1 and wrong commits against ``off``. Every title says "simulated" and states the
parameters.
"""

from __future__ import annotations

import fnmatch
import math
import resource
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from benchmark.campaign.agg_types import Aggregate, ArmStats
from benchmark.campaign.aggregate import aggregate
from benchmark.campaign.arms import ARMS, parse_arms
from benchmark.campaign.base_lift import base_notes
from benchmark.campaign.prices import PriceTable, TokenPrice
from benchmark.campaign.profiles import GUARD_FEEDBACK, FeedbackSpecError, Profile, parse_feedback
from benchmark.campaign.report import write_report
from benchmark.campaign.results import DecodeResult, passed, read_campaign_results
from benchmark.campaign.runner import CampaignConfig, Tally, Worker, run_units
from benchmark.campaign.simulated import PRICE_PER_MTOK, SimulatedAgent


@dataclass(frozen=True)
class LiftSpec:
    profile: str
    kind: str
    values: tuple[float, ...]
    arms: str
    repeat: int
    domains: tuple[str, ...]
    workers: int
    seed: int
    policy_dir: str
    reviewer: str
    data: str | None = None
    tasks: str | None = None
    """A glob over the task uids (None: every task of the domains)."""


def parse_sweep(spec: str) -> tuple[str, tuple[float, ...]]:
    """``feedback=0,0.5,1`` -> (``feedback``, (0, 0.5, 1)); each value validated as a probability."""
    kind, sep, values = spec.partition("=")
    kind = kind.strip()
    if not sep or not values.strip():
        raise FeedbackSpecError(f"--sweep {spec!r}: expected KIND=v1,v2,..., e.g. feedback=0,0.5,1")
    out = []
    for value in values.split(","):
        pairs = parse_feedback(f"{kind}={value.strip()}")
        out.append(pairs[0][1])
    if len(set(out)) != len(out):
        raise FeedbackSpecError(f"--sweep {spec!r}: a value is given twice")
    return kind, tuple(out)


def _changes(kind: str, value: float) -> tuple[tuple[str, float], ...]:
    return parse_feedback(f"{kind}={value:g}")


def _stem(kind: str, value: float) -> str:
    return f"{kind}-{value:g}"


def _run_one(
    config: CampaignConfig,
    workers: int,
    out: Path,
    console: Console,
    glob: str | None,
    reuse: Path | None = None,
) -> Tally:
    """Run ``config`` into ``out``; with ``reuse``, that results file's rows are copied first, as they
    are (the ``off`` rows measured once for the whole sweep)."""
    started, cpu = time.perf_counter(), _cpu_seconds()
    probe = Worker(config)
    try:
        chosen = tuple(probe.tasks)
        if glob is not None:
            chosen = tuple(uid for uid in chosen if fnmatch.fnmatchcase(uid, glob))
            if not chosen:
                raise ValueError(f"--tasks {glob!r}: matches no task")
        config = CampaignConfig(**{**config.__dict__, "task_ids": chosen})
        probe.config = config
        jobs = [(key, config.arms) for key in probe.units()]
        tally = Tally(config.arms)
        total = sum(len(a) for _, a in jobs)
        done = 0
        with out.open("w", encoding="utf-8") as sink:
            if reuse is not None:
                with reuse.open(encoding="utf-8") as source:
                    shutil.copyfileobj(source, sink)
            for rows in run_units(config, jobs, workers, worker=probe if workers == 1 else None):
                for summary in rows:
                    sink.write(summary.line + "\n")
                    tally.add(summary)
                done += len(rows)
                if done % 500 < len(rows):
                    console.print(f"  {out.name}: {done}/{total} pass@1 {tally.brief()}", highlight=False)
        meta = {
            "simulated": probe.agent.label,
            "parameters": probe.agent.profile.parameters()
            if isinstance(probe.agent, SimulatedAgent)
            else None,
            "setup_config": {k: v for k, v in config.__dict__.items() if k != "task_ids"},
            "tasks": len(config.task_ids),
            "attempts": total,
            "run_duration (sec)": round(time.perf_counter() - started, 1),
            "cpu (sec)": round(_cpu_seconds() - cpu, 1),
            "workers": workers,
            "reused": None if reuse is None else f"{reuse.name}: its rows first, copied as they are",
        }
        console.print(
            f"  {out.name}: {total} attempts in {meta['run_duration (sec)']} s "
            f"({meta['cpu (sec)']} s CPU, {workers} worker(s))",
            highlight=False,
        )
        out.with_name(out.stem + "_run_metadata.yaml").write_text(
            yaml.safe_dump(meta, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
    finally:
        probe.close()
    return tally


def _cpu_seconds() -> float:
    """CPU time of this process and its finished worker processes."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Change:
    """An arm's change in pass@1 against ``off`` (percentage points), paired on (task, repetition), with
    a 95% interval clustered by task: a task's repetitions share its propensity, so they are not
    independent draws; the task means are."""

    pp: float
    low: float
    high: float
    tasks: int

    def text(self, unit: str = " pp") -> str:
        return f"{self.pp:+.2f}{unit} [{self.low:+.2f}, {self.high:+.2f}]"

    @property
    def within_noise_of_zero_or_below(self) -> bool:
        return self.low <= 0


def paired_change(rows: Sequence[DecodeResult], arm: str) -> Change | None:
    """``arm``'s :class:`Change` in ``rows`` (None without pairs, or with one task only)."""
    seen: dict[tuple[str, int, str], int] = {}
    for row in rows:
        name = row.metadata.get("arm")
        if name in (arm, "off") and not row.is_system_error:
            seen[(row.uid, int(row.metadata["repetition"]), str(name))] = int(passed(row))
    per_task: dict[str, list[int]] = {}
    for (uid, rep, name), ok in seen.items():
        if name == arm and (uid, rep, "off") in seen:
            per_task.setdefault(uid, []).append(ok - seen[(uid, rep, "off")])
    if len(per_task) < 2:
        return None
    means = np.array([np.mean(v) for v in per_task.values()])
    pairs = sum(len(v) for v in per_task.values())
    mean = sum(sum(v) for v in per_task.values()) / pairs
    half = 1.96 * float(means.std(ddof=1)) / math.sqrt(len(means))
    return Change(100 * mean, 100 * (mean - half), 100 * (mean + half), len(means))


def _figures(arm: ArmStats) -> dict[str, Any]:
    s = arm.overall
    p20 = next((k.value for k in s.passk.pass_at_k if k.k == 20), None)
    cost = s.cost.per_dependable_task if s.cost is not None else None
    return {
        "pass1": 100 * s.pass1,
        "pass20": None if p20 is None else 100 * p20,
        "observed": s.passk.observed_k_of_k,
        "wrong_commit": None if s.outcomes.wrong_commit_rate is None else 100 * s.outcomes.wrong_commit_rate,
        "held": None if s.outcomes.held_rate is None else 100 * s.outcomes.held_rate,
        "cost_dependable": cost,
    }


def _pp(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _fmt(value: Any, pattern: str) -> str:
    return "n/a" if value is None else format(value, pattern)


def _summary(
    profile: Profile,
    spec: LiftSpec,
    results: dict[float, Aggregate],
    changes: dict[float, dict[str, Change | None]],
    arms: list[str],
    out: Path,
) -> str:
    fixed = {k: v for k, v in profile.feedback.model_dump().items() if k not in _swept(spec.kind)}
    title = (
        f"Simulated lift: {profile.model} ({profile.name}), {spec.kind} swept over "
        f"{', '.join(f'{v:g}' for v in spec.values)}"
    )
    lines = [
        f"# {title}",
        "",
        "**Simulated**, not measured: a calibrated profile of the model's *unguarded* behaviour "
        "(docs/architecture.md#three-ways-to-measure); how it reacts to the guard's feedback is an "
        "assumption, swept here.",
        "",
        f"- parameters: fixed feedback {' '.join(f'{k}={v:g}' for k, v in fixed.items())}; "
        f"environment_share={profile.failure_mix.environment_share:g}; fit "
        f"{profile.fit.method if profile.fit else 'none'}",
        f"- campaign: seed {spec.seed}, {spec.repeat} repeats, arms {spec.arms}, reviewer {spec.reviewer}, "
        f"domains {', '.join(spec.domains) or 'all'}" + (f", tasks {spec.tasks}" if spec.tasks else ""),
        "- cost: simulated usage at the published campaign cost (no token was spent)",
        "- Δ pass@1: against `off`, paired on (task, repetition), 95% interval clustered by task; "
        f"from feedback: the arm's pass@1 minus its own at {spec.kind}={spec.values[0]:g}",
        "",
        "![simulated: pass@1 and wrong-commit rate over the feedback parameter](curves.png)",
        "",
    ]
    if _off_once(spec, arms):
        lines[-4:-4] = [
            f"- `off`: measured once (at {spec.kind}={spec.values[0]:g}; `{OFF_FILE}`) and its rows copied "
            "into every value's results file: it meets no guard feedback, so the swept parameter cannot "
            "change it",
        ]
    base = [f"- {spec.kind}={v:g}: {note}" for v in spec.values for note in base_notes(results[v].lift)]
    if base:
        lines += [f"## {title}: the base every guarded arm shares", "", *base, ""]
    lines += _deaf_section(profile, spec, results, changes, arms, title)
    lines += _per_arm(spec, results, changes, arms, title)
    stated = (
        f"{title}\nfixed: {' '.join(f'{k}={v:g}' for k, v in fixed.items())}; "
        f"environment_share={profile.failure_mix.environment_share:g}; seed {spec.seed}, "
        f"{spec.repeat} repeats, reviewer {spec.reviewer}"
    )
    _curves(results, arms, spec, stated).savefig(out / "curves.png")
    (out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return "\n".join(lines)


def _per_arm(
    spec: LiftSpec,
    results: dict[float, Aggregate],
    changes: dict[float, dict[str, Change | None]],
    arms: list[str],
    title: str,
) -> list[str]:
    header = (
        f"| arm | {spec.kind} | pass@1 % | Δ pass@1 pp [95% CI] | from feedback pp | pass@20 % | "
        f"observed {spec.repeat}/{spec.repeat} | wrong commits % | Δ wrong pp | held % | "
        "cost / dependable task $ |"
    )
    lines = [f"## {title}: per arm", "", header, "|" + "---|" * 11]
    for arm in arms:
        base = _figures(next(a for a in results[spec.values[0]].arms if a.arm == arm))["pass1"]
        for value in spec.values:
            agg = results[value]
            stats = next(a for a in agg.arms if a.arm == arm)
            f = _figures(stats)
            lift = next((row for row in agg.lift if row.arm == arm), None)
            change = changes[value].get(arm)
            dw = _pp(lift.wrong_commit_change if lift is not None else None)
            cells = [
                stats.label,
                f"{value:g}",
                f"{f['pass1']:.2f}",
                "—" if change is None else change.text(""),
                f"{f['pass1'] - base:+.2f}",
                _fmt(f["pass20"], ".2f"),
                _fmt(f["observed"], "d"),
                _fmt(f["wrong_commit"], ".2f"),
                _fmt(dw, "+.2f"),
                _fmt(f["held"], ".2f"),
                _fmt(f["cost_dependable"], ".2f"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _deaf_section(
    profile: Profile,
    spec: LiftSpec,
    results: dict[float, Aggregate],
    changes: dict[float, dict[str, Change | None]],
    arms: list[str],
    title: str,
) -> list[str]:
    """Where a swept value leaves every feedback probability at 0: each arm's lift there, and whether it
    is ≤ 0 within noise. Only a lever that acts without the agent (retries) can lift pass@1 there."""
    deaf = next(
        (
            v
            for v in spec.values
            if not any(profile.with_feedback(**dict(_changes(spec.kind, v))).feedback.model_dump().values())
        ),
        None,
    )
    if deaf is None:
        return []
    lines = [
        f"## {title}: every feedback probability at 0 ({spec.kind}={deaf:g})",
        "",
        "The agent ignores everything it is told. A lever that needs a reaction cannot lift pass@1 here; "
        "it can only stop wrong work (wrong commits fall, held rises). The retries lever re-sends an "
        "upstream fault on the agent's behalf and needs no reaction, so an arm with it keeps that lift.",
        "",
        "| arm | retries lever | Δ pass@1 pp [95% CI] | ≤ 0 within noise | Δ wrong commits pp |",
        "|---|---|---|---|---|",
    ]
    agg = results[deaf]
    for arm in arms:
        change = changes[deaf].get(arm)
        if arm == "off" or change is None:
            continue
        lift = next((row for row in agg.lift if row.arm == arm), None)
        dw = _pp(lift.wrong_commit_change if lift is not None else None)
        label = next(a.label for a in agg.arms if a.arm == arm)
        verdict = "yes" if change.within_noise_of_zero_or_below else "no"
        lines.append(
            f"| {label} | {'yes' if ARMS[arm].has('retries') else 'no'} | {change.text('')}"
            f" | {verdict} | {_fmt(dw, '+.2f')} |"
        )
    return [*lines, ""]


def _swept(kind: str) -> tuple[str, ...]:
    return GUARD_FEEDBACK if kind == "feedback" else (kind,)


def _curves(results: dict[float, Aggregate], arms: list[str], spec: LiftSpec, title: str) -> Figure:
    fig = Figure(figsize=(10, 5.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    xs = list(spec.values)
    for arm in arms:
        pass1, wrong = [], []
        for value in xs:
            stats = next(a for a in results[value].arms if a.arm == arm)
            f = _figures(stats)
            pass1.append(f["pass1"])
            wrong.append(f["wrong_commit"] if f["wrong_commit"] is not None else float("nan"))
        label = next(a for a in results[xs[0]].arms if a.arm == arm).label
        left.plot(xs, pass1, marker="o", label=label)
        right.plot(xs, wrong, marker="o", label=label)
    left.set(xlabel=spec.kind, ylabel="pass@1 (%)", title="pass@1 (simulated)")
    right.set(xlabel=spec.kind, ylabel="wrong-commit rate (%)", title="wrong commits (simulated)")
    left.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


OFF_FILE = "off.jsonl"
"""The ``off`` arm's rows, measured once per sweep and copied into every value's results file."""


def _off_once(spec: LiftSpec, arms: Sequence[str]) -> bool:
    """Whether ``off`` is measured once for the sweep: it is an arm, there is more than one value, and
    the swept kind is one only the guard gives (``raw_error`` reaches ``off``: it is then run per value).
    ``off`` meets no guard feedback, so its rows at any such value are the same (same seed, same plans,
    same draws); measuring it once saves its share of every further value."""
    return "off" in arms and len(arms) > 1 and len(spec.values) > 1 and "raw_error" not in _swept(spec.kind)


def _config(spec: LiftSpec, arms: tuple[str, ...], value: float) -> CampaignConfig:
    return CampaignConfig(
        agent="simulated",
        arms=arms,
        repeat=spec.repeat,
        domains=spec.domains,
        seed=spec.seed,
        policy_dir=spec.policy_dir,
        reviewer=spec.reviewer,  # type: ignore[arg-type]
        data=spec.data,
        profile=spec.profile,
        feedback=_changes(spec.kind, value),
    )


def run_lift(spec: LiftSpec, profile: Profile, out: Path, console: Console) -> str:
    """Run the sweep into ``out`` and return the last line."""
    arms = [a.name for a in parse_arms(spec.arms)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "prices.yaml").write_text(
        yaml.safe_dump({profile.agent_name: {"input": 0.0, "output": PRICE_PER_MTOK}}), encoding="utf-8"
    )
    once = _off_once(spec, arms)
    if once:
        console.print(f"simulated {profile.name}: off (once: it meets no guard feedback)", highlight=False)
        _run_one(_config(spec, ("off",), spec.values[0]), spec.workers, out / OFF_FILE, console, spec.tasks)
    for value in spec.values:
        stem = _stem(spec.kind, value)
        console.print(f"simulated {profile.name}: {stem}", highlight=False)
        config = _config(spec, tuple(a for a in arms if not (once and a == "off")), value)
        reuse = out / OFF_FILE if once else None
        _run_one(config, spec.workers, out / f"{stem}.jsonl", console, spec.tasks, reuse)
    return summarize(spec, profile, out)


def summarize(spec: LiftSpec, profile: Profile, out: Path) -> str:
    """Write the reports, ``summary.md`` and ``curves.png`` of the sweep's results files in ``out``;
    return the last line."""
    arms = [a.name for a in parse_arms(spec.arms)]
    prices = PriceTable({profile.agent_name: TokenPrice(input=0.0, output=PRICE_PER_MTOK)})
    results: dict[float, Aggregate] = {}
    changes: dict[float, dict[str, Change | None]] = {}
    for value in spec.values:
        stem = _stem(spec.kind, value)
        rows = read_campaign_results([out / f"{stem}.jsonl"])
        write_report(rows, out / stem, prices)
        results[value] = aggregate(rows, prices)
        changes[value] = {arm: paired_change(rows, arm) for arm in arms if arm != "off"}
        del rows
    _summary(profile, spec, results, changes, arms, out)

    def lift_of(value: float) -> str:
        change = changes[value].get("guard")
        return "n/a" if change is None else change.text()

    return (
        f"lift (simulated {profile.name}, {spec.kind} {spec.values[0]:g}..{spec.values[-1]:g}): guard pass@1 "
        f"change {lift_of(spec.values[0])} .. {lift_of(spec.values[-1])}; summary {out / 'summary.md'}"
    )
