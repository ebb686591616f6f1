"""Shared fixtures: the benchmark data bundle, loaded domains, and the databases and approval stores
under test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from benchmark.envs import Database, Domain, load_domain
from benchmark.tasks import BenchData, Task, resolve_data
from guard.approvals import RedisApprovalStore, SqlApprovalStore, open_approval_store

RETAIL = "sandbox_external_retail"
PG_URL = os.environ.get("SHADOWGUARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHADOWGUARD_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def bench() -> BenchData:
    return resolve_data()


@pytest.fixture(scope="session")
def retail(bench: BenchData) -> Domain:
    return load_domain(RETAIL, bench.bundle)


@pytest.fixture(scope="session")
def retail_tasks(bench: BenchData) -> list[Task]:
    return bench.tasks([RETAIL])


def _pg_available() -> None:
    """Skips the test when ``SHADOWGUARD_TEST_PG=off``; fails it, saying why, when it is unreachable."""
    if PG_URL == "off":
        pytest.skip("PostgreSQL tests disabled with SHADOWGUARD_TEST_PG=off")
    engine = sa.create_engine(sa.make_url(PG_URL).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_URL} is not reachable (SHADOWGUARD_TEST_PG=off opts out): {exc}")
    finally:
        engine.dispose()


def _redis_available() -> None:
    """Skips the test when ``SHADOWGUARD_TEST_REDIS=off``; fails it, saying why, when it is unreachable."""
    if REDIS_URL == "off":
        pytest.skip("Redis tests disabled with SHADOWGUARD_TEST_REDIS=off")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable (SHADOWGUARD_TEST_REDIS=off opts out): {exc}")
    finally:
        client.close()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Database:
    """Both storage backends. PostgreSQL must be reachable (CI starts it).

    ``SHADOWGUARD_TEST_PG=off`` opts out explicitly.
    """
    if request.param == "postgresql":
        _pg_available()
        db = Database(PG_URL)
    else:
        db = Database()
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def sqlite_db() -> Database:
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
    A server backend is skipped or failed as ``SHADOWGUARD_TEST_PG`` / ``SHADOWGUARD_TEST_REDIS`` say.
    """
    on_servers: list[str] = []

    def make(backend: str) -> str:
        tag = uuid.uuid4().hex[:12]
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'approvals-{tag}.db'}"
        if backend == "postgresql":
            _pg_available()
            on_servers.append(_with_query(PG_URL, "table_prefix", f"t_{tag}_"))
        elif backend == "redis":
            _redis_available()
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
