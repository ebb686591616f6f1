"""Shared fixtures: the benchmark data bundle, loaded domains, and database URLs under test."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from benchmark.envs import Database, Domain, load_domain
from benchmark.tasks import BenchData, Task, resolve_data

RETAIL = "sandbox_external_retail"
PG_URL = os.environ.get("SHADOWGUARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


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
    if PG_URL == "off":
        pytest.skip("PostgreSQL tests disabled with SHADOWGUARD_TEST_PG=off")
    engine = sa.create_engine(PG_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


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
