"""The services some tests need (PostgreSQL, Redis, Debian's Chromium): reach them or say why not.

On a developer's machine a missing service skips its tests with the reason printed in pytest's summary
(``-ra``); ``make test`` starts an installed but stopped service first (.ci/services). With
``SHADOWGUARD_TEST_STRICT=1`` (what CI sets) a missing service fails its tests instead, so CI cannot go
green by skipping. ``SHADOWGUARD_TEST_PG=off`` / ``SHADOWGUARD_TEST_REDIS=off`` /
``SHADOWGUARD_SKIP_BROWSER=1`` opt out of one service explicitly (a skip, also in strict mode).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

PG_URL = os.environ.get("SHADOWGUARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHADOWGUARD_TEST_REDIS", "redis://127.0.0.1:6379/0")
CHROMIUM = Path("/usr/bin/chromium")
STRICT_VAR = "SHADOWGUARD_TEST_STRICT"


def strict() -> bool:
    return os.environ.get(STRICT_VAR) == "1"


def missing(reason: str) -> NoReturn:
    """Skips the test saying ``reason``; fails it instead in strict mode."""
    if strict():
        pytest.fail(f"{reason} ({STRICT_VAR}=1: a missing service fails the test)")
    pytest.skip(f"{reason} (see CONTRIBUTING.md, 'Services'; CI runs these with {STRICT_VAR}=1)")


def pg_engine_url() -> sa.URL:
    return sa.make_url(PG_URL).set(drivername="postgresql+psycopg")


def require_postgres() -> None:
    """Returns when PostgreSQL at ``SHADOWGUARD_TEST_PG`` answers; otherwise skips (or fails)."""
    if PG_URL == "off":
        pytest.skip("PostgreSQL tests disabled with SHADOWGUARD_TEST_PG=off")
    engine = sa.create_engine(pg_engine_url(), poolclass=NullPool)
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as exc:
        missing(f"PostgreSQL at {PG_URL} is not reachable: {str(exc.orig).strip().splitlines()[0]}")
    finally:
        engine.dispose()


def require_redis() -> None:
    """Returns when Redis at ``SHADOWGUARD_TEST_REDIS`` answers; otherwise skips (or fails)."""
    if REDIS_URL == "off":
        pytest.skip("Redis tests disabled with SHADOWGUARD_TEST_REDIS=off")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        missing(f"Redis at {REDIS_URL} is not reachable: {exc}")
    finally:
        client.close()


def require_redis_server() -> None:
    """Returns when the ``redis-server`` program is installed (trials that start a Redis of their
    own); otherwise skips (or fails)."""
    if shutil.which("redis-server") is None:
        missing("redis-server is not installed: the approval-store trial starts a Redis of its own")


def require_chromium() -> None:
    """Returns when Debian's Chromium is installed; otherwise skips (or fails)."""
    if os.environ.get("SHADOWGUARD_SKIP_BROWSER") == "1":
        pytest.skip("browser test disabled with SHADOWGUARD_SKIP_BROWSER=1")
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is missing: the reviewer page is tested in Debian's Chromium (apt-get install)")
