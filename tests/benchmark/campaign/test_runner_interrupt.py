"""`shadowguard bench run --workers 2` stops on a SIGINT sent to its main process alone (``kill -INT``),
not only on a terminal's Ctrl-C (which signals the whole process group): the run ends with the
"interrupted ... --resume" line, exit 130, and leaves no worker process behind, even while every
worker waits on a model endpoint that does not answer (the run must not wait for in-flight units)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmark.campaign.results import iter_results
from tests.support.processes import CTRL_C_MAIN

HANG_GUARD_S = 120.0
"""Far above what stopping takes; only there so that a run that never stops fails instead of hanging."""
START_GUARD_S = 400.0
"""Far above what starting two workers takes on a loaded machine (only a hang guard as well)."""


class SilentEndpoint:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: a model endpoint whose
    requests are all in flight for as long as the client waits."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)  # accept() wakes up to see close(): closing alone does not wake it
        self.port: int = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self.server.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentEndpoint]:
    endpoint = SilentEndpoint()
    try:
        yield endpoint
    finally:
        endpoint.close()


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found.update(int(p) for p in text.split())
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _command(out: Path, config: Path) -> list[str]:
    command = [sys.executable, "-c", CTRL_C_MAIN, "bench", "run"]
    command += ["--agent", "llm", "--llm-config", str(config), "--arms", "off", "--workers", "2"]
    return [*command, "--domain", "sandbox_external_retail", "--out", str(out)]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from Linux /proc")
def test_sigint_to_the_main_process_stops_a_multi_worker_run(tmp_path: Path, silent: SilentEndpoint) -> None:
    out = tmp_path / "w.jsonl"
    config = tmp_path / "llm.yaml"
    endpoint = {"base_url": f"http://127.0.0.1:{silent.port}/v1", "model": "silent", "retries": 0}
    config.write_text(yaml.safe_dump({"endpoint": {**endpoint, "timeout_s": 3600}}), encoding="utf-8")
    proc = subprocess.Popen(
        _command(out, config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + START_GUARD_S
        while time.monotonic() < deadline and proc.poll() is None and len(silent.accepted) < 2:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        assert len(silent.accepted) >= 2, "both workers should be waiting on the endpoint"
        workers = _children(proc.pid)
        assert len(workers) >= 2, workers
        proc.send_signal(signal.SIGINT)  # the main process only, not its group
        try:
            _, stderr = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the run did not stop after SIGINT to its main process")
        assert proc.returncode == 130, stderr
        assert "interrupted:" in stderr and "run again with --resume" in stderr, stderr
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.05)
        assert not [p for p in workers if _alive(p)], "worker processes outlived the run"
        assert [row for _, row in iter_results(out)] == []  # no unit finished; the file is valid
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()  # waits, and closes the pipes
