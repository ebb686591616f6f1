"""Lift campaigns: agents × arms × repeats over the benchmark tasks, their results and their analysis."""

__all__: list[str] = []
