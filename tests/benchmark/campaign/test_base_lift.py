"""Every lift against ``off`` states the base all guarded arms share, and measures it with ``base``."""

from __future__ import annotations

from collections.abc import Callable

from benchmark.campaign.aggregate import aggregate
from benchmark.campaign.results import DecodeResult

RowFactory = Callable[..., DecodeResult]


def _rows(make_row: RowFactory, arms: dict[str, list[str]]) -> list[DecodeResult]:
    return [
        make_row(f"t{i}.py:x", arm=arm, rep=0, outcome=outcome)
        for arm, outcomes in arms.items()
        for i, outcome in enumerate(outcomes)
    ]


def test_the_base_is_measured_and_each_lever_is_read_against_it(make_row: RowFactory) -> None:
    rows = _rows(
        make_row,
        {
            "off": ["success", "wrong_commit", "wrong_commit", "wrong_commit"],
            "base": ["success", "success", "wrong_commit", "wrong_commit"],
            "checks": ["success", "success", "success", "held"],
        },
    )
    notes = [n for n in aggregate(rows).notes if n.startswith("base:")]
    assert len(notes) == 1
    assert "Measured by the `base` arm: Δ pass@1 +25.0 pp" in notes[0]
    assert "checks +25.0 pp" in notes[0]


def test_without_a_base_arm_the_note_says_how_to_measure_it(make_row: RowFactory) -> None:
    rows = _rows(make_row, {"off": ["success", "wrong_commit"], "checks": ["success", "held"]})
    notes = [n for n in aggregate(rows).notes if n.startswith("base:")]
    assert len(notes) == 1 and "Run the `base` arm" in notes[0]


def test_no_guarded_arm_no_base_note(make_row: RowFactory) -> None:
    rows = _rows(make_row, {"off": ["success", "wrong_commit"], "tb": ["success", "success"]})
    assert not [n for n in aggregate(rows).notes if n.startswith("base:")]
