"""Counting what the guard did with calls: error classes, retries and outcomes.

GuardSession reports to a :class:`CallObserver`; :class:`ErrorCounters` is the in-process one. It
holds plain labelled counters (:meth:`ErrorCounters.samples`) that a telemetry layer (the proxy's
Prometheus/OpenTelemetry exporter) can record without the guard importing it:

    shadowguard_tool_failures_total{error_class, source}   every failed attempt, retried or not
    shadowguard_retries_total{error_class, reason}         every decision after a failed attempt
    shadowguard_tool_outcomes_total{verdict, error_class}  one per call ("none" when it succeeded)
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Protocol

from guard.models import AttemptRecord, ToolCall, ToolOutcome

FAILURES = "shadowguard_tool_failures_total"
RETRIES = "shadowguard_retries_total"
OUTCOMES = "shadowguard_tool_outcomes_total"


class CallObserver(Protocol):
    """Told about each failed attempt (in order) and then each call's outcome."""

    def attempt_failed(self, call: ToolCall, attempt: AttemptRecord, source: str) -> None: ...

    def outcome(self, outcome: ToolOutcome) -> None: ...


Labels = tuple[tuple[str, str], ...]


class ErrorCounters:
    """Thread-safe labelled counters; one instance may serve many sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, Labels]] = Counter()

    def _add(self, name: str, **labels: str) -> None:
        with self._lock:
            self._counts[(name, tuple(sorted(labels.items())))] += 1

    def attempt_failed(self, call: ToolCall, attempt: AttemptRecord, source: str) -> None:
        self._add(FAILURES, error_class=attempt.error_class, source=source)
        self._add(RETRIES, error_class=attempt.error_class, reason=attempt.reason)

    def outcome(self, outcome: ToolOutcome) -> None:
        self._add(OUTCOMES, verdict=outcome.verdict.value, error_class=outcome.error_class or "none")

    def samples(self) -> list[tuple[str, dict[str, str], int]]:
        """(metric name, labels, value) for every counter that is not zero, sorted."""
        with self._lock:
            items = sorted(self._counts.items())
        return [(name, dict(labels), value) for (name, labels), value in items]

    def value(self, name: str, **labels: str) -> int:
        """The sum of a counter over the series matching ``labels`` (0 when none)."""
        wanted = set(labels.items())
        with self._lock:
            return sum(v for (n, lab), v in self._counts.items() if n == name and wanted <= set(lab))
