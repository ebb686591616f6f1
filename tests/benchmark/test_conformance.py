"""`shadowguard bench conformance` on the landed domains: everything equal to the reference vectors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from benchmark.conformance import ConformanceRun
from benchmark.envs import DOMAINS, Database
from benchmark.tasks import BenchData, Task
from proxy.cli import _mount_benchmark, app

RETAIL = "sandbox_external_retail"


def test_cli_conformance_of_all_domains_on_sqlite(bench: BenchData) -> None:
    """The whole benchmark: 507 init and golden hashes, 3102 golden responses, 17,444 probes."""
    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", "conformance", "--data", str(bench.bundle)])
    last = result.output.strip().splitlines()[-1]
    expected = "conformance: init 507/507 golden 507/507 responses 3102/3102 probes 17444/17444"
    assert last == expected, result.output
    assert result.exit_code == 0


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_conformance_sample_on_both_databases(bench: BenchData, database: Database, domain: str) -> None:
    """Every 10th task of each domain with all of its probes (the full sweep is `make conformance-pg`)."""
    sample = bench.tasks([domain])[::10]
    result = ConformanceRun(bench, database).run_domain(domain, sample)
    assert [m.render() for m in result.mismatches] == []
    assert result.init_ok == result.golden_ok == len(sample)
    assert result.responses_ok == result.responses > 0
    assert result.probes_ok == result.probes > 0


def test_mismatch_is_reported_with_a_row_level_diff(bench: BenchData, retail_tasks: list[Task]) -> None:
    task = retail_tasks[0]
    table = "external_retail_toolset_oms_models_orders"
    patch = {k: [dict(r) for r in v] for k, v in task.data_patch.items()}
    patch[table][0]["total_amount"] = 1.5
    tampered = task.model_copy(update={"data_patch": patch})
    database = Database()
    try:
        result = ConformanceRun(bench, database, tools={"get_order"}).run_domain(RETAIL, [tampered])
    finally:
        database.dispose()
    assert not result.passed
    assert result.init_ok == 0 and result.golden_ok == 0
    rendered = "\n".join(m.render() for m in result.mismatches)
    key = patch[table][0]["id"]
    assert f"{table} key={key} total_amount: ours=1.5 reference=" in rendered


def test_unknown_domain_is_a_usage_error(bench: BenchData) -> None:
    _mount_benchmark()
    result = CliRunner().invoke(
        app, ["bench", "conformance", "--domain", "nope", "--data", str(bench.bundle)]
    )
    assert result.exit_code == 2
    assert "unknown domain" in result.output
