"""``GuardSession.discarded``: what a rollback would throw away, known without asking the backend once
every call has been settled and none kept anything (a session that only read ends with one request
fewer: a "read" that changed rows is undone too), and asked for whenever that is not known: a kept
write, a call interrupted before it was settled. Real SQLite, the guard core's test shop
(tests.support.guardcore)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from guard.models import ChangeSet, Verdict
from guard.policy import PolicyPack
from guard.session import GuardSession, ToolResult
from tests.support.guardcore import ORDERS, TOOLS, Shop


class Interrupted(BaseException):
    """Stands for a cancellation reaching the executor after it wrote."""


class Asked:
    """Counts the backend's ``changes()`` requests for the whole transaction (``since`` None)."""

    def __init__(self, shop: Shop) -> None:
        self.count = 0
        changes = shop.backend.changes

        def counted(since: str | None = None) -> ChangeSet:
            if since is None:
                self.count += 1
            return changes(since)

        shop.backend.changes = counted  # type: ignore[method-assign]


def test_a_session_that_kept_nothing_discards_nothing_without_asking(shop: Shop, pack: PolicyPack) -> None:
    session = GuardSession(shop.backend, shop, TOOLS, pack, session_id="s")
    asked = Asked(shop)
    assert session.discarded() == ChangeSet()
    assert session.call("get_order", {"order_id": "O1"}).verdict is Verdict.ALLOWED
    assert session.call("cancel_order", {"order_id": "O2"}).verdict is Verdict.REFUSED
    rolled_back = session.call("set_total", {"order_id": "O1", "total": -5})
    assert rolled_back.verdict is Verdict.ROLLED_BACK and rolled_back.changes  # it wrote, then was undone
    assert session.discarded() == ChangeSet()
    assert asked.count == 0
    assert session.pending_changes() == ChangeSet()  # what the backend says agrees
    assert asked.count == 1


def test_a_kept_write_is_asked_for(shop: Shop, pack: PolicyPack) -> None:
    session = GuardSession(shop.backend, shop, TOOLS, pack, session_id="s")
    asked = Asked(shop)
    assert session.call("set_total", {"order_id": "O1", "total": 7}).verdict is Verdict.ALLOWED
    discarded = session.discarded()
    assert asked.count == 1
    assert [(c.table, c.key, c.op) for c in discarded] == [("orders", "O1", "update")]


def test_a_read_that_changed_rows_is_undone_so_nothing_is_discarded(shop: Shop, pack: PolicyPack) -> None:
    def writes_on_read(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        if tool == "get_order":
            shop._update(str(arguments["order_id"]), status="seen")
        return shop(tool, arguments)

    session = GuardSession(shop.backend, writes_on_read, TOOLS, pack, session_id="s")
    asked = Asked(shop)
    outcome = session.call("get_order", {"order_id": "O3"})
    assert outcome.verdict is Verdict.ROLLED_BACK and outcome.changes
    assert session.discarded() == ChangeSet()
    assert asked.count == 0
    assert session.pending_changes() == ChangeSet()
    assert shop.order("O3") == ORDERS[2]


def test_a_call_interrupted_before_it_was_settled_is_asked_for(shop: Shop, pack: PolicyPack) -> None:
    def interrupted(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        shop(tool, arguments)
        raise Interrupted

    session = GuardSession(shop.backend, interrupted, TOOLS, pack, session_id="s")
    asked = Asked(shop)
    with pytest.raises(Interrupted):
        session.call("set_total", {"order_id": "O1", "total": 9})
    assert session.discarded() == ChangeSet()  # the attempt's savepoint was rolled back: asked, empty
    assert asked.count == 1
