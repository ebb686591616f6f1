"""``shadowguard bench agg|sbs|report`` (being written)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the analysis commands to ``app`` (the ``bench`` group)."""
