"""The peer proxies ``bench perf proxy`` measures beside shadowguard: how each is installed (its own
virtual environment, from the package index) and started (a generated runner script)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MODERN = "2026-07-28"
LEGACY = "legacy"
"""Client modes (protocol eras) of the ``mcp.Client`` that drives each path."""
PEER_INSTALL_TIMEOUT_S = 900.0
PEER_MARKER = "shadowguard-peer.json"


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
        # pip ends an install it could not reach the index for with "No matching distribution", the
        # same words as for a version that does not exist; its retry warnings tell the two apart
        broken = next((line for line in lines if "connection broken by" in line), None)
        reached = f" (the package index did not answer: {broken[:300]})" if broken else ""
        raise PeerUnavailable(f"{what} failed: {last[:300]}{reached}")
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
