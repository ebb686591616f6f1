"""The ``shadowguard`` console script.

The root command lives here; the benchmark's command groups are mounted from ``benchmark.cli`` (the
only place where ``proxy`` reaches into ``benchmark``: composing the command line, see docs/adr/001).
"""

from __future__ import annotations

import typer

app = typer.Typer(help="shadowguard: guardrail middleware for live AI agents.", no_args_is_help=True)


_mounted = False


def _mount_benchmark() -> None:
    global _mounted
    if _mounted:
        return
    from benchmark.cli import bench_app, env_app

    app.add_typer(bench_app, name="bench")
    app.add_typer(env_app, name="env")
    _mounted = True


def main() -> None:
    _mount_benchmark()
    app()
