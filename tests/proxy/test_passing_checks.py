"""A passing check is shown as passed, without the text it would show had it failed (the reviewer's
command line and the /review page's template)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from proxy.cli import _show_text

TEMPLATES = Path(__file__).resolve().parents[2] / "proxy" / "approvals" / "templates"
CHECKS = [
    {"rule_id": "shop.ok", "passed": True, "message": "Orders over 100 need a manager."},
    {"rule_id": "shop.bad", "passed": False, "message": "Only open orders can be cancelled."},
]


def _approval() -> dict[str, Any]:
    return {
        "id": "a1",
        "state": "pending",
        "arguments_digest": "d",
        "session_id": "s1",
        "tool": "cancel_order",
        "arguments": {},
        "effect": "irreversible",
        "rule_id": "shop.big",
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": "2026-01-02T00:00:00Z",
        "checks": CHECKS,
        "preview": {"changes": []},
    }


def test_cli_shows_a_passing_check_without_its_violation_text() -> None:
    lines = [line for line in _show_text(_approval()) if line.startswith("  check")]
    assert lines == [
        "  check      pass shop.ok",
        "  check      FAIL shop.bad: Only open orders can be cancelled.",
    ]


def test_review_page_shows_a_passing_check_without_its_violation_text() -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    source = env.loader.get_source(env, "detail.html")[0]  # type: ignore[union-attr]
    start = source.index("{% for c in a.checks %}")
    end = source.index("{% endfor %}", start) + len("{% endfor %}")
    rows = env.from_string(source[start:end]).render(a={"checks": CHECKS})
    assert "Orders over 100 need a manager." not in rows
    assert "Only open orders can be cancelled." in rows
    assert rows.count('class="pass">passed<') == 1
