"""Fixtures of the proxy's end-to-end tests: the upstream servers and the HTTP proxy a test run shares,
and per-module folders. The helpers they are built from (processes, configs, agents, the served
approvals app) are in ``tests.support.processes`` and ``tests.support.proxy``: import them from there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmark.tasks import BenchData
from tests.support.processes import RETAIL_SERVE, Process, notes_http, shadowguard_serve
from tests.support.proxy import (
    MAX_BODY_BYTES,
    journal_upstream,
    notes_http_upstream,
    retail_http_upstream,
    write_config,
)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="session")
def proxy_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy")


@dataclass
class Upstreams:
    """The upstream servers the HTTP proxy relays to (started together, once per test run)."""

    notes: Process
    """The notes fixture over HTTP with the transaction extension (``notes_db``)."""
    journal: Process
    """The notes fixture over HTTP without it: the proxy journals its writes (``journal_db``)."""
    retail: Process
    """The retail domain: ``shadowguard env serve --port 0``."""
    notes_db: Path
    journal_db: Path


@pytest.fixture(scope="session")
def upstreams(proxy_tmp: Path, bench: BenchData) -> Iterator[Upstreams]:
    notes_db, journal_db = proxy_tmp / "notes-http.sqlite", proxy_tmp / "journal.sqlite"
    notes = notes_http(notes_db)
    journal = notes_http(journal_db, transactional=False)
    retail = Process(
        [*RETAIL_SERVE, "--port", "0", "--data", str(bench.tasks_root)],
        proxy_tmp / "retail.log",
        announce="env serve: listening on",
    )
    try:
        yield Upstreams(notes.ready(), journal.ready(), retail.ready(), notes_db, journal_db)
    finally:
        for process in (notes, journal, retail):
            process.stop()


@pytest.fixture(scope="session")
def notes_db(proxy_tmp: Path) -> Path:
    """The database of the notes fixture when a stdio proxy starts it as a stdio upstream."""
    return proxy_tmp / "notes-stdio.sqlite"


@pytest.fixture(scope="session")
def marker() -> str:
    """Marks the upstream processes the proxies of this test run start (see pids_with_marker)."""
    return uuid.uuid4().hex


@pytest.fixture(scope="session")
def http_proxy(proxy_tmp: Path, upstreams: Upstreams) -> Iterator[Process]:
    """``shadowguard serve`` over HTTP with three upstreams, all over HTTP: the notes fixture
    (transactional, its policy pack), the notes fixture without transactions (journaled, prefix
    ``j_``) and the retail domain (transactional, its policy pack)."""
    config = write_config(
        proxy_tmp / "proxy.yaml",
        [
            notes_http_upstream(upstreams.notes.url),
            journal_upstream(upstreams.journal.url),
            retail_http_upstream(upstreams.retail.url),
        ],
        http={"host": "127.0.0.1", "port": 0, "max_body_bytes": MAX_BODY_BYTES},
        audit={"path": str(proxy_tmp / "audit.jsonl")},
        approvals={"wait_s": 0},  # a held call answers approval_pending at once (test_approvals_flow waits)
    )
    process = shadowguard_serve(config).ready()
    process.audit = proxy_tmp / "audit.jsonl"
    yield process
    assert process.stop() == 0, process.log.read_text()
