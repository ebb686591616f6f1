"""tests/guard holds the guard core's unit tests; they must run without the benchmark data bundle.

Every test here sees ``SHADOWGUARD_BENCH_DATA`` pointing at an empty folder, so a test that reaches for
the bundle (directly or through the ``bench``/``retail`` fixtures) fails instead of passing only where
the bundle happens to be. Tests of the guard over benchmark domains live in tests/benchmark/guarded.
"""

from __future__ import annotations

import pytest

from benchmark.tasks import ENV_VAR


@pytest.fixture(autouse=True)
def _no_bench_data(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path_factory.mktemp("no-bench-data")))


@pytest.fixture
def bench() -> None:
    pytest.fail("a guard-core test used the benchmark data bundle; move it to tests/benchmark/guarded")
