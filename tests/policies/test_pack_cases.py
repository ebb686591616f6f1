"""Every pack's table-driven cases (``policies/<domain>/tests.yaml``), on SQLite and PostgreSQL.

The cases are the pack author's ``shadowguard check --test`` suite; here each one is its own pytest
item: every case on SQLite, and every third case of each pack on PostgreSQL too (SQL rules are
transpiled per dialect; the Python rules' queries are plain), which keeps the default run short. A
rule that no case expects could be removed without failing any test, so every pack's cases must
expect every one of its rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmark.envs import Database, Domain, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.packtests import _Case, load_tests, run_case, uncovered
from benchmark.packtests import tests_path as _tests_file
from benchmark.tasks import BenchData
from guard.policy import PolicyPack

POLICIES = Path(__file__).resolve().parents[2] / "policies"
PACKS = (
    "external_booking_v1",
    "sandbox_auto_insurance",
    "sandbox_consulting",
    "sandbox_neobank_support_v1",
    "sandbox_external_retail",
)


def _names(domain: str) -> list[str]:
    raw = yaml.safe_load(_tests_file(POLICIES / domain).read_text(encoding="utf-8"))
    return [str(case["name"]) for case in raw["cases"]]


ITEMS = [
    pytest.param(db, domain, i, id=f"{db}:{domain}:{name}")
    for domain in PACKS
    for i, name in enumerate(_names(domain))
    for db in ("sqlite", "postgresql")
    if db == "sqlite" or i % 3 == 0
]

_loaded: dict[str, tuple[Domain, PolicyPack, list[_Case]]] = {}


def _pack(bench: BenchData, domain: str) -> tuple[Domain, PolicyPack, list[_Case]]:
    if domain not in _loaded:
        loaded = load_domain(domain, bench.bundle)
        pack = load_domain_policy(POLICIES / domain / "policy.yaml", loaded)
        _loaded[domain] = (loaded, pack, load_tests(_tests_file(POLICIES / domain), loaded))
    return _loaded[domain]


@pytest.mark.parametrize("database,domain,index", ITEMS, indirect=["database"])
def test_case(bench: BenchData, database: Database, domain: str, index: int) -> None:
    loaded, pack, cases = _pack(bench, domain)
    result = run_case(cases[index], loaded, database, pack)
    assert result.problems == [], result.problems


@pytest.mark.parametrize("domain", PACKS)
def test_every_rule_is_expected_by_a_case(bench: BenchData, domain: str) -> None:
    _, pack, cases = _pack(bench, domain)
    assert uncovered(pack, cases) == []
