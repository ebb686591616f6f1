"""``shadowguard bench agg|sbs|report``: tables and figures from campaign results (docs/lift.md).

Every command reads and validates all of its input first (results with
:func:`~benchmark.campaign.results.read_campaign_results`, a price file with
:func:`~benchmark.campaign.prices.load_prices`). Bad input is ``error: <file>:<line>: field ...`` on
stderr and exit code 2, with nothing written. The analysis modules (scipy, numpy, matplotlib) are
imported inside the commands, so the CLI starts fast.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from benchmark.campaign.prices import PriceTable
    from benchmark.campaign.results import DecodeResult

_WIDE = 200


class Format(StrEnum):
    table = "table"
    md = "md"
    json = "json"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table (rich), md (Markdown) or json.")]
PricesOpt = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="YAML/JSON price table: agent or model name (or default) → USD per million input, "
        "cached_input and output tokens.",
        show_default=False,
    ),
]


def _fail(message: str) -> NoReturn:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def _read(paths: list[Path]) -> list[DecodeResult]:
    from benchmark.campaign.results import ResultsError, read_campaign_results

    try:
        return read_campaign_results(paths)
    except ResultsError as exc:
        _fail(str(exc))


def _prices(path: Path | None) -> PriceTable | None:
    if path is None:
        return None
    from benchmark.campaign.prices import PriceError, load_prices

    try:
        return load_prices(path)
    except PriceError as exc:
        _fail(str(exc))


def _print(fmt: Format, table: object, markdown: str, json_text: str, summary: str) -> None:
    """The output in ``fmt``, then the summary line: on stdout, except after JSON, where it goes to
    stderr so that stdout stays one JSON document."""
    if fmt is Format.json:
        print(json_text)
        Console(stderr=True, soft_wrap=True).print(summary, markup=False, highlight=False)
        return
    if fmt is Format.md:
        print(markdown, end="" if markdown.endswith("\n") else "\n")
    else:
        Console(width=_WIDE).print(table)
    print(summary)


def agg_command(
    results: Annotated[list[Path], typer.Argument(help="Results JSONL file(s).", metavar="RESULTS...")],
    fmt: FormatOpt = Format.table,
    prices: PricesOpt = None,
) -> None:
    """Per-arm and per-arm × domain pass rates, pass@k, pass^k, outcomes, signatures, cost and lift."""
    rows = _read(results)
    table = _prices(prices)
    from benchmark.campaign.aggregate import aggregate, render_markdown, render_table, summary_line, to_json

    agg = aggregate(rows, table)
    _print(fmt, render_table(agg), render_markdown(agg), to_json(agg), summary_line(agg))


def sbs_command(
    base: Annotated[Path, typer.Option("--base", help="The base run's results JSONL.", show_default=False)],
    cand: Annotated[
        Path, typer.Option("--cand", help="The candidate run's results JSONL.", show_default=False)
    ],
    fmt: FormatOpt = Format.table,
    base_arm: Annotated[
        str | None, typer.Option("--base-arm", help="Only this arm's rows of --base (a campaign file).")
    ] = None,
    cand_arm: Annotated[
        str | None, typer.Option("--cand-arm", help="Only this arm's rows of --cand (a campaign file).")
    ] = None,
) -> None:
    """Candidate vs base, task by task: P(cand > base), pooled pass@1 lift with a bootstrap interval."""
    base_rows, cand_rows = _read([base]), _read([cand])
    from benchmark.campaign import sbs

    try:
        base_side = sbs.select_group(base_rows, base_arm, str(base), "--base-arm")
        cand_side = sbs.select_group(cand_rows, cand_arm, str(cand), "--cand-arm")
        result = sbs.side_by_side(base_side, cand_side, base_label=str(base), cand_label=str(cand))
    except sbs.SbsError as exc:
        _fail(str(exc))
    _print(
        fmt,
        sbs.render_table(result),
        sbs.render_markdown(result),
        sbs.to_json(result),
        sbs.summary_line(result),
    )


def report_command(
    results: Annotated[list[Path], typer.Argument(help="Results JSONL file(s).", metavar="RESULTS...")],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for report.md and the figures.", show_default=False)
    ],
    prices: PricesOpt = None,
) -> None:
    """report.md with the agg tables and PNG figures (outcomes, pass@k, per domain, lift)."""
    rows = _read(results)
    table = _prices(prices)
    if out.exists() and not out.is_dir():
        _fail(f"{out}: exists and is not a directory")
    from benchmark.campaign.report import FIGURES, write_report

    path = write_report(rows, out, table)
    print(f"report: {path} figures {' '.join(FIGURES)}")


def register(app: typer.Typer) -> None:
    """Add ``agg``, ``sbs`` and ``report`` to ``app`` (the ``bench`` group)."""
    app.command("agg")(agg_command)
    app.command("sbs")(sbs_command)
    app.command("report")(report_command)
