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
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import yaml
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

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
PROXY_KINDS = ("read", "write")
MODERN = "2026-07-28"
LEGACY = "legacy"
"""Client modes (protocol eras) of the ``mcp.Client`` that drives each path."""
NOTES_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "notes_server.py"
NOTES_POLICY = NOTES_SERVER.with_name("notes_policy.yaml")
SESSION_META_KEY = "shadowguard/session"
SERVE_ANNOUNCE = "shadowguard serve: listening on"
STARTUP_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 1800.0
CALL_TIMEOUT_S = 60.0
PEER_INSTALL_TIMEOUT_S = 900.0
PEER_MARKER = "shadowguard-peer.json"


class ProxyBenchError(RuntimeError):
    """The proxy benchmark could not run (a server did not start, a call failed)."""


class PeerUnavailable(RuntimeError):
    """A peer proxy could not be installed, started or called; the message says why (shown in its row)."""


# A peer's runner is generated into the run's work directory and run with the peer venv's Python as
# ``python runner.py UPSTREAM_URL WORKDIR``. It serves streamable HTTP at /mcp on 127.0.0.1 and
# prints ``peer: listening on http://127.0.0.1:PORT/mcp`` on stderr. Sockets are bound with
# IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say TCP (else ~40 ms a request).
_RUNNER_PRELUDE = """\
import socket
import sys


def bind():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    return sock


def announce(port):
    print(f"peer: listening on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)


"""

_MCP_PROXY_RUNNER = """\
import anyio
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp_proxy.mcp_server import create_single_instance_routes
from mcp_proxy.proxy_server import create_proxy_server
from starlette.applications import Starlette


async def main(upstream):
    sock = bind()
    async with streamablehttp_client(upstream) as (read, write, _), ClientSession(read, write) as session:
        server = await create_proxy_server(session)
        routes, manager = create_single_instance_routes(server, stateless_instance=False)
        app = Starlette(routes=routes)
        app.router.redirect_slashes = False
        async with manager.run():
            announce(sock.getsockname()[1])
            await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


anyio.run(main, sys.argv[1])
"""

_AIRLOCK_RUNNER = """\
import os
from pathlib import Path

work = Path(sys.argv[2])
policy = work / "airlock-policy.yaml"
policy.write_text("environment: bench\\ntools:\\n  get_note:\\n    tiers: {bench: L0}\\n")
os.environ["AIRLOCK_TRUST_PRINCIPAL_HEADER"] = "1"
probe = bind()
port = probe.getsockname()[1]
probe.close()
sys.argv = [
    "mcp-airlock", "--policy", str(policy), "--upstream", sys.argv[1], "--env", "bench",
    "--audit", str(work / "airlock-audit.jsonl"), "--host", "127.0.0.1", "--port", str(port),
]
announce(port)
from mcp_airlock.__main__ import main

main()
"""

_FASTMCP_RUNNER = """\
from fastmcp.server import create_proxy

sock = bind()
proxy = create_proxy(sys.argv[1], name="fastmcp-proxy")
announce(sock.getsockname()[1])
proxy.run(transport="http", path="/mcp", show_banner=False, log_level="warning", sockets=[sock])
"""


@dataclass(frozen=True)
class Peer:
    """Another MCP proxy, measured in front of the same upstream with the same read call.

    ``requirement`` is installed with pip into the peer's own virtual environment (a
    benchmark-only extra: its MCP SDK may conflict with ours); ``None`` runs the runner with this
    interpreter (the tests' stand-in peers). ``runner`` is the body of the runner script (see
    ``_RUNNER_PRELUDE``); ``mode`` is the protocol era its front end speaks, ``headers`` what every
    client request must carry.
    """

    name: str
    requirement: str | None
    distribution: str | None
    mode: str
    runner: str
    headers: Mapping[str, str] = field(default_factory=dict)
    how: str = ""


