"""`shadowguard bench perf proxy`: what it prints (never how fast it is), with tiny numbers.

The peer proxies come from the package index, which the tests do not reach: here the peer
machinery runs stand-in peers (a notes server of its own, a runner that will not start, a
requirement pip cannot install), so that installing, starting, measuring and reporting a peer are
exercised offline; the real peers run only from the command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from benchmark import perf_peers, perf_proxy
from benchmark.fixtures import BARE_RELAY_ANNOUNCE, BARE_RELAY_SERVER, NOTES_ANNOUNCE, NOTES_SERVER
from benchmark.procs import ServerProcess
from proxy.cli import _mount_benchmark, app

FAKE_NOTES = f"""\
import runpy

probe = bind()
port = probe.getsockname()[1]
probe.close()
sys.argv = ["notes", "--db", sys.argv[2] + "/peer.sqlite", "--port", str(port), "--transactional"]
announce(port)
runpy.run_path({str(NOTES_SERVER)!r}, run_name="__main__")
"""


def _cells(output: str) -> list[list[str]]:
    rows = [line for line in output.splitlines() if line.startswith("│ ")]
    return [[c.strip() for c in line.strip("│").split("│")] for line in rows]


def test_cli_proxy_prints_a_row_per_path_kind_and_concurrency() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--no-peers", "--clients", "1", "--clients", "2", "--calls", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "tools/call round trips over HTTP" in result.output
    body = [c for c in _cells(result.output) if c[0] in ("direct", "shadowguard")]
    assert [(c[0], c[1], c[2]) for c in body] == [
        (path, kind, n)
        for kind in ("read", "write")
        for n in ("1", "2")
        for path in ("direct", "shadowguard")
    ]
    assert all(int(c[3]) + int(c[4]) == int(c[2]) * 3 for c in body)
    assert all(c[8] == "-" and c[11] == "-" for c in body if c[0] == "direct")
    assert all(c[11].startswith(("+", "-")) and c[11] != "-" for c in body if c[0] == "shadowguard")
    assert "Peer proxies (mcp-proxy, mcp-airlock, fastmcp) were not measured (--no-peers)." in result.output
    lines = result.output.strip().splitlines()
    assert lines[-3].startswith("perf proxy: median through shadowguard vs direct: read ×1 ")
    assert "; write ×2 " in lines[-3]
    assert lines[-2].startswith("perf proxy: read ×1 median overhead vs direct: shadowguard ")
    assert lines[-1].startswith("perf proxy: read ×2 median overhead vs direct: shadowguard ")


def test_cli_proxy_json_has_the_documented_row_fields() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--no-peers", "--clients", "2", "--calls", "2", "-f", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    rows = document["rows"]
    assert [(r["path"], r["kind"], r["clients"]) for r in rows] == [
        (path, kind, 2) for kind in ("read", "write") for path in ("direct", "shadowguard")
    ]
    for row in rows:
        assert list(row)[: len(perf_proxy.JSON_FIELDS)] == list(perf_proxy.JSON_FIELDS)
        assert row["ok"] + row["failed"] == 4
        if row["path"] == "direct":
            assert row["proxy_cpu_ms_per_call"] is None and row["median_ratio"] is None
        else:
            assert isinstance(row["proxy_cpu_ms_per_call"], float) and row["proxy_cpu_ms_per_call"] >= 0
            assert row["median_ratio"] == row["median_ms"] / next(
                r["median_ms"] for r in rows if (r["path"], r["kind"]) == ("direct", row["kind"])
            )
    assert document["calls_per_client"] == 2 and document["peers"] == []


def test_cli_proxy_measures_only_the_kinds_asked_for() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--no-peers", "--clients", "1", "--calls", "1", "--kind", "read"]
    result = CliRunner().invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 0, result.output
    assert {r["kind"] for r in json.loads(result.stdout)["rows"]} == {"read"}
    result = CliRunner().invoke(app, [*args[:-1], "delete"])
    assert result.exit_code == 1 and "kinds must be some of" in result.output


def test_cli_proxy_measures_installed_peers_and_names_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = (
        perf_peers.Peer(
            "stand-in", None, None, perf_peers.LEGACY, FAKE_NOTES, how="a notes server of its own"
        ),
        perf_peers.Peer(
            "no-start", None, None, perf_peers.MODERN, 'raise SystemExit("stand-in: refusing to start")\n'
        ),
        perf_peers.Peer(
            "no-install", str(tmp_path / "no-such-package"), "no-such-package", perf_peers.MODERN, ""
        ),
    )
    monkeypatch.setattr(perf_peers, "PEERS", peers)
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--clients", "1", "--calls", "2", "--round-trips"]
    args += ["--peers-dir", str(tmp_path / "peers"), "--require-peers"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # --require-peers: two peers were not measured
    reads = [(c[0], c[3], c[4]) for c in _cells(result.output) if c[1] == "read"]
    assert reads == [
        ("direct", "2", "0"),
        ("shadowguard", "2", "0"),
        ("shadowguard, no piggyback", "2", "0"),
        ("direct (legacy)", "2", "0"),
        ("stand-in local (legacy)", "2", "0"),
    ]
    text = " ".join(result.output.split())
    assert "peer stand-in local: a notes server of its own." in text
    assert "peer no-start: not measured: no-start exited 1" in text
    assert "stand-in: refusing to start" in text
    assert f"peer no-install: not measured: pip install {tmp_path / 'no-such-package'} failed: ERROR" in text
    assert "error: not measured: no-start, no-install (--require-peers)" in text
    assert "stand-in local (legacy) +" in text or "stand-in local (legacy) -" in text


def test_a_peer_environment_is_reused_when_it_holds_the_pinned_requirement(tmp_path: Path) -> None:
    peer = perf_peers.Peer("pinned", "pinned==1.*", "pinned", perf_peers.MODERN, "")
    venv = tmp_path / "pinned"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / perf_peers.PEER_MARKER).write_text(json.dumps({"requirement": "pinned==1.*", "version": "1.2"}))
    assert perf_peers.install_peer(peer, tmp_path) == (venv / "bin" / "python", "1.2")
    missing = str(tmp_path / "pinned-2")  # a local path: pip fails at once, without the index
    other = perf_peers.Peer("pinned", missing, "pinned", perf_peers.MODERN, "")
    with pytest.raises(perf_peers.PeerUnavailable, match=f"pip install {missing} failed: ERROR"):
        perf_peers.install_peer(other, tmp_path, timeout=60)
    assert not (venv / perf_peers.PEER_MARKER).exists()  # the stale environment was replaced, not reused


def test_an_index_that_does_not_answer_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip says "No matching distribution" both for a version that does not exist and for an index it
    could not reach; the peer's error tells them apart (the peer tests skip only on the second)."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # discard port: refused
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    peer = perf_peers.Peer("offline", "no-such-peer-sg==1.0", "no-such-peer-sg", perf_peers.MODERN, "")
    with pytest.raises(perf_peers.PeerUnavailable) as caught:
        perf_peers.install_peer(peer, tmp_path, timeout=120)
    message = str(caught.value)
    assert "No matching distribution" in message and "the package index did not answer" in message
    assert "Connection refused" in message


def test_a_guarded_session_commits_every_ten_writes_at_one_client_and_each_write_with_several() -> None:
    assert perf_proxy.writes_per_commit(None, 1) == perf_proxy.WRITES_PER_COMMIT == 10
    assert perf_proxy.writes_per_commit(None, 8) == 1
    assert perf_proxy.writes_per_commit(3, 8) == 3
    with pytest.raises(perf_proxy.ProxyBenchError, match="at least 1"):
        perf_proxy.writes_per_commit(0, 1)


def test_cli_proxy_reports_the_writes_per_commit_of_guarded_writes() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--no-peers", "--clients", "1", "--calls", "3", "--kind", "write"]
    result = CliRunner().invoke(app, [*args, "--writes-per-commit", "2", "-f", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["path"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["shadowguard"]["writes_per_commit"] == 2 and rows["direct"]["writes_per_commit"] is None
    assert rows["shadowguard"]["ok"] == 3


def test_cli_proxy_floor_measures_reads_through_the_bare_relay_and_every_path_costs_the_upstream() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "proxy", "--no-peers", "--floor", "--clients", "1", "--calls", "3"]
    result = CliRunner().invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["path"], r["kind"]) for r in rows] == [
        ("direct", "read"),
        ("shadowguard", "read"),
        (perf_proxy.BARE_RELAY, "read"),
        ("direct", "write"),
        ("shadowguard", "write"),
    ]
    floor = rows[2]
    assert floor["ok"] == 3 and floor["failed"] == 0 and isinstance(floor["proxy_cpu_ms_per_call"], float)
    assert all(isinstance(r["upstream_cpu_ms_per_call"], float) for r in rows)
    result = CliRunner().invoke(app, [*args, "--kind", "read"])
    assert result.exit_code == 0, result.output
    assert "bare relay (floor) +" in result.output or "bare relay (floor) -" in result.output


def test_the_bare_relay_answers_as_the_upstream_and_refuses_other_methods(tmp_path: Path) -> None:
    notes = ServerProcess(
        [sys.executable, str(NOTES_SERVER), "--db", str(tmp_path / "n.sqlite"), "--port", "0"],
        tmp_path / "notes.log",
        NOTES_ANNOUNCE,
    )
    with notes:
        upstream = notes.wait_url()
        relay = ServerProcess(
            [sys.executable, str(BARE_RELAY_SERVER), upstream], tmp_path / "relay.log", BARE_RELAY_ANNOUNCE
        )
        with relay:
            url = relay.wait_url()

            async def read(target: str) -> tuple[bool, Any]:
                async with Client(streamable_http_client(target), cache=None) as client:
                    result = await client.call_tool("get_note", {"id": "n1"})
                return result.is_error, result.structured_content

            relayed = anyio.run(read, url)
            assert relayed == anyio.run(read, upstream) and relayed[0] is False
            assert httpx.get(url).status_code == 405


def test_a_configurations_calls_are_split_over_rounds_and_each_path_takes_each_position() -> None:
    assert perf_proxy.round_sizes(10, 4) == [3, 3, 2, 2]
    assert perf_proxy.round_sizes(3, 4) == [1, 1, 1]
    assert perf_proxy.round_sizes(1, 1) == [1]
    with pytest.raises(perf_proxy.ProxyBenchError):
        perf_proxy.round_sizes(5, 0)
    paths = ["direct", "shadowguard", "airlock"]
    orders = [perf_proxy.round_order(paths, r) for r in range(len(paths))]
    assert orders[0] == paths and orders[1] == ["shadowguard", "airlock", "direct"]
    for path in paths:
        assert sorted(order.index(path) for order in orders) == [0, 1, 2]


def test_a_row_pools_its_rounds() -> None:
    target = perf_proxy._Target("shadowguard", "http://127.0.0.1:1/mcp", guarded=True, pid=1)
    samples = [
        perf_proxy._Sample([1.0, 2.0, 3.0], 1, 0.5, 0.2, 0.4),
        perf_proxy._Sample([10.0, 20.0], 0, 1.5, 0.3, 0.6),
    ]
    row = perf_proxy._pooled(target, "read", 1, None, samples)
    assert (row.calls, row.failed, row.median_ms, row.p99_ms) == (5, 1, 3.0, 20.0)
    assert row.calls_per_s == 5 / 2.0
    assert row.proxy_cpu_ms_per_call == pytest.approx(500 / 6)
    assert row.upstream_cpu_ms_per_call == pytest.approx(1000 / 6)
