"""Third-party peers for the relay's tests, installed from the package registries on first use.

The MCP servers the proxy relays to (``@modelcontextprotocol/server-everything`` from npm,
``mcp-server-git`` from PyPI) and the official TypeScript SDK client (``@modelcontextprotocol/sdk``)
are installed into the user's cache (``$XDG_CACHE_HOME/shadowguard/peers``, as ``shadowguard bench
perf`` does for its peer proxies) and reused while the pinned version is there. Nothing of them is
committed. A test that needs a peer is skipped, with the reason, only when the registry cannot be
reached; any other install failure fails it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmark.perf_peers import Peer, PeerUnavailable, default_peers_dir, install_peer
from tests.support.processes import shadowguard_serve

EVERYTHING = ("@modelcontextprotocol/server-everything", "2026.8.31")
TS_SDK = ("@modelcontextprotocol/sdk", "1.32.2")
GIT_SERVER = "mcp-server-git==2026.10.19"
INSTALL_TIMEOUT_S = 900.0
MARKER = "shadowguard-peer.json"
_OFFLINE = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ECONNRESET",
    "ETIMEDOUT",
    "ENETUNREACH",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Could not fetch URL",
    "Max retries exceeded",
)


def _unreachable(message: str) -> bool:
    return any(sign in message for sign in _OFFLINE)


def npm_package(package: str, version: str) -> Path:
    """The ``node_modules`` folder holding ``package@version`` (installed with npm if missing)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the npm peers (this machine has neither on PATH)")
    folder = default_peers_dir() / ("npm-" + package.rsplit("/", 1)[-1])
    marker = folder / MARKER
    spec = f"{package}@{version}"
    if marker.is_file() and json.loads(marker.read_text()).get("requirement") == spec:
        return folder / "node_modules"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "package.json").write_text('{"private": true}\n')
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", spec],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {spec} took more than {INSTALL_TIMEOUT_S:.0f} s (registry unreachable?)")
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        if _unreachable(output):
            pytest.skip(f"the npm registry is unreachable: npm install {spec}: {output[-300:]}")
        pytest.fail(f"npm install {spec} failed: {output[-1000:]}")
    marker.write_text(json.dumps({"requirement": spec, "version": version}))
    return folder / "node_modules"


def pip_peer(name: str, requirement: str, distribution: str) -> Path:
    """The ``bin`` folder of a virtual environment holding ``requirement`` (benchmark.perf_peers)."""
    try:
        python, _ = install_peer(
            Peer(name=name, requirement=requirement, distribution=distribution, runner="", mode="", how=""),
            default_peers_dir(),
            timeout=INSTALL_TIMEOUT_S,
        )
    except PeerUnavailable as exc:
        if _unreachable(str(exc)):
            pytest.skip(f"the package index is unreachable: {exc}")
        raise
    return python.parent


@pytest.fixture(scope="session")
def everything_server() -> Path:
    return npm_package(*EVERYTHING) / ".bin" / "mcp-server-everything"


@pytest.fixture(scope="session")
def ts_sdk() -> Path:
    return npm_package(*TS_SDK) / "@modelcontextprotocol" / "sdk"


@pytest.fixture(scope="session")
def git_server() -> Path:
    return pip_peer("mcp-server-git", GIT_SERVER, "mcp-server-git") / "mcp-server-git"


@pytest.fixture(scope="module")
def proxy_url(config: Path) -> Iterator[str]:
    """``shadowguard serve`` on the module's ``config`` fixture: its MCP URL; it must exit 0."""
    process = shadowguard_serve(config).ready()
    yield process.url
    assert process.stop() == 0, process.log.read_text()
