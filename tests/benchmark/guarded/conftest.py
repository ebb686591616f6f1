"""The guard over benchmark domains: ``env`` is a fresh retail environment on each storage backend
(a module on SQLite only overrides it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmark.envs import Database, Domain, Environment
from tests.support.envs import open_env


@pytest.fixture
def env(retail: Domain, database: Database) -> Iterator[Environment]:
    with open_env(retail, database) as environment:
        yield environment
