"""Shared fixtures: the benchmark data bundle, loaded domains, and the databases and approval stores
under test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from benchmark.envs import Database, Domain, load_domain
from benchmark.tasks import BenchData, Task, resolve_data
from guard.approvals import RedisApprovalStore, SqlApprovalStore, open_approval_store
from tests.support.services import PG_URL, REDIS_URL, require_postgres, require_redis

RETAIL = "sandbox_external_retail"

# Property tests check properties, not speed: Hypothesis's per-example deadline (200 ms) turns a
# loaded machine into failures ("no timing assertions in tests"), so it is off for the whole suite.
settings.register_profile("shadowguard", deadline=None)
settings.load_profile("shadowguard")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The async tests (``pytest.mark.anyio``) run on asyncio alone."""
    return "asyncio"


@pytest.fixture(scope="session")
def bench() -> BenchData:
    return resolve_data()


@pytest.fixture(scope="session")
def retail(bench: BenchData) -> Domain:
    return load_domain(RETAIL, bench.bundle)


@pytest.fixture(scope="session")
def retail_tasks(bench: BenchData) -> list[Task]:
    return bench.tasks([RETAIL])


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[Database]:
    """Both storage backends; the PostgreSQL one is skipped (failed in strict mode) when the server
    is unreachable (tests.support.services)."""
    if request.param == "postgresql":
        require_postgres()
        db = Database(PG_URL)
    else:
        db = Database()
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def sqlite_db() -> Iterator[Database]:
    db = Database()
    yield db
    db.dispose()


def _with_query(url: str, name: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


@pytest.fixture
def approval_store_url(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Makes the URL of a fresh approval store of the test's own on a backend: ``"sqlite"`` (a file in
    ``tmp_path``), ``"postgresql"`` (a table prefix) or ``"redis"`` (a key prefix) on the shared servers.

    After the test, whatever was created under each URL made is removed (tables dropped, keys purged).
    A server backend that is unreachable is skipped (failed in strict mode: tests.support.services).
    """
    on_servers: list[str] = []

    def make(backend: str) -> str:
        tag = uuid.uuid4().hex[:12]
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'approvals-{tag}.db'}"
        if backend == "postgresql":
            require_postgres()
            on_servers.append(_with_query(PG_URL, "table_prefix", f"t_{tag}_"))
        elif backend == "redis":
            require_redis()
            on_servers.append(_with_query(REDIS_URL, "prefix", f"shadowguard-test-{tag}:"))
        else:
            raise ValueError(f"no approval store backend {backend!r} (sqlite, postgresql, redis)")
        return on_servers[-1]

    yield make
    for url in on_servers:
        store = open_approval_store(url)
        try:
            if isinstance(store, SqlApprovalStore):
                store.drop_tables()
            else:
                assert isinstance(store, RedisApprovalStore), store
                store.purge()
        finally:
            store.close()
