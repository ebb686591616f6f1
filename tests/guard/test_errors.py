"""The error-class hierarchy: the tree in the module docstring is the truth, hints never leak internals."""

from __future__ import annotations

import json
import re

import pytest

import guard.errors as errors
from guard.errors import (
    FAILURE_CLASSES,
    ConnectFailed,
    ErrorClass,
    InvalidArguments,
    NotFound,
    RateLimited,
    ServerError,
    ToolFailure,
    UpstreamTimeout,
    clean_message,
    render_hint,
)
from guard.models import FieldProblem

TREE_LINE = re.compile(r"^\s*[│├└─ ]*(\w+)\s+(yes|no)\s+(yes|no)\b", re.M)


def failure_classes() -> dict[str, type[ToolFailure]]:
    return {
        name: obj
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and issubclass(obj, ToolFailure)
    }


def test_the_docstring_tree_states_retryable_and_safe_for_every_class_with_a_row() -> None:
    doc = errors.__doc__ or ""
    rows = TREE_LINE.findall(doc)
    assert len(rows) >= 14
    classes = failure_classes()
    for name, retryable, safe in rows:
        klass = classes[name]
        assert klass.retryable is (retryable == "yes"), name
        assert klass.safe_to_retry is (safe == "yes"), name
    named = set(re.findall(r"[├└]── (\w+)", doc)) | {"ToolFailure"}
    assert named == set(classes), "every failure class is drawn in the tree, and only those"


def test_parents_in_the_tree_are_the_python_bases() -> None:
    doc = (errors.__doc__ or "").splitlines()
    tree = [line for line in doc if "──" in line or line.strip().startswith("ToolFailure")]
    stack: list[tuple[int, str]] = []
    for line in tree:
        name = re.search(r"(\w+)", line.replace("├──", "").replace("└──", "").replace("│", ""))
        assert name is not None
        indent = len(line) - len(line.lstrip(" │├└─"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            assert failure_classes()[name.group(1)].__bases__[0].__name__ == stack[-1][1], line
        stack.append((indent, name.group(1)))


def test_every_error_class_has_one_failure_class_that_reports_it() -> None:
    assert set(FAILURE_CLASSES) == set(ErrorClass)
    for error_class, klass in FAILURE_CLASSES.items():
        assert klass.error_class is error_class
    reported = {k.error_class for k in failure_classes().values()}
    assert reported == set(ErrorClass)


def test_only_transient_and_rate_limited_are_retryable() -> None:
    queued = errors.ApprovalQueued  # the agent's to send again once approved; never classified
    retryable = {k.error_class for k in failure_classes().values() if k.retryable and k is not queued}
    assert retryable == {ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED}
    assert queued.retryable and queued not in FAILURE_CLASSES.values()


def test_a_failure_never_sent_is_safe_and_one_sent_is_not() -> None:
    assert ConnectFailed.safe_to_retry and RateLimited.safe_to_retry
    assert not UpstreamTimeout.safe_to_retry and not ServerError.safe_to_retry


def test_tracebacks_are_cut_to_their_last_line_and_messages_bounded() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app.py", line 3, in handler\n'
        "    do()\n"
        "KeyError: 'customer_id'\n"
    )
    assert clean_message(text) == "KeyError: 'customer_id'"
    failure = ToolFailure(text, tool="t")
    hint = failure.hint()
    assert "Traceback" not in hint.model_dump_json() and "/srv/app.py" not in hint.model_dump_json()
    long = ToolFailure("x" * 5000)
    assert len(long.message) == errors.MAX_MESSAGE
    assert clean_message("  a \n\t b  ") == "a b"


def test_hints_fill_their_templates_and_say_what_to_do() -> None:
    limited = RateLimited("HTTP 429", tool="get_order", retry_after=2.5)
    hint = limited.hint(retries=3)
    assert hint.error_class == "rate_limited" and hint.retryable and hint.retry_after_s == 2.5
    assert "2.5 seconds" in hint.next_step and "get_order" in hint.next_step and "3 time(s)" in hint.next_step
    assert "{" not in hint.next_step
    missing = NotFound("Order not found: ORD-1", tool="get_order")
    assert "do not guess identifiers" in missing.hint().next_step
    assert not missing.hint().retryable


def test_an_unknown_outcome_is_said_plainly() -> None:
    hint = UpstreamTimeout("ReadTimeout: timed out", tool="charge").hint(applied=None)
    assert "outcome is unknown" in hint.next_step and "Read the current state" in hint.next_step


def test_a_rule_can_replace_the_next_step() -> None:
    failure = NotFound("Promotion code not found or expired: X", next_step="Ask the user for another code.")
    assert failure.hint().next_step == "Ask the user for another code."


def test_render_hint_is_structured_content() -> None:
    problem = FieldProblem(field="item.status", problem="bad", expected="one of 'open'", example="open")
    hint = InvalidArguments("Invalid arguments", tool="t", fields=[problem]).hint()
    content = render_hint(hint)
    assert json.loads(json.dumps(content)) == content
    assert content["error"]["error_class"] == "invalid_arguments"
    assert content["error"]["fields"][0] == {
        "field": "item.status",
        "problem": "bad",
        "expected": "one of 'open'",
        "example": "open",
    }


@pytest.mark.parametrize("klass", list(failure_classes().values()))
def test_every_class_renders_a_complete_hint(klass: type[ToolFailure]) -> None:
    hint = klass("something failed", tool="a_tool", retry_after=1.0).hint(retries=1)
    assert hint.error_class == klass.error_class.value
    assert hint.message == "something failed" and hint.next_step
    assert not re.search(r"\{\w+\}", hint.next_step)
