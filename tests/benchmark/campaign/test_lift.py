"""`bench lift`: a simulated profile swept over a feedback parameter, its reports and bad input."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from proxy.cli import _mount_benchmark, app


def _lift(*args: str) -> Any:
    _mount_benchmark()
    return CliRunner().invoke(app, ["bench", "lift", *args])


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The folder a lift writes into (it does not exist before the run)."""
    return tmp_path / "lift"


def _simulated_lift(out: Path, *, tasks: str, repeat: int, arms: str, sweep: str) -> str:
    """``bench lift`` on the simulated ``kimi-k3`` profile into ``out``; asserts that it exited 0 and
    returns its output."""
    result = _lift(
        "--profile", "kimi-k3", "--out", str(out), "--tasks", tasks, "--repeat", str(repeat),
        "--arms", arms, "--sweep", sweep,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return str(result.output)


def test_lift_writes_runs_reports_and_a_simulated_summary(out: Path) -> None:
    output = _simulated_lift(out, tasks="*ST01[0-3]*", repeat=1, arms="off,guard", sweep="feedback=0,1")
    last = output.strip().splitlines()[-1]
    assert last.startswith("lift (simulated kimi-k3, feedback 0..1): guard pass@1 change ")
    for stem in ("feedback-0", "feedback-1"):
        assert (out / f"{stem}.jsonl").is_file()
        report = (out / stem / "report.md").read_text(encoding="utf-8")
        assert report.startswith("# Lift campaign report (simulated)")
        held = "0" if stem == "feedback-0" else "1"
        assert f"`kimi-k3: feedback raw_error=0 classified_hint={held} policy_violation={held}" in report
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert summary.startswith("# Simulated lift: Kimi-K3 (kimi-k3), feedback swept over 0, 1")
    assert "fixed feedback raw_error=0; environment_share=0.2" in summary
    assert "| guard (simulated) | 1 |" in summary
    # feedback=0 leaves every probability at 0 (raw_error is 0 in the profile): each arm's lift there
    deaf = summary.split("every feedback probability at 0 (feedback=0)", 1)[1].split("\n## ", 1)[0]
    guard_row = next(line for line in deaf.splitlines() if line.startswith("| guard (simulated) |"))
    cells = [c.strip() for c in guard_row.strip("|").split("|")]
    assert cells[1] == "yes"  # the guard has the retries lever
    assert re.fullmatch(r"[+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]", cells[2]), cells
    assert cells[3] in ("yes", "no")
    assert re.search(r"guard pass@1 change [+-]\d+\.\d\d pp \[", last)
    assert (out / "curves.png").stat().st_size > 0
    assert (out / "prices.yaml").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "feedback=0,2"], "feedback: 2 is outside [0, 1]"),
        (["--sweep", "feedback"], "expected KIND=v1,v2"),
        (["--profile", "nope"], "unknown profile 'nope'"),
        (["--arms", "off,nope"], "unknown arm(s) nope"),
        (["--reviewer", "maybe"], "--reviewer: unknown policy 'maybe'"),
        (["--tasks", "no-such-*"], "matches no task"),
    ],
)
def test_bad_input_writes_nothing(out: Path, args: list[str], message: str) -> None:
    base = {"--profile": "opus-5", "--sweep": "feedback=0,1"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    result = _lift("--out", str(out), *[x for kv in base.items() for x in kv])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_off_is_measured_once_and_its_rows_reused(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``off`` meets no guard feedback: one run of it serves every value, row for row."""
    from benchmark.campaign import lift, runner

    arms_run: list[str] = []
    real = runner.run_units

    def counting(config: Any, jobs: Any, workers: int, worker: Any = None) -> Any:
        arms_run.extend(arm for _, arms in jobs for arm in arms)
        return real(config, jobs, workers, worker=worker)

    monkeypatch.setattr(lift, "run_units", counting)
    _simulated_lift(out, tasks="*ST01[0-3]*", repeat=2, arms="off,base,checks", sweep="feedback=0,0.5,1")
    units = arms_run.count("base") // 3
    assert units > 0 and arms_run.count("off") == units  # once, not once per value
    once = (out / "off.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(once) == units
    for stem in ("feedback-0", "feedback-0.5", "feedback-1"):
        lines = (out / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [line for line in lines if '"arm": "off"' in line or '"arm":"off"' in line] == once
        assert len(lines) == 3 * units
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "`off`: measured once (at feedback=0; `off.jsonl`)" in summary
    assert "the base every guarded arm shares" in summary
    assert "Measured by the `base` arm" in summary


def test_a_raw_error_sweep_runs_off_per_value(out: Path) -> None:
    _simulated_lift(out, tasks="*ST010*", repeat=1, arms="off,base", sweep="raw_error=0,1")
    assert not (out / "off.jsonl").exists()
    offs = [
        [line for line in (out / f"raw_error-{v}.jsonl").read_text().splitlines() if '"off"' in line]
        for v in ("0", "1")
    ]
    assert offs[0] and offs[1]
