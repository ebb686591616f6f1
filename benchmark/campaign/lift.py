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
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from benchmark.campaign.agg_types import Aggregate, ArmStats
from benchmark.campaign.aggregate import aggregate
from benchmark.campaign.arms import parse_arms
from benchmark.campaign.prices import PriceTable, TokenPrice
from benchmark.campaign.profiles import GUARD_FEEDBACK, FeedbackSpecError, Profile, parse_feedback
from benchmark.campaign.report import write_report
from benchmark.campaign.results import read_campaign_results
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


def _run_one(config: CampaignConfig, workers: int, out: Path, console: Console, glob: str | None) -> Tally:
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
    profile: Profile, spec: LiftSpec, results: dict[float, Aggregate], arms: list[str], out: Path
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
        "(../shared/docs/LIFT.md §2B); how it reacts to the guard's feedback is an assumption, swept here.",
        "",
        f"- parameters: fixed feedback {' '.join(f'{k}={v:g}' for k, v in fixed.items())}; "
        f"environment_share={profile.failure_mix.environment_share:g}; fit "
        f"{profile.fit.method if profile.fit else 'none'}",
        f"- campaign: seed {spec.seed}, {spec.repeat} repeats, arms {spec.arms}, reviewer {spec.reviewer}, "
        f"domains {', '.join(spec.domains) or 'all'}" + (f", tasks {spec.tasks}" if spec.tasks else ""),
        "- cost: simulated usage at the published campaign cost (no token was spent)",
        "",
        "![simulated: pass@1 and wrong-commit rate over the feedback parameter](curves.png)",
        "",
    ]
    header = (
        f"| arm | {spec.kind} | pass@1 % | Δ pass@1 pp | pass@20 % | observed {spec.repeat}/{spec.repeat} | "
        "wrong commits % | Δ wrong pp | held % | cost / dependable task $ |"
    )
    lines += [f"## {title}: per arm", "", header, "|" + "---|" * 10]
    for arm in arms:
        for value in spec.values:
            agg = results[value]
            stats = next(a for a in agg.arms if a.arm == arm)
            f = _figures(stats)
            lift = next((row for row in agg.lift if row.arm == arm), None)
            d1 = _pp(lift.pass1_change if lift is not None else None)
            dw = _pp(lift.wrong_commit_change if lift is not None else None)
            cells = [
                stats.label,
                f"{value:g}",
                f"{f['pass1']:.2f}",
                _fmt(d1, "+.2f"),
                _fmt(f["pass20"], ".2f"),
                _fmt(f["observed"], "d"),
                _fmt(f["wrong_commit"], ".2f"),
                _fmt(dw, "+.2f"),
                _fmt(f["held"], ".2f"),
                _fmt(f["cost_dependable"], ".2f"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    _curves(results, arms, spec, title).savefig(out / "curves.png")
    (out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    return "\n".join(lines)


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


def run_lift(spec: LiftSpec, profile: Profile, out: Path, console: Console) -> str:
    """Run the sweep into ``out`` and return the last line."""
    arms = [a.name for a in parse_arms(spec.arms)]
    out.mkdir(parents=True, exist_ok=True)
    prices = PriceTable({profile.agent_name: TokenPrice(input=0.0, output=PRICE_PER_MTOK)})
    (out / "prices.yaml").write_text(
        yaml.safe_dump({profile.agent_name: {"input": 0.0, "output": PRICE_PER_MTOK}}), encoding="utf-8"
    )
    results: dict[float, Aggregate] = {}
    for value in spec.values:
        stem = _stem(spec.kind, value)
        console.print(f"simulated {profile.name}: {stem}", highlight=False)
        config = CampaignConfig(
            agent="simulated",
            arms=tuple(arms),
            repeat=spec.repeat,
            domains=spec.domains,
            seed=spec.seed,
            policy_dir=spec.policy_dir,
            reviewer=spec.reviewer,  # type: ignore[arg-type]
            data=spec.data,
            profile=spec.profile,
            feedback=_changes(spec.kind, value),
        )
        path = out / f"{stem}.jsonl"
        _run_one(config, spec.workers, path, console, spec.tasks)
        rows = read_campaign_results([path])
        write_report(rows, out / stem, prices)
        results[value] = aggregate(rows, prices)
    _summary(profile, spec, results, arms, out)
    last = results[spec.values[-1]]
    first = results[spec.values[0]]

    def lift_of(agg: Aggregate) -> str:
        row = next((r for r in agg.lift if r.arm == "guard"), None)
        return "n/a" if row is None or row.pass1_change is None else f"{100 * row.pass1_change:+.2f} pp"

    return (
        f"lift (simulated {profile.name}, {spec.kind} {spec.values[0]:g}..{spec.values[-1]:g}): guard pass@1 "
        f"change {lift_of(first)} .. {lift_of(last)}; summary {out / 'summary.md'}"
    )
