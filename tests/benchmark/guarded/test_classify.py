"""The classifier: the benchmark's whole error corpus, HTTP statuses, JSON-RPC codes, real transport
exceptions, per-upstream pack rules, and properties that hold for any input."""

from __future__ import annotations

import email.utils
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import MCPError

from benchmark.tasks import BenchData
from guard.classifier import (
    BUILTIN_RULES,
    Classifier,
    error_message,
    parse_retry_after,
    status_class,
    strip_envelope,
)
from guard.errors import (
    ConnectFailed,
    ConnectionDropped,
    ErrorClass,
    InternalError,
    NotFound,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ToolFailure,
    UpstreamTimeout,
)
from guard.policy import PolicyError, PolicyPackModel, compile_pack, load_policy

DOMAINS = {
    "sandbox_external_retail",
    "external_booking_v1",
    "sandbox_auto_insurance",
    "sandbox_neobank_support_v1",
    "sandbox_consulting",
}
PROBES = ("error_probes.jsonl", "read_probes.jsonl", "write_probes.jsonl")
CLASSIFIER = Classifier()


def probe_rows(bench: BenchData) -> Iterator[dict[str, Any]]:
    for name in PROBES:
        with (Path(bench.bundle) / "vectors" / name).open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                row["file"] = name
                yield row


@pytest.fixture(scope="module")
def corpus(bench: BenchData) -> list[dict[str, Any]]:
    return list(probe_rows(bench))


def unclassified(texts: Iterable[tuple[str, str]]) -> list[str]:
    """The error texts (tool, text) no rule recognises: the corpus test fails on any of them."""
    out = []
    for tool, text in texts:
        failure = CLASSIFIER.result(tool, text, is_error=True)
        assert failure is not None
        if not failure.classified:
            out.append(text)
    return out


def test_every_error_text_of_the_five_domains_is_classified(corpus: list[dict[str, Any]]) -> None:
    errors = [(r["tool"], r["response"]) for r in corpus if r["is_error"]]
    assert {r["domain"] for r in corpus if r["is_error"]} == DOMAINS
    assert len(errors) == 4807
    assert unclassified(errors) == []


def test_an_unclassified_new_text_fails_the_corpus_test(corpus: list[dict[str, Any]]) -> None:
    new = json.dumps({"error": "Tool execution failed: Flux capacitor desynchronised", "tool": "x"})
    errors = [(r["tool"], r["response"]) for r in corpus if r["is_error"]][:50]
    assert unclassified([*errors, ("x", new)]) == [new]
    failure = CLASSIFIER.result("x", new, is_error=False)
    assert isinstance(failure, InternalError) and failure.rule is None and not failure.classified


def test_in_band_detection_agrees_with_the_reference_on_every_probe(corpus: list[dict[str, Any]]) -> None:
    """17,000+ responses: every error body is seen as an error, and no successful result is."""
    disagree = [
        r["response"][:80]
        for r in corpus
        if (CLASSIFIER.result(r["tool"], r["response"], is_error=False) is not None) != r["is_error"]
    ]
    assert disagree == []


