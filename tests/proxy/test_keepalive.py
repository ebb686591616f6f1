"""HTTP keep-alive (issue 15): no server of the project closes an idle connection a client may still
reuse.

Seen: ``bench chaos isolation --sessions 200`` lost 22 sessions' HTTP connections
(``httpx.ReadError('')``, no 5xx, nothing in the proxy's log), and under ``bench perf proxy`` a
proxy→upstream connection left idle while its session queued for a writer slot died with the same
error. Both servers ran uvicorn's default keep-alive (5 s), equal to the clients' pool expiry (httpx:
5 s): the server closes the connection just as a loaded client takes it from its pool and sends on
it. The servers now keep an idle connection open for ``SERVER_KEEP_ALIVE_S`` (75 s), far beyond any
client pool's expiry, and the proxy's own upstream pool lets go of idle connections after
``CLIENT_KEEPALIVE_EXPIRY_S`` (4 s, under uvicorn's default for upstreams the project does not run).

Each test opens one real connection to a real server process, idles past uvicorn's default and asks
again on the same connection: before the fix the server had closed it at 5 s.
"""

from __future__ import annotations

import http.client
import select
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from guard.keepalive import CLIENT_KEEPALIVE_EXPIRY_S, SERVER_KEEP_ALIVE_S
from proxy.upstream_http import upstream_http_limits
from tests.support.processes import RETAIL_SERVE, Process, notes_http, shadowguard_serve
from tests.support.proxy import notes_upstream, write_config

UVICORN_DEFAULT_KEEP_ALIVE_S = 5.0
IDLE_S = UVICORN_DEFAULT_KEEP_ALIVE_S + 2.0
"""Past uvicorn's default keep-alive, well within the servers' own."""


def still_open(sock: socket.socket) -> bool:
    """The peer has not closed the connection (no EOF or reset waiting to be read)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except ConnectionResetError:
        return False


def assert_kept_alive(url: str, path: str) -> None:
    """GET ``path`` twice on one connection, ``IDLE_S`` apart: the second is answered on it."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", path)
        first = conn.getresponse()
        first.read()
        assert not first.will_close, "the server asked to close the connection after one request"
        sock = conn.sock
        assert sock is not None
        time.sleep(IDLE_S)
        assert still_open(sock), f"the server closed an idle connection within {IDLE_S} s"
        conn.request("GET", path)
        second = conn.getresponse()
        second.read()
        assert conn.sock is sock, "the second request needed a new connection"
        assert second.status == first.status
    finally:
        conn.close()


def test_the_keep_alive_settings_leave_no_race() -> None:
    """Every client pool lets go of an idle connection well before a server would close it."""
    assert CLIENT_KEEPALIVE_EXPIRY_S < UVICORN_DEFAULT_KEEP_ALIVE_S < SERVER_KEEP_ALIVE_S
    assert IDLE_S < SERVER_KEEP_ALIVE_S


def test_the_proxys_upstream_pool_expires_idle_connections_first() -> None:
    assert upstream_http_limits().keepalive_expiry == CLIENT_KEEPALIVE_EXPIRY_S


def test_shadowguard_serve_keeps_an_idle_connection(tmp_path: Path) -> None:
    db = tmp_path / "notes.sqlite"
    config = write_config(
        tmp_path / "proxy.yaml",
        [notes_upstream(db, "keepalive")],
        http={"host": "127.0.0.1", "port": 0},
    )
    proxy = shadowguard_serve(config).ready()
    try:
        assert_kept_alive(proxy.url, "/healthz")
    finally:
        proxy.stop()


def test_the_notes_fixture_keeps_an_idle_connection(tmp_path: Path) -> None:
    notes = notes_http(tmp_path / "notes.sqlite").ready()
    try:
        assert_kept_alive(notes.url, "/mcp")
    finally:
        notes.stop()


def test_env_serve_keeps_an_idle_connection(tmp_path: Path, bench: Any) -> None:
    env = Process(
        [*RETAIL_SERVE, "--port", "0", "--data", str(bench.tasks_root)],
        tmp_path / "retail.log",
        announce="env serve: listening on",
    ).ready()
    try:
        assert_kept_alive(env.url, "/healthz")
    finally:
        env.stop()
