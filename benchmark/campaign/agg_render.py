"""Printing an :class:`~benchmark.campaign.agg_types.Aggregate`: rich tables, Markdown, JSON and the
one-line summary. All four are built from the same sections, so they never disagree; nothing here
computes a figure, it only formats one."""

from __future__ import annotations

import dataclasses
import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from benchmark.campaign.agg_types import Aggregate, Interval, KValue, Stats
from benchmark.campaign.tables import Section, ci, pct, pp, usd

__all__ = ["render_markdown", "render_table", "simulated_text", "summary_line", "to_json"]


def _ci(i: Interval) -> str:
    return ci(i.low, i.high)


def _counted(rate: float | None, count: int | None) -> str:
    return "n/a" if rate is None or count is None else f"{pct(rate)} ({count})"


def _k_of_k(s: Stats) -> str:
    p = s.passk
    return "omitted" if p.observed_k_of_k is None else f"{p.observed_k_of_k} ({p.n}/{p.n})"


def _klist(values: list[KValue]) -> str:
    return " · ".join(f"{v.k}: {pct(v.value)}" for v in values) if values else "omitted"


def _sections(agg: Aggregate) -> list[Section]:
    sections = [
        Section(
            "pass@1 per arm (errors count as failures, as tb agg)",
            ("arm", "attempts", "tasks", "errors", "pass@1", "95% CI (Jeffreys)", "observed k/k"),
            [
                [
                    a.label,
                    str(s.attempts),
                    str(s.tasks),
                    str(s.errors),
                    pct(s.pass1),
                    _ci(s.pass1_ci95),
                    _k_of_k(s),
                ]
                for a in agg.arms
                for s in [a.overall]
            ],
        ),
        Section(
            "pass@k and pass^k per arm (mean over tasks)",
            (
                "arm",
                "k",
                "pass@k (unbiased)",
                "pass^k (c/n)^k, as tb agg",
                "pass^k C(c,k)/C(n,k), as τ-bench",
            ),
            _passk_rows(agg),
        ),
        Section(
            "Outcomes per arm (share of attempts; false block: of attempts with an unguarded twin)",
            (
                "arm",
                "attempts",
                "success",
                "wrong commit",
                "held",
                "false block",
                "system errors",
                "approvals / attempt",
                "guard ms / attempt",
            ),
            [_outcome_row(a.label, a.overall) for a in agg.arms],
        ),
        Section(
            "Per domain",
            (
                "arm",
                "domain",
                "attempts",
                "tasks",
                "pass@1",
                "95% CI (Jeffreys)",
                "pass@k (unbiased)",
                "wrong commit",
                "held",
                "false block",
                "system errors",
            ),
            [
                [
                    a.label,
                    d.domain,
                    str(d.attempts),
                    str(d.tasks),
                    pct(d.pass1),
                    _ci(d.pass1_ci95),
                    _klist(d.passk.pass_at_k),
                    *_outcome_row(a.label, d)[3:7],
                ]
                for a in agg.arms
                for d in a.domains
            ],
            text_columns=2,
        ),
        _signature_section(agg),
    ]
    if any(a.overall.open_loop is not None for a in agg.arms):
        sections.append(
            Section(
                "Open loop (replayed trajectories: unguarded judge × guard)",
                ("arm", "caught", "missed", "false block", "clean pass", "catch rate", "false-block rate"),
                [
                    [
                        a.label,
                        str(o.caught),
                        str(o.missed),
                        str(o.false_block),
                        str(o.clean_pass),
                        pct(o.catch_rate),
                        pct(o.false_block_rate),
                    ]
                    for a in agg.arms
                    if (o := a.overall.open_loop) is not None
                ],
            )
        )
    if agg.priced:
        sections.append(
            Section(
                "Cost (agent tokens × price table)",
                ("arm", "total", "per successful attempt", "per dependable task"),
                [
                    [a.label, usd(c.total_usd), usd(c.per_successful_attempt), usd(c.per_dependable_task)]
                    for a in agg.arms
                    if (c := a.overall.cost) is not None
                ],
            )
        )
    if agg.lift:
        sections.append(
            Section(
                "Lift vs off (same uid, repetition pairs)",
                (
                    "arm",
                    "pairs",
                    "pass@1",
                    "off pass@1",
                    "Δ pass@1",
                    "wrong commit",
                    "off wrong commit",
                    "Δ wrong commit",
                ),
                [
                    [
                        x.label,
                        str(x.pairs),
                        pct(x.pass1),
                        pct(x.off_pass1),
                        pp(x.pass1_change),
                        pct(x.wrong_commit_rate),
                        pct(x.off_wrong_commit_rate),
                        pp(x.wrong_commit_change),
                    ]
                    for x in agg.lift
                ],
            )
        )
    if agg.simulated:
        tag = f" — simulated: {simulated_text(agg)}"
        sections = [dataclasses.replace(x, title=x.title + tag) for x in sections]
    return sections


