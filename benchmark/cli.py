"""``shadowguard bench ...`` and ``shadowguard env ...`` commands."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from sqlalchemy.exc import SQLAlchemyError

from benchmark.conformance import ConformanceRun, DomainResult, select_tasks
from benchmark.envs import DOMAINS, Database, EnvError, load_domain
from benchmark.options import DataOpt, DbOpt, DomainOpt, domains_of
from benchmark.tables import ResultTable
from benchmark.tasks import resolve_data

bench_app = typer.Typer(help="Benchmark ThinkingBox-Bench environments and the guard.", no_args_is_help=True)
env_app = typer.Typer(help="Serve a benchmark domain as an MCP tool server.", no_args_is_help=True)


@bench_app.command("conformance")
def conformance(
    domain: DomainOpt = None,
    data: DataOpt = None,
    db: DbOpt = None,
    tool: Annotated[list[str] | None, typer.Option("--tool", help="Only check these tools.")] = None,
    show: Annotated[int, typer.Option(help="Mismatches to print per domain.")] = 20,
) -> None:
    """Check init hashes, golden replays, golden responses and all probe vectors against the reference."""
    console = Console()
    domains = domains_of(domain)
    try:
        bench = resolve_data(data)
        database = Database(db)
        grouped = select_tasks(bench, domains)
    except (EnvError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    results: list[DomainResult] = []
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bars = {d: progress.add_task(d, total=len(ts)) for d, ts in grouped.items()}
        runner = ConformanceRun(
            bench,
            database,
            set(tool) if tool else None,
            on_progress=lambda d, n: progress.advance(bars[d], n),
            max_mismatches=max(show, 1),
        )
        for d, ts in grouped.items():
            results.append(runner.run_domain(d, ts))
    database.dispose()
    elapsed = time.perf_counter() - started
    table = ResultTable(
        f"conformance ({database.dialect})",
        ("domain", "init", "golden", "responses", "probes", "s", "tasks/s"),  # init/golden: x of tasks
    )
    for r in results:
        table.add_row(
            r.domain,
            f"{r.init_ok}/{r.tasks}",
            f"{r.golden_ok}/{r.tasks}",
            f"{r.responses_ok}/{r.responses}",
            f"{r.probes_ok}/{r.probes}",
            f"{r.seconds:.1f}",
            f"{r.tasks / r.seconds:.0f}" if r.seconds else "-",
        )
    table.print(console)
    for r in results:
        for m in r.mismatches[:show]:
            console.print(m.render(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"total {elapsed:.1f} s", highlight=False)
    n = sum(r.tasks for r in results)
    totals = (
        sum(r.init_ok for r in results),
        sum(r.golden_ok for r in results),
        sum(r.responses_ok for r in results),
        sum(r.responses for r in results),
        sum(r.probes_ok for r in results),
        sum(r.probes for r in results),
    )
    print(
        f"conformance: init {totals[0]}/{n} golden {totals[1]}/{n} responses {totals[2]}/{totals[3]} "
        f"probes {totals[4]}/{totals[5]}"
    )
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


@env_app.command("serve")
def serve(
    domain: Annotated[str, typer.Option("--domain", help=f"Domain to serve ({', '.join(sorted(DOMAINS))}).")],
    data: DataOpt = None,
    db: DbOpt = None,
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve stdin/stdout instead of HTTP.")] = False,
    host: Annotated[str, typer.Option(help="HTTP bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port (0: any free port; the URL goes to stderr).")] = 8000,
    idle_timeout: Annotated[
        float, typer.Option(help="Close a session's environment after this many idle seconds (0: never).")
    ] = 1800.0,
    max_sessions: Annotated[int, typer.Option(help="Most environment sessions open at once.", min=1)] = 1000,
    tx_lease: Annotated[
        float,
        typer.Option(help="Roll back a guard's transaction after this many seconds without its requests."),
    ] = 60.0,
) -> None:
    """Serve one domain's tools as an MCP server (stdio, or HTTP at /mcp); see docs/env-server.md."""
    from benchmark.envs.server import EnvServer, announce_stderr

    console = Console(stderr=True)
    (name,) = domains_of([domain])
    try:
        bench = resolve_data(data)
        database = Database(db)
        env_server = EnvServer(
            load_domain(name, bench.bundle),
            database,
            bench,
            idle_timeout=idle_timeout or None,
            max_sessions=max_sessions,
            tx_lease_s=tx_lease,
        )
        env_server.sessions.open_environment().close()  # fail now, not on the first call, on a bad --db
    except (EnvError, ValueError, SQLAlchemyError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    try:
        if stdio:
            anyio.run(env_server.serve_stdio)
        else:
            env_server.serve_http(host, port, announce=announce_stderr)
    finally:
        database.dispose()


def _advance(progress: Progress, bar: TaskID) -> Callable[[object], None]:
    return lambda _report: progress.advance(bar)


@bench_app.command("replay")
def replay_command(
    through: Annotated[
        str, typer.Option("--through", help="guard: through a GuardSession; off: straight to the tools.")
    ],
    domain: DomainOpt = None,
    data: DataOpt = None,
    db: DbOpt = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Policy pack: its folder or YAML (default: empty pack)."),
    ] = None,
    policy_dir: Annotated[
        Path | None,
        typer.Option(
            "--policy-dir",
            help="Each domain's own pack, DIR/<domain>/policy.yaml (a domain without one: the empty pack).",
        ),
    ] = None,
    show: Annotated[int, typer.Option(help="Tasks with problems to list.")] = 10,
    faults: Annotated[
        str | None,
        typer.Option(
            "--faults",
            help="Inject upstream faults, seeded per task: kind=rate pairs, e.g. transient=0.2,429=0.05 "
            "(kinds: transient, timeout, drop, refused, 5xx, 503, 429, slow; see docs/errors.md).",
        ),
    ] = None,
    fault_seed: Annotated[int, typer.Option("--fault-seed", help="Seed of the injected faults.")] = 0,
) -> None:
    """Replay every task's golden calls and commit; count tasks that end in the reference golden state."""
    from benchmark.replay import Through, replay
    from guard.faults import FaultPlan, FaultSpecError
    from guard.policy import EMPTY, PolicyError

    console = Console()
    if through not in ("guard", "off"):
        raise typer.BadParameter("use guard or off", param_hint="--through")
    mode: Through = "guard" if through == "guard" else "off"
    try:
        plan = FaultPlan.parse(faults, seed=fault_seed) if faults is not None else None
    except FaultSpecError as exc:
        raise typer.BadParameter(str(exc), param_hint="--faults") from exc
    domains = domains_of(domain)
    try:
        bench = resolve_data(data)
        database = Database(db)
        grouped = select_tasks(bench, domains)
        packs = {d: EMPTY for d in domains}
        if policy is not None and policy_dir is not None:
            raise typer.BadParameter("give --policy or --policy-dir, not both", param_hint="--policy-dir")
        if policy_dir is not None:
            from benchmark.campaign.runner import domain_pack
            from benchmark.envs import load_domain

            for d in domains:
                packs[d] = domain_pack(policy_dir, load_domain(d, bench.bundle))
        if policy is not None:
            from benchmark.envs import load_domain
            from benchmark.guarded import load_domain_policy

            for d in domains:
                packs[d] = load_domain_policy(policy, load_domain(d, bench.bundle))
    except (EnvError, ValueError, PolicyError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    totals = {"n": 0, "golden": 0, "rolled": 0, "violations": 0, "faults": 0, "retries": 0, "failed": 0}
    totals["accounted"] = 0
    problems = []
    title = f"golden replay through {through} ({database.dialect})"
    columns = ["domain", "tasks", "committed golden", "rolled back", "violations", "delta = golden_delta"]
    if plan is not None:
        columns += ["faults", "retries", "failed calls"] + (["changes accounted"] if mode == "guard" else [])
    table = ResultTable(title + (f", faults {plan.describe()} seed {fault_seed}" if plan else ""), columns)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        for d, ts in grouped.items():
            bar = progress.add_task(d, total=len(ts))
            result = replay(
                bench, database, d, ts, mode, packs[d], on_task=_advance(progress, bar), faults=plan
            )
            deltas = [t.delta_matches for t in result.tasks if t.delta_matches is not None]
            row = [
                d,
                str(len(ts)),
                f"{result.committed_golden}/{len(ts)}",
                str(result.rolled_back),
                str(result.violations),
                f"{sum(deltas)}/{len(deltas)}" if deltas else "-",
            ]
            if plan is not None:
                row += [str(result.faults), str(result.retries), str(result.failed_calls)]
                row += [f"{result.changes_accounted}/{len(ts)}"] if mode == "guard" else []
            table.add_row(*row)
            totals["faults"] += result.faults
            totals["retries"] += result.retries
            totals["failed"] += result.failed_calls
            totals["accounted"] += result.changes_accounted
            totals["n"] += len(ts)
            totals["golden"] += result.committed_golden
            totals["rolled"] += sum(1 for t in result.tasks if t.rolled_back or not t.committed)
            totals["violations"] += result.violations
            problems += [t for t in result.tasks if t.messages or not t.golden]
    database.dispose()
    table.print(console)
    for t in problems[:show]:
        console.print(f"{t.task_id}: committed={t.committed} golden={t.golden}", highlight=False)
        for m in t.messages[:5]:
            console.print(f"    {m}", markup=False, highlight=False)
    n = totals["n"]
    line = (
        f"replay: committed-golden {totals['golden']}/{n} rolled-back {totals['rolled']}/{n} "
        f"violations {totals['violations']}"
    )
    if plan is not None:
        line += f" faults {totals['faults']} retries {totals['retries']} failed-calls {totals['failed']}"
        line += f" changes-accounted {totals['accounted']}/{n}" if mode == "guard" else ""
    print(line)


def _mount_campaign() -> None:
    """``bench run`` (benchmark.campaign.cli), ``bench agg|sbs|report`` (benchmark.campaign.analysis_cli),
    ``bench faults`` (corpus_cli), ``bench calibrate|lift`` (profile_cli), ``bench chaos`` (chaos_cli)."""
    from benchmark import chaos_cli
    from benchmark.campaign import analysis_cli, cli, corpus_cli, profile_cli
    from benchmark.llm import cli as llm_cli

    chaos_cli.register(bench_app)
    cli.register(bench_app)
    analysis_cli.register(bench_app)
    corpus_cli.register(bench_app)
    profile_cli.register(bench_app)
    llm_cli.register(bench_app)


_mount_campaign()


def _mount_openenv() -> None:
    """``env openenv`` (benchmark.openenv_env.cli; needs the ``openenv`` extra only when run)."""
    from benchmark.openenv_env.cli import openenv_cmd

    env_app.command("openenv")(openenv_cmd)


_mount_openenv()


from benchmark.perf_cli import perf_app  # noqa: E402 - it takes the options defined above

bench_app.add_typer(perf_app, name="perf")
