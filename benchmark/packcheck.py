"""The benchmark side of ``shadowguard check``: a pack checked against a benchmark domain (``--domain``)
and its table-driven tests run there (``--test``). proxy/cli.py reaches it only through
``_mount_benchmark`` (docs/adr/001-cli-composition.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from benchmark.envs import DOMAINS, Database, EnvError, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.packtests import PackTestError, load_tests, run_case, tests_path, uncovered
from benchmark.tasks import resolve_data
from guard.policy import PolicyPack

__all__ = ["load_against_domain", "run_pack_tests"]


def run_pack_tests(
    pack: Path, policy: PolicyPack, domain: str, data: str | None, *, require_coverage: bool
) -> None:
    loaded = load_domain(domain, resolve_data(data).bundle)
    path = tests_path(pack)
    try:
        cases = load_tests(path, loaded)
    except PackTestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    database = Database()
    failed = 0
    try:
        for case in cases:
            result = run_case(case, loaded, database, policy)
            if not result.passed:
                failed += 1
                typer.echo(f"FAIL {case.name}")
                for problem in result.problems:
                    typer.echo(f"    {problem}")
    finally:
        database.dispose()
    missing = uncovered(policy, cases)
    if missing:
        typer.echo(f"rules no case expects ({len(missing)}): {', '.join(missing)}")
    typer.echo(
        f"check --test: {path}: cases {len(cases)} passed {len(cases) - failed} failed {failed}; "
        f"rules covered {len(policy.checks) + len(policy.model.approvals) - len(missing)}/"
        f"{len(policy.checks) + len(policy.model.approvals)}"
    )
    if failed or (require_coverage and missing):
        raise typer.Exit(1)


def load_against_domain(pack: Path, domain: str, data: str | None) -> PolicyPack:
    if domain not in DOMAINS:
        raise typer.BadParameter(
            f"unknown domain {domain!r}; implemented: {', '.join(sorted(DOMAINS))}", param_hint="--domain"
        )
    try:
        loaded = load_domain(domain, resolve_data(data).bundle)
    except (EnvError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return load_domain_policy(pack, loaded)
