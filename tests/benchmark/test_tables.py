"""Result tables at 80 columns: no name or count is cut, the headers wrap instead."""

from __future__ import annotations

import io

from rich.console import Console

from benchmark.tables import ResultTable

DOMAINS = [
    "sandbox_external_retail",
    "external_booking_v1",
    "sandbox_auto_insurance",
    "sandbox_neobank_support_v1",
    "sandbox_consulting",
]
HEADERS = ("domain", "init", "golden", "responses", "probes", "s", "tasks/s")


def _printed(table: ResultTable, width: int) -> str:
    out = io.StringIO()
    table.print(Console(file=out, width=width, color_system=None, legacy_windows=False))
    return out.getvalue()


def test_conformance_shaped_table_fits_80_columns_uncut() -> None:
    table = ResultTable("conformance (sqlite)", HEADERS)
    for name in DOMAINS:
        table.add_row(name, "102/102", "102/102", "3055/3055", "1480/1480", "12.5", "8")
    text = _printed(table, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for name in DOMAINS:
        assert name in text
    assert text.count("3055/3055") == len(DOMAINS) and text.count("1480/1480") == len(DOMAINS)


def test_a_table_wider_than_the_terminal_is_printed_wider_not_cut() -> None:
    table = ResultTable("wide", ["name", *(f"column {i}" for i in range(12))])
    table.add_row("a_rather_long_row_name", *("1234567/1234567" for _ in range(12)))
    text = _printed(table, 80)
    assert "…" not in text and text.count("1234567/1234567") == 12


def test_a_row_with_the_wrong_number_of_cells_is_refused() -> None:
    table = ResultTable("t", ["a", "b"])
    try:
        table.add_row("only one")
    except ValueError as exc:
        assert "1 cells for 2 columns" in str(exc)
    else:
        raise AssertionError("a short row was accepted")
