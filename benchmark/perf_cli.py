"""``shadowguard bench perf envs|guard-core|proxy``: the performance benchmarks (benchmark.perf,
benchmark.perf_proxy), each printed as a table or, with ``-f json``, as one JSON document."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from benchmark.conformance import select_tasks
from benchmark.envs import Database, EnvError, load_domain
from benchmark.options import DataOpt, DbOpt, DomainOpt, domains_of
from benchmark.tasks import BenchData, Task, resolve_data

if TYPE_CHECKING:
    from benchmark.perf_proxy import ProxyPerf

perf_app = typer.Typer(
    help="Performance: the grading step (envs), the guard core per call (guard-core), the proxy's "
    "round trips beside its peers (proxy), the instructions a call costs (instructions).",
    no_args_is_help=True,
)


class Format(StrEnum):
    table = "table"
    json = "json"


FormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help="table (for people) or json (one document on stdout).")
]
RepeatOpt = Annotated[int, typer.Option(min=1, help="Measured passes (after one warm-up pass).")]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", min=1, help="Only the first N tasks of each domain.")
]


def _tasks(
    console: Console, domain: list[str] | None, data: str | None, db: str | None, limit: int | None
) -> tuple[BenchData, Database, dict[str, list[Task]]]:
    domains = domains_of(domain)
    try:
        bench = resolve_data(data)
        database = Database(db)
        grouped = {d: ts[:limit] for d, ts in select_tasks(bench, domains).items()}
    except (EnvError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    return bench, database, grouped


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, allow_nan=False))


@perf_app.command("envs")
def envs(
    domain: DomainOpt = None,
    data: DataOpt = None,
    db: DbOpt = None,
    repeat: RepeatOpt = 3,
    limit: LimitOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Time the grading step per task (init + golden replay + hash) beside the reference's figure."""
    from benchmark.perf import REFERENCE_INIT_MS, REFERENCE_MS_PER_TASK, measure_envs

    console = Console(stderr=fmt is Format.json)
    bench, database, grouped = _tasks(console, domain, data, db, limit)
    results = [measure_envs(bench, database, d, ts, repeat) for d, ts in grouped.items()]
    database.dispose()
    lo, hi = REFERENCE_MS_PER_TASK
    total = sum(r.total_ms * r.tasks for r in results) / max(sum(r.tasks for r in results), 1)
    if fmt is Format.json:
        rows = [
            {**dataclasses.asdict(r), "total_ms": r.total_ms, "ratio_to_reference": r.ratio_to_reference}
            for r in results
        ]
        _print_json(
            {
                "dialect": database.dialect,
                "repeat": repeat,
                "rows": rows,
                "ms_per_task": total,
                "reference_ms_per_task": [lo, hi],
                "reference_init_ms": REFERENCE_INIT_MS,
            }
        )
        return
    table = RichTable(title=f"environment grading step per task ({database.dialect}, median of {repeat})")
    for col in ("domain", "tasks", "init ms", "replay ms", "hash ms", "total ms", "tasks/s", "× reference"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.domain,
            str(r.tasks),
            f"{r.init_ms:.2f}",
            f"{r.replay_ms:.2f}",
            f"{r.hash_ms:.2f}",
            f"{r.total_ms:.2f}",
            f"{r.tasks_per_s:.0f}",
            f"{r.ratio_to_reference:.2f}",
        )
    console.print(table)
    console.print(
        f"reference (data README): init ≈ {REFERENCE_INIT_MS} ms, grading step ≈ {lo}–{hi} ms per task"
    )
    print(f"perf: {total:.2f} ms/task, {1000 / total:.0f} tasks/s, {total / ((lo + hi) / 2):.2f}x reference")


