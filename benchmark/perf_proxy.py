"""``bench perf proxy``: tools/call round trips of concurrent MCP clients over streamable HTTP, straight
to an upstream (the notes fixture) and through ``shadowguard serve`` and each peer proxy in front of
it, all in one run; with each proxy process's CPU time per call (``/proc``: Linux)."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import mcp.types as types
import yaml
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from benchmark.fixtures import (
    BARE_RELAY_ANNOUNCE,
    BARE_RELAY_SERVER,
    NOTES_ANNOUNCE,
    NOTES_POLICY,
    NOTES_SERVER,
)
from benchmark.mcphttp import mcp_http_client
from benchmark.perf_peers import (
    _RUNNER_PRELUDE,
    LEGACY,
    MODERN,
    Peer,
    PeerStatus,
    PeerUnavailable,
    default_peers_dir,
    install_peer,
)
from benchmark.procs import ServerError, ServerProcess

PROXY_CLIENTS = (1, 8, 32)
PROXY_CALLS = 50
PROXY_KINDS = ("read", "write")
PROXY_ROUNDS = 4
"""Rounds a configuration's calls are split over, the paths' order rotated each round (round_order)."""
WARMUP_CALLS = 20
"""Untimed calls per path and kind, at one client, before anything is timed."""
WRITES_PER_COMMIT = 10
"""Issue 18's guarded write: one commit per 10 writes (at one client)."""
SESSION_META_KEY = "shadowguard/session"
SERVE_ANNOUNCE = "shadowguard serve: listening on"
RUN_TIMEOUT_S = 1800.0
CALL_TIMEOUT_S = 60.0
SHADOWGUARD = "shadowguard"
SHADOWGUARD_RT = "shadowguard-no-piggyback"
BARE_RELAY = "bare-relay"
"""The floor path (``--floor``): benchmark/fixtures/bare_relay.py, an HTTP hop with no MCP or guard work."""
JSON_FIELDS = (
    "path", "kind", "clients", "median_ms", "p99_ms", "calls_per_s", "proxy_cpu_ms_per_call", "ok", "failed"
)  # fmt: skip
"""The fields of a row of ``bench perf proxy -f json`` (then ``mode``, the era, and the ratios)."""


T = TypeVar("T")
ProxyBenchError = ServerError
"""The proxy benchmark could not run (a server did not start, a call failed): the process runner's
error (benchmark.procs), so that one ``except`` covers a server that did not start and a failed run."""


