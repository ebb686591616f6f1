"""``mcp-server-git`` (PyPI) behind the proxy, on a temporary git repository.

The server speaks the 2026-07-28 era to the proxy (it is built on the MCP Python SDK 2.x). Its tools
are listed through the proxy exactly as directly, a read (``git_status``, ``git_log``) and writes
(``git_add``, ``git_commit``: a journaled upstream, so they take effect at once) are called
through it in both protocol eras, over HTTP and over stdio, and the repository shows the result.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support.processes import SHADOWGUARD
from tests.support.proxy import http_proxy_config, request_meta, text

pytestmark = pytest.mark.anyio
ERAS = ["legacy", "2026-07-28"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


@pytest.fixture(scope="module")
def repo(module_tmp: Path) -> Path:
    repo = module_tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "agent@example.com")
    git(repo, "config", "user.name", "Agent")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


@pytest.fixture(scope="module")
def config(module_tmp: Path, git_server: Path, repo: Path) -> Path:
    upstream = {
        "name": "git",
        "transport": "stdio",
        "command": str(git_server),
        "args": ["--repository", str(repo)],
    }
    return http_proxy_config(module_tmp / "git.yaml", upstream)


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_are_listed_as_the_server_lists_them(
    git_server: Path, repo: Path, proxy_url: str, mode: str
) -> None:
    upstream = StdioServerParameters(command=str(git_server), args=["--repository", str(repo)])
    async with Client(upstream, mode=mode, cache=None) as direct:
        expected = (await direct.list_tools()).tools
    async with Client(proxy_url, mode=mode, cache=None) as agent:
        listed = {t.name: t for t in (await agent.list_tools()).tools}
    assert {"commit", "rollback"} <= set(listed)
    for tool in expected:
        assert listed[tool.name] == tool, tool.name


@pytest.mark.parametrize(
    ("transport", "mode"), [("http", "legacy"), ("http", "2026-07-28"), ("stdio", "legacy")]
)
async def test_a_read_and_writes_reach_the_repository(
    config: Path, repo: Path, proxy_url: str, transport: str, mode: str
) -> None:
    name = f"{transport}-{mode}.txt"
    (repo / name).write_text(f"written for {transport} {mode}\n")
    target: Any = proxy_url
    if transport == "stdio":
        target = StdioServerParameters(
            command=SHADOWGUARD, args=["serve", "--config", str(config), "--stdio"]
        )
    meta = request_meta({"shadowguard/session": f"git-{transport}-{mode}"}) if mode != "legacy" else None
    path = {"repo_path": str(repo)}
    async with Client(target, mode=mode, cache=None, read_timeout_seconds=60) as agent:
        status = await agent.call_tool("git_status", path, meta=meta)
        assert not status.is_error, text(status)
        assert name in text(status)
        added = await agent.call_tool("git_add", {**path, "files": [name]}, meta=meta)
        assert not added.is_error, text(added)
        committed = await agent.call_tool("git_commit", {**path, "message": f"add {name}"}, meta=meta)
        assert not committed.is_error, text(committed)
        log = await agent.call_tool("git_log", {**path, "max_count": 1}, meta=meta)
        assert f"add {name}" in text(log)
        done = await agent.call_tool("commit", {}, meta=meta)
        assert not done.is_error, text(done)
    assert git(repo, "log", "-1", "--format=%s").strip() == f"add {name}"
    assert name in git(repo, "show", "--name-only", "--format=", "HEAD")
