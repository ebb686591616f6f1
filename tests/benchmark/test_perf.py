"""`shadowguard bench perf guard-core` and `envs`: what they measure and print (never how fast it is)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from benchmark.envs import Database, Domain
from benchmark.perf import measure_guard_core
from benchmark.tasks import BenchData, Task
from guard.models import PolicySource
from guard.policy import PolicyPackModel, compile_pack
from proxy.cli import _mount_benchmark, app

RETAIL = "sandbox_external_retail"
ROOT = Path(__file__).resolve().parents[2]
NEGATIVE_TOTALS = "SELECT id FROM external_retail_toolset_oms_models_orders WHERE total_amount < 0"


def test_every_golden_call_is_timed_under_every_variant(
    bench: BenchData, sqlite_db: Database, retail: Domain, retail_tasks: list[Task]
) -> None:
    tasks = retail_tasks[:2]
    pack = compile_pack(
        PolicyPackModel.model_validate(
            {
                "name": "one-check",
                "checks": [
                    {
                        "id": "no_negative_totals",
                        "source": PolicySource(ref="test"),
                        "phase": "after_call",
                        "sql": NEGATIVE_TOTALS,
                        "message": "negative total",
                    }
                ],
            }
        )
    )
    result = measure_guard_core(bench, sqlite_db, RETAIL, tasks, pack, repeat=1, pack_name="one-check")
    writes = {name for name, tool in retail.tools.items() if tool.writes}
    calls = [c.tool for t in tasks for c in t.answer.golden_tool_interactions]
    assert result.write.calls == sum(tool in writes for tool in calls)
    assert result.read.calls == len(calls) - result.write.calls
    assert set(result.write.us) == {"direct", "shadow", "guard", "pack"}
    assert set(result.write.overhead_us) == set(result.write.ratio) == {"shadow", "guard", "pack"}
    assert all(v > 0 for v in result.write.us.values())
    assert result.session_us > 0
    assert (result.pack, result.checks, result.pack_not_allowed) == ("one-check", 1, 0)

    without = measure_guard_core(bench, sqlite_db, RETAIL, tasks[:1], None, repeat=1)
    assert "pack" not in without.write.us and without.pack is None


def test_cli_guard_core_prints_a_table_and_a_summary_line(bench: BenchData) -> None:
    _mount_benchmark()
    pack = ROOT / "policies" / RETAIL / "policy.yaml"
    args = ["bench", "perf", "guard-core", "--domain", RETAIL, "--limit", "1", "--repeat", "1"]
    result = CliRunner().invoke(app, [*args, "--data", str(bench.bundle), "--policy", str(pack)])
    assert result.exit_code == 0, result.output
    assert "guard core per call (sqlite" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"perf guard-core {RETAIL} (sqlite): write call ")
    assert "through the guard; with pack +" in last


def test_cli_guard_core_json_is_one_document_with_a_row_per_domain(bench: BenchData) -> None:
    _mount_benchmark()
    args = ["bench", "perf", "guard-core", "--domain", RETAIL, "--limit", "1", "--repeat", "1", "-f", "json"]
    result = CliRunner().invoke(app, [*args, "--data", str(bench.bundle), "--policy", "none.yaml"])
    assert result.exit_code == 2  # a missing pack is an error in both formats
    result = CliRunner().invoke(app, [*args, "--data", str(bench.bundle)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["repeat"] == 1
    [row] = document["rows"]
    assert (row["domain"], row["dialect"], row["tasks"]) == (RETAIL, "sqlite", 1)
    assert set(row["write"]["us"]) >= {"direct", "shadow", "guard"}
    assert row["write"]["calls"] + row["read"]["calls"] > 0


def test_cli_envs_prints_a_table_or_json(bench: BenchData) -> None:
    _mount_benchmark()
    args = ["bench", "perf", "envs", "--domain", RETAIL, "--limit", "1", "--repeat", "1"]
    result = CliRunner().invoke(app, [*args, "--data", str(bench.bundle)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].startswith("perf: ")
    result = CliRunner().invoke(app, [*args, "--data", str(bench.bundle), "-f", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    [row] = document["rows"]
    assert (row["domain"], row["tasks"]) == (RETAIL, 1)
    assert row["total_ms"] == row["init_ms"] + row["replay_ms"] + row["hash_ms"]
    assert document["reference_ms_per_task"] == [4.5, 4.9]


def test_cli_perf_modes_are_subcommands(bench: BenchData) -> None:
    _mount_benchmark()
    result = CliRunner().invoke(
        app, ["bench", "perf", "envs", "--policy", "x.yaml", "--data", str(bench.bundle)]
    )
    assert result.exit_code == 2
    assert "No such option" in result.output
    result = CliRunner().invoke(app, ["bench", "perf", "--proxy"])
    assert result.exit_code == 2


def test_cli_bad_policy_is_a_usage_error(bench: BenchData, tmp_path: Path) -> None:
    _mount_benchmark()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nchecks: [{id: x}]\n", encoding="utf-8")
    args = [
        "bench",
        "perf",
        "guard-core",
        "--domain",
        RETAIL,
        "--policy",
        str(bad),
        "--data",
        str(bench.bundle),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "error:" in result.output and "bad.yaml" in result.output