@dataclass
class ProxyPerfRow:
    """One path, kind, concurrency and era: every client's tools/call round trips, pooled."""

    path: str
    """``direct``, ``shadowguard``, ``shadowguard-no-piggyback`` or a peer's name."""
    kind: str
    clients: int
    calls: int
    """Calls that succeeded (the latencies are theirs)."""
    failed: int
    median_ms: float
    p99_ms: float
    calls_per_s: float
    mode: str = MODERN
    median_ratio: float | None = None
    p99_ratio: float | None = None
    throughput_ratio: float | None = None
    """``None`` on the direct rows; elsewhere latency and calls/s ratios against direct (same kind,
    concurrency and era)."""
    overhead_ms: float | None = None
    """Median minus direct's median (same kind, concurrency and era); ``None`` on the direct rows."""
    writes_per_commit: int | None = None
    """Through shadowguard, writes: how many writes a session makes before each (untimed) commit;
    ``None`` elsewhere."""
    proxy_cpu_ms_per_call: float | None = None
    """CPU time (user + system) of the proxy's process over the configuration, per call made (ok or
    failed; through shadowguard a write's untimed commit is included); ``None`` on the direct rows."""
    upstream_cpu_ms_per_call: float | None = None
    """CPU time (user + system) of the upstream's process (the notes fixture) over the configuration,
    per call made: what a path costs the upstream (through shadowguard, the transaction extension's
    work is in it)."""

    def as_json(self) -> dict[str, Any]:
        """The row as ``bench perf proxy -f json`` prints it."""
        out: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "clients": self.clients,
            "median_ms": _finite(self.median_ms),
            "p99_ms": _finite(self.p99_ms),
            "calls_per_s": self.calls_per_s,
            "proxy_cpu_ms_per_call": self.proxy_cpu_ms_per_call,
            "ok": self.calls,
            "failed": self.failed,
            "mode": self.mode,
            "writes_per_commit": self.writes_per_commit,
            "upstream_cpu_ms_per_call": self.upstream_cpu_ms_per_call,
        }
        for name in ("median_ratio", "p99_ratio", "throughput_ratio", "overhead_ms"):
            out[name] = getattr(self, name)
        return out


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process and its waited-for children, from ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError as exc:
        raise ProxyBenchError(f"cannot read the CPU time of process {pid}: {exc}") from exc
    # Fields after the command name (which may hold spaces, in parentheses): utime is the 14th
    # field of the line, stime the 15th, cutime and cstime the 16th and 17th.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class ProxyPerf:
    calls_per_client: int
    rows: list[ProxyPerfRow]
    peers: list[PeerStatus] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """``bench perf proxy -f json``: the rows, then the run's settings and the peers' status."""
        return {
            "rows": [r.as_json() for r in self.rows],
            "calls_per_client": self.calls_per_client,
            "peers": [dataclasses.asdict(p) for p in self.peers],
        }

    def row(self, path: str, kind: str, clients: int, mode: str = MODERN) -> ProxyPerfRow:
        return next(
            r for r in self.rows if (r.path, r.kind, r.clients, r.mode) == (path, kind, clients, mode)
        )


def _p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass
class _Target:
    """One path the clients call: its URL, client era, extra headers, and what is measured on it."""

    path: str
    url: str
    mode: str = MODERN
    headers: Mapping[str, str] = field(default_factory=dict)
    kinds: tuple[str, ...] = PROXY_KINDS
    guarded: bool = False
    """Through shadowguard: writes are committed after each call, reads rolled back at the end."""
    pid: int | None = None
    """The proxy's process (its CPU time is measured); ``None`` for direct."""
    upstream_pid: int | None = None
    """The upstream's process (its CPU time is measured too)."""


def writes_per_commit(requested: int | None, clients: int) -> int:
    """How many writes a guarded session makes before each commit: ``requested``, else
    :data:`WRITES_PER_COMMIT` for one client (issue 18's guarded write) and 1 for several (the notes
    fixture's SQLite file takes one writer at a time: a session that keeps its writes open between
    commits makes every other client's writes fail)."""
    if requested is not None:
        if requested < 1:
            raise ProxyBenchError(f"writes per commit must be at least 1, not {requested}")
        return requested
    return WRITES_PER_COMMIT if clients == 1 else 1


async def _client_run(
    target: _Target, kind: str, client: int, calls: int, run: str, per_commit: int = 1
) -> tuple[list[float], int]:
    """One client's timed round trips (ms) of the calls that succeeded, and how many failed (a tool
    error or a JSON-RPC error: the notes fixture's SQLite file takes one writer at a time, and a
    deferred transaction that read before it writes fails at once with "database is locked" when
    another writer got in first). Through the proxy every ``per_commit`` writes, and after the last,
    the session commits (untimed, but inside the wall clock of calls/s); reads are rolled back once
    at the end."""
    meta = cast(types.RequestParamsMeta, {SESSION_META_KEY: f"bench-{run}-{kind}-{client}"})
    tool, arguments = (
        ("get_note", {"id": "n1"})
        if kind == "read"
        else ("put_note", {"id": f"bench-{client}", "body": "benchmark note", "status": "draft"})
    )
    times: list[float] = []
    failed = 0
    async with mcp_http_client(headers=dict(target.headers)) as http:
        transport = streamable_http_client(target.url, http_client=http)
        async with Client(
            transport, mode=cast(Any, target.mode), cache=None, read_timeout_seconds=CALL_TIMEOUT_S
        ) as mcp_client:
            for i in range(calls):
                t0 = time.perf_counter()
                try:
                    result = await mcp_client.call_tool(tool, dict(arguments), meta=meta)
                except MCPError:
                    failed += 1
                else:
                    elapsed = (time.perf_counter() - t0) * 1000
                    if result.is_error:
                        failed += 1
                    else:
                        times.append(elapsed)
                if target.guarded and kind == "write" and ((i + 1) % per_commit == 0 or i + 1 == calls):
                    await _end(mcp_client, "commit", meta)
            if target.guarded and kind == "read":
                await _end(mcp_client, "rollback", meta)
    return times, failed