def test_the_corpus_maps_to_the_classes_its_probes_provoke(corpus: list[dict[str, Any]]) -> None:
    by_kind: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for row in corpus:
        failure = CLASSIFIER.result(row["tool"], row["response"], is_error=False)
        if failure is None:
            continue
        kind = row.get("kind") or row["source"]
        by_kind.setdefault(kind, Counter())[failure.error_class.value] += 1
        totals[failure.error_class.value] += 1
    for kind in ("no_arguments", "wrong_type", "invalid_enum", "null_required", "action_missing_params"):
        assert set(by_kind[kind]) == {"invalid_arguments"}, kind
    assert set(by_kind["nonexistent_id"]) == {"not_found", "invalid_arguments"}  # id format checks
    assert by_kind["nonexistent_id"]["not_found"] > 0.9 * sum(by_kind["nonexistent_id"].values())
    assert set(by_kind["synthetic"]) <= {"precondition_failed", "conflict"}
    assert totals == {"invalid_arguments": 1235, "not_found": 3544, "precondition_failed": 24, "conflict": 4}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Texts the environments can raise that no probe provokes.
        ("Check-in date must be before check-out date", ErrorClass.INVALID_ARGUMENTS),
        ("Invalid charge amount - must be greater than 0", ErrorClass.INVALID_ARGUMENTS),
        ("No licenses available in pool", ErrorClass.PRECONDITION_FAILED),
        ("Asset VDB-HW-1 is already retired", ErrorClass.CONFLICT),
        ("Employee already has a license for this software: Jira", ErrorClass.CONFLICT),
        ("Booking is not associated with this corporate account.", ErrorClass.PRECONDITION_FAILED),
        ("bypass_duration_hours cannot exceed 72 hours", ErrorClass.INVALID_ARGUMENTS),
        (
            "Invalid date format: day is out of range for month Expected YYYY-MM-DD format.",
            "invalid_arguments",
        ),
        ("No tracking found for shipment: SHP-1", ErrorClass.NOT_FOUND),
        ("Unknown tool: frobnicate", ErrorClass.NOT_FOUND),
        # Generic upstream texts.
        ("Rate limit exceeded, retry in 30s", ErrorClass.RATE_LIMITED),
        ("upstream request timed out", ErrorClass.TRANSIENT),
        ("Service Unavailable", ErrorClass.TRANSIENT),
        ("Permission denied for table payments", ErrorClass.PERMISSION_DENIED),
        ("Error executing tool get_user: User 42 does not exist", ErrorClass.NOT_FOUND),
    ],
)
def test_texts_beyond_the_corpus(text: str, expected: str) -> None:
    failure = CLASSIFIER.text("a_tool", f"Tool execution failed: {text}")
    assert failure.classified and failure.error_class == expected


def test_envelopes_are_stripped_and_pydantic_field_errors_kept() -> None:
    body = json.dumps(
        {
            "error": "Tool execution failed: Input validation failed: customer_id: Field required; "
            "points_to_add: Input should be a valid integer",
            "tool": "add_points_to_balance",
        }
    )
    failure = CLASSIFIER.result("add_points_to_balance", body, is_error=False)
    assert failure is not None and failure.error_class is ErrorClass.INVALID_ARGUMENTS
    assert failure.message.startswith("Input validation failed:")
    assert [(f.field, f.problem) for f in failure.fields] == [
        ("customer_id", "Field required"),
        ("points_to_add", "Input should be a valid integer"),
    ]
    assert strip_envelope("Error calling tool 'x': Error: boom") == "boom"


def test_in_band_detection_is_narrow() -> None:
    assert error_message('{"id": 1, "error": "none", "status": "ok"}', is_error=False) is None
    assert error_message('{"error": null, "tool": "x"}', is_error=False) is None
    assert error_message('{"error": {"message": "nope", "code": 404}}', is_error=False) == "nope"
    # the key spelled with JSON escapes is the same key (the text is decoded only when it may hold it)
    assert error_message('{"\\u0065rror": "disk full"}', is_error=False) == "disk full"
    assert error_message("plain text", is_error=False) is None
    assert error_message("plain text", is_error=True) == "plain text"
    assert error_message("", is_error=True) == "the tool reported an error without a message"