PEERS: tuple[Peer, ...] = (
    Peer(
        "mcp-proxy",
        "mcp-proxy==0.13.*",
        "mcp-proxy",
        LEGACY,
        _MCP_PROXY_RUNNER,
        how="its relay server (mcp_proxy.proxy_server) on one upstream session, served over streamable "
        "HTTP with its own routes; its SDK (mcp 1.x) speaks the handshake era only",
    ),
    Peer(
        "mcp-airlock",
        "mcp-airlock==0.4.*",
        "mcp-airlock",
        MODERN,
        _AIRLOCK_RUNNER,
        headers={"X-Airlock-Principal": "bench"},
        how="its CLI with a one-tool policy (get_note: L0, pass through) and a trusted principal header; "
        "2026-07-28 era only",
    ),
    Peer(
        "fastmcp",
        "fastmcp==4.*",
        "fastmcp",
        MODERN,
        _FASTMCP_RUNNER,
        how="fastmcp.server.create_proxy(upstream URL) with its default session strategy "
        "(a fresh upstream session per request), served over streamable HTTP",
    ),
)


def default_peers_dir() -> Path:
    """``$XDG_CACHE_HOME/shadowguard/peers`` (``~/.cache/shadowguard/peers`` when it is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shadowguard" / "peers"


def _setup_step(args: Sequence[str], what: str, timeout: float) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - our interpreter and the peer venv's pip
            list(args), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"{what} took more than {timeout:.0f} s") from exc
    except OSError as exc:
        raise PeerUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")]
        last = (errors or lines or [f"exit status {done.returncode}"])[-1]
        raise PeerUnavailable(f"{what} failed: {last[:300]}")
    return done.stdout


def install_peer(peer: Peer, peers_dir: Path, *, timeout: float = PEER_INSTALL_TIMEOUT_S) -> tuple[Path, str]:
    """(python, installed version) of ``peer``'s own virtual environment under ``peers_dir``.

    The environment is reused when it holds the same requirement (a marker file written after a
    complete install says so); otherwise it is created anew and the requirement installed with pip.
    Raises :class:`PeerUnavailable` naming the step that failed.
    """
    if peer.requirement is None:
        return Path(sys.executable), "local"
    venv = peers_dir / peer.name
    python = venv / "bin" / "python"
    marker = venv / PEER_MARKER
    if marker.is_file() and python.exists():
        try:
            installed = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError:
            installed = {}
        if isinstance(installed, dict) and installed.get("requirement") == peer.requirement:
            return python, str(installed.get("version"))
    try:
        if venv.exists():
            shutil.rmtree(venv)
        peers_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PeerUnavailable(f"preparing {venv} failed: {exc}") from exc
    _setup_step([sys.executable, "-m", "venv", str(venv)], f"creating {venv}", timeout)
    _setup_step(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", peer.requirement],
        f"pip install {peer.requirement}",
        timeout,
    )
    version = peer.requirement
    if peer.distribution is not None:
        script = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
        version = _setup_step(
            [str(python), "-c", script, peer.distribution], "reading its version", 60
        ).strip()
    marker.write_text(json.dumps({"requirement": peer.requirement, "version": version}), encoding="utf-8")
    return python, version


@dataclass
class PeerStatus:
    """A peer of the run: its installed version, and why it was not measured (``None``: it was)."""

    name: str
    mode: str
    how: str
    version: str | None = None
    not_measured: str | None = None


@dataclass
class ProxyPerfRow:
    """One path, kind, concurrency and era: every client's tools/call round trips, pooled."""

    path: str
    """``direct``, ``proxy`` (shadowguard) or a peer's name."""
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


@dataclass
class ProxyPerf:
    calls_per_client: int
    rows: list[ProxyPerfRow]
    peers: list[PeerStatus] = field(default_factory=list)

    def row(self, path: str, kind: str, clients: int, mode: str = MODERN) -> ProxyPerfRow:
        return next(
            r for r in self.rows if (r.path, r.kind, r.clients, r.mode) == (path, kind, clients, mode)
        )