async def _end(mcp_client: Client, tool: str, meta: types.RequestParamsMeta) -> None:
    result = await mcp_client.call_tool(tool, {}, meta=meta)
    if result.is_error:
        text = " ".join(p.text for p in result.content if isinstance(p, types.TextContent))
        raise ProxyBenchError(f"{tool} through the proxy failed: {text[:500]}")


@dataclass
class _Sample:
    """One round of one configuration: every client's timed calls, failures, wall clock and CPU."""

    times: list[float]
    failed: int
    wall_s: float
    cpu_s: float | None
    upstream_cpu_s: float | None


async def _sample(target: _Target, kind: str, clients: int, calls: int, run: str, batch: int) -> _Sample:
    per_client: dict[int, tuple[list[float], int]] = {}

    async def one(i: int) -> None:
        per_client[i] = await _client_run(target, kind, i, calls, run, batch)

    cpu0 = process_cpu_s(target.pid) if target.pid is not None else 0.0
    upstream0 = process_cpu_s(target.upstream_pid) if target.upstream_pid is not None else 0.0
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(clients):
            tg.start_soon(one, i)
    wall = time.perf_counter() - t0
    cpu = process_cpu_s(target.pid) - cpu0 if target.pid is not None else None
    upstream = process_cpu_s(target.upstream_pid) - upstream0 if target.upstream_pid is not None else None
    times = [t for ts, _ in per_client.values() for t in ts]
    return _Sample(times, sum(f for _, f in per_client.values()), wall, cpu, upstream)


def _pooled(
    target: _Target, kind: str, clients: int, batch: int | None, samples: Sequence[_Sample]
) -> ProxyPerfRow:
    """One row of a configuration's rounds: latencies pooled, calls/s over the rounds' summed wall
    clock, CPU per call over the rounds' summed CPU time."""
    times = [t for s in samples for t in s.times]
    failed = sum(s.failed for s in samples)
    made = len(times) + failed
    wall = sum(s.wall_s for s in samples)

    def per_call(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) * 1000 / made if known and made else None

    return ProxyPerfRow(
        path=target.path,
        kind=kind,
        clients=clients,
        calls=len(times),
        failed=failed,
        median_ms=statistics.median(times) if times else float("nan"),
        p99_ms=_p99(times) if times else float("nan"),
        calls_per_s=len(times) / wall if wall else 0.0,
        mode=target.mode,
        writes_per_commit=batch,
        proxy_cpu_ms_per_call=per_call([s.cpu_s for s in samples]),
        upstream_cpu_ms_per_call=per_call([s.upstream_cpu_s for s in samples]),
    )


def _batch(target: _Target, kind: str, clients: int, per_commit: int | None) -> int | None:
    """Writes per commit of a guarded write configuration; None for the others."""
    return writes_per_commit(per_commit, clients) if target.guarded and kind == "write" else None


async def _measure_one(
    target: _Target, kind: str, clients: int, calls: int, run: str, per_commit: int | None = None
) -> ProxyPerfRow:
    """One configuration in one round (``bench perf instructions`` counts such a window)."""
    batch = _batch(target, kind, clients, per_commit)
    sample = await _sample(target, kind, clients, calls, run, batch or 1)
    return _pooled(target, kind, clients, batch, [sample])