@perf_app.command("guard-core")
def guard_core(
    domain: DomainOpt = None,
    data: DataOpt = None,
    db: DbOpt = None,
    repeat: RepeatOpt = 3,
    limit: LimitOpt = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="The pack whose checks are timed (default: policies/<domain>/policy.yaml under the "
            "current directory, where it exists).",
        ),
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Time each golden call directly and through the guard core (savepoint, change set, checks) in the
    same run."""
    console = Console(stderr=fmt is Format.json)
    bench, database, grouped = _tasks(console, domain, data, db, limit)
    _perf_guard_core(console, bench, database, grouped, policy, repeat, fmt)


@perf_app.command("proxy")
def proxy(
    clients: Annotated[
        list[int] | None,
        typer.Option("--clients", min=1, help="Concurrent clients (repeatable; default 1, 8, 32)."),
    ] = None,
    calls: Annotated[int, typer.Option("--calls", min=1, help="Calls per client.")] = 50,
    peers: Annotated[
        bool,
        typer.Option(
            "--peers/--no-peers",
            help="Also measure the peer proxies (mcp-proxy, mcp-airlock, FastMCP's proxy), each "
            "installed from the package index into its own virtual environment under --peers-dir.",
        ),
    ] = True,
    peers_dir: Annotated[
        Path | None,
        typer.Option(
            "--peers-dir",
            help="Where the peers' virtual environments are kept and reused "
            "(default: $XDG_CACHE_HOME/shadowguard/peers, or ~/.cache/shadowguard/peers).",
        ),
    ] = None,
    require_peers: Annotated[
        bool, typer.Option("--require-peers", help="Exit 1 when a peer could not be measured.")
    ] = False,
    round_trips: Annotated[
        bool,
        typer.Option(
            "--round-trips",
            help="Also measure shadowguard in front of a participant without the piggyback feature (one "
            "round trip per savepoint, change set and release: the cost piggybacking saves).",
        ),
    ] = False,
    floor: Annotated[
        bool,
        typer.Option(
            "--floor",
            help="Also measure reads through a bare HTTP relay built of shadowguard's transport parts "
            "with no MCP or guard work (benchmark/fixtures/bare_relay.py): what the hop itself costs.",
        ),
    ] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", help="read and/or write (repeatable; default both)."),
    ] = None,
    per_commit: Annotated[
        int | None,
        typer.Option(
            "--writes-per-commit",
            min=1,
            help="Guarded writes a session makes before each commit (default: 10 at one client, 1 with "
            "several: the fixture's SQLite file takes one writer at a time).",
        ),
    ] = None,
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            min=1,
            help="Rounds each configuration's calls are split over, the paths' order rotated each round "
            "(so that the host's drift weighs on every path alike).",
        ),
    ] = 4,
    fmt: FormatOpt = Format.table,
) -> None:
    """Time tools/call round trips of concurrent MCP clients straight to an upstream (the notes fixture
    over HTTP), through `shadowguard serve` and through the peer proxies, in one run."""
    _perf_proxy(
        Console(stderr=fmt is Format.json),
        clients,
        calls,
        peers=peers,
        peers_dir=peers_dir,
        require_peers=require_peers,
        round_trips=round_trips,
        floor=floor,
        kinds=kind,
        per_commit=per_commit,
        rounds=rounds,
        fmt=fmt,
    )


@perf_app.command("instructions")
def instructions(
    calls: Annotated[int, typer.Option("--calls", min=1, help="Counted calls per path and kind.")] = 300,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", help="read and/or write (repeatable; default both)."),
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Count the CPU instructions a call costs the proxy and the upstream (valgrind's callgrind): direct,
    through `shadowguard serve` and through the bare relay (the floor). Unlike time, the counts do not
    move with the host's speed or load."""
    from benchmark.perf_instructions import INSTRUCTIONS_FIELDS, measure_instructions
    from benchmark.perf_proxy import ProxyBenchError

    console = Console(stderr=fmt is Format.json)
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("perf instructions", total=None)
        try:
            rows = measure_instructions(
                calls,
                kinds=kind or ("read", "write"),
                on_progress=lambda text: progress.update(task, description=f"perf instructions: {text}"),
            )
        except ProxyBenchError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
    if fmt is Format.json:
        _print_json({"rows": [{f: getattr(r, f) for f in INSTRUCTIONS_FIELDS} for r in rows]})
        return
    table = RichTable(title=f"Instructions per call (callgrind, one client, {calls} counted calls)")
    for header in ("path", "kind", "proxy", "upstream"):
        table.add_column(header, justify="left" if header in ("path", "kind") else "right")
    for r in rows:
        proxy = (
            "" if r.proxy_instructions_per_call is None else f"{r.proxy_instructions_per_call / 1e6:.3f} M"
        )
        table.add_row(r.path, r.kind, proxy, f"{r.upstream_instructions_per_call / 1e6:.3f} M")
    console.print(table)


