"""`shadowguard bench conformance` on the landed domains: everything equal to the reference vectors."""

from __future__ import annotations

from typer.testing import CliRunner

from benchmark.conformance import ConformanceRun
from benchmark.envs import Database
from benchmark.tasks import BenchData, Task
from proxy.cli import _mount_benchmark, app

RETAIL = "sandbox_external_retail"


def test_cli_retail_conformance_on_sqlite(bench: BenchData) -> None:
    _mount_benchmark()
    result = CliRunner().invoke(
        app, ["bench", "conformance", "--domain", RETAIL, "--data", str(bench.bundle)]
    )
    last = result.output.strip().splitlines()[-1]
    assert last == "conformance: init 98/98 golden 98/98 responses 435/435 probes 3055/3055", result.output
    assert result.exit_code == 0


def test_retail_conformance_on_postgresql_sample(
    bench: BenchData, retail_tasks: list[Task], database: Database
) -> None:
    """Every 7th retail task with all of its probes (the full PostgreSQL sweep is `make conformance-pg`)."""
    sample = retail_tasks[::7]
    result = ConformanceRun(bench, database).run_domain(RETAIL, sample)
    assert result.mismatches == []
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
