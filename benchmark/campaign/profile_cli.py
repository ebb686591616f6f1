"""``shadowguard bench calibrate`` and ``bench lift``: simulated profiles, fitted and swept (docs/lift.md).

``calibrate`` fits a profile's propensity distributions to its published figures
(:mod:`benchmark.campaign.calibrate`), writes the fit into the profile file, and prints published vs
reproduced: the fit's expectation and the propensity/outcome model over the tasks × 20 for a check
seed (``--check-seed``; the fit itself is analytic and uses no seed).

``lift`` runs the campaign of a fitted profile over the arms once per value of the swept feedback
parameter, then writes one ``bench report`` per value and a ``simulated`` summary (curves over the
parameter). Every title says "simulated" and states the parameters.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmark.campaign.profiles import (
    FeedbackSpecError,
    Profile,
    ProfileError,
    load_profile,
    profile_path,
    save_profile,
)


def _fail(message: str) -> NoReturn:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def _uids_by_domain(data: str | None) -> dict[str, list[str]]:
    from benchmark.tasks import resolve_data

    out: dict[str, list[str]] = {}
    for task in resolve_data(data).tasks(None):
        out.setdefault(task.domain, []).append(task.id)
    return out


def calibrate_profile(name: str, data: str | None, check_seed: int, write: bool) -> tuple[Profile, Any]:
    """Fit ``name`` (written back when ``write``) and its check figures for ``check_seed``."""
    from benchmark.campaign.calibrate import calibrate, simulate_off

    profile = load_profile(name)
    uids = _uids_by_domain(data)
    fitted = calibrate(profile, {d: len(u) for d, u in uids.items()})
    if write:
        save_profile(fitted, profile_path(name))
    assert fitted.fit is not None
    return fitted, simulate_off(fitted.fit, uids, check_seed)


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` and ``lift`` to ``app`` (the ``bench`` group)."""

    @app.command("calibrate")
    def calibrate_cmd(
        profile: Annotated[str, typer.Option("--profile", help="A profile name or .yaml file.")],
        check_seed: Annotated[
            int, typer.Option("--check-seed", help="Seed of the reproduction check (the fit uses none).")
        ] = 1,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the fit; do not write it.")] = False,
        data: Annotated[str | None, typer.Option("--data", help="Benchmark data (see README).")] = None,
    ) -> None:
        """Fit a profile's propensity distributions to its published figures and write them into it."""
        from benchmark.campaign.calibrate import comparison

        try:
            fitted, check = calibrate_profile(profile, data, check_seed, write=not dry_run)
        except ProfileError as exc:
            _fail(str(exc))
        assert fitted.fit is not None
        fit = fitted.fit
        table = Table(
            title=f"simulated: {fitted.model} ({fitted.name}), fit {fit.method} "
            f"κ={fit.kappa:.4g} λ0={fit.lambda0:.4g} λ1={fit.lambda1:.4g}",
        )
        for column in ("figure", "published", "fit (expected)", f"reproduced (seed {check_seed}, × 20)"):
            table.add_column(column, justify="left" if column == "figure" else "right")
        for row in comparison(fitted, check, f"seed {check_seed}"):
            table.add_row(*row)
        Console(width=140).print(table)
        where = "not written (--dry-run)" if dry_run else f"written to {profile_path(profile)}"
        print(
            f"calibrate: {fitted.name} {fit.method} pass@1 {check.overall:.2f}% (published "
            f"{fitted.published.overall_pass1:.2f}%) pass@20 {check.pass20:.2f}% observed-20/20 "
            f"{check.observed_20:.0f} (published {fitted.published.observed_20}); fit {where}"
        )

    @app.command("lift")
    def lift_cmd(
        profile: Annotated[str, typer.Option("--profile", help="A fitted profile name or .yaml file.")],
        out: Annotated[Path, typer.Option("--out", help="Directory for the results, reports and summary.")],
        sweep: Annotated[
            str,
            typer.Option(
                "--sweep",
                help="KIND=v1,v2,...: the feedback parameter to sweep (feedback = the four guard kinds).",
            ),
        ] = "feedback=0,0.25,0.5,0.75,1",
        arms: Annotated[str, typer.Option("--arms", help="Comma-separated arms.")] = (
            "off,base,validation,retries,checks,approvals,surface,guard,oracle-ceiling"
        ),
        repeat: Annotated[int, typer.Option("--repeat", min=1, help="Attempts per task and arm.")] = 20,
        domain: Annotated[list[str] | None, typer.Option("--domain", help="Domain(s) (repeatable).")] = None,
        tasks: Annotated[str | None, typer.Option("--tasks", help="A glob over the task uids.")] = None,
        workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes.")] = 1,
        seed: Annotated[int, typer.Option("--seed", help="Campaign seed (propensities, plans).")] = 0,
        policy_dir: Annotated[Path, typer.Option("--policy-dir", help="Packs.")] = Path("policies"),
        reviewer: Annotated[
            str, typer.Option("--reviewer", help="Reviewer of held calls.")
        ] = "approve-matching",
        data: Annotated[str | None, typer.Option("--data", help="Benchmark data (see README).")] = None,
    ) -> None:
        """The campaign of a simulated profile over the arms, swept over a feedback parameter."""
        from benchmark.campaign.arms import ArmError, parse_arms
        from benchmark.campaign.lift import LiftSpec, parse_sweep, run_lift
        from benchmark.campaign.surfaces import REVIEWERS
        from benchmark.envs import DOMAINS

        try:
            kind, values = parse_sweep(sweep)
            fitted = load_profile(profile, fitted=True)
            parse_arms(arms)
        except (ProfileError, FeedbackSpecError, ArmError) as exc:
            _fail(str(exc))
        if reviewer not in REVIEWERS:
            _fail(f"--reviewer: unknown policy {reviewer!r}; known: {', '.join(REVIEWERS)}")
        unknown = [d for d in domain or [] if d not in DOMAINS]
        if unknown:
            _fail(f"--domain: unknown domain(s) {', '.join(unknown)}; known: {', '.join(sorted(DOMAINS))}")
        if tasks is not None:
            import fnmatch

            chosen = [
                uid
                for d, uids in _uids_by_domain(data).items()
                if not domain or d in domain
                for uid in uids
                if fnmatch.fnmatchcase(uid, tasks)
            ]
            if not chosen:
                _fail(f"--tasks {tasks!r}: matches no task (in the chosen domains)")
        if out.exists() and any(out.iterdir()):
            _fail(f"{out} exists and is not empty; choose another --out")
        spec = LiftSpec(
            profile=profile,
            kind=kind,
            values=values,
            arms=arms,
            repeat=repeat,
            domains=tuple(domain or ()),
            workers=workers,
            seed=seed,
            policy_dir=str(policy_dir),
            reviewer=reviewer,
            data=data,
            tasks=tasks,
        )
        started = time.perf_counter()
        try:
            summary = run_lift(spec, fitted, out, Console(stderr=True))
        except (ProfileError, ValueError) as exc:
            _fail(str(exc))
        print(f"{summary} ({time.perf_counter() - started:.0f} s)")
        sys.stdout.flush()