# -- statuses, JSON-RPC codes, exceptions --------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, ErrorClass.INVALID_ARGUMENTS),
        (401, ErrorClass.PERMISSION_DENIED),
        (403, ErrorClass.PERMISSION_DENIED),
        (404, ErrorClass.NOT_FOUND),
        (409, ErrorClass.CONFLICT),
        (412, ErrorClass.PRECONDITION_FAILED),
        (422, ErrorClass.INVALID_ARGUMENTS),
        (429, ErrorClass.RATE_LIMITED),
        (500, ErrorClass.TRANSIENT),
        (502, ErrorClass.TRANSIENT),
        (503, ErrorClass.TRANSIENT),
        (504, ErrorClass.TRANSIENT),
        (405, ErrorClass.INTERNAL),
    ],
)
def test_http_statuses(status: int, expected: ErrorClass) -> None:
    assert CLASSIFIER.status("t", status).error_class is expected


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert CLASSIFIER.status("t", 429, {"retry-after": "7"}).retry_after == 7.0
    assert CLASSIFIER.status("t", 503, {"Retry-After": "1.5"}).retry_after == 1.5
    when = email.utils.formatdate(1_000_030.0, usegmt=True)
    fixed = Classifier(now=lambda: 1_000_000.0)
    assert fixed.status("t", 429, {"Retry-After": when}).retry_after == 30.0
    assert parse_retry_after("soon") is None and parse_retry_after("nan") is None
    assert parse_retry_after("-5") == 0.0 and parse_retry_after("99999999") == 3600.0


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (-32602, "Unknown tool: x", "invalid_arguments"),
        (-32001, "Request timed out", "transient"),
        (-32000, "Connection closed", "transient"),
        (-32603, "Internal server error", "transient"),
        (-32603, "Rate limit exceeded", "rate_limited"),
        (-32603, "Customer not found.", "not_found"),
        (-32002, "Resource not found", "not_found"),
        (-32601, "Method not found", "internal"),
        (-32700, "Parse error", "internal"),
        (-32050, "Something odd", "transient"),
        (-1, "Custom failure", "internal"),
    ],
)
def test_jsonrpc_codes(code: int, message: str, expected: str) -> None:
    assert CLASSIFIER.jsonrpc("t", code, message).error_class.value == expected
    assert CLASSIFIER.exception("t", MCPError(code, message)).error_class.value == expected


def _status_error(status: int, headers: dict[str, str]) -> httpx2.HTTPStatusError:
    request = httpx2.Request("POST", "http://upstream.invalid/mcp")
    response = httpx2.Response(status, headers=headers, request=request)
    return httpx2.HTTPStatusError("failed", request=request, response=response)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ConnectError("refused"), ConnectFailed),
        (httpx2.ConnectTimeout("connect timed out"), ConnectFailed),
        (httpx2.PoolTimeout("pool"), ConnectFailed),
        (httpx2.ReadTimeout("timed out"), UpstreamTimeout),
        (httpx2.WriteTimeout("timed out"), UpstreamTimeout),
        (httpx2.RemoteProtocolError("Server disconnected"), ConnectionDropped),
        (httpx2.ReadError("reset"), ConnectionDropped),
        (_status_error(503, {"Retry-After": "3"}), ServiceUnavailable),
        (_status_error(429, {"Retry-After": "2"}), RateLimited),
        (_status_error(500, {}), ServerError),
        (_status_error(404, {}), NotFound),
        (anyio.ClosedResourceError(), ConnectionDropped),
        (anyio.BrokenResourceError(), ConnectionDropped),
        (ConnectionRefusedError(111, "Connection refused"), ConnectFailed),
        (ConnectionResetError(104, "Connection reset by peer"), ConnectionDropped),
        (BrokenPipeError(32, "Broken pipe"), ConnectionDropped),
        (TimeoutError("timed out"), UpstreamTimeout),
        (ValueError("bad state"), InternalError),
        (KeyError("customer_id"), InternalError),
    ],
)
def test_exceptions(exc: Exception, expected: type[ToolFailure]) -> None:
    failure = CLASSIFIER.exception("t", exc)
    assert type(failure) is expected
    assert failure.classified is (expected is not InternalError)
    if isinstance(exc, httpx2.HTTPStatusError) and "retry-after" in exc.response.headers:
        assert failure.retry_after == float(exc.response.headers["retry-after"])


def test_a_failure_raised_by_an_executor_is_kept_as_is() -> None:
    failure = NotFound("gone", tool="t", rule="custom")
    assert CLASSIFIER.exception("t", failure) is failure


# -- per-upstream rules from the policy pack -----------------------------------------------------
def pack(rules: list[dict[str, Any]]) -> Classifier:
    model = PolicyPackModel.model_validate({"name": "p", "errors": {"rules": rules}})
    return Classifier.for_policy(compile_pack(model))


