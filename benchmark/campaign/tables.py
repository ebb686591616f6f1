"""A titled table that prints the same as Markdown and as a rich ``Table``, and the number formats the
analysis outputs share (so ``bench agg``, ``bench sbs`` and ``bench report`` read alike)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

__all__ = ["Section", "ci", "pct", "pp", "usd"]


@dataclass(frozen=True)
class Section:
    """A table: ``text_columns`` leading columns hold names (left-aligned), the rest figures."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[str]]
    text_columns: int = 1

    def markdown(self) -> list[str]:
        """``## title``, a blank line, the GitHub Markdown table and a blank line, as lines."""
        align = ["---" if i < self.text_columns else "---:" for i in range(len(self.columns))]
        return [
            f"## {self.title}",
            "",
            _md_row(self.columns),
            "|" + "|".join(align) + "|",
            *[_md_row(row) for row in self.rows],
            "",
        ]

    def rich(self) -> Table:
        """The rich table; cells are plain text (a ``[off]`` in a label is not markup)."""
        table = Table(title=Text(self.title), title_justify="left", min_width=len(self.title))
        for i, column in enumerate(self.columns):
            justify: JustifyMethod = "left" if i < self.text_columns else "right"
            table.add_column(Text(column), justify=justify, overflow="fold")
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table


def _md_row(cells: tuple[str, ...] | list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def pct(v: float | None) -> str:
    """A rate as a percentage with one decimal; ``n/a`` for None."""
    return "n/a" if v is None else f"{100 * v:.1f}%"


def pp(v: float | None) -> str:
    """A difference of rates in signed percentage points; ``n/a`` for None."""
    return "n/a" if v is None else f"{100 * v:+.1f} pp"


def usd(v: float | None) -> str:
    """Dollars: cents from $1 up, a tenth of a cent below; ``n/a`` for None."""
    if v is None:
        return "n/a"
    return f"${v:,.2f}" if v >= 1 else f"${v:.3f}"


def ci(low: float, high: float, *, points: bool = False) -> str:
    """An interval of rates (``points``: of differences, in percentage points)."""
    if points:
        return f"[{100 * low:+.1f}, {100 * high:+.1f}] pp"
    return f"{100 * low:.1f}–{100 * high:.1f}%"
