"""Performance benchmarks. ``envs``: the grading step per task (init + golden replay + hash).
``guard core``: what the guard adds to each tool call (savepoint, change extraction, checks), against
the same call made directly, measured in the same run (:func:`measure_guard_core`).

The grading step is reported beside the reference implementation's published anchor (data README:
init ≈ 2.0 ms, full grading step ≈ 4.5–4.9 ms per task on 2 vCPU, Python 3.11), since the reference
code is not available to run in the same process. Medians over repeats; the first pass (warm-up) is
discarded.
"""

from __future__ import annotations

import gc
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import yaml
from mcp import Client, MCPError

from benchmark.envs import Database, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, tool_infos
from benchmark.tasks import BenchData, Task
from guard.models import Verdict
from guard.policy import EMPTY, PolicyPack
from guard.session import GuardSession

REFERENCE_MS_PER_TASK = (4.5, 4.9)
REFERENCE_INIT_MS = 2.0


@dataclass
class EnvPerf:
    domain: str
    tasks: int
    init_ms: float
    replay_ms: float
    hash_ms: float

    @property
    def total_ms(self) -> float:
        return self.init_ms + self.replay_ms + self.hash_ms

    @property
    def tasks_per_s(self) -> float:
        return 1000.0 / self.total_ms if self.total_ms else 0.0

    @property
    def ratio_to_reference(self) -> float:
        return self.total_ms / (sum(REFERENCE_MS_PER_TASK) / 2)


def measure_envs(
    data: BenchData, database: Database, domain: str, tasks: Sequence[Task], repeat: int = 3
) -> EnvPerf:
    dom = load_domain(domain, data.bundle)
    passes: list[tuple[float, float, float]] = []
    for _ in range(repeat + 1):
        init = replay = hashing = 0.0
        for task in tasks:
            t0 = time.perf_counter()
            env = Environment(dom, database)
            env.apply_patch(task.data_patch)
            t1 = time.perf_counter()
            for call in task.answer.golden_tool_interactions:
                env.call_tool(call.tool, call.parameters)
            t2 = time.perf_counter()
            env.state_hash()
            t3 = time.perf_counter()
            env.close()
            init += t1 - t0
            replay += t2 - t1
            hashing += t3 - t2
        passes.append((init, replay, hashing))
    warm = passes[1:]
    n = max(len(tasks), 1)
    return EnvPerf(
        domain=domain,
        tasks=len(tasks),
        init_ms=statistics.median(p[0] for p in warm) / n * 1000,
        replay_ms=statistics.median(p[1] for p in warm) / n * 1000,
        hash_ms=statistics.median(p[2] for p in warm) / n * 1000,
    )


# -- guard core -------------------------------------------------------------------------------------
VARIANTS = ("direct", "shadow", "guard", "pack")
"""direct: ``env.call_tool`` alone. shadow: savepoint + call + change extraction + release on the
SqlBackend. guard: a GuardSession with the empty pack. pack: a GuardSession with the domain's pack."""


@dataclass
class CallKindPerf:
    """Per-call medians (µs) of one kind of call (write or read) under each variant.

    Every golden call is timed under every variant in the same state; a call's time is its median over
    the measured passes; the figures below are medians over calls, and overheads and ratios are medians
    of the per-call differences and ratios against ``direct`` (paired, so a slow tool does not hide a
    fast one's overhead).
    """

    calls: int
    us: dict[str, float]
    overhead_us: dict[str, float]
    ratio: dict[str, float]


@dataclass
class GuardCorePerf:
    domain: str
    dialect: str
    tasks: int
    pack: str | None
    checks: int
    write: CallKindPerf
    read: CallKindPerf
    session_us: float
    """Median per task: GuardSession begin (capture triggers installed) + commit (removed)."""
    pack_not_allowed: int
    """Golden calls the pack did not allow in the last pass (each a false block, or a held approval)."""