def simulated_text(agg: Aggregate) -> str:
    """The simulated parameters the rows state, joined (``""`` when no row is simulated)."""
    return " | ".join(agg.simulated)


def _passk_rows(agg: Aggregate) -> list[list[str]]:
    rows: list[list[str]] = []
    for a in agg.arms:
        p = a.overall.passk
        if p.omitted:
            rows.append([a.label, "—", "omitted (unequal n)", "omitted (unequal n)", "omitted (unequal n)"])
            continue
        for at, power, hat in zip(p.pass_at_k, p.pass_power_k, p.pass_hat_k, strict=True):
            rows.append([a.label, str(at.k), pct(at.value), pct(power.value), pct(hat.value)])
    return rows


def _outcome_row(label: str, s: Stats) -> list[str]:
    o = s.outcomes
    if o.false_block_rate is None or o.false_block is None:
        false_block = "n/a"
    else:
        false_block = f"{pct(o.false_block_rate)} ({o.false_block} of {o.false_block_knowable})"
    return [
        label,
        str(s.attempts),
        _counted(o.success_rate, o.success),
        _counted(o.wrong_commit_rate, o.wrong_commit),
        _counted(o.held_rate, o.held),
        false_block,
        _counted(o.system_error_rate, o.system_errors),
        "n/a" if s.approvals_per_attempt is None else f"{s.approvals_per_attempt:.2f}",
        "n/a" if s.guard_added_ms_per_attempt is None else f"{s.guard_added_ms_per_attempt:.1f}",
    ]


def _signature_section(agg: Aggregate) -> Section:
    names = sorted({x.signature for a in agg.arms for x in a.overall.signatures})
    rows = []
    for a in agg.arms:
        shares = {x.signature: x for x in a.overall.signatures}
        cells = [f"{pct(x.share)} ({x.count})" if (x := shares.get(n)) else "—" for n in names]
        rows.append([a.label, str(a.overall.failures), *cells])
    return Section(
        "Failure signatures (share of failed attempts that are not errors)", ("arm", "failures", *names), rows
    )


def render_markdown(agg: Aggregate) -> str:
    """The tables as GitHub Markdown (``##`` headings), then the notes; ends with a newline."""
    out = [f"{agg.rows} rows, {len(agg.arms)} arms.", ""]
    if agg.simulated:
        out += [f"**Simulated**, not measured; parameters: {simulated_text(agg)}.", ""]
    for section in _sections(agg):
        out += section.markdown()
    if agg.notes:
        out += ["## Notes", "", *[f"- {note}" for note in agg.notes], ""]
    return "\n".join(out)


def render_table(agg: Aggregate) -> Group:
    """The tables as rich renderables (print with a wide ``Console``), then the notes."""
    parts: list[Table | Text] = []
    if agg.simulated:
        parts.append(Text(f"simulated, not measured; parameters: {simulated_text(agg)}"))
    parts += [section.rich() for section in _sections(agg)]
    parts += [Text(f"note: {note}") for note in agg.notes]
    return Group(*parts)


def to_json(agg: Aggregate) -> str:
    """The whole :class:`Aggregate` as indented JSON; keys always present and in model order."""
    return json.dumps(agg.model_dump(mode="json"), indent=2, ensure_ascii=False)


def summary_line(agg: Aggregate) -> str:
    """``agg: rows N arms A pass@1 <arm>=x.x% ...``, each labelled arm followed by its labels."""
    parts = []
    for a in agg.arms:
        tags = a.label[len(a.name) :]
        parts.append(f"{a.name}={pct(a.overall.pass1)}{tags}")
    line = f"agg: rows {agg.rows} arms {len(agg.arms)} pass@1 " + " ".join(parts)
    return line + (f" (simulated: {simulated_text(agg)})" if agg.simulated else "")
