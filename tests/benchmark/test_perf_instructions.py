"""`shadowguard bench perf instructions`: instructions per call counted by callgrind (what it prints,
never how many: the counts are the measurement)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmark import perf_instructions
from proxy.cli import _mount_benchmark, app


def test_a_dump_counts_only_once_its_totals_line_is_written(tmp_path: Path) -> None:
    dump = tmp_path / "x.callgrind.1"
    dump.write_text("version: 1\nevents: Ir\nsummary: 0\nfn=main\n1 20\n", encoding="utf-8")
    assert perf_instructions._total(dump) is None
    dump.write_text(dump.read_text(encoding="utf-8") + "\ntotals: 1234\n", encoding="utf-8")
    assert perf_instructions._total(dump) == 1234


def test_without_valgrind_the_command_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", "perf", "instructions", "--calls", "1"])
    assert result.exit_code == 1
    assert "valgrind and callgrind_control not found" in result.output


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_cli_counts_each_paths_instructions_in_the_proxy_and_the_upstream() -> None:
    _mount_benchmark()
    args = ["bench", "perf", "instructions", "--calls", "5", "--kind", "read", "-f", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {r["path"]: r for r in json.loads(result.stdout)["rows"]}
    assert set(rows) == {"direct", "shadowguard", "bare-relay"}
    assert all(r["kind"] == "read" and r["calls"] == 5 for r in rows.values())
    assert rows["direct"]["proxy_instructions_per_call"] is None
    # the guard does MCP and guard work the bare relay does not; the participant works for the guard
    assert (
        rows["shadowguard"]["proxy_instructions_per_call"]
        > rows["bare-relay"]["proxy_instructions_per_call"]
        > 0
    )
    assert (
        rows["shadowguard"]["upstream_instructions_per_call"]
        > rows["direct"]["upstream_instructions_per_call"]
        > 0
    )
