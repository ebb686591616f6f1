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
from rich.table import Table as RichTable
from sqlalchemy.exc import SQLAlchemyError

from benchmark.conformance import ConformanceRun, DomainResult, select_tasks
from benchmark.envs import DOMAINS, Database, EnvError, load_domain
from benchmark.tables import ResultTable
from benchmark.tasks import BenchData, Task, resolve_data

bench_app = typer.Typer(help="Benchmark ThinkingBox-Bench environments and the guard.", no_args_is_help=True)
env_app = typer.Typer(help="Serve a benchmark domain as an MCP tool server.", no_args_is_help=True)

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


def _domains(requested: list[str] | None) -> list[str]:
    if not requested:
        return list(DOMAINS)
    unknown = [d for d in requested if d not in DOMAINS]
    if unknown:
        raise typer.BadParameter(
            f"unknown domain(s) {unknown}; implemented: {sorted(DOMAINS)}", param_hint="--domain"
        )
    return requested


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
    domains = _domains(domain)
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
    (name,) = _domains([domain])
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


@bench_app.command("perf")
def perf(
    domain: DomainOpt = None,
    data: DataOpt = None,
    db: DbOpt = None,
    repeat: Annotated[int, typer.Option(min=1, help="Measured passes (after one warm-up pass).")] = 3,
    guard_core: Annotated[
        bool,
        typer.Option(
            "--guard-core",
            help="Time each golden call directly and through the guard core (savepoint, change set, "
            "checks) in the same run, instead of the grading step.",
        ),
    ] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N tasks of each domain.")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="With --guard-core: the pack whose checks are timed (default: policies/<domain>/policy.yaml "
            "under the current directory, where it exists).",
        ),
    ] = None,
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy",
            help="Time tools/call round trips of concurrent MCP clients straight to an upstream (the notes "
            "fixture over HTTP) and through `shadowguard serve`, instead of the grading step.",
        ),
    ] = False,
    clients: Annotated[
        list[int] | None,
        typer.Option(
            "--clients", min=1, help="With --proxy: concurrent clients (repeatable; default 1, 8, 32)."
        ),
    ] = None,
    calls: Annotated[int, typer.Option("--calls", min=1, help="With --proxy: calls per client.")] = 50,
    peers: Annotated[
        bool,
        typer.Option(
            "--peers/--no-peers",
            help="With --proxy: also measure the peer proxies (mcp-proxy, mcp-airlock, FastMCP's proxy), "
            "each installed from the package index into its own virtual environment under --peers-dir.",
        ),
    ] = True,
    peers_dir: Annotated[
        Path | None,
        typer.Option(
            "--peers-dir",
            help="With --proxy: where the peers' virtual environments are kept and reused "
            "(default: $XDG_CACHE_HOME/shadowguard/peers, or ~/.cache/shadowguard/peers).",
        ),
    ] = None,
    require_peers: Annotated[
        bool,
        typer.Option("--require-peers", help="With --proxy: exit 1 when a peer could not be measured."),
    ] = False,
    round_trips: Annotated[
        bool,
        typer.Option(
            "--round-trips",
            help="With --proxy: also measure shadowguard in front of a participant without the piggyback "
            "feature (one round trip per savepoint, change set and release: the cost piggybacking saves).",
        ),
    ] = False,
) -> None:
    """Time the grading step per task (init + golden replay + hash) beside the reference's figure."""
    from benchmark.perf import REFERENCE_INIT_MS, REFERENCE_MS_PER_TASK, measure_envs

    console = Console()
    if proxy:
        if guard_core or policy is not None:
            raise typer.BadParameter("--proxy does not take --guard-core or --policy", param_hint="--proxy")
        _perf_proxy(
            console,
            clients,
            calls,
            peers=peers,
            peers_dir=peers_dir,
            require_peers=require_peers,
            round_trips=round_trips,
        )
        return
    domains = _domains(domain)
    try:
        bench = resolve_data(data)
        database = Database(db)
        grouped = {d: ts[:limit] for d, ts in select_tasks(bench, domains).items()}
    except (EnvError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if guard_core:
        _perf_guard_core(console, bench, database, grouped, policy, repeat)
        return
    if policy is not None:
        raise typer.BadParameter("only used with --guard-core", param_hint="--policy")
    table = RichTable(title=f"environment grading step per task ({database.dialect}, median of {repeat})")
    for col in ("domain", "tasks", "init ms", "replay ms", "hash ms", "total ms", "tasks/s", "× reference"):
        table.add_column(col)
    results = []
    for d, ts in grouped.items():
        r = measure_envs(bench, database, d, ts, repeat)
        results.append(r)
        table.add_row(
            d,
            str(r.tasks),
            f"{r.init_ms:.2f}",
            f"{r.replay_ms:.2f}",
            f"{r.hash_ms:.2f}",
            f"{r.total_ms:.2f}",
            f"{r.tasks_per_s:.0f}",
            f"{r.ratio_to_reference:.2f}",
        )
    database.dispose()
    console.print(table)
    lo, hi = REFERENCE_MS_PER_TASK
    console.print(
        f"reference (data README): init ≈ {REFERENCE_INIT_MS} ms, grading step ≈ {lo}–{hi} ms per task"
    )
    total = sum(r.total_ms * r.tasks for r in results) / max(sum(r.tasks for r in results), 1)
    print(f"perf: {total:.2f} ms/task, {1000 / total:.0f} tasks/s, {total / ((lo + hi) / 2):.2f}x reference")


def _perf_guard_core(
    console: Console,
    bench: BenchData,
    database: Database,
    grouped: dict[str, list[Task]],
    policy: str | None,
    repeat: int,
) -> None:
    from benchmark.guarded import load_domain_policy
    from benchmark.perf import GuardCorePerf, measure_guard_core
    from guard.policy import PolicyError, PolicyPack

    packs: dict[str, tuple[PolicyPack, str] | None] = {}
    try:
        for d in grouped:
            path = Path(policy) if policy is not None else Path("policies") / d / "policy.yaml"
            if policy is None and not path.is_file():
                packs[d] = None
                continue
            packs[d] = (load_domain_policy(path, load_domain(d, bench.bundle)), str(path))
    except (EnvError, PolicyError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    results: list[GuardCorePerf] = []
    with Progress(
        TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        for d, ts in grouped.items():
            bar = progress.add_task(f"{d}: {len(ts)} tasks × {repeat + 1} passes")
            chosen = packs[d]
            results.append(
                measure_guard_core(
                    bench,
                    database,
                    d,
                    ts,
                    chosen[0] if chosen else None,
                    repeat,
                    pack_name=chosen[1] if chosen else None,
                )
            )
            progress.remove_task(bar)
    database.dispose()

    table = RichTable(
        title=f"guard core per call ({database.dialect}, µs, median over calls of the median of {repeat} "
        "passes; +µs and × against the same call made directly)"
    )
    table.add_column("domain", no_wrap=True)
    for col in ("calls", "n", "direct", "+shadow", "×", "+guard", "×", "+pack", "×", "checks", "session"):
        table.add_column(col, justify="right")
    for r in results:
        for kind in ("write", "read"):
            k = r.write if kind == "write" else r.read
            if not k.calls:
                continue
            row = [r.domain if kind == "write" else "", kind, str(k.calls), f"{k.us['direct']:.0f}"]
            for variant in ("shadow", "guard", "pack"):
                if variant in k.overhead_us:
                    row += [f"{k.overhead_us[variant]:+.0f}", f"{k.ratio[variant]:.2f}"]
                else:
                    row += ["-", "-"]
            row += [
                str(r.checks) if r.pack and kind == "write" else "",
                f"{r.session_us:.0f}" if kind == "write" else "",
            ]
            table.add_row(*row)
    Console(width=max(console.width, 132)).print(table)
    console.print(
        "shadow: SqlBackend savepoint + the call + changes() + release. guard: GuardSession.call with the "
        "empty pack. pack: GuardSession.call with the domain's pack. session: GuardSession begin "
        "(capture triggers installed) + commit (removed), µs per task.",
        highlight=False,
    )
    for r in results:
        if r.pack:
            console.print(
                f"{r.domain}: pack {r.pack} ({r.checks} checks); golden calls not allowed by it: "
                f"{r.pack_not_allowed}",
                highlight=False,
            )
    for r in results:
        w = r.write
        if not w.calls:
            continue
        pack = f"; with pack +{w.overhead_us['pack']:.0f} µs ×{w.ratio['pack']:.2f}" if "pack" in w.us else ""
        print(
            f"perf guard-core {r.domain} ({r.dialect}): write call {w.us['direct']:.0f} µs direct, "
            f"+{w.overhead_us['guard']:.0f} µs ×{w.ratio['guard']:.2f} through the guard{pack}; "
            f"session {r.session_us:.0f} µs"
        )


def _perf_proxy(
    console: Console,
    clients: list[int] | None,
    calls: int,
    *,
    peers: bool,
    peers_dir: Path | None,
    require_peers: bool,
    round_trips: bool = False,
) -> None:
    from benchmark import perf as bench_perf

    counts = sorted(set(clients)) if clients else list(bench_perf.PROXY_CLIENTS)
    with Progress(
        TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        bar = progress.add_task("starting the notes upstream and shadowguard serve")
        try:
            result = bench_perf.measure_proxy(
                counts,
                calls,
                peers=bench_perf.PEERS if peers else (),
                peers_dir=peers_dir,
                round_trips=round_trips,
                on_progress=lambda what: progress.update(bar, description=what),
            )
        except bench_perf.ProxyBenchError as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from exc

    def ratio(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    versions = {p.name: p.version for p in result.peers}

    def label(row: bench_perf.ProxyPerfRow) -> str:
        name = {"direct": "direct", "proxy": "shadowguard", "proxy-rt": "shadowguard, no piggyback"}.get(
            row.path
        )
        if name is None:
            name = f"{row.path} {versions.get(row.path) or ''}".strip()
        return name if row.mode == bench_perf.MODERN else f"{name} ({row.mode})"

    table = RichTable(
        title=f"tools/call round trips over HTTP, 127.0.0.1 ({calls} calls per client, 2026-07-28 era "
        "unless marked; × against direct at the same concurrency and era)"
    )
    table.add_column("path", no_wrap=True)
    for col in (
        "kind",
        "clients",
        "ok",
        "failed",
        "median ms",
        "p99 ms",
        "calls/s",
        "× median",
        "× p99",
        "× calls/s",
        "+median ms",
    ):
        table.add_column(col, justify="right")
    for r in result.rows:
        table.add_row(
            label(r),
            r.kind,
            str(r.clients),
            str(r.calls),
            str(r.failed),
            f"{r.median_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{r.calls_per_s:.0f}",
            ratio(r.median_ratio),
            ratio(r.p99_ratio),
            ratio(r.throughput_ratio),
            f"{r.overhead_ms:+.2f}" if r.overhead_ms is not None else "-",
        )
    Console(width=max(console.width, 150)).print(table)
    console.print(
        "direct: the notes fixture (tests/fixtures/notes_server.py, transactional) over streamable HTTP. "
        "shadowguard: `shadowguard serve` relaying to it, with its policy pack. "
        "read: get_note (passthrough). write: put_note (guarded: shadow transaction, savepoint, "
        "change set, checks); through the proxy each write is committed before the next "
        "(untimed, but counted in calls/s). failed: tool or JSON-RPC "
        "errors (the fixture's SQLite file takes one writer at a time), left out of the latencies. "
        "+median ms: median minus direct's.",
        highlight=False,
    )
    if not peers:
        names = ", ".join(p.name for p in bench_perf.PEERS)
        console.print(f"Peer proxies ({names}) were not measured (--no-peers).", highlight=False)
    for status in result.peers:
        if status.not_measured is None:
            console.print(f"peer {status.name} {status.version}: {status.how}.", highlight=False)
        else:
            console.print(f"peer {status.name}: not measured: {status.not_measured}", highlight=False)

    parts = []
    for kind in ("read", "write"):
        for n in (counts[0], counts[-1]):
            d, p = result.row("direct", kind, n), result.row("proxy", kind, n)
            parts.append(
                f"{kind} ×{n} {p.median_ms:.1f} ms vs {d.median_ms:.1f} ms ({ratio(p.median_ratio)}x)"
            )
            if counts[0] == counts[-1]:
                break
    print("perf proxy: median through shadowguard vs direct: " + "; ".join(parts))
    for n in counts:
        overheads = [
            f"{label(r)} {r.overhead_ms:+.2f} ms"
            for r in result.rows
            if r.kind == "read" and r.clients == n and r.overhead_ms is not None
        ]
        print(f"perf proxy: read ×{n} median overhead vs direct: " + ", ".join(overheads))
    missing = [s.name for s in result.peers if s.not_measured is not None]
    if require_peers and missing:
        console.print(f"[red]error:[/red] not measured: {', '.join(missing)} (--require-peers)")
        raise typer.Exit(1)


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
    domains = _domains(domain)
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
