"""``bench run --engine ray`` against a real local Ray head on loopback (started here with ``ray start
--head --block``, stopped by ending that process): its rows equal the in-process engine's row for row
(everything but the timings: transcript, outcome, judge, guard facts), and a resumed Ray run completes
a cut file to the same rows. Starting a Ray head takes tens of seconds: ``slow`` marker
(``make slow-check``)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmark.procs import startup_timeout_s

ROOT = Path(__file__).resolve().parents[2]
TASKS = "sandbox_neobank*_00[12]"  # 10 tasks of one domain
SHADOWGUARD = [str(Path(sys.executable).with_name("shadowguard"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


RAY_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
"""The head and its clients share a token of this test's own (never ~/.ray/auth_token)."""


def _run(out: Path, *extra: str, resume: bool = False) -> None:
    argv = [*SHADOWGUARD, "bench", "run", "--agent", "oracle", "--arms", "off,guard", "--repeat", "2"]
    argv += ["--tasks", TASKS, "--out", str(out), *extra, *(["--resume"] if resume else [])]
    env = os.environ | RAY_ENV
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _timeless(value: Any) -> Any:
    """A row without its timings (``execution_time``, ``added_ms``...), the only fields that may differ."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not (k.endswith("_ms") or "time" in k)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _rows(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        md = row["metadata"]
        key = (row["uid"], md.get("trajectory"), md["repetition"], md["arm"])
        assert key not in rows, f"{key} twice"
        assert not row["is_system_error"], row["test_result"]
        rows[key] = _timeless(row)
    return rows


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = _free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    temp = tmp_path_factory.mktemp("ray")
    argv = [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}"]
    argv += ["--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    log = (temp / "head.log").open("w")
    env = os.environ | RAY_ENV
    head = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + startup_timeout_s()
    while time.monotonic() < deadline:
        assert head.poll() is None, (temp / "head.log").read_text()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
        log.close()


@pytest.mark.slow
def test_ray_rows_equal_in_process_rows_and_resume(ray_head: str, tmp_path: Path) -> None:
    local = tmp_path / "in-process.jsonl"
    on_ray = tmp_path / "ray.jsonl"
    _run(local)
    _run(on_ray, "--engine", "ray", "--address", ray_head)
    expected = _rows(local)
    assert len(expected) == 10 * 2 * 2
    assert _rows(on_ray) == expected
    meta = (tmp_path / "ray_run_metadata.yaml").read_text(encoding="utf-8")
    assert f"engine: 'ray (cluster: {ray_head})'" in meta or f"engine: ray (cluster: {ray_head})" in meta

    # a run cut short: the first 15 rows kept, the rest run again on Ray with --resume
    lines = on_ray.read_text(encoding="utf-8").splitlines(keepends=True)
    on_ray.write_text("".join(lines[:15]), encoding="utf-8")
    _run(on_ray, "--engine", "ray", "--address", ray_head, resume=True)
    assert _rows(on_ray) == expected


def test_address_needs_the_ray_engine(tmp_path: Path) -> None:
    argv = [*SHADOWGUARD, "bench", "run", "--agent", "oracle", "--address", "127.0.0.1:1"]
    done = subprocess.run(
        [*argv, "--out", str(tmp_path / "x.jsonl")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "--address goes with --engine ray" in done.stderr
    assert not (tmp_path / "x.jsonl").exists()
