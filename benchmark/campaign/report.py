"""``bench report``: a Markdown report with PNG figures, all drawn from one :func:`aggregate` result.

:func:`write_report` writes into ``out_dir``:

- ``report.md`` — the figures, then :func:`~benchmark.campaign.agg_render.render_markdown`'s tables and
  notes. The Markdown holds no number that ``aggregate()`` did not compute.
- ``outcomes.png`` (the headline) — stacked outcome shares per arm: success / wrong commit / held /
  false block / system error (plain ``tb`` arms: passed / failed / error).
- ``pass_at_k.png`` — pass@k (unbiased) per arm, and pass^k with both estimators (solid: ``(c/n)^k``
  as ``tb agg``; dashed: ``C(c,k)/C(n,k)`` as τ-bench).
- ``domains.png`` — pass@1 per domain, one bar per arm, with the 95% Jeffreys interval.
- ``lift.png`` — each arm's pass@1 and wrong-commit change against ``off``, in percentage points.

Arm names in every figure carry their labels (``(upper bound)``, ``(simulated)``). Figures are drawn with
matplotlib's object API on the Agg canvas (no pyplot, so no GUI backend and no global figure state);
each is ``FIGSIZE`` inches at ``DPI``. Files are first written to a temporary directory beside
``out_dir`` and then moved into place, so a failure leaves ``out_dir`` as it was.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmark.campaign.agg_render import simulated_text
from benchmark.campaign.agg_types import Aggregate, ArmStats
from benchmark.campaign.aggregate import aggregate, render_markdown
from benchmark.campaign.prices import PriceTable
from benchmark.campaign.results import DecodeResult

__all__ = ["DPI", "FIGSIZE", "FIGURES", "write_report"]

FIGSIZE = (10.0, 5.5)
DPI = 100
FIGURES = ("outcomes.png", "pass_at_k.png", "domains.png", "lift.png")

_OUTCOME_COLOURS = {
    "success": "#2e7d32",
    "wrong commit": "#c62828",
    "held": "#f9a825",
    "false block": "#6a1b9a",
    "system error": "#757575",
    "failed (no outcome)": "#ef9a9a",
}


def _figure() -> Figure:
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _empty(ax: Axes, message: str) -> None:
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)


def _outcomes(agg: Aggregate) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    labels = [a.label for a in agg.arms]
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for part, colour in _OUTCOME_COLOURS.items():
        shares = np.array([_outcome_share(a, part) for a in agg.arms])
        if not shares.any():
            continue
        ax.barh(y, shares * 100, left=left * 100, color=colour, label=part)
        left += shares
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of attempts (%)")
    ax.set_title("Outcomes per arm")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.06), ncols=6, frameon=False, fontsize="small")
    return fig


def _outcome_share(a: ArmStats, part: str) -> float:
    o = a.overall.outcomes
    n = a.overall.attempts
    if part == "success":
        return o.success_rate
    if part == "system error":
        return o.system_error_rate
    if not o.known:
        return (n - o.success - o.system_errors) / n if part == "failed (no outcome)" else 0.0
    counts = {"wrong commit": o.wrong_commit, "held": o.held, "false block": o.false_block}
    return (counts.get(part) or 0) / n


def _pass_at_k(agg: Aggregate) -> Figure:
    fig = _figure()
    at, power = fig.subplots(1, 2)
    shown = [a for a in agg.arms if not a.overall.passk.omitted]
    if not shown:
        _empty(at, "pass@k omitted for every arm: tasks have unequal attempt counts")
        _empty(power, "pass^k omitted for every arm")
        return fig
    for a in shown:
        p = a.overall.passk
        (line,) = at.plot([v.k for v in p.pass_at_k], [100 * v.value for v in p.pass_at_k], marker="o")
        colour = line.get_color()
        at.plot([], [], color=colour, label=a.label)
        power.plot(
            [v.k for v in p.pass_power_k], [100 * v.value for v in p.pass_power_k], marker="o", color=colour
        )
        power.plot(
            [v.k for v in p.pass_hat_k],
            [100 * v.value for v in p.pass_hat_k],
            marker="s",
            ls="--",
            color=colour,
        )
    power.plot([], [], color="black", label="(c/n)^k, as tb agg")
    power.plot([], [], color="black", ls="--", label="C(c,k)/C(n,k), as τ-bench")
    ks = sorted({v.k for a in shown for v in a.overall.passk.pass_at_k})
    for ax, title in ((at, "pass@k (unbiased)"), (power, "pass^k")):
        ax.set_xticks(ks)
        ax.set_title(title)
        ax.set_xlabel("k")
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    at.legend(fontsize="small")
    power.legend(fontsize="small")
    omitted = [a.label for a in agg.arms if a.overall.passk.omitted]
    if omitted:
        fig.suptitle("omitted (unequal n): " + ", ".join(omitted), fontsize="small")
    return fig


def _domains(agg: Aggregate) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    domains = sorted({d.domain for a in agg.arms for d in a.domains})
    x = np.arange(len(domains))
    width = 0.8 / max(len(agg.arms), 1)
    for i, a in enumerate(agg.arms):
        by = {d.domain: d for d in a.domains}
        values, low, high = [], [], []
        for name in domains:
            d = by.get(name)
            values.append(100 * d.pass1 if d else 0.0)
            # max(0, …): the equal-tailed interval excludes p̂ at c = 0 and c = n (no end-point fix).
            low.append(100 * max(d.pass1 - d.pass1_ci95.low, 0.0) if d else 0.0)
            high.append(100 * max(d.pass1_ci95.high - d.pass1, 0.0) if d else 0.0)
        ax.bar(
            x + (i - (len(agg.arms) - 1) / 2) * width,
            values,
            width,
            yerr=[low, high],
            capsize=2,
            label=a.label,
        )
    ax.set_xticks(x, domains, rotation=15, ha="right")
    ax.set_ylim(0, 100)
    ax.set_ylabel("pass@1 (%), 95% Jeffreys interval")
    ax.set_title("pass@1 per domain")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return fig


def _lift(agg: Aggregate) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    if not agg.lift:
        _empty(ax, "no `off` arm in the results: lift is not computed")
        return fig
    labels = [x.label for x in agg.lift]
    y = np.arange(len(labels))
    for offset, attr, colour, name in (
        (-0.2, "pass1_change", "#2e7d32", "Δ pass@1"),
        (0.2, "wrong_commit_change", "#c62828", "Δ wrong-commit rate"),
    ):
        known = [(i, getattr(x, attr)) for i, x in enumerate(agg.lift) if getattr(x, attr) is not None]
        ax.barh([i + offset for i, _ in known], [100 * v for _, v in known], 0.4, color=colour, label=name)
        for i, x in enumerate(agg.lift):
            if getattr(x, attr) is None:
                ax.text(0, i + offset, " n/a", va="center", fontsize="small")
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("change vs off (percentage points), same (uid, repetition) pairs")
    ax.set_title("Lift per lever")
    ax.legend(fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    return fig


_DRAW = {"outcomes.png": _outcomes, "pass_at_k.png": _pass_at_k, "domains.png": _domains, "lift.png": _lift}


def _simulated_title(fig: Figure, agg: Aggregate) -> Figure:
    """``fig`` with "simulated" and the parameters in its title
    (docs/architecture.md#rules-that-keep-the-numbers-honest)."""
    if agg.simulated:
        prior = fig.get_suptitle()
        text = f"simulated: {simulated_text(agg)}" + (f"\n{prior}" if prior else "")
        fig.suptitle(text, fontsize="small", wrap=True)
    return fig


def _markdown(agg: Aggregate) -> str:
    labels = []
    if any(a.upper_bound for a in agg.arms):
        labels.append(
            "- **(upper bound)**: the arm reads the answer key (`oracle-ceiling`); its figures bound what a "
            "guard could reach and are not the product's."
        )
    if any(a.simulated for a in agg.arms):
        labels.append(
            "- **(simulated)**: a simulated agent profile, not a model; its figures depend on the profile's "
            "feedback parameters:"
        )
        labels += [f"  - `{p}`" for p in agg.simulated or ["(the rows state no parameters)"]]
    simulated = any(a.simulated for a in agg.arms)
    out = [
        "# Lift campaign report" + (" (simulated)" if simulated else ""),
        "",
        "Every figure and table below comes from one `bench agg` aggregate of these results.",
        "",
        *labels,
        *([""] if labels else []),
        "## Outcomes",
        "",
        "![Outcomes per arm](outcomes.png)",
        "",
        "## pass@k and pass^k",
        "",
        "![pass@k and pass^k per arm](pass_at_k.png)",
        "",
        "## pass@1 per domain",
        "",
        "![pass@1 per domain and arm](domains.png)",
        "",
        "## Lift per lever",
        "",
        "![Change in pass@1 and wrong-commit rate vs off](lift.png)",
        "",
        render_markdown(agg),
    ]
    return "\n".join(out)


def write_report(rows: Iterable[DecodeResult], out_dir: Path, prices: PriceTable | None = None) -> Path:
    """Write ``report.md`` and the figures of ``rows`` into ``out_dir`` (created if missing; files of
    the same names replaced) and return the path of ``report.md``.

    Everything is computed and drawn in a temporary directory beside ``out_dir`` first; on any error it
    is removed, ``out_dir`` is left untouched and the error propagates.
    """
    rows = list(rows)
    agg = aggregate(rows, prices)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}-{uuid.uuid4().hex[:12]}"
    staging.mkdir()  # beside out_dir (same file system: the moves are renames), with the umask's mode
    try:
        for name, draw in _DRAW.items():
            _simulated_title(draw(agg), agg).savefig(staging / name)
        (staging / "report.md").write_text(_markdown(agg), encoding="utf-8")
        if not out_dir.exists():
            staging.rename(out_dir)
        else:
            for path in staging.iterdir():
                os.replace(path, out_dir / path.name)
            staging.rmdir()
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out_dir / "report.md"
