"""The guarded call on a small purpose-built shop (tests.support.guardcore), no benchmark data: a
before_call rule refuses without reaching the upstream, an after_call rule rolls the call back, an
at_commit rule holds the commit, a hidden tool is refused, commit and rollback settle the shop, and a
pack given as its folder loads the same as its YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.checks import CheckContext, PythonCheck, RuleText
from guard.models import EffectClass, Verdict
from guard.policy import PolicyPack, load_policy
from guard.session import GuardSession, SessionClosedError
from tests.support.guardcore import ORDERS, SHOP_PACK, TOOLS, Shop, write_pack


@pytest.fixture
def session(shop: Shop, pack: PolicyPack) -> GuardSession:
    return GuardSession(shop.backend, shop, TOOLS, pack, session_id="core")


def test_allowed_write_is_kept_and_committed(shop: Shop, session: GuardSession) -> None:
    outcome = session.call("cancel_order", {"order_id": "O1", "reason": "asked"})
    assert outcome.verdict is Verdict.ALLOWED
    assert [(c.table, c.key, c.op) for c in outcome.changes] == [("orders", "O1", "update")]
    assert session.commit().committed
    assert shop.order("O1") == {**ORDERS[0], "status": "cancelled"}


def test_before_call_rule_refuses_without_reaching_the_upstream(shop: Shop, session: GuardSession) -> None:
    outcome = session.call("cancel_order", {"order_id": "O2"})
    assert outcome.verdict is Verdict.REFUSED
    assert [v.rule_id for v in outcome.violations] == ["shop.cancel_processing_only"]
    assert outcome.violations[0].rows == [{"id": "O2", "status": "shipped"}]
    assert shop.calls == []
    assert session.pending_changes().changes == []


def test_after_call_rule_rolls_the_call_back(shop: Shop, session: GuardSession) -> None:
    outcome = session.call("set_total", {"order_id": "O1", "total": -5})
    assert outcome.verdict is Verdict.ROLLED_BACK
    assert shop.calls == ["set_total"]
    assert [v.rule_id for v in outcome.violations] == ["shop.total_not_negative"]
    assert shop.order("O1") == ORDERS[0]
    assert session.pending_changes().changes == []


def test_at_commit_rule_holds_the_commit_until_fixed(shop: Shop, session: GuardSession) -> None:
    added = session.call("add_order", {"order_id": "O4", "customer_id": "C1", "total": 10})
    more = session.call("add_order", {"order_id": "O5", "customer_id": "C1", "total": 10})
    assert (added.verdict, more.verdict) == (Verdict.ALLOWED, Verdict.ALLOWED)
    refused = session.commit()
    assert not refused.committed
    assert [v.rule_id for v in refused.violations] == ["shop.at_most_two_open_orders"]
    assert session.call("cancel_order", {"order_id": "O1"}).verdict is Verdict.ALLOWED
    assert session.commit().committed
    assert [r["id"] for r in shop.rows()] == ["O1", "O2", "O3", "O4", "O5"]


def test_rollback_leaves_the_shop_as_it_was(shop: Shop, session: GuardSession) -> None:
    session.call("cancel_order", {"order_id": "O3"})
    session.rollback()
    assert shop.rows() == ORDERS
    with pytest.raises(SessionClosedError):
        session.call("get_order", {"order_id": "O1"})


def test_failed_tool_keeps_nothing(shop: Shop, session: GuardSession) -> None:
    outcome = session.call("set_total", {"order_id": "NOPE", "total": 1})
    assert outcome.verdict is Verdict.FAILED
    assert outcome.error_class is not None
    assert session.pending_changes().changes == []


def test_hidden_tool_is_refused(tmp_path: Path, shop: Shop) -> None:
    text = SHOP_PACK.replace("    tools:\n", "    tools:\n      allow: [get_order, cancel_order]\n", 1)
    hidden = load_policy(write_pack(tmp_path, text))
    session = GuardSession(shop.backend, shop, TOOLS, hidden, session_id="core")
    assert session.call("set_total", {"order_id": "O1", "total": 1}).verdict is Verdict.REFUSED
    assert shop.calls == []


def test_pack_effects_and_folder_loading(tmp_path: Path, pack: PolicyPack) -> None:
    assert pack.effect_of("cancel_order") is EffectClass.IRREVERSIBLE
    assert pack.effect_of("get_order") is EffectClass.READ
    assert [c.id for c in load_policy(tmp_path).checks] == [c.id for c in pack.checks]


def test_a_reviewed_commit_runs_the_at_commit_checks_once(shop: Shop, session: GuardSession) -> None:
    runs: list[int] = []

    def counted(ctx: CheckContext) -> str | None:
        runs.append(len(ctx.changes))
        return None

    session.checks.append(PythonCheck("counted", "at_commit", counted, RuleText("counted at commit")))
    assert session.call("set_total", {"order_id": "O1", "total": 10}).verdict is Verdict.ALLOWED
    review = session.review()
    assert not review.committed and review.violations == [] and len(review.changes) == 1
    outcome = session.commit(review)
    assert outcome.committed and outcome.changes == review.changes
    assert runs == [1]  # the review's run only: commit(reviewed) does not check again
    assert shop.order("O1") == {**ORDERS[0], "total": 10}


def test_a_review_with_violations_is_the_commits_refusal(session: GuardSession) -> None:
    session.call("add_order", {"order_id": "O4", "customer_id": "C1", "total": 5})
    session.call("add_order", {"order_id": "O5", "customer_id": "C1", "total": 5})
    review = session.review()
    assert [v.rule_id for v in review.violations] == ["shop.at_most_two_open_orders"]
    assert session.commit(review) == review and not session.closed
