"""What a reviewer reads of a rehearsed change set: each row's columns side by side, before and after.

The page (and anything else that shows a preview) renders :func:`change_diffs`: one :class:`RowDiff`
per row the call would touch, after collapsing successive changes of a row into their net effect, so a
reviewer judges where each row ends up rather than the steps in between.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from guard.models import ChangeSet, RowChange


@dataclass(frozen=True)
class Shown:
    """A cell value as text; ``literal`` marks JSON (numbers, null, booleans, nested) apart from strings."""

    text: str
    literal: bool


@dataclass(frozen=True)
class CellDiff:
    column: str
    before: Shown | None
    """None: the column had no value before (the row was inserted, or the column is new)."""
    after: Shown | None
    """None: the column has no value after (the row was deleted, or the column is gone)."""
    changed: bool


@dataclass(frozen=True)
class RowDiff:
    table: str
    key: str
    op: Literal["insert", "update", "delete"]
    cells: list[CellDiff]


def show(value: Any) -> Shown:
    if isinstance(value, str):
        return Shown(value, literal=False)
    return Shown(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False), literal=True)


def row_diff(change: RowChange) -> RowDiff:
    """Every column of one row; a cell is changed if its value differs, appears or disappears."""
    before = (change.before or {}) if change.op != "insert" else {}
    after = (change.after or {}) if change.op != "delete" else {}
    cells = [
        CellDiff(
            column=column,
            before=show(before[column]) if column in before else None,
            after=show(after[column]) if column in after else None,
            changed=column not in before or column not in after or before[column] != after[column],
        )
        for column in dict.fromkeys([*before, *after])
    ]
    return RowDiff(table=change.table, key=change.key, op=change.op, cells=cells)


def change_diffs(preview: ChangeSet) -> list[RowDiff]:
    """The net effect on each row (several changes to one row are shown as one before/after)."""
    return [row_diff(c) for c in preview.net()]


__all__ = ["CellDiff", "RowDiff", "Shown", "change_diffs", "row_diff", "show"]
