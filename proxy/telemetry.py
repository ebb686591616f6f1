"""Metrics (Prometheus) and traces (OpenTelemetry) of guarded sessions.

Metrics live in their own registry, :data:`REGISTRY` (served at ``/metrics`` by :mod:`proxy.health`),
with the process and runtime collectors beside them:

* ``shadowguard_tool_calls_total{tool, effect, verdict}`` - every call the guard decided on
* ``shadowguard_tool_errors_total{tool, error_class}`` - calls that ended in a classified error
* ``shadowguard_violations_total{rule}`` - rule violations that refused or rolled back a call or a commit
* ``shadowguard_commits_total{result}`` - ``committed`` or ``refused``
* ``shadowguard_rollbacks_total{reason, result}`` - sessions rolled back (``agent``, ``idle``, ``shutdown``,
  ...), ``complete`` or ``incomplete`` (an applied call of a journaled upstream stayed in effect)
* ``shadowguard_tool_call_duration_seconds{tool, effect}`` - time the guard spent on a call, checks included
* ``shadowguard_relay_calls_total{path}`` - HTTP ``tools/call`` requests by the path that answered them
  on each side: ``lean_agent`` (proxy/relay_lean.py) and ``lean_upstream`` (proxy/lean_upstream.py)

and the approval queue's (docs/approvals.md "Metrics and traces" says exactly what each counts):

* ``shadowguard_approvals_requested_total{upstream, tool}`` - approval requests this replica made
* ``shadowguard_approvals_decided_total{decision}`` - ``approved`` or ``rejected`` by a reviewer here
* ``shadowguard_approvals_finished_total{outcome}`` - ``used``, ``returned_to_review``, ``expired``,
  ``cancelled``
* ``shadowguard_approval_wait_seconds{decision}`` - request to decision, as a waiting call saw it
* ``shadowguard_approvals_pending`` - the shared queue's depth at the last sweep (the same on every
  replica: aggregate it with ``max``, never ``sum``)
* ``shadowguard_approvals_swept_timestamp_seconds`` - when this replica last swept (the gauge's age)
* ``shadowguard_webhook_deliveries_total{result}`` - webhook notices ``delivered`` or ``failed``

Traces: :func:`span` opens a span on the global OpenTelemetry tracer, so the guard's spans nest under
the MCP SDK's own request spans (its middleware traces every message) and the upstream calls carry the
trace context on. :func:`setup_telemetry` picks the exporter: ``none`` installs nothing (spans are the
API's no-ops), ``console`` prints finished spans to stderr (stdout may be the MCP stdio stream),
``otlp`` batches them to a collector over OTLP/HTTP. The SDK tracer provider can be installed only once
per process, so it is installed on the first exporter that needs it and later calls swap the exporter
behind it; the service name is the one of that first call.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import Enum
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from guard.approvals.models import Approval, ApprovalState
from guard.models import CommitOutcome, ToolOutcome, Verdict

if TYPE_CHECKING:
    from proxy.config import ProxyConfig, TelemetryConfig

TRACER_NAME = "shadowguard"
OTLP_TRACES_PATH = "/v1/traces"

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

TOOL_CALLS = Counter(
    "shadowguard_tool_calls",
    "Tool calls the guard decided on, by tool, effect class and verdict.",
    ["tool", "effect", "verdict"],
    registry=REGISTRY,
)
RELAY_CALLS = Counter(
    "shadowguard_relay_calls",
    "Requests relayed on a lean path, by path (lean_agent, lean_upstream: tools/call; lean_tx: "
    "shadowguard/tx requests of guarded transactions).",
    ["path"],
    registry=REGISTRY,
)
TOOL_ERRORS = Counter(
    "shadowguard_tool_errors",
    "Tool calls that ended in a classified error, by tool and error class.",
    ["tool", "error_class"],
    registry=REGISTRY,
)
VIOLATIONS = Counter(
    "shadowguard_violations",
    "Rule violations that refused or rolled back a call, or refused a commit, by rule id.",
    ["rule"],
    registry=REGISTRY,
)
COMMITS = Counter(
    "shadowguard_commits",
    "Commit requests by result (committed, refused).",
    ["result"],
    registry=REGISTRY,
)
ROLLBACKS = Counter(
    "shadowguard_rollbacks",
    "Sessions rolled back, by reason (agent, idle, shutdown, ...) and result: complete, or incomplete "
    "(some applied call of a journaled upstream stayed in effect).",
    ["reason", "result"],
    registry=REGISTRY,
)
CALL_SECONDS = Histogram(
    "shadowguard_tool_call_duration_seconds",
    "Time the guard spent on one call (checks, savepoints and the upstream round trip).",
    ["tool", "effect"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400)
"""Seconds, up to a day: a decision may take hours (``approvals.expires_after_s`` defaults to one)."""

APPROVALS_REQUESTED = Counter(
    "shadowguard_approvals_requested",
    "Approval requests made by this replica's held calls, by upstream and tool (as the agent names it).",
    ["upstream", "tool"],
    registry=REGISTRY,
)
APPROVALS_DECIDED = Counter(
    "shadowguard_approvals_decided",
    "Reviewer decisions taken through this replica (API, CLI, review page), by decision.",
    ["decision"],
    registry=REGISTRY,
)
APPROVALS_FINISHED = Counter(
    "shadowguard_approvals_finished",
    "Approval requests that ended where this replica saw it: used, returned_to_review, expired, cancelled.",
    ["outcome"],
    registry=REGISTRY,
)
APPROVAL_WAIT_SECONDS = Histogram(
    "shadowguard_approval_wait_seconds",
    "Time from an approval request to its decision, as observed by a call waiting for it here.",
    ["decision"],
    buckets=WAIT_BUCKETS,
    registry=REGISTRY,
)
APPROVALS_PENDING = Gauge(
    "shadowguard_approvals_pending",
    "Pending approval requests in the shared store at this replica's last sweep (every replica reports "
    "the same queue: use max, not sum).",
    registry=REGISTRY,
)
APPROVALS_SWEPT = Gauge(
    "shadowguard_approvals_swept_timestamp_seconds",
    "Unix time of this replica's last sweep that reached the store (when shadowguard_approvals_pending "
    "was counted).",
    registry=REGISTRY,
)
WEBHOOK_DELIVERIES = Counter(
    "shadowguard_webhook_deliveries",
    "Webhook notices of new approval requests, by result (delivered, failed after its retries).",
    ["result"],
    registry=REGISTRY,
)

DECISIONS = ("approved", "rejected")
FINISHED_OUTCOMES = ("used", "returned_to_review", "expired", "cancelled")
DELIVERY_RESULTS = ("delivered", "failed")
for _value in DECISIONS:
    APPROVALS_DECIDED.labels(decision=_value)
    APPROVAL_WAIT_SECONDS.labels(decision=_value)
for _value in FINISHED_OUTCOMES:
    APPROVALS_FINISHED.labels(outcome=_value)
for _value in DELIVERY_RESULTS:
    WEBHOOK_DELIVERIES.labels(result=_value)

_RELAY_PATHS: dict[str, Counter] = {}
"""Each lean path's counter once used (``labels`` validates and locks on every call); a path's
series appears on ``/metrics`` with its first request, as before."""

_COUNTED = (Verdict.REFUSED, Verdict.ROLLED_BACK)
"""Verdicts whose violations are rule violations (a held call's entry names the approval rule)."""


# -- metrics ------------------------------------------------------------------------------------------


UNKNOWN_TOOL_RULE = "unknown_tool"
UNKNOWN_TOOL_LABEL = "(unknown)"
"""The ``tool`` label of calls refused because no upstream serves the name."""


_CALL_SERIES: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
"""(tool, effect, verdict) -> its ``TOOL_CALLS`` and ``CALL_SECONDS`` series, looked up once (as
:data:`_RELAY_PATHS`): ``labels()`` checks and locks on every call. Bounded as the series are: the
tool is a served name or :data:`UNKNOWN_TOOL_LABEL`, effect and verdict are enums."""


def record_call(outcome: ToolOutcome) -> None:
    """Count one decided call and annotate the current span with what the guard did."""
    tool, effect, verdict = outcome.call.tool, outcome.effect.value, outcome.verdict.value
    if any(v.rule_id == UNKNOWN_TOOL_RULE for v in outcome.violations):
        # A name no upstream serves is the caller's text: as a label it would let anyone add series
        # without bound (and one that is not valid Unicode would break the exposition).
        tool = UNKNOWN_TOOL_LABEL
    counted = _CALL_SERIES.get((tool, effect, verdict))
    if counted is None:
        counted = _CALL_SERIES[(tool, effect, verdict)] = (
            TOOL_CALLS.labels(tool=tool, effect=effect, verdict=verdict),
            CALL_SECONDS.labels(tool=tool, effect=effect),
        )
    counted[0].inc()
    counted[1].observe(max(outcome.duration_ms, 0.0) / 1000)
    if outcome.error_class is not None:
        TOOL_ERRORS.labels(tool=tool, error_class=outcome.error_class).inc()
    if outcome.verdict in _COUNTED:
        for violation in outcome.violations:
            VIOLATIONS.labels(rule=violation.rule_id).inc()
    current = trace.get_current_span()
    if not current.is_recording():
        return  # no exporter: the attributes would be dropped (issue 18: built on every call)
    current.set_attributes(
        _attributes(
            {
                "shadowguard.tool": tool,
                "shadowguard.effect": effect,
                "shadowguard.verdict": verdict,
                "shadowguard.error_class": outcome.error_class,
                "shadowguard.changes": len(outcome.changes),
                "shadowguard.violations": [v.rule_id for v in outcome.violations],
            }
        )
    )


def record_commit(outcome: CommitOutcome) -> None:
    """Count one commit request (committed or refused) and the rules that refused it."""
    COMMITS.labels(result="committed" if outcome.committed else "refused").inc()
    for violation in outcome.violations:
        VIOLATIONS.labels(rule=violation.rule_id).inc()
    trace.get_current_span().set_attributes(
        _attributes(
            {
                "shadowguard.committed": outcome.committed,
                "shadowguard.changes": len(outcome.changes),
                "shadowguard.violations": [v.rule_id for v in outcome.violations],
            }
        )
    )


def record_rollback(reason: str, *, complete: bool = True) -> None:
    """Count one session rolled back (``agent``, ``idle``, ``shutdown``, ``api``, ...); ``complete``
    False: something applied stayed in effect (result ``incomplete``)."""
    ROLLBACKS.labels(reason=reason, result="complete" if complete else "incomplete").inc()


def record_approval_requested(approval: Approval) -> None:
    """Count one new approval request."""
    APPROVALS_REQUESTED.labels(upstream=approval.upstream or "", tool=approval.tool).inc()


def record_approval_decided(approval: Approval) -> None:
    """Count one reviewer decision (``approval`` as decided: approved or rejected)."""
    APPROVALS_DECIDED.labels(decision=_decision(approval)).inc()


def record_approval_finished(outcome: str) -> None:
    """Count one approval request that ended (one of :data:`FINISHED_OUTCOMES`)."""
    if outcome not in FINISHED_OUTCOMES:
        raise ValueError(f"unknown approval outcome {outcome!r}; expected one of {FINISHED_OUTCOMES}")
    APPROVALS_FINISHED.labels(outcome=outcome).inc()


def record_approval_wait(approval: Approval) -> None:
    """Observe a decided approval's time from request to decision."""
    if approval.decided_at is None:
        raise ValueError(f"approval {approval.id} is {approval.state.value}: it has no decision to time")
    seconds = (approval.decided_at - approval.created_at).total_seconds()
    APPROVAL_WAIT_SECONDS.labels(decision=_decision(approval)).observe(max(seconds, 0.0))


def record_approvals_swept(pending: int) -> None:
    """A sweep that reached the store: the shared queue's depth it counted, and now as its time."""
    APPROVALS_PENDING.set(pending)
    APPROVALS_SWEPT.set_to_current_time()


def record_webhook_delivery(delivered: bool) -> None:
    """Count one webhook notice: delivered, or given up on after its retries."""
    WEBHOOK_DELIVERIES.labels(result="delivered" if delivered else "failed").inc()


def record_relay_call(path: str) -> None:
    """Count one request a lean path relayed: a ``tools/call`` (``lean_agent``, ``lean_upstream``) or a
    ``shadowguard/tx`` request (``lean_tx``)."""
    counter = _RELAY_PATHS.get(path)
    if counter is None:
        counter = _RELAY_PATHS[path] = RELAY_CALLS.labels(path=path)
    counter.inc()


def _decision(approval: Approval) -> str:
    if approval.state is ApprovalState.APPROVED:
        return "approved"
    if approval.state is ApprovalState.REJECTED:
        return "rejected"
    raise ValueError(f"approval {approval.id} is {approval.state.value}, not decided")


# -- traces -------------------------------------------------------------------------------------------


def span(name: str, **attributes: Any) -> AbstractContextManager[trace.Span]:
    """A span around a block; ``None`` attributes are left out, others made OpenTelemetry-safe.

    An exception leaving the block is recorded on the span and re-raised. While no tracer provider is
    installed (no exporter configured, none set by a host) OpenTelemetry's API would only make a
    non-recording span: that span is handed out without building the attributes or touching the
    context (issue 18: about 12 µs a span on the call path).
    """
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return nullcontext(trace.INVALID_SPAN)
    return _span(name, _attributes(attributes))


@contextmanager
def _span(name: str, attributes: dict[str, Any]) -> Iterator[trace.Span]:
    with trace.get_tracer(TRACER_NAME).start_as_current_span(name, attributes=attributes) as current:
        yield current


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = _attribute(value)
    return out


def _attribute(value: Any) -> Any:
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        items = [_attribute(v) for v in value if v is not None]
        if all(isinstance(v, str) for v in items):
            return tuple(items)
        return tuple(str(v) for v in items)
    return str(value)


class _ExporterSlot(SpanProcessor):
    """The one processor on the installed provider; forwards to the exporter chosen last."""

    def __init__(self) -> None:
        self._target: SpanProcessor | None = None
        self._lock = threading.Lock()

    def replace(self, target: SpanProcessor | None) -> None:
        with self._lock:
            old, self._target = self._target, target
        if old is not None:
            old.shutdown()  # flushes what it still holds

    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        target = self._target
        if target is not None:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        target = self._target
        if target is not None:
            target.on_end(span)

    def shutdown(self) -> None:
        self.replace(None)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        target = self._target
        return True if target is None else target.force_flush(timeout_millis)


_slot = _ExporterSlot()
_installed = False
_install_lock = threading.Lock()


def setup_telemetry(config: TelemetryConfig | ProxyConfig) -> None:
    """Choose the span exporter (see the module docstring); the metrics need no setup."""
    from proxy.config import ProxyConfig

    telemetry = config.telemetry if isinstance(config, ProxyConfig) else config
    processor = _processor(telemetry)
    if processor is not None:
        _install(telemetry.service_name)
    _slot.replace(processor)


def flush_telemetry(timeout_s: float = 5.0) -> bool:
    """Export the spans still queued; False when the exporter did not finish in time."""
    return _slot.force_flush(int(timeout_s * 1000))


def shutdown_telemetry() -> None:
    """Flush and stop the exporter (at shutdown); spans after this are dropped."""
    _slot.replace(None)


def _processor(telemetry: TelemetryConfig) -> SpanProcessor | None:
    if telemetry.exporter == "console":
        return SimpleSpanProcessor(ConsoleSpanExporter(service_name=telemetry.service_name, out=sys.stderr))
    if telemetry.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(telemetry.endpoint)))
    return None


def traces_url(endpoint: str | None) -> str | None:
    """The OTLP/HTTP traces URL for a collector's base URL (None: the exporter's env/default)."""
    if endpoint is None:
        return None
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(OTLP_TRACES_PATH) else endpoint + OTLP_TRACES_PATH


def _install(service_name: str) -> None:
    """Put the slot on the global SDK provider: ours, or one the host installed before us."""
    global _installed
    with _install_lock:
        if _installed:
            return
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            current.add_span_processor(_slot)
        else:
            provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
            provider.add_span_processor(_slot)
            trace.set_tracer_provider(provider)
        _installed = True
