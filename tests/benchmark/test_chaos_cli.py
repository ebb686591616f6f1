"""``shadowguard bench chaos``'s shared error path (benchmark/chaos_cli.py): a trial kind that cannot
start prints ``error: ...`` and exits 1, before anything runs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from proxy.cli import _mount_benchmark, app


def test_a_kill_trial_that_cannot_start_prints_its_error_and_exits_1(tmp_path: Path) -> None:
    _mount_benchmark()
    out = tmp_path / "out"
    out.mkdir()
    args = ["bench", "chaos", "kills", "--trials", "1", "--upstream", "mysql", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "error: " in result.output and "unknown upstream" in result.output, result.output
    assert list(out.iterdir()) == []
