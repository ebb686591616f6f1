"""``shadowguard bench chaos ...``: reliability trials of the proxy (benchmark.chaos)."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

chaos_app = typer.Typer(
    help="Reliability trials of `shadowguard serve` on 127.0.0.1. With no subcommand: every trial kind "
    "(kill -9 of the proxy and of the upstream, the approval store going away, concurrent sessions, "
    "hostile input), one summary line. Subcommands run one kind."
)

_R = TypeVar("_R")


def _out_option(text: str) -> Any:
    """The ``--out FOLDER`` option every trial kind has; ``text`` (its help) says what is kept there."""
    return typer.Option("--out", resolve_path=True, help=text)


OutOpt = Annotated[Path | None, _out_option("Keep the servers' logs and databases in this folder.")]


def _or_exit(call: Callable[[], _R], errors: tuple[type[Exception], ...] = (Exception,)) -> _R:
    """``call()``; an error of ``errors`` means the trials could not run: printed as ``error: ...`` on
    stderr and exit 1 (chained, not swallowed). Other errors propagate."""
    try:
        return call()
    except errors as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _in_folder(
    run: Callable[[Path], _R], out: Path | None, errors: tuple[type[Exception], ...] = (Exception,)
) -> _R:
    """``run`` in ``out``, or in a temporary folder removed after it; errors as :func:`_or_exit`."""
    with tempfile.TemporaryDirectory(prefix="shadowguard-chaos-") as tmp:
        return _or_exit(lambda: run(out or Path(tmp)), errors)


def _finish(lines: Iterable[str], failed: bool) -> None:
    """Print the result ``lines`` (the chaos line last); exit 1 when the trials ``failed``."""
    for line in lines:
        typer.echo(line)
    if failed:
        raise typer.Exit(1)


@chaos_app.callback(invoke_without_command=True)
def suite(
    ctx: typer.Context,
    quick: Annotated[
        bool, typer.Option("--quick", help="The small suite (under 3 minutes; the default tests run it).")
    ] = False,
    upstream: Annotated[
        str, typer.Option(help="The kill trials' upstream database: sqlite or postgresql.")
    ] = "sqlite",
    out: Annotated[
        Path | None, _out_option("Keep the report (report.json, report.md), logs and databases here.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of kill moments, jitter and generated input.")] = 0,
    pg_url: Annotated[
        str,
        typer.Option(
            help="PostgreSQL for the postgresql upstream and approval store (a schema or tables of its own)."
        ),
    ] = "postgresql://127.0.0.1:5432/test",
) -> None:
    """Every trial kind; the last line is `chaos: partial-commits P lost-commits L leaks K double-writes D
    5xx E hangs H (N trials)`. Exit 1 when a counter is above 0 or a trial found another problem."""
    if ctx.invoked_subcommand is not None:
        return
    from benchmark.chaos_stack import TrialRecord
    from benchmark.chaos_suite import run_suite

    def progress(record: TrialRecord) -> None:
        figures = {
            k: v for k, v in record.details.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        typer.echo(
            f"{record.kind} {record.trial}: {record.counters.total()} counted, "
            f"{len(record.problems)} problem(s), {record.wall_s:.0f} s {figures if figures else ''}".rstrip()
        )
        for problem in record.problems:
            typer.echo(f"  {problem[:400]}")

    result = _in_folder(
        lambda folder: run_suite(
            quick=quick, out=folder, upstream=upstream, seed=seed, pg_url=pg_url, progress=progress
        ),
        out,
    )
    report = [f"report: {out / 'report.md'}, {out / 'report.json'}"] if out else []
    _finish([*report, f"wall: {result.wall_s:.0f} s", result.line()], bool(result.failed()))


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

    result = _or_exit(
        lambda: run_load(sessions, rounds, retries=retries, out=out, writers=writers), (ChaosError,)
    )
    by_class = ", ".join(f"{k} {v}" for k, v in sorted(result.errors.items()))
    errors = [f"failed attempts by class: {by_class}"] if result.errors else []
    _finish([*errors, result.line()], bool(result.failed))


@chaos_app.command("wide-payload")
def wide_payload(
    keys: Annotated[int, typer.Option(min=1, help="Unexpected argument keys in the call.")] = 16_000,
    repeat: Annotated[int, typer.Option(min=1, help="Calls measured (after one warm-up).")] = 10,
    out: OutOpt = None,
) -> None:
    """The issue's hostile tools/call (16,000 unexpected keys, ~250 KB) sent REPEAT times; the proxy's
    CPU time per call. Exit 1 unless every call was refused as invalid_arguments."""
    from benchmark.chaos import ChaosError, run_wide_payload

    result = _or_exit(lambda: run_wide_payload(keys=keys, repeat=repeat, out=out), (ChaosError,))
    typer.echo(result.line())
    if result.refused != result.calls or math.isnan(result.cpu_ms_per_call):
        typer.echo(f"last answer: {result.answer}", err=True)
        raise typer.Exit(1)


def _kills(
    trials: int, sessions: int, upstream: str, out: Path | None, seed: int, window: tuple[float, float]
) -> None:
    from benchmark.chaos_kills import KillTrialError, TrialResult, run_kills

    def progress(trial: TrialResult) -> None:
        typer.echo(
            f"trial {trial.trial}: kill after {trial.kill_after_s:.2f} s, rounds committed "
            f"{trial.rounds_committed}, open at kill {trial.rounds_open_at_kill}, refused as lost "
            f"{trial.refused_as_lost}, interrupted mid-commit {trial.interrupted}, "
            f"problems {len(trial.problems)}, {trial.wall_s:.1f} s"
        )
        for problem in trial.problems:
            typer.echo(f"  {problem}")

    result = _in_folder(
        lambda folder: run_kills(
            trials,
            sessions,
            out=folder,
            upstream=upstream,
            seed=seed,
            progress=progress,
            kill_window_s=window,
        ),
        out,
        (KillTrialError,),
    )
    report = [f"report: {out / 'kills.jsonl'}"] if out else []
    _finish([*report, f"wall: {result.wall_s:.0f} s", result.line()], bool(result.problems()))


Upstream = Annotated[str, typer.Option(help="The upstream's database: sqlite or postgresql.")]
Seed = Annotated[int, typer.Option(help="Seed of the kill moments.")]


@chaos_app.command("kills")
def kills(
    trials: Annotated[int, typer.Option(min=1, help="Kill -9 trials.")] = 50,
    sessions: Annotated[int, typer.Option(min=1, help="Concurrent sessions writing in each trial.")] = 20,
    upstream: Upstream = "sqlite",
    seed: Seed = 0,
    out: Annotated[
        Path | None, _out_option("Keep the report (kills.jsonl), logs and databases here.")
    ] = None,
    kill_max_s: Annotated[
        float, typer.Option(min=0.0, help="The kill comes at a random moment up to this many seconds in.")
    ] = 3.0,
) -> None:
    """TRIALS times: SESSIONS sessions write and commit their own notes through `shadowguard serve`,
    which is killed with SIGKILL at a random moment and started again; the upstream file must hold
    every acknowledged commit, no half commit, no uncommitted row, nothing twice, and a commit under a
    killed session must be refused as changes_lost. Last line: the chaos counters. Exit 1 on any."""
    _kills(trials, sessions, upstream, out, seed, (min(0.2, kill_max_s), kill_max_s))


def _one_kind(run: Callable[[Path], list[Any]], out: Path | None) -> None:
    """Run one trial kind in ``out`` (or a temporary folder), print each trial and the chaos line."""
    from benchmark.chaos_kills import Counters

    records = _in_folder(run, out)
    total = Counters()
    for record in records:
        total.add(record.counters)
        typer.echo(json.dumps(record.record(), ensure_ascii=False))
    _finish([total.line(len(records))], bool(total.total() or any(r.problems for r in records)))


@chaos_app.command("upstream-kill")
def upstream_kill(
    trials: Annotated[int, typer.Option(min=1, help="Trials.")] = 1, out: OutOpt = None
) -> None:
    """Kill -9 of the upstream mid-session: the agent gets a clear error, nothing is committed."""
    from benchmark.chaos_faults import run_upstream_kill

    _one_kind(lambda d: [run_upstream_kill(n, d / f"upstream-kill-{n}") for n in range(trials)], out)


@chaos_app.command("approval-store")
def approval_store(
    store: Annotated[
        str, typer.Option(help="redis (its own server) or postgresql (through a relay).")
    ] = "redis",
    pg_url: Annotated[
        str, typer.Option(help="PostgreSQL of the postgresql store.")
    ] = "postgresql://127.0.0.1:5432/test",
    out: OutOpt = None,
) -> None:
    """The approval store going away and coming back; an expired approval never runs."""
    from benchmark.chaos_faults import run_store_outage

    _one_kind(lambda d: [run_store_outage(0, d / f"store-{store}", store, pg_url=pg_url)], out)


@chaos_app.command("isolation")
def isolation(
    sessions: Annotated[int, typer.Option(min=2, help="Concurrent sessions.")] = 200, out: OutOpt = None
) -> None:
    """SESSIONS sessions write, read each other's rows and commit: no uncommitted row seen, none blocked
    beyond the bound; throughput and p99 in the record."""
    from benchmark.chaos_isolation import run_isolation

    _one_kind(lambda d: [run_isolation(0, sessions, d / "isolation")], out)


@chaos_app.command("hostile")
def hostile(
    examples: Annotated[int, typer.Option(min=1, help="hypothesis-generated MCP messages.")] = 1000,
    api_examples: Annotated[int, typer.Option(min=1, help="schemathesis examples per API operation.")] = 30,
    out: OutOpt = None,
) -> None:
    """Hostile input on /mcp and the REST APIs (hand-written, hypothesis, schemathesis)."""
    from benchmark.chaos_hostile import run_hostile

    _one_kind(lambda d: [run_hostile(0, d / "hostile", examples=examples, api_examples=api_examples)], out)


def register(bench_app: typer.Typer) -> None:
    bench_app.add_typer(chaos_app, name="chaos")
