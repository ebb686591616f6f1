"""Error classes of real third-party servers' texts (issue 14, deliverable 6).

tests/fixtures/upstream_errors/*.json hold what mcp-server-git, mcp-server-sqlite, mcp-server-time,
@modelcontextprotocol/server-filesystem and server-memory answered to failing calls (recorded by
record.py beside them, each file naming the server's version), with the class the guard must give
each answer. In-band texts (no ``isError``) must be recognised as errors at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guard.classifier import Classifier, error_message

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "upstream_errors"


def _cases() -> list[Any]:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        fixture = json.loads(path.read_text())
        assert fixture["version"], f"{path.name} names no server version"
        for i, case in enumerate(fixture["texts"]):
            cases.append(pytest.param(fixture["server"], case, id=f"{path.stem}-{i}-{case['tool']}"))
    return cases


def test_the_corpus_covers_the_five_servers() -> None:
    servers = {json.loads(p.read_text())["server"] for p in CORPUS.glob("*.json")}
    assert servers == {
        "mcp-server-git",
        "mcp-server-sqlite",
        "mcp-server-time",
        "@modelcontextprotocol/server-filesystem",
        "@modelcontextprotocol/server-memory",
    }


@pytest.mark.parametrize(("server", "case"), _cases())
def test_each_recorded_error_text_is_an_error_of_its_class(server: str, case: dict[str, Any]) -> None:
    failure = Classifier().result(case["tool"], case["text"], case["is_error"])
    assert failure is not None, f"{server} {case['tool']}: {case['text']!r} passed as a success"
    assert failure.classified, f"{server} {case['tool']}: no rule recognises {case['text']!r}"
    assert failure.error_class.value == case["error_class"], (server, case["text"], failure.rule)


@pytest.mark.parametrize(
    "text",
    [
        '[{"id": 1, "name": "error: none"}]',
        "Error handling is described in section 4.",
        "errors: 0",
        "The last error: none was seen",
        '{"error": null, "rows": []}',
    ],
)
def test_success_texts_that_mention_errors_are_not_errors(text: str) -> None:
    assert error_message(text, False) is None