def _p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class _Server:
    """A server subprocess on 127.0.0.1 that announces its URL on stderr (logged to a file).

    The URL counts once the announce line is there and a TCP connection to it is accepted.
    """

    def __init__(self, args: list[str], log: Path, announce: str, name: str | None = None) -> None:
        self.log = log
        default = Path(args[0]).name if len(args) < 2 else f"{Path(args[0]).name} {Path(args[1]).name}"
        self.name = name or default
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(  # noqa: S603 - the notes fixture, our console script, a peer runner
            args, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT
        )
        self.announce = announce

    def _failed(self, why: str) -> str:
        return f"{self.name} {why}:\n{self.log.read_text(errors='replace')[-2000:]}"

    def wait_url(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        url: str | None = None
        while time.monotonic() < deadline:
            if url is None:
                for line in self.log.read_text(errors="replace").splitlines():
                    if self.announce in line and "http://127.0.0.1:" in line:
                        url = line[line.index("http://") :].strip()
            if url is not None:
                port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                except OSError:
                    pass
                else:
                    return url
            if self.proc.poll() is not None:
                raise ProxyBenchError(self._failed(f"exited {self.proc.returncode}"))
            time.sleep(0.05)
        raise ProxyBenchError(self._failed(f"did not start in {STARTUP_TIMEOUT_S:.0f} s"))

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


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


async def _client_run(
    target: _Target, kind: str, client: int, calls: int, run: str
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
    async with create_mcp_http_client(headers=dict(target.headers)) as http:
        transport = streamable_http_client(target.url, http_client=http)
        async with Client(
            transport, mode=cast(Any, target.mode), cache=None, read_timeout_seconds=CALL_TIMEOUT_S
        ) as mcp_client:
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
                if target.guarded and kind == "write":
                    await _end(mcp_client, "commit", meta)
            if target.guarded and kind == "read":
                await _end(mcp_client, "rollback", meta)
    return times, failed


async def _end(mcp_client: Client, tool: str, meta: types.RequestParamsMeta) -> None:
    result = await mcp_client.call_tool(tool, {}, meta=meta)
    if result.is_error:
        text = " ".join(p.text for p in result.content if isinstance(p, types.TextContent))
        raise ProxyBenchError(f"{tool} through the proxy failed: {text[:500]}")


async def _measure_one(target: _Target, kind: str, clients: int, calls: int, run: str) -> ProxyPerfRow:
    per_client: dict[int, tuple[list[float], int]] = {}

    async def one(i: int) -> None:
        per_client[i] = await _client_run(target, kind, i, calls, run)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(clients):
            tg.start_soon(one, i)
    wall = time.perf_counter() - t0
    times = [t for ts, _ in per_client.values() for t in ts]
    return ProxyPerfRow(
        path=target.path,
        kind=kind,
        clients=clients,
        calls=len(times),
        failed=sum(f for _, f in per_client.values()),
        median_ms=statistics.median(times) if times else float("nan"),
        p99_ms=_p99(times) if times else float("nan"),
        calls_per_s=len(times) / wall if wall else 0.0,
        mode=target.mode,
    )


def _first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


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
    on_progress: Callable[[str], None] | None = None,
) -> ProxyPerf:
    """tools/call round trips of ``clients`` concurrent MCP clients over streamable HTTP, each in its
    own session (``_meta["shadowguard/session"]``), ``calls`` each: straight to the notes fixture
    (transactional), through ``shadowguard serve`` relaying to the same upstream, and through each
    of ``peers`` in front of it (installed under ``peers_dir`` first: :func:`install_peer`). With
    ``round_trips``, also through a second ``shadowguard serve`` in front of a second notes server
    on the same database that serves the transaction extension without piggybacking (path
    ``proxy-rt``: one round trip per savepoint, change set and release, as before version 1's
    piggyback feature).

    Reads are ``get_note`` (a passthrough read); writes are ``put_note`` (a guarded write), measured
    direct and through shadowguard only (the peers do not guard writes). Clients speak the
    2026-07-28 era, except towards a peer whose front end speaks only the handshake era; direct is
    then measured in that era too, and the peer's ratios are against it. Each configuration runs
    once, after one warm-up call per path, the paths interleaved at each concurrency. A peer that
    cannot be installed, started or called is left out with the reason (:attr:`ProxyPerf.peers`);
    any other failure raises :class:`ProxyBenchError`. The servers are subprocesses on 127.0.0.1
    and are stopped before this returns, whatever happens.
    """
    if not NOTES_SERVER.is_file():
        raise ProxyBenchError(f"the notes fixture is not here: {NOTES_SERVER} (run from a source checkout)")
    if calls < 1 or not clients or min(clients) < 1:
        raise ProxyBenchError("clients and calls must be at least 1")
    executable = shadowguard or str(Path(sys.executable).parent / "shadowguard")

    def notes(work: Path, name: str, *extra: str) -> _Server:
        db = str(work / "notes.sqlite")
        args = [sys.executable, str(NOTES_SERVER), "--db", db, "--port", "0", "--transactional", *extra]
        return _Server(args, work / f"{name}.log", "notes: listening on", name=name)

    def shadowguard_serve(work: Path, name: str, upstream_url: str) -> _Server:
        config = _proxy_config(work / f"{name}.yaml", upstream_url)
        return _Server(
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
        servers: list[_Server] = []
        try:
            upstream = notes(work, "notes")
            servers.append(upstream)
            upstream_url = upstream.wait_url()
            proxy = shadowguard_serve(work, "shadowguard", upstream_url)
            servers.append(proxy)
            targets = [_Target("direct", upstream_url), _Target("proxy", proxy.wait_url(), guarded=True)]
            if round_trips:
                upstream_rt = notes(work, "notes-no-piggyback", "--no-piggyback")
                servers.append(upstream_rt)
                proxy_rt = shadowguard_serve(work, "shadowguard-no-piggyback", upstream_rt.wait_url())
                servers.append(proxy_rt)
                targets.append(_Target("proxy-rt", proxy_rt.wait_url(), guarded=True))
            peer_targets: dict[str, tuple[_Target, PeerStatus, _Server]] = {}
            for peer, status in zip(peers, statuses, strict=True):
                if status.not_measured is not None:
                    continue
                if on_progress is not None:
                    on_progress(f"starting {peer.name}")
                runner = work / f"{peer.name}-runner.py"
                runner.write_text(_RUNNER_PRELUDE + peer.runner, encoding="utf-8")
                peer_work = work / peer.name
                peer_work.mkdir()
                server = _Server(
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
                target = _Target(peer.name, url, peer.mode, peer.headers, kinds=("read",))
                peer_targets[peer.name] = (target, status, server)
            if any(t.mode == LEGACY for t, _, _ in peer_targets.values()):
                targets.append(_Target("direct", upstream_url, LEGACY, kinds=("read",)))

            async def measure(target: _Target, kind: str, n: int, run: str) -> None:
                entry = peer_targets.get(target.path)
                try:
                    row = await _measure_one(target, kind, n, calls if run != "warmup" else 1, run)
                except Exception as exc:
                    if entry is None:
                        raise
                    cause = _first_error(exc)
                    entry[1].not_measured = f"{type(cause).__name__}: {cause}"[:300] + _last_line(
                        entry[2].tail()
                    )
                    del peer_targets[target.path]
                    return
                if run != "warmup":
                    rows.append(row)

            async def run_all() -> None:
                with anyio.fail_after(RUN_TIMEOUT_S):
                    for target in [*targets, *(t for t, _, _ in peer_targets.values())]:
                        await measure(target, "read", 1, "warmup")
                    for kind in PROXY_KINDS:
                        for n in clients:
                            for target in [*targets, *(t for t, _, _ in peer_targets.values())]:
                                if kind not in target.kinds:
                                    continue
                                if on_progress is not None:
                                    era = "" if target.mode == MODERN else f" ({target.mode})"
                                    on_progress(f"{target.path}{era} {kind}, {n} clients × {calls} calls")
                                await measure(target, kind, n, f"{kind}{n}")

            try:
                anyio.run(run_all)
            except Exception as exc:
                logs = "\n".join(f"--- {s.name}:\n{s.tail()}" for s in servers)
                raise ProxyBenchError(f"the benchmark failed: {exc!r}\n{logs}") from exc
        finally:
            for server in reversed(servers):
                server.stop()
    measured = {s.name for s in statuses if s.not_measured is None}
    rows = [r for r in rows if r.path in ("direct", "proxy", "proxy-rt") or r.path in measured]
    _ratios(rows)
    return ProxyPerf(calls_per_client=calls, rows=rows, peers=statuses)


def _last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return f" (last log line: {lines[-1][:300]})" if lines else ""