def _times_direct(env: Environment, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[int]:
    out = []
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        env.call_tool(tool, arguments)
        out.append(time.perf_counter_ns() - t0)
    return out


def _times_shadow(env: Environment, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[int]:
    backend = backend_for(env)
    backend.begin()
    out = []
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        savepoint = backend.savepoint()
        env.call_tool(tool, arguments)
        backend.changes(savepoint)
        backend.release(savepoint)
        out.append(time.perf_counter_ns() - t0)
    backend.commit()
    return out


def _times_session(
    env: Environment, calls: Sequence[tuple[str, dict[str, Any]]], pack: PolicyPack
) -> tuple[list[int], int, int]:
    """(per-call ns, begin + commit ns, calls not allowed)."""
    t0 = time.perf_counter_ns()
    session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack)
    setup = time.perf_counter_ns() - t0
    out = []
    not_allowed = 0
    for tool, arguments in calls:
        t0 = time.perf_counter_ns()
        outcome = session.call(tool, arguments)
        out.append(time.perf_counter_ns() - t0)
        not_allowed += outcome.verdict is not Verdict.ALLOWED and outcome.verdict is not Verdict.FAILED
    t0 = time.perf_counter_ns()
    if not session.commit().committed:
        session.rollback()
    return out, setup + time.perf_counter_ns() - t0, not_allowed


def _summarise(samples: Mapping[str, Sequence[list[int]]], variants: Sequence[str]) -> CallKindPerf:
    """``samples[variant][call]`` holds that call's ns per measured pass."""
    per_call = {v: [statistics.median(s) / 1000 for s in samples[v]] for v in variants}
    direct = per_call["direct"]
    us = {v: statistics.median(per_call[v]) if per_call[v] else 0.0 for v in variants}
    overhead, ratio = {}, {}
    for v in variants:
        if v == "direct" or not direct:
            continue
        overhead[v] = statistics.median(t - d for t, d in zip(per_call[v], direct, strict=True))
        ratio[v] = statistics.median(t / d for t, d in zip(per_call[v], direct, strict=True) if d > 0)
    return CallKindPerf(calls=len(direct), us=us, overhead_us=overhead, ratio=ratio)


def measure_guard_core(
    data: BenchData,
    database: Database,
    domain: str,
    tasks: Sequence[Task],
    pack: PolicyPack | None,
    repeat: int = 3,
    pack_name: str | None = None,
) -> GuardCorePerf:
    """Time every golden call directly and through the guard core, interleaved, ``repeat`` + 1 passes.

    Each pass replays every task once per variant, each in a fresh environment, in an order rotated
    per task and pass so that warm caches favour no variant; the first pass is a warm-up. The garbage
    collector runs between replays, not during them.
    """
    dom = load_domain(domain, data.bundle)
    variants = [v for v in VARIANTS if v != "pack" or pack is not None]
    writes_of = {name: tool.writes for name, tool in dom.tools.items()}
    plans = [[(c.tool, dict(c.parameters)) for c in t.answer.golden_tool_interactions] for t in tasks]
    # samples[variant][task][call] -> ns per pass
    samples: dict[str, list[list[list[int]]]] = {v: [[[] for _ in plan] for plan in plans] for v in variants}
    sessions: list[int] = []
    not_allowed = 0
    gc_was_enabled = gc.isenabled()
    try:
        for n in range(repeat + 1):
            not_allowed = 0
            for i, (task, plan) in enumerate(zip(tasks, plans, strict=True)):
                shift = (n + i) % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    with Environment(dom, database) as env:
                        env.apply_patch(task.data_patch)
                        gc.collect()
                        gc.disable()
                        if variant == "direct":
                            times = _times_direct(env, plan)
                        elif variant == "shadow":
                            times = _times_shadow(env, plan)
                        else:
                            chosen = pack if variant == "pack" and pack is not None else EMPTY
                            times, setup, blocked = _times_session(env, plan, chosen)
                            if variant == "guard" and n > 0:
                                sessions.append(setup)
                            if variant == "pack":
                                not_allowed += blocked
                        gc.enable()
                    if n > 0:
                        for j, ns in enumerate(times):
                            samples[variant][i][j].append(ns)
    finally:
        if gc_was_enabled:
            gc.enable()

    def kind(writes: bool) -> CallKindPerf:
        chosen = {
            v: [
                calls[j]
                for plan, calls in zip(plans, samples[v], strict=True)
                for j, (tool, _) in enumerate(plan)
                if writes_of.get(tool, True) is writes
            ]
            for v in variants
        }
        return _summarise(chosen, variants)

    return GuardCorePerf(
        domain=domain,
        dialect=database.dialect,
        tasks=len(tasks),
        pack=pack_name if pack is not None else None,
        checks=len(pack.checks) if pack is not None else 0,
        write=kind(True),
        read=kind(False),
        session_us=statistics.median(sessions) / 1000 if sessions else 0.0,
        pack_not_allowed=not_allowed,
    )


# -- proxy ------------------------------------------------------------------------------------------
PROXY_CLIENTS = (1, 8, 32)
PROXY_CALLS = 50
PROXY_PATHS = ("direct", "proxy")
PROXY_KINDS = ("read", "write")
PEERS_NOT_MEASURED = "mcp-proxy, mcp-airlock, FastMCP's proxy"
NOTES_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "notes_server.py"
NOTES_POLICY = NOTES_SERVER.with_name("notes_policy.yaml")
SESSION_META_KEY = "shadowguard/session"
STARTUP_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 1800.0
CALL_TIMEOUT_S = 60.0


class ProxyBenchError(RuntimeError):
    """The proxy benchmark could not run (a server did not start, a call failed)."""


@dataclass
class ProxyPerfRow:
    """One path, kind and concurrency: every client's tools/call round trips, pooled."""

    path: str
    kind: str
    clients: int
    calls: int
    """Calls that succeeded (the latencies are theirs)."""
    failed: int
    median_ms: float
    p99_ms: float
    calls_per_s: float
    median_ratio: float | None = None
    p99_ratio: float | None = None
    throughput_ratio: float | None = None
    """``None`` on the direct rows; through the proxy: latency ratios and calls/s ratio against direct."""


@dataclass
class ProxyPerf:
    calls_per_client: int
    rows: list[ProxyPerfRow]

    def row(self, path: str, kind: str, clients: int) -> ProxyPerfRow:
        return next(r for r in self.rows if (r.path, r.kind, r.clients) == (path, kind, clients))


def _p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class _Server:
    """A server subprocess on 127.0.0.1 that announces its URL on stderr (logged to a file)."""

    def __init__(self, args: list[str], log: Path, announce: str) -> None:
        self.log = log
        self.name = Path(args[0]).name if len(args) < 2 else f"{Path(args[0]).name} {Path(args[1]).name}"
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(  # noqa: S603 - the notes fixture and our own console script
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log_file
        )
        self.announce = announce

    def wait_url(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.log.read_text(errors="replace").splitlines():
                if self.announce in line and "http://127.0.0.1:" in line:
                    return line[line.index("http://") :].strip()
            if self.proc.poll() is not None:
                raise ProxyBenchError(
                    f"{self.name} exited {self.proc.returncode}:\n{self.log.read_text()[-2000:]}"
                )
            time.sleep(0.05)
        raise ProxyBenchError(f"{self.name} did not start in {STARTUP_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


async def _client_run(
    url: str, path: str, kind: str, client: int, calls: int, run: str
) -> tuple[list[float], int]:
    """One client's timed round trips (ms) of the calls that succeeded, and how many failed (a tool
    error or a JSON-RPC error: the notes fixture's SQLite file takes one writer at a time, and a
    deferred transaction that read before it writes fails at once with "database is locked" when
    another writer got in first). Through the proxy each write is committed (untimed, but inside the
    wall clock of calls/s) before the next, so that a guard session does not keep the upstream's write
    lock; reads are rolled back once at the end."""
    meta = cast(types.RequestParamsMeta, {SESSION_META_KEY: f"bench-{run}-{kind}-{client}"})
    tool, arguments = (
        ("get_note", {"id": "n1"})
        if kind == "read"
        else ("put_note", {"id": f"bench-{client}", "body": "benchmark note", "status": "draft"})
    )
    times: list[float] = []
    failed = 0
    async with Client(url, mode="2026-07-28", cache=None, read_timeout_seconds=CALL_TIMEOUT_S) as mcp_client:
        for _ in range(calls):
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
            if path == "proxy" and kind == "write":
                await _end(mcp_client, "commit", meta)
        if path == "proxy" and kind == "read":
            await _end(mcp_client, "rollback", meta)
    return times, failed


async def _end(mcp_client: Client, tool: str, meta: types.RequestParamsMeta) -> None:
    result = await mcp_client.call_tool(tool, {}, meta=meta)
    if result.is_error:
        text = " ".join(p.text for p in result.content if isinstance(p, types.TextContent))
        raise ProxyBenchError(f"{tool} through the proxy failed: {text[:500]}")


async def _measure_one(url: str, path: str, kind: str, clients: int, calls: int, run: str) -> ProxyPerfRow:
    per_client: dict[int, tuple[list[float], int]] = {}

    async def one(i: int) -> None:
        per_client[i] = await _client_run(url, path, kind, i, calls, run)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(clients):
            tg.start_soon(one, i)
    wall = time.perf_counter() - t0
    times = [t for ts, _ in per_client.values() for t in ts]
    return ProxyPerfRow(
        path=path,
        kind=kind,
        clients=clients,
        calls=len(times),
        failed=sum(f for _, f in per_client.values()),
        median_ms=statistics.median(times) if times else float("nan"),
        p99_ms=_p99(times) if times else float("nan"),
        calls_per_s=len(times) / wall if wall else 0.0,
    )


def _proxy_config(path: Path, upstream_url: str) -> Path:
    config = {
        "upstreams": [
            {"name": "notes", "transport": "http", "url": upstream_url, "policy": str(NOTES_POLICY)}
        ],
        "http": {"host": "127.0.0.1", "port": 0},
        "telemetry": {"exporter": "none"},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def measure_proxy(
    clients: Sequence[int] = PROXY_CLIENTS,
    calls: int = PROXY_CALLS,
    *,
    shadowguard: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> ProxyPerf:
    """tools/call round trips of ``clients`` concurrent 2026-07-28 era MCP clients over HTTP, each in
    its own session (``_meta["shadowguard/session"]``), ``calls`` each: straight to the notes fixture
    (transactional, streamable HTTP) and through ``shadowguard serve`` relaying to the same upstream.

    Reads are ``get_note`` (a passthrough read); writes are ``put_note`` (a guarded write). Each
    configuration runs once, after one warm-up call per client path; the servers are subprocesses on
    127.0.0.1 and are stopped before this returns, whatever happens.
    """
    if not NOTES_SERVER.is_file():
        raise ProxyBenchError(f"the notes fixture is not here: {NOTES_SERVER} (run from a source checkout)")
    if calls < 1 or not clients or min(clients) < 1:
        raise ProxyBenchError("clients and calls must be at least 1")
    executable = shadowguard or str(Path(sys.executable).parent / "shadowguard")
    rows: list[ProxyPerfRow] = []
    with tempfile.TemporaryDirectory(prefix="sg-perf-proxy-") as tmp:
        work = Path(tmp)
        servers: list[_Server] = []
        try:
            upstream = _Server(
                [
                    sys.executable,
                    str(NOTES_SERVER),
                    "--db",
                    str(work / "notes.sqlite"),
                    "--port",
                    "0",
                    "--transactional",
                ],
                work / "notes.log",
                "notes: listening on",
            )
            servers.append(upstream)
            upstream_url = upstream.wait_url()
            proxy = _Server(
                [executable, "serve", "--config", str(_proxy_config(work / "proxy.yaml", upstream_url))],
                work / "proxy.log",
                "shadowguard serve: listening on",
            )
            servers.append(proxy)
            urls = {"direct": upstream_url, "proxy": proxy.wait_url()}

            async def run_all() -> None:
                with anyio.fail_after(RUN_TIMEOUT_S):
                    for path in PROXY_PATHS:
                        await _measure_one(urls[path], path, "read", 1, 1, "warmup")
                    for kind in PROXY_KINDS:
                        for n in clients:
                            for path in PROXY_PATHS:
                                if on_progress is not None:
                                    on_progress(f"{path} {kind}, {n} clients × {calls} calls")
                                rows.append(
                                    await _measure_one(urls[path], path, kind, n, calls, f"{kind}{n}")
                                )

            try:
                anyio.run(run_all)
            except Exception as exc:
                logs = "\n".join(
                    f"--- {s.name}:\n{s.log.read_text(errors='replace')[-3000:]}" for s in servers
                )
                raise ProxyBenchError(f"the benchmark failed: {exc!r}\n{logs}") from exc
        finally:
            for server in reversed(servers):
                server.stop()
    for row in rows:
        if row.path == "direct":
            continue
        base = next(r for r in rows if (r.path, r.kind, r.clients) == ("direct", row.kind, row.clients))
        row.median_ratio = row.median_ms / base.median_ms if base.median_ms else None
        row.p99_ratio = row.p99_ms / base.p99_ms if base.p99_ms else None
        row.throughput_ratio = row.calls_per_s / base.calls_per_s if base.calls_per_s else None
    return ProxyPerf(calls_per_client=calls, rows=rows)
