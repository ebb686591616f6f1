"""`bench run --agent simulated`: the off arm plays the calibrated plan, feedback moves the guarded arms,
the same seed gives the same bytes, and bad options write nothing. Real environments and packs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmark.campaign.results import DecodeResult, iter_results
from proxy.cli import _mount_benchmark, app

TASKS = "*ST01*"
"""25 retail tasks."""


def _run(args: list[str]) -> Any:
    _mount_benchmark()
    return CliRunner().invoke(app, ["bench", "run", "--agent", "simulated", *args])


def _rows(path: Path) -> list[DecodeResult]:
    return [row for _, row in iter_results(path)]


def _campaign(tmp_path: Path, name: str, *extra: str, tasks: str = TASKS) -> list[DecodeResult]:
    out = tmp_path / f"{name}.jsonl"
    result = _run(["--profile", "kimi-k3", "--tasks", tasks, "--repeat", "2", "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return _rows(out)


def _by_arm(rows: list[DecodeResult]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for row in rows:
        out.setdefault(row.metadata["arm"], Counter())[row.metadata["outcome"]] += 1
    return out


def test_off_plays_the_calibrated_plan_and_feedback_moves_the_guard(tmp_path: Path) -> None:
    deaf = _campaign(tmp_path, "deaf", "--arms", "off,guard", "--feedback", "feedback=0")
    heeds = _campaign(tmp_path, "heeds", "--arms", "off,guard", "--feedback", "feedback=1")
    off = [r for r in deaf if r.metadata["arm"] == "off"]
    assert len(off) == 50
    # every planned success passes and every planned failure fails in off: off's pass@1 is the fit's
    for row in off:
        notes = row.metadata["simulated"]
        assert (row.metadata["outcome"] == "success") == (notes["intent"] == "success"), notes
        assert notes["feedback"]["held"] == 0.0
        assert row.metadata["execution_time"] == 0.0
    same = [(r.messages, r.metadata["outcome"]) for r in heeds if r.metadata["arm"] == "off"]
    assert [(r.messages, r.metadata["outcome"]) for r in off] == same
    failures = Counter(r.metadata["simulated"]["intent"] for r in off if r.metadata["outcome"] != "success")
    assert failures, "the sample must hold failures to compare"
    d, h = _by_arm(deaf), _by_arm(heeds)
    assert d["guard"]["wrong_commit"] < d["off"]["wrong_commit"]
    assert h["guard"]["success"] > d["guard"]["success"]
    assert h["guard"]["success"] > h["off"]["success"]
    reacted = [r for r in heeds if r.metadata["arm"] == "guard" and r.metadata["simulated"]["reactions"]]
    assert reacted
    assert not [r for r in deaf if r.metadata["simulated"]["reactions"]]
    assert all(r.metadata["agent"] == "simulated:kimi-k3" for r in deaf)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    args = ["--arms", "off,approvals", "--reviewer", "reject-all", "--seed", "5"]
    _campaign(tmp_path, "a", *args, tasks="*ST01[0-3]*")
    _campaign(tmp_path, "b", *args, tasks="*ST01[0-3]*")
    _campaign(tmp_path, "c", *args[:-1], "6", tasks="*ST01[0-3]*")
    a, b, c = (tmp_path / f"{n}.jsonl" for n in "abc")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert b"apr_#1" in a.read_bytes()  # approval ids recorded by order, never the token


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--agent simulated needs it"),
        (["--profile", "nope"], "--profile: unknown profile 'nope'"),
        (["--profile", "opus-5", "--feedback", "held=2"], "--feedback: held: 2 is outside [0, 1]"),
        (["--profile", "opus-5", "--feedback", "hold=1"], "unknown feedback kind 'hold'"),
    ],
)
def test_bad_options_write_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "r.jsonl"
    result = _run([*args, "--out", str(out)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_profile_only_with_the_simulated_agent(tmp_path: Path) -> None:
    _mount_benchmark()
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        app, ["bench", "run", "--agent", "oracle", "--profile", "opus-5", "--out", str(out)]
    )
    assert result.exit_code == 2
    assert not out.exists()
