"""Options the ``bench`` and ``env`` commands share (benchmark.cli, benchmark.perf_cli)."""

from __future__ import annotations

from typing import Annotated

import typer

from benchmark.envs import DOMAINS

__all__ = ["DataOpt", "DbOpt", "DomainOpt", "domains_of"]

DataOpt = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="Data export or thinkingbox-data checkout (default: $SHADOWGUARD_BENCH_DATA, "
        "else ../shared/thinkingbox-bench).",
    ),
]
DbOpt = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL for environment state (default: SQLite in memory).")
]
DomainOpt = Annotated[
    list[str] | None, typer.Option("--domain", help="Domain(s) to run (repeatable; default: all landed).")
]


def domains_of(requested: list[str] | None) -> list[str]:
    """The domains a ``--domain`` option names (all landed ones when none), or a usage error."""
    if not requested:
        return list(DOMAINS)
    unknown = [d for d in requested if d not in DOMAINS]
    if unknown:
        raise typer.BadParameter(
            f"unknown domain(s) {unknown}; implemented: {sorted(DOMAINS)}", param_hint="--domain"
        )
    return requested
