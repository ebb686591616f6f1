"""``bench perf instructions``: what a call costs the proxy and the upstream in CPU instructions, counted by
valgrind's callgrind, so that runs on hosts of different speed (or one host at a busy hour) compare.

The notes fixture, ``shadowguard serve`` in front of it and the bare relay (the floor of ``bench perf
proxy --floor``) each run under ``valgrind --tool=callgrind --instr-atstart=no``. One MCP client makes
``calls`` calls of a kind, first ``WARMUP_CALLS`` uncounted, then ``callgrind_control`` turns counting on
in the process it calls and in the upstream, the counted calls run, counting stops and a dump is read.
Paths: ``direct`` (only the upstream counts), ``shadowguard`` and ``bare-relay`` (reads only). What a
path costs the upstream is the upstream's instructions per call on that path, so the participant's work
for a guarded call is ``upstream_instructions_per_call`` of shadowguard minus that of direct.

Instructions are not time: a cache miss or a system call costs no more here than an addition, and the
kernel's work (socket writes, the loopback network stack) is not counted at all. They answer "did this
change make the call path do less", not "how many milliseconds".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from benchmark.fixtures import BARE_RELAY_ANNOUNCE, BARE_RELAY_SERVER, NOTES_ANNOUNCE, NOTES_SERVER
from benchmark.perf_proxy import (
    BARE_RELAY,
    PROXY_KINDS,
    SERVE_ANNOUNCE,
    SHADOWGUARD,
    ProxyBenchError,
    _measure_one,
    _Target,
    notes_proxy_config,
)
from benchmark.procs import ServerProcess, stop_all

WARMUP_CALLS = 50
STARTUP_TIMEOUT_S = 600.0
"""Under callgrind a Python server starts tens of times slower than natively."""
INSTRUCTIONS_FIELDS = (
    "path",
    "kind",
    "calls",
    "proxy_instructions_per_call",
    "upstream_instructions_per_call",
)


@dataclass
class InstructionsRow:
    """One path and kind: instructions per counted call, in the proxy (None for direct) and the upstream."""

    path: str
    kind: str
    calls: int
    proxy_instructions_per_call: float | None
    upstream_instructions_per_call: float


def tools_missing() -> str | None:
    """Why the benchmark cannot run here (valgrind or callgrind_control not on PATH), else None."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found: install valgrind (Debian: apt install valgrind)"
    return None


class _Counted:
    """A server process under callgrind whose counting is switched on and off around a window."""

    def __init__(self, name: str, args: list[str], work: Path, announce: str) -> None:
        self.out = work / f"{name}.callgrind"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}"]
        self.server = ServerProcess([*command, *args], work / f"{name}.log", announce, name=name)

    def url(self) -> str:
        return self.server.wait_url(STARTUP_TIMEOUT_S)

    def control(self, *options: str) -> None:
        run = subprocess.run(  # noqa: S603 - valgrind's own tool, on our own child
            ["callgrind_control", *options, str(self.server.pid)],  # noqa: S607 - looked up by tools_missing
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if run.returncode != 0:
            raise ProxyBenchError(
                f"callgrind_control {' '.join(options)} on {self.server.name}: {run.stderr}"
            )

    def dumped(self) -> int:
        """Dump what was counted since the last dump; the instructions it holds."""
        before = set(self.out.parent.glob(self.out.name + "*"))
        self.control("--dump")
        for _ in range(600):
            new = set(self.out.parent.glob(self.out.name + "*")) - before
            for path in new:
                total = _total(path)
                if total is not None:
                    return total
            time.sleep(0.1)
        raise ProxyBenchError(f"{self.server.name}: callgrind wrote no dump")


def _total(path: Path) -> int | None:
    """The ``totals:`` line of a callgrind dump (its last: None while the dump is being written)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    return None


def measure_instructions(
    calls: int = 300,
    *,
    kinds: Sequence[str] = PROXY_KINDS,
    on_progress: Callable[[str], None] | None = None,
) -> list[InstructionsRow]:
    """Instructions per call of each path and kind (module docstring); ProxyBenchError when valgrind is
    missing, a server does not start or a call fails."""
    if calls < 1:
        raise ProxyBenchError("calls must be at least 1")
    if not kinds or set(kinds) - set(PROXY_KINDS):
        raise ProxyBenchError(f"kinds must be some of {PROXY_KINDS}, not {list(kinds)}")
    missing = tools_missing()
    if missing is not None:
        raise ProxyBenchError(missing)
    serve = [sys.executable, str(Path(sys.executable).parent / "shadowguard"), "serve"]
    rows: list[InstructionsRow] = []
    with tempfile.TemporaryDirectory(prefix="sg-perf-instructions-") as tmp:
        work = Path(tmp)
        servers: list[_Counted] = []
        try:
            note = on_progress or (lambda _: None)
            note("starting the notes fixture under callgrind")
            args = [sys.executable, str(NOTES_SERVER), "--db", str(work / "notes.sqlite"), "--port", "0"]
            upstream = _Counted("notes", [*args, "--transactional"], work, NOTES_ANNOUNCE)
            servers.append(upstream)
            upstream_url = upstream.url()
            note("starting shadowguard serve and the bare relay under callgrind")
            config = notes_proxy_config(work / "shadowguard.yaml", upstream_url)
            proxy = _Counted(SHADOWGUARD, [*serve, "--config", str(config)], work, SERVE_ANNOUNCE)
            servers.append(proxy)
            relay = _Counted(
                BARE_RELAY, [sys.executable, str(BARE_RELAY_SERVER), upstream_url], work, BARE_RELAY_ANNOUNCE
            )
            servers.append(relay)
            paths: list[tuple[str, str, _Counted | None]] = [
                ("direct", upstream_url, None),
                (SHADOWGUARD, proxy.url(), proxy),
                (BARE_RELAY, relay.url(), relay),
            ]
            for path, url, counted in paths:
                for kind in kinds:
                    if path == BARE_RELAY and kind != "read":
                        continue
                    note(f"{path} {kind}: {calls} counted calls")
                    rows.append(_count(path, url, kind, calls, counted, upstream))
        finally:
            stop_all([s.server for s in servers])
    return rows


def _count(
    path: str, url: str, kind: str, calls: int, counted: _Counted | None, upstream: _Counted
) -> InstructionsRow:
    target = _Target(path, url, guarded=path == SHADOWGUARD)
    anyio.run(_measure_one, target, kind, 1, WARMUP_CALLS, f"warmup-{kind}")
    watched = [s for s in (counted, upstream) if s is not None]
    for server in watched:  # counting is off outside the windows, and each window ends with a dump
        server.control("--instr=on")
    try:
        row = anyio.run(_measure_one, target, kind, 1, calls, f"counted-{kind}")
    finally:
        for server in watched:
            server.control("--instr=off")
    if row.failed:
        raise ProxyBenchError(f"{path} {kind}: {row.failed} of {calls} counted calls failed")
    made = row.calls
    proxy = counted.dumped() / made if counted is not None else None
    return InstructionsRow(path, kind, made, proxy, upstream.dumped() / made)


__all__ = ["INSTRUCTIONS_FIELDS", "InstructionsRow", "measure_instructions", "tools_missing"]
