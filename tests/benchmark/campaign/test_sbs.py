"""``side_by_side()``: pairing, errors left out of n, the lift interval and the worse-task list."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console

from benchmark.campaign.metrics import prob_cand_better
from benchmark.campaign.results import DecodeResult
from benchmark.campaign.sbs import (
    SbsError,
    render_markdown,
    render_table,
    select_group,
    side_by_side,
    summary_line,
    to_json,
)

RowFactory = Callable[..., DecodeResult]


def _run(
    make_row: RowFactory, arm: str, passes: dict[str, int], n: int = 10, **kw: object
) -> list[DecodeResult]:
    return [
        make_row(uid, arm=arm, rep=rep, outcome="success" if rep < c else "wrong_commit", **kw)
        for uid, c in passes.items()
        for rep in range(n)
    ]


def test_per_task_probabilities_lift_and_worse_tasks(make_row: RowFactory) -> None:
    base = _run(make_row, "off", {"a.py:t": 2, "b.py:t": 9, "c.py:t": 5, "d.py:t": 5})
    cand = _run(make_row, "guard", {"a.py:t": 9, "b.py:t": 1, "c.py:t": 4, "d.py:t": 5})
    s = side_by_side(base, cand, base_label="base.jsonl", cand_label="cand.jsonl")
    assert (s.base, s.cand, s.labels) == ("base.jsonl [off]", "cand.jsonl [guard]", [])
    assert (s.tasks, s.base_attempts, s.cand_attempts) == (4, 40, 40)
    assert (s.base_pass1, s.cand_pass1) == (21 / 40, 19 / 40)
    assert s.lift == pytest.approx(-2 / 40)
    assert s.lift_ci95_low < s.lift < s.lift_ci95_high
    by_uid = {t.uid: t for t in s.per_task}
    assert [t.uid for t in s.per_task] == sorted(by_uid)
    assert by_uid["a.py:t"].p_cand_better == prob_cand_better(2, 10, 9, 10)
    assert s.better == 1
    # b got significantly worse, c has a lower mean; d is even.
    assert [(t.uid, t.significant) for t in s.worse] == [("b.py:t", True), ("c.py:t", False)]
    assert s == side_by_side(base, cand, base_label="base.jsonl", cand_label="cand.jsonl")  # seeded
    md = render_markdown(s)
    assert "| b.py:t | 9/10 | 1/10 |" in md and "percentile bootstrap over tasks" in md
    assert summary_line(s).startswith("sbs: tasks 4 base 52.5% cand 47.5% lift -5.0 pp [")
    assert summary_line(s).endswith("worse 2 (P<0.05 1)")
    assert '"per_task"' in to_json(s)


def test_errors_are_left_out_of_n(make_row: RowFactory) -> None:
    base = _run(make_row, "off", {"a.py:t": 5}, n=6)
    cand = [
        *_run(make_row, "guard", {"a.py:t": 5}, n=5),
        make_row("a.py:t", arm="guard", rep=5, outcome=None),
    ]
    s = side_by_side(base, cand)
    (t,) = s.per_task
    assert (t.base_n, t.base_errors, t.cand_n, t.cand_errors) == (6, 0, 5, 1)
    assert (t.base_pass1, t.cand_pass1) == (5 / 6, 1.0)
    assert t.p_cand_better == prob_cand_better(5, 6, 5, 5)
    assert (s.cand_attempts, s.cand_errors, s.cand_pass1) == (5, 1, 1.0)


def test_mismatched_tasks_name_both_files_and_uids(make_row: RowFactory) -> None:
    base = _run(make_row, "off", {f"t{i}.py:x": 1 for i in range(6)}, n=1)
    cand = _run(make_row, "off", {"t0.py:x": 1, "new.py:x": 1}, n=1)
    with pytest.raises(SbsError) as err:
        side_by_side(base, cand, base_label="runs/base.jsonl", cand_label="runs/cand.jsonl")
    message = str(err.value)
    assert "runs/base.jsonl and runs/cand.jsonl hold different tasks" in message
    assert "5 only in runs/base.jsonl (t1.py:x, t2.py:x, t3.py:x and 2 more)" in message
    assert "1 only in runs/cand.jsonl (new.py:x)" in message


def test_a_side_of_errors_only_cannot_be_compared(make_row: RowFactory) -> None:
    base = _run(make_row, "off", {"a.py:t": 1}, n=2)
    cand = [make_row("a.py:t", arm="guard", outcome=None)]
    with pytest.raises(SbsError, match="every attempt is an error"):
        side_by_side(base, cand, cand_label="c.jsonl")


def test_select_group_picks_one_arm(make_row: RowFactory) -> None:
    rows = _run(make_row, "off", {"a.py:t": 1}, n=2) + _run(make_row, "guard", {"a.py:t": 2}, n=2)
    with pytest.raises(
        SbsError, match=r"several agent/arm groups: guard .*, off .*; choose one with --base-arm"
    ):
        select_group(rows, None, "c.jsonl", "--base-arm")
    assert {r.metadata["arm"] for r in select_group(rows, "guard", "c.jsonl", "--base-arm")} == {"guard"}
    with pytest.raises(SbsError, match="no rows of arm 'checks'"):
        select_group(rows, "checks", "c.jsonl", "--base-arm")


def test_simulated_and_upper_bound_sides_are_labelled(make_row: RowFactory) -> None:
    base = _run(make_row, "off", {"a.py:t": 3}, n=4, agent="simulated:o4-mini")
    cand = _run(make_row, "oracle-ceiling", {"a.py:t": 4}, n=4, agent="simulated:o4-mini", upper_bound=True)
    s = side_by_side(base, cand)
    assert s.labels == ["upper bound", "simulated"]
    assert s.cand == "cand [oracle-ceiling (simulated, upper bound)]"
    assert summary_line(s).endswith("(upper bound, simulated)")
    assert "Lift (cand − base) (upper bound, simulated)" in render_markdown(s)
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(render_table(s))
    text = console.export_text()
    assert "cand [oracle-ceiling (simulated, upper bound)]" in text  # brackets are not taken as markup
    assert text.count("(upper bound, simulated)") == 3