def _perf_guard_core(
    console: Console,
    bench: BenchData,
    database: Database,
    grouped: dict[str, list[Task]],
    policy: str | None,
    repeat: int,
    fmt: Format = Format.table,
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
    if fmt is Format.json:
        _print_json({"repeat": repeat, "rows": [dataclasses.asdict(r) for r in results]})
        return
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
    floor: bool = False,
    kinds: list[str] | None = None,
    per_commit: int | None = None,
    rounds: int | None = None,
    fmt: Format = Format.table,
) -> None:
    from benchmark import perf_peers
    from benchmark import perf_proxy as bench_perf

    counts = sorted(set(clients)) if clients else list(bench_perf.PROXY_CLIENTS)
    with Progress(
        TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        bar = progress.add_task("starting the notes upstream and shadowguard serve")
        try:
            result = bench_perf.measure_proxy(
                counts,
                calls,
                peers=perf_peers.PEERS if peers else (),
                peers_dir=peers_dir,
                round_trips=round_trips,
                floor=floor,
                kinds=kinds or bench_perf.PROXY_KINDS,
                on_progress=lambda what: progress.update(bar, description=what),
                per_commit=per_commit,
                rounds=rounds or bench_perf.PROXY_ROUNDS,
            )
        except bench_perf.ProxyBenchError as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from exc
    missing = [s.name for s in result.peers if s.not_measured is not None]
    if fmt is Format.json:
        _print_json(result.as_json())
    else:
        _proxy_table(console, result, counts, calls, peers)
    if require_peers and missing:
        console.print(f"[red]error:[/red] not measured: {', '.join(missing)} (--require-peers)")
        raise typer.Exit(1)


def _proxy_table(console: Console, result: ProxyPerf, counts: list[int], calls: int, peers: bool) -> None:
    from benchmark import perf_peers
    from benchmark import perf_proxy as bench_perf

    def ratio(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    versions = {p.name: p.version for p in result.peers}

    def label(row: bench_perf.ProxyPerfRow) -> str:
        name = {
            "direct": "direct",
            "shadowguard": "shadowguard",
            bench_perf.SHADOWGUARD_RT: "shadowguard, no piggyback",
            bench_perf.BARE_RELAY: "bare relay (floor)",
        }.get(row.path)
        if name is None:
            name = f"{row.path} {versions.get(row.path) or ''}".strip()
        return name if row.mode == perf_peers.MODERN else f"{name} ({row.mode})"

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
        "proxy CPU ms/call",
        "upstream CPU ms/call",
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
            f"{r.proxy_cpu_ms_per_call:.2f}" if r.proxy_cpu_ms_per_call is not None else "-",
            f"{r.upstream_cpu_ms_per_call:.2f}" if r.upstream_cpu_ms_per_call is not None else "-",
        )
    Console(width=max(console.width, 150)).print(table)
    console.print(
        "direct: the notes fixture (benchmark/fixtures/notes_server.py, transactional) over streamable HTTP. "
        "shadowguard: `shadowguard serve` relaying to it, with its policy pack. "
        "read: get_note (passthrough). write: put_note (guarded: shadow transaction, savepoint, "
        "change set, checks); through the proxy a session commits every --writes-per-commit writes "
        "(10 at one client, 1 with several; untimed, but counted in calls/s). failed: tool or JSON-RPC "
        "errors (the fixture's SQLite file takes one writer at a time), left out of the latencies. "
        "+median ms: median minus direct's. proxy CPU: the proxy process's user + system CPU time "
        "over the configuration per call made; upstream CPU: the notes fixture's, likewise. bare relay "
        "(--floor): an HTTP hop built of shadowguard's transport parts with no MCP or guard work.",
        highlight=False,
    )
    if not peers:
        names = ", ".join(p.name for p in perf_peers.PEERS)
        console.print(f"Peer proxies ({names}) were not measured (--no-peers).", highlight=False)
    for status in result.peers:
        if status.not_measured is None:
            console.print(f"peer {status.name} {status.version}: {status.how}.", highlight=False)
        else:
            console.print(f"peer {status.name}: not measured: {status.not_measured}", highlight=False)

    parts = []
    for kind in [k for k in ("read", "write") if any(r.kind == k for r in result.rows)]:
        for n in (counts[0], counts[-1]):
            d, p = result.row("direct", kind, n), result.row(bench_perf.SHADOWGUARD, kind, n)
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
