"""Result tables that stay readable in an 80-column terminal.

Rich shrinks a table wider than the terminal by cutting cells (``3055/30…``). Here every cell keeps its
full width (names and counts are never cut): the columns are separated by one space, the borders are
a rule under the header, and only the headers wrap (at their spaces). A table whose cells alone are
wider than the terminal is printed wider rather than cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["ResultTable"]

GAP = 1  # the space the box draws between two columns (the columns have no padding)


class ResultTable:
    """Columns by header (the first left-aligned: the row's name; the others right-aligned counts)."""

    def __init__(self, title: str, headers: Sequence[str]) -> None:
        self.title = title
        self.headers = list(headers)
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"{len(cells)} cells for {len(self.headers)} columns")
        self.rows.append(list(cells))

    def widths(self) -> list[int]:
        """Each column's width: its widest cell, or its header's longest word if that is wider."""
        return [
            max([len(word) for word in header.split()] + [len(row[i]) for row in self.rows])
            for i, header in enumerate(self.headers)
        ]

    def render(self) -> Table:
        table = Table(title=self.title, box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
        for i, (header, width) in enumerate(zip(self.headers, self.widths(), strict=True)):
            table.add_column(header, justify="left" if i == 0 else "right", width=width)
        for row in self.rows:
            table.add_row(*row)
        return table

    def print(self, console: Console) -> None:
        needed = sum(self.widths()) + GAP * (len(self.headers) - 1)
        target = console if needed <= console.width else Console(width=needed, file=console.file)
        target.print(self.render())
