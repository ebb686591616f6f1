"""Server subprocesses for the benchmarks (and their tests): start one, wait for the URL it announces,
read its output, stop it.

A server here is a program that binds 127.0.0.1 (usually on a free port) and prints one announce line
holding its URL, ``... listening on http://127.0.0.1:PORT/...``, on stdout or stderr: the notes
fixture (:mod:`benchmark.fixtures`), ``shadowguard serve``, ``shadowguard env serve``, ``bench stub-llm``,
a peer proxy's runner. Its stdout and stderr go to a log file, which is where the announce line is
looked for and what an error quotes.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

STARTUP_TIMEOUT_S = 180.0
"""How long a server may take to announce a reachable URL when ``START_TIMEOUT_ENV`` is not set:
generous, because a loaded machine (load average above ~25) takes minutes to start Python servers."""
START_TIMEOUT_ENV = "SHADOWGUARD_TEST_START_TIMEOUT"
"""Seconds (a positive number) that replace ``STARTUP_TIMEOUT_S`` for every server started through
:meth:`ServerProcess.wait_url` without an explicit timeout, and for the test suite's own servers."""
STOP_TIMEOUT_S = 20.0
POLL_S = 0.05

__all__ = [
    "STARTUP_TIMEOUT_S",
    "START_TIMEOUT_ENV",
    "ServerError",
    "ServerProcess",
    "startup_timeout_s",
    "stop_all",
]


def startup_timeout_s() -> float:
    """The start timeout in seconds: ``$SHADOWGUARD_TEST_START_TIMEOUT`` when set (read at each call),
    else ``STARTUP_TIMEOUT_S``. A value that is not a finite positive number raises ``ValueError``
    naming the variable, rather than falling back to the default."""
    raw = os.environ.get(START_TIMEOUT_ENV)
    if raw is None:
        return STARTUP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{START_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{START_TIMEOUT_ENV}={raw!r} must be a finite number of seconds above 0")
    return value


class ServerError(RuntimeError):
    """A server subprocess did not start (it exited, or did not announce a reachable URL in time); the
    message names the server and ends with the tail of its log. Benchmarks built on server processes
    raise it for their own failures too (``benchmark.perf_proxy.ProxyBenchError`` is this class)."""


class ServerProcess:
    """A server subprocess on 127.0.0.1 that announces its URL; its stdout and stderr go to ``log``.

    The URL counts once a line of the log holds ``announce`` and ``http://127.0.0.1:PORT``, and a TCP
    connection to that port is accepted. Use as a context manager, or call :meth:`stop`.
    """

    def __init__(self, args: list[str], log: Path, announce: str, name: str | None = None) -> None:
        if not args:
            raise ValueError("a server process needs a command")
        self.args = list(args)
        self.log = log
        self.announce = announce
        default = Path(args[0]).name if len(args) < 2 else f"{Path(args[0]).name} {Path(args[1]).name}"
        self.name = name or default
        self._log_file = log.open("wb")
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - our own console scripts, fixtures and peer runners
                self.args, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT
            )
        except OSError:
            self._log_file.close()
            raise
        self._url: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def output(self) -> str:
        """Everything the process wrote so far (stdout and stderr, interleaved)."""
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 3000) -> str:
        return self.output()[-chars:]

    def _failed(self, why: str) -> ServerError:
        return ServerError(f"{self.name} {why}:\n{self.tail(2000)}")

    def _announced(self) -> str | None:
        for line in self.output().splitlines():
            if self.announce in line and "http://127.0.0.1:" in line:
                return line[line.index("http://") :].strip()
        return None

    def wait_url(self, timeout_s: float | None = None) -> str:
        """The announced URL, once the port accepts connections; :class:`ServerError` when the process
        exits first or ``timeout_s`` passes (by default :func:`startup_timeout_s`)."""
        if timeout_s is None:
            timeout_s = startup_timeout_s()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._url is None:
                self._url = self._announced()
            if self._url is not None:
                port = int(self._url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                except OSError:
                    pass
                else:
                    return self._url
            if self.proc.poll() is not None:
                raise self._failed(f"exited {self.proc.returncode}")
            time.sleep(POLL_S)
        raise self._failed(f"did not start in {timeout_s:.0f} s")

    def terminate(self) -> None:
        """SIGTERM, without waiting (:meth:`stop` waits); nothing when the process has ended."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; closes the log. Returns the exit code. Stopping a
        stopped process does nothing more."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return self.proc.returncode


def stop_all(servers: Iterable[ServerProcess], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop several servers at once: SIGTERM to all, then :meth:`ServerProcess.stop` each (their
    graceful shutdowns overlap instead of adding up)."""
    listed = list(servers)
    for server in listed:
        server.terminate()
    for server in listed:
        server.stop(timeout_s)
