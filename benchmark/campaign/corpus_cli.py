"""``shadowguard bench faults``: build the fault corpus, or measure a replay of it (open loop)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmark.campaign.results import ResultsError
from benchmark.envs import DOMAINS, Database, EnvError, load_domain
from benchmark.tasks import resolve_data


def register(app: typer.Typer) -> None:
    """Add ``faults`` to ``app`` (the ``bench`` group)."""

    @app.command("faults")
    def faults(
        out: Annotated[Path | None, typer.Option("--out", help="Write the corpus (JSONL) here.")] = None,
        domain: Annotated[list[str] | None, typer.Option("--domain", help="Domain(s) (repeatable).")] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the mutations.")] = 0,
        measure: Annotated[
            Path | None,
            typer.Option("--measure", help="A `bench run --agent replay` results file over --corpus."),
        ] = None,
        corpus: Annotated[Path | None, typer.Option("--corpus", help="With --measure: the corpus.")] = None,
        show: Annotated[int, typer.Option("--show", help="With --measure: misses to list per family.")] = 5,
        data: Annotated[str | None, typer.Option("--data", help="Benchmark data (see README).")] = None,
    ) -> None:
        """Mutate every golden trajectory by fault family (kept only if the unguarded replay fails) and
        add equivalent variants (kept only if it passes); or, with --measure, the catch rate per family."""
        from benchmark.campaign.corpus import FAMILIES, VARIANTS, CorpusStats, build_corpus

        console = Console(stderr=True)

        def fail(message: str) -> typer.Exit:
            console.print(f"[red]error:[/red] {message}", highlight=False)
            return typer.Exit(2)

        if measure is not None:
            if corpus is None or out is not None:
                raise fail("--measure takes --corpus CORPUS (and no --out)")
            _measure(corpus, measure, show)
            return
        if out is None:
            raise fail("--out FILE is needed (or --measure RESULTS --corpus CORPUS)")
        if out.exists():
            raise fail(f"{out} exists; choose another --out")
        unknown = [d for d in domain or [] if d not in DOMAINS]
        if unknown:
            raise fail(
                f"--domain: unknown domain(s) {', '.join(unknown)}; known: {', '.join(sorted(DOMAINS))}"
            )
        try:
            bench = resolve_data(data)
            database = Database()
            tasks = bench.tasks(domain or None)
            domains = {name: load_domain(name, bench.bundle) for name in sorted({t.domain for t in tasks})}
        except (EnvError, ValueError) as exc:
            raise fail(str(exc)) from exc
        stats = CorpusStats()
        tmp = out.with_name(out.name + ".tmp")
        written = 0
        with (
            tmp.open("w", encoding="utf-8") as sink,
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress,
        ):
            bar = progress.add_task("mutating goldens", total=len(tasks))
            for name, dom in domains.items():
                chosen = [t for t in tasks if t.domain == name]
                for entry in build_corpus(dom, database, chosen, seed, stats, lambda: progress.advance(bar)):
                    sink.write(entry.line() + "\n")
                    written += 1
        os.replace(tmp, out)
        database.dispose()
        table = Table(
            title=f"fault corpus (seed {seed}): kept / tried "
            "(faults: the unguarded replay fails; variants: it passes)"
        )
        table.add_column("domain")
        for family in (*FAMILIES, *VARIANTS):
            table.add_column(family.replace("_", " "), justify="right")
        for name in domains:
            table.add_row(
                name, *(f"{stats.kept[(name, f)]}/{stats.tried[(name, f)]}" for f in (*FAMILIES, *VARIANTS))
            )
        Console(width=max(console.width, 170), stderr=True).print(table)
        faults_n = sum(stats.kept[(d, f)] for d in domains for f in FAMILIES)
        variants_n = sum(stats.kept[(d, f)] for d in domains for f in VARIANTS)
        print(f"faults: corpus {out} faults {faults_n} variants {variants_n} lines {written}")


def _measure(corpus: Path, results: Path, show: int) -> None:
    from benchmark.campaign.corpus import measure

    console = Console(width=max(Console().width, 140))
    try:
        figures = measure(corpus, results)
    except ResultsError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    table = Table(title="open loop over the fault corpus (guarded rows)")
    for col in ("domain", "kind", "family", "caught", "missed", "catch rate", "false block", "clean pass"):
        table.add_column(col, justify="right" if col not in ("domain", "kind", "family") else "left")
    caught = missed = blocks = passes = 0
    for (dom, kind, family), f in sorted(figures.items()):
        rate = f"{100 * f.catch_rate:.1f}%" if f.catch_rate is not None else "-"
        table.add_row(
            dom, kind, family, str(f.caught), str(f.missed), rate, str(f.false_block), str(f.clean_pass)
        )
        caught, missed = caught + f.caught, missed + f.missed
        blocks, passes = blocks + f.false_block, passes + f.clean_pass
    console.print(table)
    for (dom, _kind, family), f in sorted(figures.items()):
        for miss in f.misses[:show]:
            console.print(f"missed {dom} {family}: {miss}", markup=False, highlight=False)
    rate = f"{100 * caught / (caught + missed):.1f}%" if caught + missed else "-"
    print(f"faults: caught {caught}/{caught + missed} ({rate}) false-blocks {blocks}/{blocks + passes}")
