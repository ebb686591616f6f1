"""`shadowguard bench perf --proxy`: what it prints (never how fast it is), with tiny numbers."""

from __future__ import annotations

from typer.testing import CliRunner

from proxy.cli import _mount_benchmark, app


def test_cli_proxy_prints_a_row_per_path_kind_and_concurrency() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "--proxy", "--clients", "1", "--clients", "2", "--calls", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "tools/call round trips over HTTP" in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ ")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in rows]
    body = [c for c in cells if c[0] in ("direct", "shadowguard")]
    assert [(c[0], c[1], c[2]) for c in body] == [
        (path, kind, n)
        for kind in ("read", "write")
        for n in ("1", "2")
        for path in ("direct", "shadowguard")
    ]
    assert all(int(c[3]) + int(c[4]) == int(c[2]) * 3 for c in body)
    assert all(c[8] == "-" for c in body if c[0] == "direct")
    assert "Peer proxies (mcp-proxy, mcp-airlock, FastMCP's proxy) were not measured." in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("perf proxy: median through shadowguard vs direct: read ×1 ")
    assert "; write ×2 " in last
