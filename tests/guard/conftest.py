"""tests/guard holds the guard core's unit tests; they must run without the benchmark data bundle.

Every test here sees ``SHADOWGUARD_BENCH_DATA`` pointing at an empty folder, so a test that reaches for
the bundle (directly or through the ``bench``/``retail`` fixtures) fails instead of passing only where
the bundle happens to be. Tests of the guard over benchmark domains live in tests/benchmark/guarded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmark.tasks import ENV_VAR
from guard.policy import PolicyPack, load_policy
from tests.support.guardcore import ARGUMENTS, SCHEMA, SHOP_PACK, TOOLS, Shop, open_shop, write_pack


@pytest.fixture(autouse=True)
def _no_bench_data(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path_factory.mktemp("no-bench-data")))


@pytest.fixture
def bench() -> None:
    pytest.fail("a guard-core test used the benchmark data bundle; move it to tests/benchmark/guarded")


@pytest.fixture
def shop() -> Iterator[Shop]:
    """The guard core's test shop (tests.support.guardcore), fresh and seeded."""
    with open_shop() as opened:
        yield opened


@pytest.fixture
def pack(tmp_path: Path) -> PolicyPack:
    """The shop's policy pack, loaded against its schema and tools."""
    arguments = {tool: set(props) for tool, props in ARGUMENTS.items()}
    return load_policy(
        write_pack(tmp_path, SHOP_PACK), schema=SCHEMA, tools=list(TOOLS), tool_arguments=arguments
    )
