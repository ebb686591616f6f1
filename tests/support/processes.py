"""Server processes for the proxy tests: a subprocess that announces its URL on stderr, the notes
fixture over HTTP, ``shadowguard serve`` on a config, an ASGI app behind uvicorn in a thread, and the
process-table helpers that find and kill a test's upstreams (``SG_TEST_MARKER``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from benchmark.fixtures import NOTES_SERVER as NOTES_SERVER
from benchmark.procs import startup_timeout_s

ROOT = Path(__file__).resolve().parents[2]
SHADOWGUARD = str(Path(sys.executable).parent / "shadowguard")
MARKER_ENV = "SG_TEST_MARKER"
RETAIL_SERVE = [SHADOWGUARD, "env", "serve", "--domain", "sandbox_external_retail"]
CTRL_C_MAIN = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from proxy.cli import main; main()"
)
"""``python -c`` code of a ``shadowguard`` run that takes Ctrl-C (SIGINT) as a terminal's would, even
when the tests run in a background job (which starts its children with SIGINT ignored)."""


class Process:
    """A server subprocess whose stderr goes to a file; it announces its URL there."""

    def __init__(
        self, args: list[str], log: Path, *, announce: str | None, env: Mapping[str, str] | None = None
    ):
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env={**os.environ, **(env or {})},
            cwd=str(ROOT),
        )
        self._announce = announce
        self._url: str | None = None
        self.audit: Path | None = None
        """The audit log a ``shadowguard serve`` process writes, when the test set one."""

    def ready(self) -> Process:
        """Wait for the announced URL (servers started together are waited for together)."""
        if self._url is None and self._announce is not None:
            self._url = self._wait(self._announce)
        return self

    def _wait(self, announce: str) -> str:
        deadline = time.monotonic() + startup_timeout_s()
        while time.monotonic() < deadline:
            for line in self.log.read_text(errors="replace").splitlines():
                if announce in line and "http://" in line:
                    return line[line.index("http://") :].strip()
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"{self.proc.args!r} exited {self.proc.returncode}:\n{self.log.read_text()}"
                )
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.proc.args!r} did not announce a URL:\n{self.log.read_text()}")

    def restart(self, args: list[str]) -> Process:
        """Start again (after a kill) with ``args``, and wait until it announces its URL."""
        assert self.proc.poll() is not None, "stop or kill the process first"
        self._log_file.close()
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log_file, cwd=str(ROOT)
        )
        self._url = None
        return self.ready()

    @property
    def url(self) -> str:
        """The URL the process announced (``ready()`` waits for it)."""
        if self._url is None:
            raise RuntimeError(f"{self.proc.args!r} has announced no URL: call ready() first")
        return self._url

    @property
    def base(self) -> str:
        return self.url.rsplit("/mcp", 1)[0]

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode


def pids_with_marker(marker: str) -> list[int]:
    """Processes started with ``SG_TEST_MARKER=marker`` in their environment (upstreams of a test)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
        if ") Z " in stat:
            return
        time.sleep(0.02)


def shadowguard_serve(config: Path) -> Process:
    """``shadowguard serve --config config`` (its log beside the config); ``ready()`` gives its URL."""
    return Process(
        [SHADOWGUARD, "serve", "--config", str(config)],
        config.with_suffix(".log"),
        announce="shadowguard serve: listening on",
    )


def shadowguard_serve_refused(config: Path) -> str:
    """Runs ``shadowguard serve --config config``, which must refuse to start (exit 1, within the start
    timeout); returns its stderr, which says why."""
    done = subprocess.run(
        [SHADOWGUARD, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=startup_timeout_s(),
        check=False,
    )
    assert done.returncode == 1, done.stderr
    return done.stderr


@contextmanager
def shadowguard_serving(configs: Mapping[str, Path]) -> Iterator[dict[str, Process]]:
    """:func:`shadowguard_serve` for each config by name, started together and ready; on exit every
    one is stopped, and each must have exited 0 (else its log is shown)."""
    processes: dict[str, Process] = {}
    try:
        for name, config in configs.items():
            processes[name] = shadowguard_serve(config)
        for process in processes.values():
            process.ready()
        yield processes
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
        failed = [
            f"{name} exited {code}:\n{processes[name].log.read_text()}"
            for name, code in codes.items()
            if code
        ]
        assert not failed, "\n".join(failed)


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """``app`` behind a real uvicorn server (lifespan on) on a free loopback port, in a thread of this
    process: yields its base URL. On exit the server shuts down, its lifespan with it, and must stop."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + startup_timeout_s()
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("the test server did not start")
                time.sleep(0.01)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        assert not thread.is_alive(), "the test server did not stop"


def notes_http_args(db: Path, port: int = 0, *, transactional: bool) -> list[str]:
    return [
        sys.executable,
        str(NOTES_SERVER),
        "--db",
        str(db),
        "--port",
        str(port),
        *(["--transactional"] if transactional else []),
    ]


class NotesServer(Process):
    """The notes fixture served over HTTP, keeping its notes in ``db`` (its log beside it)."""

    def __init__(self, db: Path, *extra_args: str, transactional: bool = True) -> None:
        args = [*notes_http_args(db, transactional=transactional), *extra_args]
        super().__init__(args, db.with_suffix(".log"), announce="notes: listening on")
        self.db = db

    def ready(self) -> NotesServer:
        super().ready()
        return self


def notes_http(db: Path, *, transactional: bool = True) -> NotesServer:
    """The notes fixture over HTTP on a free port, on ``db``; ``ready()`` waits for its URL."""
    return NotesServer(db, transactional=transactional)
