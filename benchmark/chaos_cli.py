"""``shadowguard bench chaos ...``: reliability trials of the proxy (benchmark.chaos)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

chaos_app = typer.Typer(
    help="Reliability trials of `shadowguard serve` on 127.0.0.1: load, hostile input.", no_args_is_help=True
)

OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Keep the servers' logs and databases in this folder.")
]


@chaos_app.command("load")
def load(
    sessions: Annotated[int, typer.Option(min=1, help="Concurrent guard sessions.")] = 100,
    rounds: Annotated[int, typer.Option(min=1, help="Committed writes per session.")] = 2,
    retries: Annotated[int, typer.Option(min=0, help="Sends of a write after a retryable error.")] = 20,
    writers: Annotated[
        int | None,
        typer.Option(min=1, help="The upstream's writer slots (config `writers`; default: no limit)."),
    ] = 1,
    out: OutOpt = None,
) -> None:
    """SESSIONS concurrent sessions write their own note and commit, ROUNDS times, through one SQLite
    upstream; a retryable error is retried. Exit 1 if a write never succeeded or the data is wrong."""
    from benchmark.chaos import ChaosError, run_load

    try:
        result = run_load(sessions, rounds, retries=retries, out=out, writers=writers)
    except ChaosError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if result.errors:
        typer.echo(
            "failed attempts by class: " + ", ".join(f"{k} {v}" for k, v in sorted(result.errors.items()))
        )
    typer.echo(result.line())
    if result.failed:
        raise typer.Exit(1)


@chaos_app.command("wide-payload")
def wide_payload(
    keys: Annotated[int, typer.Option(min=1, help="Unexpected argument keys in the call.")] = 16_000,
    repeat: Annotated[int, typer.Option(min=1, help="Calls measured (after one warm-up).")] = 10,
    out: OutOpt = None,
) -> None:
    """The issue's hostile tools/call (16,000 unexpected keys, ~250 KB) sent REPEAT times; the proxy's
    CPU time per call. Exit 1 unless every call was refused as invalid_arguments."""
    from benchmark.chaos import ChaosError, run_wide_payload

    try:
        result = run_wide_payload(keys=keys, repeat=repeat, out=out)
    except ChaosError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(result.line())
    if result.refused != result.calls or math.isnan(result.cpu_ms_per_call):
        typer.echo(f"last answer: {result.answer}", err=True)
        raise typer.Exit(1)


def register(bench_app: typer.Typer) -> None:
    bench_app.add_typer(chaos_app, name="chaos")
