"""Session lifetimes that follow real clients (issue 14, deliverable 9): a stdio proxy ends when its
client goes, whatever it is doing; ``serve --stdio`` with the config's port taken still starts; an HTTP
session whose client went away without ending it is reclaimed on a short lease, rolled back; ``make
demo`` refuses a port that is already taken.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from mcp import Client, StdioServerParameters

from benchmark.procs import startup_timeout_s
from guard.approvals import ApprovalQuery, ApprovalState, SqlApprovalStore
from proxy.approvals.auth import hash_token
from proxy.config import UpstreamConfig
from proxy.demo.__main__ import main as demo_main
from proxy.registry import SessionRegistry
from proxy.server import GuardProxy
from proxy.upstreams import Upstream
from tests.support.processes import MARKER_ENV, SHADOWGUARD, NotesServer, notes_http, pids_with_marker
from tests.support.proxy import (
    NOTES_APPROVALS_POLICY,
    NOTES_POLICY,
    Agent,
    ended,
    initialize_request,
    notes_http_upstream,
    notes_rows,
    notes_upstream,
    text,
    write_config,
)

pytestmark = pytest.mark.anyio
SQL_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "sql_server.py"


@pytest.fixture(scope="module")
def notes(module_tmp: Path) -> Iterator[NotesServer]:
    process = notes_http(module_tmp / "lease.sqlite")
    try:
        yield process.ready()
    finally:
        process.stop()


def _send(pipe: IO[bytes], message: dict[str, Any]) -> None:
    pipe.write((json.dumps(message) + "\n").encode())
    pipe.flush()


def _answer(pipe: IO[bytes], request_id: int) -> dict[str, Any]:
    while True:
        line = pipe.readline()
        assert line, "the proxy closed stdout"
        message = json.loads(line)
        if message.get("id") == request_id:
            return dict(message)


@contextlib.contextmanager
def _stdio_proxy(config: Path, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``serve --stdio`` with ``config``, initialized; killed (if still running) and its pipes closed
    at the end of the block."""
    with log_path.open("wb") as log:
        proxy = subprocess.Popen(
            [SHADOWGUARD, "serve", "--config", str(config), "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            assert proxy.stdin is not None and proxy.stdout is not None
            _send(proxy.stdin, initialize_request())
            assert "result" in _answer(proxy.stdout, 1)
            _send(proxy.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield proxy
        finally:
            if proxy.poll() is None:
                proxy.kill()
                proxy.wait()
            for pipe in (proxy.stdin, proxy.stdout):
                if pipe is not None:
                    pipe.close()


def test_a_stdio_proxy_ends_when_its_client_goes_even_mid_call(module_tmp: Path, marker: str) -> None:
    db, store_url = module_tmp / "eof.sqlite", f"sqlite:///{module_tmp / 'eof-approvals.db'}"
    notes = notes_upstream(db, marker, name="notes", policy=str(NOTES_APPROVALS_POLICY))
    reviewer = {"name": "ed", "role": "approver", "token_sha256": hash_token(secrets.token_urlsafe(16))}
    config = write_config(
        module_tmp / "eof.yaml",
        [notes],
        approvals={"store": store_url, "wait_s": 600},
        auth={"reviewers": [reviewer]},
        audit={"path": str(module_tmp / "eof-audit.jsonl")},
    )
    note = f"eof-{uuid.uuid4().hex[:6]}"
    with _stdio_proxy(config, module_tmp / "eof.log") as proxy:
        assert proxy.stdin is not None and proxy.stdout is not None
        put = {"name": "put_note", "arguments": {"id": note, "body": "pending"}}
        _send(proxy.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": put})
        assert _answer(proxy.stdout, 2)["result"].get("isError") is not True
        held = {"name": "delete_note", "arguments": {"id": "n1"}}
        _send(proxy.stdin, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": held})
        store = SqlApprovalStore(store_url)
        try:
            deadline = time.monotonic() + 60
            while not store.list(ApprovalQuery(states=[ApprovalState.PENDING])):
                assert time.monotonic() < deadline, "the held call never reached the queue"
                time.sleep(0.1)
            proxy.stdin.close()  # the client goes while the call waits for a reviewer
            assert proxy.wait(timeout=60) == 0, (module_tmp / "eof.log").read_text()
            [request] = store.list(ApprovalQuery())
            assert request.state is ApprovalState.CANCELLED
        finally:
            store.close()
    assert note not in notes_rows(db), "the session was rolled back, never committed"
    records = [json.loads(line) for line in (module_tmp / "eof-audit.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in records if r["kind"] == "rollback"] == ["closed"]
    assert pids_with_marker(marker) == [], "no upstream process is left behind"


def test_a_stdio_proxy_ends_when_its_client_goes_during_a_slow_upstream_call(
    module_tmp: Path, marker: str
) -> None:
    sql = {
        "name": "db",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SQL_SERVER), "--db", str(module_tmp / "slow.sqlite")],
        "env": {MARKER_ENV: marker},
    }
    config = write_config(
        module_tmp / "slow.yaml",
        [sql],
        approvals={"store": f"sqlite:///{module_tmp / 'slow.db'}"},
        http={"host": "127.0.0.1", "port": 0},
    )
    with _stdio_proxy(config, module_tmp / "slow.log") as proxy:
        assert proxy.stdin is not None and proxy.stdout is not None
        slow = {"name": "sleep", "arguments": {"seconds": 600}}
        _send(proxy.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": slow})
        time.sleep(1.0)  # the call is on its way to the upstream (or already there)
        proxy.stdin.close()
        assert proxy.wait(timeout=60) == 0, (module_tmp / "slow.log").read_text()
    assert pids_with_marker(marker) == [], "no upstream process is left behind"


async def test_stdio_mode_starts_when_the_configs_port_is_taken(module_tmp: Path, notes: NotesServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(
            module_tmp / "taken.yaml",
            [notes_http_upstream(notes.url, None)],
            http={"host": "127.0.0.1", "port": port},
            approvals={"store": f"sqlite:///{module_tmp / 'taken.db'}"},
        )
        params = StdioServerParameters(
            command=SHADOWGUARD, args=["serve", "--config", str(config), "--stdio"]
        )
        errlog = module_tmp / "taken.log"
        from mcp.client.stdio import stdio_client

        with errlog.open("w") as sink:
            async with Client(
                stdio_client(params, errlog=sink), cache=None, read_timeout_seconds=startup_timeout_s()
            ) as c:
                assert "get_note" in {t.name for t in (await c.list_tools()).tools}
        said = errlog.read_text()
        assert f"port {port} is in use" in said and "listening on http://127.0.0.1:" in said, said


async def test_an_http_session_whose_client_is_gone_is_reclaimed_on_its_lease(
    notes: NotesServer, module_tmp: Path
) -> None:
    sessions = SessionRegistry(idle_timeout=900, lease=0.5)
    spec = UpstreamConfig(name="notes", transport="http", url=notes.url, policy=Path(NOTES_POLICY))
    proxy = GuardProxy([Upstream.from_settings(spec)], sessions)
    session, note = f"lease-{uuid.uuid4().hex[:6]}", f"lease-{uuid.uuid4().hex[:6]}"
    async with proxy.running(), Client(proxy.server, cache=None) as client:
        agent = Agent(client, session)
        await agent.ok("put_note", {"id": note, "body": "never committed"})
        assert await ended(sessions, session) == "lease"
        late = await agent.call("commit")
        assert late.is_error and "lease" in text(late)
    assert note not in notes_rows(module_tmp / "lease.sqlite")


def test_make_demo_refuses_a_port_that_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert demo_main(["--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port}" in err and "already in use" in err and "--port 0" in err
