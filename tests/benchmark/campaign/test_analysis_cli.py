"""``bench agg|sbs|report`` through typer: what they print, and bad input as ``error: file:line: field``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from benchmark.campaign.analysis_cli import register
from benchmark.campaign.results import DecodeResult

RowFactory = Callable[..., DecodeResult]
WriteRows = Callable[[Path, Iterable[DecodeResult]], Path]


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(_app(), list(args))


def _campaign(make_row: RowFactory) -> list[DecodeResult]:
    rows = []
    for rep in range(4):
        for uid in ("a.py:t", "b.py:t"):
            rows.append(make_row(uid, arm="off", rep=rep, outcome="success" if rep % 2 else "wrong_commit"))
            rows.append(make_row(uid, arm="guard", rep=rep, outcome="held" if rep == 0 else "success"))
    return rows


@pytest.fixture
def results(tmp_path: Path, make_row: RowFactory, write_rows: WriteRows) -> Path:
    return write_rows(tmp_path / "results.jsonl", _campaign(make_row))


def _bad_field(tmp_path: Path, make_row: RowFactory) -> Path:
    """Line 2's test_result.reward is out of range."""
    good = make_row("a.py:t").line()
    raw = json.loads(good)
    raw["test_result"]["reward"] = 2.0
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n{json.dumps(raw)}\n")
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_agg_table_then_summary_line(results: Path) -> None:
    result = _invoke("agg", str(results))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pass@1 per arm" in out and "Lift vs off" in out
    assert out.strip().splitlines()[-1] == "agg: rows 16 arms 2 pass@1 off=50.0% guard=75.0%"


def test_agg_markdown_and_json(results: Path, tmp_path: Path) -> None:
    md = _invoke("agg", str(results), "-f", "md")
    assert md.exit_code == 0
    assert "| off | 8 | 2 | 0 | 50.0% |" in md.stdout
    assert md.stdout.strip().splitlines()[-1].startswith("agg: rows 16 arms 2 pass@1 off=50.0%")
    prices = tmp_path / "prices.yaml"
    prices.write_text("default: {input: 1.0, output: 2.0}\n")
    js = _invoke("agg", str(results), "--format", "json", "--prices", str(prices))
    assert js.exit_code == 0, js.output
    data = json.loads(js.stdout)
    assert data["priced"] is True and [a["arm"] for a in data["arms"]] == ["off", "guard"]
    assert js.stderr.strip().splitlines()[-1].startswith("agg: rows 16")


def test_agg_reads_plain_tb_rows(tb_rows_file: Path) -> None:
    result = _invoke("agg", str(tb_rows_file), "-f", "md")
    assert result.exit_code == 0, result.output
    assert "tool_usage" in result.stdout and "incomplete_resolution" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "agg: rows 3 arms 1 pass@1 tb=33.3%"


def _assert_error(result: Result, *parts: str) -> None:
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert err.startswith("error: "), err
    for part in parts:
        assert part in err, err
    assert result.stdout == ""


def test_agg_bad_input(tmp_path: Path, make_row: RowFactory, results: Path) -> None:
    bad = _bad_field(tmp_path, make_row)
    _assert_error(_invoke("agg", str(results), str(bad)), f"error: {bad}:2: field test_result.reward")
    torn = tmp_path / "torn.jsonl"
    torn.write_text(make_row("a.py:t").line() + "\n\n{not json\n")
    _assert_error(_invoke("agg", str(torn)), f"{torn}:3: not JSON")
    facts = tmp_path / "facts.jsonl"
    facts.write_text(make_row("a.py:t").line().replace('"outcome":"success"', '"outcome":"maybe"') + "\n")
    _assert_error(_invoke("agg", str(facts)), f"{facts}:1: field metadata.outcome")
    missing = tmp_path / "missing.jsonl"
    _assert_error(_invoke("agg", str(missing)), f"{missing}: cannot read")
    prices = tmp_path / "prices.yaml"
    prices.write_text("default: {input: 1.0, output: cheap}\n")
    _assert_error(_invoke("agg", str(results), "--prices", str(prices)), f"{prices}: field default.output")


def test_sbs(tmp_path: Path, make_row: RowFactory, write_rows: WriteRows, results: Path) -> None:
    result = _invoke(
        "sbs", "--base", str(results), "--base-arm", "off", "--cand", str(results), "--cand-arm", "guard"
    )
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("sbs: tasks 2 base 50.0% cand 75.0% lift +25.0 pp ["), last
    js = _invoke(
        "sbs",
        "--base",
        str(results),
        "--base-arm",
        "off",
        "--cand",
        str(results),
        "--cand-arm",
        "guard",
        "-f",
        "json",
    )
    assert json.loads(js.stdout)["tasks"] == 2


def test_sbs_bad_input(tmp_path: Path, make_row: RowFactory, write_rows: WriteRows, results: Path) -> None:
    before = _listing(tmp_path)
    bad = _bad_field(tmp_path, make_row)
    _assert_error(
        _invoke("sbs", "--base", str(results), "--cand", str(bad)), f"{bad}:2: field test_result.reward"
    )
    _assert_error(
        _invoke("sbs", "--base", str(results), "--cand", str(results)),
        f"{results}: holds several agent/arm groups",
        "--base-arm",
    )
    other = write_rows(tmp_path / "other.jsonl", [make_row("z.py:t", arm="guard")])
    _assert_error(
        _invoke("sbs", "--base", str(results), "--base-arm", "off", "--cand", str(other)),
        f"{results} and {other} hold different tasks",
        "a.py:t",
        "z.py:t",
    )
    assert _listing(tmp_path) == sorted([*before, "bad.jsonl", "other.jsonl"])


def test_report(tmp_path: Path, results: Path) -> None:
    out = tmp_path / "rep"
    result = _invoke("report", str(results), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == (
        f"report: {out / 'report.md'} figures outcomes.png pass_at_k.png domains.png lift.png"
    )
    assert (out / "outcomes.png").stat().st_size > 0


def test_report_bad_input_writes_nothing(tmp_path: Path, make_row: RowFactory, results: Path) -> None:
    out = tmp_path / "rep"
    bad = _bad_field(tmp_path, make_row)
    before = _listing(tmp_path)
    _assert_error(
        _invoke("report", str(results), str(bad), "--out", str(out)), f"{bad}:2: field test_result.reward"
    )
    prices = tmp_path / "prices.json"
    prices.write_text('{"default": {"input": -1, "output": 1}}')
    _assert_error(
        _invoke("report", str(results), "--out", str(out), "--prices", str(prices)), "field default.input"
    )
    assert _listing(tmp_path) == sorted([*before, "prices.json"])
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    _assert_error(_invoke("report", str(results), "--out", str(not_a_dir)), "is not a directory")
    assert not_a_dir.read_text() == "x"


def test_mounted_under_shadowguard_bench(results: Path) -> None:
    from proxy.cli import _mount_benchmark, app

    _mount_benchmark()
    result = CliRunner().invoke(app, ["bench", "agg", str(results)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("agg: rows 16 arms 2")
