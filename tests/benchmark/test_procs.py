"""The process runner (benchmark.procs) with real subprocesses: the announced URL once the port accepts,
a server that exits or never announces as an error quoting its output, stop's SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2
import pytest

from benchmark.fixtures import NOTES_ANNOUNCE, NOTES_SERVER
from benchmark.perf_proxy import ProxyBenchError
from benchmark.procs import (
    START_TIMEOUT_ENV,
    STARTUP_TIMEOUT_S,
    ServerError,
    ServerProcess,
    startup_timeout_s,
)

SILENT = "import time; print('starting, never announcing', flush=True); time.sleep(60)"


def test_the_notes_fixture_starts_answers_and_stops(tmp_path: Path) -> None:
    args = [sys.executable, str(NOTES_SERVER), "--db", str(tmp_path / "n.sqlite"), "--port", "0"]
    with ServerProcess(args, tmp_path / "notes.log", NOTES_ANNOUNCE, name="notes") as server:
        url = server.wait_url()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        assert server.wait_url() == url
        response = httpx2.get(url.rsplit("/mcp", 1)[0] + "/nothing-here", timeout=10)
        assert response.status_code == 404
        assert NOTES_ANNOUNCE in server.output()
    assert server.proc.returncode is not None
    assert server.stop() == server.proc.returncode  # stopping again does nothing more


def test_a_server_that_exits_is_an_error_with_its_output(tmp_path: Path) -> None:
    args = [sys.executable, "-c", "import sys; print('bad flag --nope', file=sys.stderr); sys.exit(3)"]
    server = ServerProcess(args, tmp_path / "x.log", "listening on", name="broken")
    with pytest.raises(ServerError, match=r"(?s)broken exited 3:.*bad flag --nope"):
        server.wait_url()
    server.stop()


def test_a_server_that_never_announces_times_out_and_is_stopped(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", SILENT], tmp_path / "s.log", "listening on")
    with pytest.raises(ProxyBenchError, match=r"(?s)did not start in 1 s:.*never announcing"):
        server.wait_url(timeout_s=1.0)  # the benchmarks' error is the runner's: one except covers both
    assert server.stop(timeout_s=10) == -15  # SIGTERM
    assert server.name == f"{Path(sys.executable).name} -c"


def test_the_start_timeout_is_the_environment_s_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(START_TIMEOUT_ENV, raising=False)
    assert startup_timeout_s() == STARTUP_TIMEOUT_S >= 180
    monkeypatch.setenv(START_TIMEOUT_ENV, "1")
    server = ServerProcess([sys.executable, "-c", SILENT], tmp_path / "s.log", "listening on")
    with pytest.raises(ServerError, match=r"did not start in 1 s"):
        server.wait_url()  # no timeout given: the environment's
    server.stop(timeout_s=10)


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan", ""])
def test_a_start_timeout_that_is_not_a_positive_number_is_an_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(START_TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=START_TIMEOUT_ENV):
        startup_timeout_s()


def test_a_server_needs_a_command(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a command"):
        ServerProcess([], tmp_path / "none.log", "x")