def test_pack_rules_come_before_the_builtin_ones_and_can_be_scoped_to_tools() -> None:
    rule = {
        "match": r"promotion code not found or expired",
        "class": "precondition_failed",
        "tools": ["apply_promo"],
        "hint": "Ask the customer for a current promotion code.",
        "source": {"ref": "retail policy §4"},
    }
    classifier = pack([rule])
    text = "Tool execution failed: Promotion code not found or expired: SAVE10"
    scoped = classifier.text("apply_promo", text)
    assert scoped.error_class is ErrorClass.PRECONDITION_FAILED and scoped.rule == "p:errors.rules[0]"
    assert scoped.hint().next_step == "Ask the customer for a current promotion code."
    assert classifier.text("other_tool", text).error_class is ErrorClass.NOT_FOUND


def test_a_pack_rule_can_classify_what_nothing_else_does() -> None:
    classifier = pack([{"match": "ledger locked", "class": "transient"}])
    assert classifier.text("t", "ledger locked").error_class is ErrorClass.TRANSIENT
    assert CLASSIFIER.text("t", "ledger locked").rule is None


def test_bad_error_rules_fail_at_load_time_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nerrors:\n  rules:\n    - match: '(unclosed'\n      class: not_found\n")
    with pytest.raises(PolicyError, match=r"line 4: .*not a valid regular expression") as info:
        load_policy(path)
    assert info.value.line == 4
    path.write_text("name: p\nerrors:\n  rules:\n    - match: x\n      class: nope\n")
    with pytest.raises(PolicyError, match=r"line 5: .*errors\.rules\.0\.class"):
        load_policy(path)
    path.write_text(
        "name: p\nerrors:\n  rules:\n    - match: x\n      class: not_found\n      tools: [ghost]\n"
    )
    with pytest.raises(PolicyError, match=r"line 6: rule errors\.rules\[0\]: unknown tool 'ghost'"):
        load_policy(path, tools=["real"])
    path.write_text("name: p\nerrors:\n  validation: loose\n")
    with pytest.raises(PolicyError, match=r"line 3: .*errors\.validation"):
        load_policy(path)


# -- properties ----------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000), st.one_of(st.none(), st.sampled_from(["t", "apply_promo"])))
def test_any_text_gets_a_class_a_bounded_message_and_a_clean_hint(text: str, tool: str | None) -> None:
    failure = CLASSIFIER.text(tool, text)
    assert isinstance(failure, ToolFailure)
    assert failure.error_class in set(ErrorClass)
    assert len(failure.message) <= 500 and "\n" not in failure.message
    assert (failure.rule is None) == (type(failure) is InternalError)
    assert failure.hint().next_step


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=100, max_value=599), st.text(max_size=20))
def test_any_status_maps_consistently(status: int, retry_after: str) -> None:
    failure = CLASSIFIER.status("t", status, {"Retry-After": retry_after})
    assert failure.error_class is status_class(status).error_class
    assert failure.retryable is (status >= 500 or status in (408, 425, 429))
    assert failure.retry_after is None or 0.0 <= failure.retry_after <= 3600.0


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**31), max_value=2**31), st.text(max_size=200))
def test_any_jsonrpc_error_maps_to_a_class(code: int, message: str) -> None:
    failure = CLASSIFIER.jsonrpc("t", code, message)
    assert failure.error_class in set(ErrorClass) and failure.code == code


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k != "error"),
        st.one_of(st.none(), st.integers(), st.text(max_size=20)),
        max_size=5,
    )
)
def test_a_successful_result_without_an_error_key_is_never_an_error(body: dict[str, Any]) -> None:
    assert CLASSIFIER.result("t", json.dumps(body), is_error=False) is None


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=300).filter(lambda s: s.strip() != ""))
def test_an_in_band_error_body_is_always_seen(message: str) -> None:
    body = json.dumps({"error": f"Tool execution failed: {message}", "tool": "t"})
    failure = CLASSIFIER.result("t", body, is_error=False)
    assert failure is not None


def test_builtin_rule_ids_are_unique() -> None:
    ids = [r.id for r in BUILTIN_RULES]
    assert len(ids) == len(set(ids))
