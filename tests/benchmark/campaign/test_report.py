"""``write_report()``: report.md from the agg tables, and four PNG figures that open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image

from benchmark.campaign.aggregate import aggregate, render_markdown
from benchmark.campaign.report import DPI, FIGSIZE, FIGURES, write_report
from benchmark.campaign.results import DecodeResult

RowFactory = Callable[..., DecodeResult]


def _rows(make_row: RowFactory) -> list[DecodeResult]:
    rows = []
    for rep in range(5):
        for uid, domain in (("r.py:test_a", "retail"), ("b.py:test_b", "booking")):
            rows.append(
                make_row(uid, arm="off", rep=rep, domain=domain, outcome="success" if rep else "wrong_commit")
            )
            rows.append(
                make_row(uid, arm="guard", rep=rep, domain=domain, outcome="held" if rep == 1 else "success")
            )
            rows.append(make_row(uid, arm="oracle-ceiling", rep=rep, domain=domain, upper_bound=True))
    return rows


def _check_figures(out: Path) -> None:
    for name in FIGURES:
        with Image.open(out / name) as image:
            image.verify()
        with Image.open(out / name) as image:
            assert image.format == "PNG"
            assert image.size == (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))
            colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 10  # something is drawn


def test_report_and_figures(tmp_path: Path, make_row: RowFactory) -> None:
    rows = _rows(make_row)
    out = tmp_path / "report"
    path = write_report(rows, out)
    assert path == out / "report.md"
    assert sorted(p.name for p in out.iterdir()) == sorted([*FIGURES, "report.md"])
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no staging left behind
    _check_figures(out)
    text = path.read_text()
    for name in FIGURES:
        assert f"]({name})" in text
    assert text.index("(outcomes.png)") < text.index("(pass_at_k.png)")
    assert render_markdown(aggregate(rows)) in text  # the tables are agg's, verbatim
    assert "oracle-ceiling (upper bound)" in text and "**(upper bound)**" in text


def test_report_into_an_existing_directory_without_an_off_arm(tmp_path: Path, make_row: RowFactory) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "report.md").write_text("old")
    rows = [r for r in _rows(make_row) if r.metadata["arm"] == "guard"]
    write_report(rows, out)
    assert (out / "keep.txt").read_text() == "mine"
    assert (out / "report.md").read_text() != "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    _check_figures(out)
