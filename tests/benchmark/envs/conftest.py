"""Fixtures of the domain-environment tests: ``env`` is a fresh environment of the folder's ``domain``
(each domain folder's ``conftest.py`` names it) on in-memory SQLite, with the module's ``env_patch``
upserted over the defaults. A module with a patch overrides ``env_patch``::

    @pytest.fixture
    def env_patch() -> Patch:
        return PATCH
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmark.envs import Database, Domain, Environment
from tests.support.envs import Patch, open_env


@pytest.fixture
def env_patch() -> Patch | None:
    return None


@pytest.fixture
def env(domain: Domain, sqlite_db: Database, env_patch: Patch | None) -> Iterator[Environment]:
    with open_env(domain, sqlite_db, env_patch) as environment:
        yield environment
