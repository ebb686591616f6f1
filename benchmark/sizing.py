"""Sizing a replica (docs/deploy.md): the proxy's resident memory with N open guard sessions.

    python -m benchmark.sizing [--sessions 0,100,200,400] [--out sizing.json]

One ``shadowguard serve`` in front of the notes fixture over HTTP, transactional: each guard session
opens an upstream connection and a transaction leg of its own, as a production session does. For each N,
N sessions (2026-07-28 clients naming their session in ``_meta``) have made one call (a read) and stay
open; the proxy's RSS (``/proc/<pid>/status`` VmRSS) is read once all N are open. Memory per session is
the slope of a least-squares line over the points. The upstream's own memory is not counted (sessions
holding uncommitted writes cost the upstream, not the proxy, their row changes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import anyio
from mcp import Client
from mcp.types import RequestParamsMeta

from benchmark.fixtures import NOTES_ANNOUNCE, NOTES_SERVER
from benchmark.perf_proxy import notes_proxy_config
from benchmark.procs import ServerProcess


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def _open_sessions(url: str, count: int, tag: str) -> None:
    async with Client(url, mode="2026-07-28", cache=None, read_timeout_seconds=120) as client:
        for i in range(count):
            meta = cast(RequestParamsMeta, {"shadowguard/session": f"sizing-{tag}-{i}"})
            result = await client.call_tool("get_note", {"id": "n1"}, meta=meta)
            if result.is_error:
                raise RuntimeError(f"session {i}: {result.content}")


def measure(counts: list[int]) -> dict[str, Any]:
    points: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="shadowguard-sizing-") as tmp:
        base = Path(tmp)
        notes = ServerProcess(
            [
                sys.executable,
                str(NOTES_SERVER),
                "--db",
                str(base / "notes.sqlite"),
                "--port",
                "0",
                "--transactional",
            ],
            base / "notes.log",
            NOTES_ANNOUNCE,
            name="notes",
        )
        try:
            upstream = notes.wait_url()
            config = notes_proxy_config(base / "proxy.yaml", upstream)
            serve = [str(Path(sys.executable).with_name("shadowguard")), "serve", "--config", str(config)]
            proxy = ServerProcess(serve, base / "proxy.log", "listening on")
            try:
                url = proxy.wait_url()
                opened = 0
                anyio.run(_open_sessions, url, 1, "warm")
                time.sleep(1)
                for count in sorted(counts):
                    anyio.run(_open_sessions, url, count - opened, f"n{count}")
                    opened = count
                    time.sleep(1)
                    points.append((count, _rss_mib(proxy.pid)))
            finally:
                proxy.stop()
        finally:
            notes.stop()
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
    return {
        "points": [{"sessions": x, "proxy_rss_mib": round(y, 1)} for x, y in points],
        "mib_per_session": round(slope, 3),
        "baseline_rss_mib": round(mean_y - slope * mean_x, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="0,100,200,400")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = measure([int(c) for c in args.sessions.split(",")])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