def round_sizes(calls: int, rounds: int) -> list[int]:
    """Each round's calls per client: ``calls`` split as evenly as it goes over at most ``rounds``
    rounds (never a round of none)."""
    if calls < 1 or rounds < 1:
        raise ProxyBenchError("calls and rounds must be at least 1")
    used = min(calls, rounds)
    return [calls // used + (1 if i < calls % used else 0) for i in range(used)]


def round_order(paths: Sequence[T], round_no: int) -> list[T]:
    """The paths in the order round ``round_no`` measures them: rotated by one each round, so that
    over as many rounds as paths each path runs once in each position (a host that slows down or
    speeds up during a configuration weighs on every path alike)."""
    if not paths:
        return []
    shift = round_no % len(paths)
    return [*paths[shift:], *paths[:shift]]


def _first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def notes_proxy_config(path: Path, upstream_url: str) -> Path:
    config = {
        "upstreams": [
            {"name": "notes", "transport": "http", "url": upstream_url, "policy": str(NOTES_POLICY)}
        ],
        "http": {"host": "127.0.0.1", "port": 0},
        "telemetry": {"exporter": "none"},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _ratios(rows: Sequence[ProxyPerfRow]) -> None:
    for row in rows:
        if row.path == "direct":
            continue
        key = ("direct", row.kind, row.clients, row.mode)
        base = next(r for r in rows if (r.path, r.kind, r.clients, r.mode) == key)
        row.median_ratio = row.median_ms / base.median_ms if base.median_ms else None
        row.p99_ratio = row.p99_ms / base.p99_ms if base.p99_ms else None
        row.throughput_ratio = row.calls_per_s / base.calls_per_s if base.calls_per_s else None
        row.overhead_ms = row.median_ms - base.median_ms


def measure_proxy(
    clients: Sequence[int] = PROXY_CLIENTS,
    calls: int = PROXY_CALLS,
    *,
    shadowguard: str | None = None,
    peers: Sequence[Peer] = (),
    peers_dir: Path | None = None,
    round_trips: bool = False,
    floor: bool = False,
    kinds: Sequence[str] = PROXY_KINDS,
    on_progress: Callable[[str], None] | None = None,
    per_commit: int | None = None,
    rounds: int = PROXY_ROUNDS,
) -> ProxyPerf:
    """tools/call round trips of ``clients`` concurrent MCP clients over streamable HTTP, each in its
    own session (``_meta["shadowguard/session"]``), ``calls`` each: straight to the notes fixture
    (transactional), through ``shadowguard serve`` relaying to the same upstream, and through each
    of ``peers`` in front of it (installed under ``peers_dir`` first: :func:`install_peer`). With
    ``round_trips``, also through a second ``shadowguard serve`` in front of a second notes server
    on the same database that serves the transaction extension without piggybacking (path
    ``shadowguard-no-piggyback``: one round trip per savepoint, change set and release, as before version 1's
    piggyback feature). With ``floor``, reads also go through benchmark/fixtures/bare_relay.py (path
    ``bare-relay``): the same HTTP hop built of shadowguard's transport parts, with no MCP or guard
    work, so that what the hop costs and what the guard costs above it are told apart.

    Reads are ``get_note`` (a passthrough read); writes are ``put_note`` (a guarded write), measured
    direct and through shadowguard only (the peers do not guard writes); a guarded session commits
    every ``per_commit`` writes (default: :func:`writes_per_commit`). Clients speak the
    2026-07-28 era, except towards a peer whose front end speaks only the handshake era; direct is
    then measured in that era too, and the peer's ratios are against it. First every path takes
    :data:`WARMUP_CALLS` untimed calls of each kind it measures. Then each configuration (kind and
    concurrency) runs in ``rounds`` rounds, each client's ``calls`` split over them
    (:func:`round_sizes`) and the paths' order rotated each round (:func:`round_order`): the
    host's speed drifts by tens of percent within minutes, and a path measured only at one end of
    a configuration would carry that drift. A row pools its rounds (latencies together, calls/s
    and CPU per call over their summed wall clock and CPU time). A peer that
    cannot be installed, started or called is left out with the reason (:attr:`ProxyPerf.peers`);
    any other failure raises :class:`ProxyBenchError`. The servers are subprocesses on 127.0.0.1
    and are stopped before this returns, whatever happens.
    """
    if calls < 1 or not clients or min(clients) < 1:
        raise ProxyBenchError("clients and calls must be at least 1")
    sizes = round_sizes(calls, rounds)
    writes_per_commit(per_commit, 1)  # refuse a bad value before anything starts
    if not kinds or set(kinds) - set(PROXY_KINDS):
        raise ProxyBenchError(f"kinds must be some of {PROXY_KINDS}, not {list(kinds)}")
    executable = shadowguard or str(Path(sys.executable).parent / "shadowguard")

    def notes(work: Path, name: str, *extra: str) -> ServerProcess:
        db = str(work / "notes.sqlite")
        args = [sys.executable, str(NOTES_SERVER), "--db", db, "--port", "0", "--transactional", *extra]
        return ServerProcess(args, work / f"{name}.log", NOTES_ANNOUNCE, name=name)

    def shadowguard_serve(work: Path, name: str, upstream_url: str) -> ServerProcess:
        config = notes_proxy_config(work / f"{name}.yaml", upstream_url)
        return ServerProcess(
            [executable, "serve", "--config", str(config)], work / f"{name}.log", SERVE_ANNOUNCE, name
        )

    statuses = [PeerStatus(p.name, p.mode, p.how) for p in peers]
    pythons: dict[str, Path] = {}
    for peer, status in zip(peers, statuses, strict=True):
        if on_progress is not None:
            on_progress(f"installing {peer.requirement or peer.name}")
        try:
            pythons[peer.name], status.version = install_peer(peer, peers_dir or default_peers_dir())
        except PeerUnavailable as exc:
            status.not_measured = str(exc)
    rows: list[ProxyPerfRow] = []
    with tempfile.TemporaryDirectory(prefix="sg-perf-proxy-") as tmp:
        work = Path(tmp)
        servers: list[ServerProcess] = []
        try:
            upstream = notes(work, "notes")
            servers.append(upstream)
            upstream_url = upstream.wait_url()
            proxy = shadowguard_serve(work, "shadowguard", upstream_url)
            servers.append(proxy)
            targets = [
                _Target("direct", upstream_url, upstream_pid=upstream.pid),
                _Target(
                    SHADOWGUARD, proxy.wait_url(), guarded=True, pid=proxy.pid, upstream_pid=upstream.pid
                ),
            ]
            if floor:
                relay = ServerProcess(
                    [sys.executable, str(BARE_RELAY_SERVER), upstream_url],
                    work / "bare-relay.log",
                    BARE_RELAY_ANNOUNCE,
                    name=BARE_RELAY,
                )
                servers.append(relay)
                targets.append(
                    _Target(
                        BARE_RELAY,
                        relay.wait_url(),
                        kinds=("read",),
                        pid=relay.pid,
                        upstream_pid=upstream.pid,
                    )
                )
            if round_trips:
                upstream_rt = notes(work, "notes-no-piggyback", "--no-piggyback")
                servers.append(upstream_rt)
                proxy_rt = shadowguard_serve(work, "shadowguard-no-piggyback", upstream_rt.wait_url())
                servers.append(proxy_rt)
                targets.append(
                    _Target(
                        SHADOWGUARD_RT,
                        proxy_rt.wait_url(),
                        guarded=True,
                        pid=proxy_rt.pid,
                        upstream_pid=upstream_rt.pid,
                    )
                )
            peer_targets: dict[str, tuple[_Target, PeerStatus, ServerProcess]] = {}
            for peer, status in zip(peers, statuses, strict=True):
                if status.not_measured is not None:
                    continue
                if on_progress is not None:
                    on_progress(f"starting {peer.name}")
                runner = work / f"{peer.name}-runner.py"
                runner.write_text(_RUNNER_PRELUDE + peer.runner, encoding="utf-8")
                peer_work = work / peer.name
                peer_work.mkdir()
                server = ServerProcess(
                    [str(pythons[peer.name]), str(runner), upstream_url, str(peer_work)],
                    work / f"{peer.name}.log",
                    "peer: listening on",
                    name=peer.name,
                )
                servers.append(server)
                try:
                    url = server.wait_url()
                except ProxyBenchError as exc:
                    status.not_measured = str(exc).splitlines()[0] + _last_line(server.tail())
                    continue
                target = _Target(
                    peer.name,
                    url,
                    peer.mode,
                    peer.headers,
                    kinds=("read",),
                    pid=server.pid,
                    upstream_pid=upstream.pid,
                )
                peer_targets[peer.name] = (target, status, server)
            if any(t.mode == LEGACY for t, _, _ in peer_targets.values()):
                targets.append(
                    _Target("direct", upstream_url, LEGACY, kinds=("read",), upstream_pid=upstream.pid)
                )

            samples: dict[tuple[str, str, str, int], list[_Sample]] = {}

            def measured_targets() -> list[_Target]:
                return [*targets, *(t for t, _, _ in peer_targets.values())]

            async def measure(target: _Target, kind: str, n: int, size: int, run: str) -> _Sample | None:
                """One round of a configuration; None for a peer that failed (and is left out)."""
                entry = peer_targets.get(target.path)
                batch = _batch(target, kind, n, per_commit) or 1
                try:
                    return await _sample(target, kind, n, size, run, batch)
                except Exception as exc:
                    if entry is None:
                        raise
                    cause = _first_error(exc)
                    entry[1].not_measured = f"{type(cause).__name__}: {cause}"[:300] + _last_line(
                        entry[2].tail()
                    )
                    del peer_targets[target.path]
                    return None

            async def run_all() -> None:
                with anyio.fail_after(RUN_TIMEOUT_S):
                    for kind in kinds:
                        for target in measured_targets():
                            if kind in target.kinds:
                                await measure(target, kind, 1, WARMUP_CALLS, f"warmup-{kind}")
                    for kind in kinds:
                        for n in clients:
                            for round_no, size in enumerate(sizes):
                                for target in round_order(measured_targets(), round_no):
                                    if kind not in target.kinds:
                                        continue
                                    if on_progress is not None:
                                        era = "" if target.mode == MODERN else f" ({target.mode})"
                                        on_progress(
                                            f"{target.path}{era} {kind}, {n} clients × {calls} calls: "
                                            f"round {round_no + 1} of {len(sizes)}"
                                        )
                                    sample = await measure(target, kind, n, size, f"{kind}{n}r{round_no}")
                                    if sample is not None:
                                        samples.setdefault((target.path, target.mode, kind, n), []).append(
                                            sample
                                        )

            try:
                anyio.run(run_all)
            except Exception as exc:
                logs = "\n".join(f"--- {s.name}:\n{s.tail()}" for s in servers)
                raise ProxyBenchError(f"the benchmark failed: {exc!r}\n{logs}") from exc
            for kind in kinds:
                for n in clients:
                    for target in measured_targets():
                        taken = samples.get((target.path, target.mode, kind, n))
                        if taken:
                            rows.append(_pooled(target, kind, n, _batch(target, kind, n, per_commit), taken))
        finally:
            for server in reversed(servers):
                server.stop()
    measured = {s.name for s in statuses if s.not_measured is None}
    rows = [
        r for r in rows if r.path in ("direct", SHADOWGUARD, SHADOWGUARD_RT, BARE_RELAY) or r.path in measured
    ]
    _ratios(rows)
    return ProxyPerf(calls_per_client=calls, rows=rows, peers=statuses)


def _last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return f" (last log line: {lines[-1][:300]})" if lines else ""
