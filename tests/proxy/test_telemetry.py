"""Metrics and traces: outcomes are counted; the console exporter prints spans to stderr (never stdout,
which may be the MCP stream); ``none`` installs nothing; OTLP/HTTP reaches a collector (a local one here).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from guard.models import ChangeSet, CommitOutcome, EffectClass, RowChange, Verdict, Violation
from proxy.config import ProxyConfig, TelemetryConfig
from proxy.telemetry import (
    REGISTRY,
    flush_telemetry,
    record_call,
    record_commit,
    record_rollback,
    setup_telemetry,
    span,
    traces_url,
)
from tests.support.proxy import tool_outcome


@pytest.fixture(autouse=True)
def no_exporter() -> Iterator[None]:
    yield
    setup_telemetry(TelemetryConfig(exporter="none"))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- metrics ----------------------------------------------------------------------------------------------


def test_calls_are_counted_by_tool_effect_and_verdict() -> None:
    labels = {"tool": "t_count", "effect": "write", "verdict": "allowed"}
    before = sample("shadowguard_tool_calls_total", **labels)
    record_call(tool_outcome("t_count", Verdict.ALLOWED, duration_ms=12.0))
    record_call(tool_outcome("t_count", Verdict.ALLOWED, duration_ms=3.0))
    record_call(tool_outcome("t_count", Verdict.FAILED, error_class="transient"))
    assert sample("shadowguard_tool_calls_total", **labels) == before + 2
    assert sample("shadowguard_tool_calls_total", tool="t_count", effect="write", verdict="failed") == 1
    assert sample("shadowguard_tool_errors_total", tool="t_count", error_class="transient") == 1
    assert sample("shadowguard_tool_call_duration_seconds_count", tool="t_count", effect="write") == 3
    assert sample(
        "shadowguard_tool_call_duration_seconds_sum", tool="t_count", effect="write"
    ) == pytest.approx(0.015)
    assert (
        sample("shadowguard_tool_call_duration_seconds_bucket", tool="t_count", effect="write", le="0.005")
        == 2
    )


def test_violations_count_refusals_and_rollbacks_not_holds() -> None:
    record_call(tool_outcome("t_viol", Verdict.ROLLED_BACK, rules=("demo.no_overdraft",)))
    record_call(tool_outcome("t_viol", Verdict.REFUSED, rules=("demo.frozen", "demo.no_overdraft")))
    record_call(tool_outcome("t_viol", Verdict.HELD, rules=("demo.large_transfers",)))
    assert sample("shadowguard_violations_total", rule="demo.no_overdraft") == 2
    assert sample("shadowguard_violations_total", rule="demo.frozen") == 1
    assert sample("shadowguard_violations_total", rule="demo.large_transfers") == 0
    assert sample("shadowguard_tool_calls_total", tool="t_viol", effect="write", verdict="held") == 1


def test_commits_and_rollbacks_are_counted() -> None:
    committed = sample("shadowguard_commits_total", result="committed")
    refused = sample("shadowguard_commits_total", result="refused")
    changes = ChangeSet(changes=[RowChange(table="accounts", key="a", op="update", before={}, after={})])
    record_commit(CommitOutcome(committed=True, changes=changes))
    record_commit(
        CommitOutcome(
            committed=False, violations=[Violation(rule_id="demo.named_at_commit", message="blank")]
        )
    )
    record_rollback("idle_test")
    record_rollback("idle_test", complete=False)
    assert sample("shadowguard_commits_total", result="committed") == committed + 1
    assert sample("shadowguard_commits_total", result="refused") == refused + 1
    assert sample("shadowguard_violations_total", rule="demo.named_at_commit") == 1
    assert sample("shadowguard_rollbacks_total", reason="idle_test", result="complete") == 1
    assert sample("shadowguard_rollbacks_total", reason="idle_test", result="incomplete") == 1


# -- traces -----------------------------------------------------------------------------------------------


def test_console_exporter_prints_spans_with_outcome_attributes_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_telemetry(
        ProxyConfig.model_validate({"telemetry": {"exporter": "console", "service_name": "sg-test"}})
    )
    with span(
        "guard.call", tool="transfer_funds", session="s-1", effect=EffectClass.IRREVERSIBLE, skipped=None
    ):
        record_call(tool_outcome("transfer_funds", Verdict.ROLLED_BACK, rules=("demo.no_overdraft",)))
    with pytest.raises(RuntimeError), span("guard.commit", session="s-1"):
        raise RuntimeError("upstream went away")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert '"name": "guard.call"' in captured.err
    assert '"shadowguard.verdict": "rolled_back"' in captured.err
    assert '"effect": "irreversible"' in captured.err
    assert "skipped" not in captured.err
    assert '"demo.no_overdraft"' in captured.err
    assert '"name": "guard.commit"' in captured.err
    assert "upstream went away" in captured.err  # the exception is recorded on the span
    assert '"status_code": "ERROR"' in captured.err


def test_spans_nest() -> None:
    setup_telemetry(TelemetryConfig(exporter="console"))
    with span("outer") as outer, span("inner") as inner:
        assert inner.get_span_context().trace_id == outer.get_span_context().trace_id
        assert inner.parent is not None  # type: ignore[attr-defined]
        assert inner.parent.span_id == outer.get_span_context().span_id  # type: ignore[attr-defined]


def test_none_installs_no_provider_and_spans_are_no_ops() -> None:
    """In a fresh interpreter: the global tracer provider must stay the API's proxy (no SDK cost)."""
    script = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from proxy.config import TelemetryConfig
from proxy.telemetry import setup_telemetry, span
setup_telemetry(TelemetryConfig(exporter="none"))
assert not isinstance(trace.get_tracer_provider(), TracerProvider)
with span("guard.call", tool="x") as s:
    assert not s.is_recording()
# an incoming trace context stays the current one inside a span (what the SDK propagates upstream)
parent = trace.SpanContext(trace_id=1, span_id=2, is_remote=True)
with trace.use_span(trace.NonRecordingSpan(parent)), span("shadowguard.tool_call", tool="x"):
    assert trace.get_current_span().get_span_context() == parent
print("ok")
"""
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
    assert run.stderr == ""


def test_console_then_none_stops_exporting(capsys: pytest.CaptureFixture[str]) -> None:
    setup_telemetry(TelemetryConfig(exporter="console"))
    setup_telemetry(TelemetryConfig(exporter="none"))
    with span("after.none"):
        pass
    assert "after.none" not in capsys.readouterr().err


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    received: list[tuple[str, str, bytes]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_otlp_exporter_posts_spans_to_the_collector(
    collector: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    endpoint, received = collector
    setup_telemetry(TelemetryConfig(exporter="otlp", endpoint=endpoint + "/"))
    with span("guard.commit", session="s-otlp"):
        record_commit(CommitOutcome(committed=True))
    assert flush_telemetry(10.0)
    assert received, "no OTLP request arrived"
    path, content_type, body = received[-1]
    assert path == "/v1/traces"
    assert content_type == "application/x-protobuf"
    assert b"guard.commit" in body and b"s-otlp" in body


def test_traces_url() -> None:
    assert traces_url(None) is None
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"
