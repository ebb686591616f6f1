"""The reviewer page ``/review``: the real app served by uvicorn over a real SQLite approval store.

One browser test drives Debian's Chromium through Playwright (log in, queue, request, diff, approve,
screenshot); the rest speak plain HTTP to the same server: who may see and post what, CSRF, unknown
ids, conflicts, and escaping of everything the agent controls.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from guard.approvals import (
    Approval,
    ApprovalRequest,
    ApprovalState,
    CheckResult,
    utcnow,
)
from guard.approvals.sql import SqlApprovalStore
from guard.models import ChangeSet, EffectClass, PolicySource, RowChange
from proxy.approvals.auth import REVIEW_COOKIE, hash_token
from proxy.approvals.diff import change_diffs
from proxy.approvals.review import csrf_token
from proxy.config import AgentConfig, AuthConfig, ReviewerConfig
from tests.support.proxy import approvals_app
from tests.support.services import CHROMIUM, require_chromium

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM_FLAGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
APPROVER = "tok-approver-" + "a" * 32
OTHER_APPROVER = "tok-approver-" + "b" * 32
VIEWER = "tok-viewer-" + "v" * 32
AGENT = "tok-agent-" + "g" * 32
XSS = "<script>alert('pwned')</script>"
XSS_IMG = '<img src=x onerror="alert(1)">'


@dataclass
class Site:
    base: str
    store: SqlApprovalStore
    audit_path: Path

    def client(self, token: str | None = None) -> httpx2.Client:
        cookies = {REVIEW_COOKIE: token} if token is not None else None
        return httpx2.Client(base_url=self.base, cookies=cookies, follow_redirects=False, timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    auth = AuthConfig(
        agents=[AgentConfig(name="agent-7", token_sha256=hash_token(AGENT))],
        reviewers=[
            ReviewerConfig(name="alice", role="approver", token_sha256=hash_token(APPROVER)),
            ReviewerConfig(name="bob", role="approver", token_sha256=hash_token(OTHER_APPROVER)),
            ReviewerConfig(name="vera", role="viewer", token_sha256=hash_token(VIEWER)),
        ],
    )
    with approvals_app(tmp_path_factory.mktemp("review"), auth) as app:
        yield Site(app.base, app.store, app.audit_path)


def refund_preview() -> ChangeSet:
    """What a rehearsed ``refund_order`` did: the order updated, a refund row inserted, a hold released."""
    return ChangeSet(
        changes=[
            RowChange(
                table="orders",
                key="W0001",
                op="update",
                before={"id": "W0001", "status": "delivered", "refunded_cents": 0, "note": None},
                after={"id": "W0001", "status": "refunded", "refunded_cents": 12999, "note": None},
            ),
            RowChange(
                table="refunds",
                key="R0042",
                op="insert",
                after={"id": "R0042", "order_id": "W0001", "amount_cents": 12999, "method": "card"},
            ),
            RowChange(
                table="holds",
                key="H9",
                op="delete",
                before={"id": "H9", "order_id": "W0001"},
            ),
        ]
    )


def seed(site: Site, **overrides: Any) -> Approval:
    fields: dict[str, Any] = {
        "principal": "agent-7",
        "session_id": "sess-" + os.urandom(4).hex(),
        "upstream": "retail",
        "tool": "refund_order",
        "arguments": {"order_id": "W0001", "amount_cents": 12999, "reason": "damaged in transit"},
        "effect": EffectClass.IRREVERSIBLE,
        "rule_id": "refund_over_100",
        "rule_source": PolicySource(ref="policy.md#refunds", quote="Refunds above $100 need a supervisor."),
        "preview": refund_preview(),
        "checks": [
            CheckResult(rule_id="order_delivered", passed=True, message="order W0001 is delivered"),
            CheckResult(rule_id="refund_le_paid", passed=True),
        ],
        "policy_version": "sha256:" + "0" * 64,
        "expires_at": utcnow() + timedelta(hours=1),
    }
    fields.update(overrides)
    return site.store.create(ApprovalRequest(**fields))


def form_token(token: str, approval_id: str) -> str:
    return csrf_token(token, f"decide:{approval_id}")


def post(client: httpx2.Client, approval_id: str, action: str, data: dict[str, str]) -> httpx2.Response:
    return client.post(f"/review/{approval_id}/{action}", data=data)


def flash_error(response: httpx2.Response) -> str:
    """The error message the page shows at its top (empty if none)."""
    found = re.search(r'<p class="flash flash-error" role="alert">([^<]*)</p>', response.text)
    return found.group(1) if found else ""


def unchanged(site: Site, approval: Approval) -> None:
    """Nothing happened to it: still pending, and its history is only the request."""
    now = site.store.get(approval.id)
    assert now.state is ApprovalState.PENDING
    assert now.decided_by is None
    assert [e.action for e in site.store.history(approval.id)] == ["requested"]


# -- the browser: queue, request, diff, approve -------------------------------------------------------


def _artifacts() -> Path:
    folder = Path(os.environ.get("SHADOWGUARD_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _require_chromium() -> None:
    require_chromium()  # skipped without Chromium, failed in strict mode (CI)


def test_approve_in_chromium(site: Site) -> None:
    _require_chromium()
    from playwright.sync_api import Dialog, expect, sync_playwright

    approval = seed(site)
    older = seed(site, tool="cancel_order", arguments={"order_id": "W0002"}, preview=ChangeSet())
    site.store.decide(older.id, approve=False, reviewer="bob", reason="customer changed their mind")
    hostile = seed(
        site,
        arguments={"note": XSS},
        preview=ChangeSet(changes=[RowChange(table="notes", key="n1", op="insert", after={"body": XSS_IMG})]),
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(f"{site.base}/review")
            expect(page).to_have_url(re.compile(r"/review/login\?next=%2Freview$"))
            page.fill("#token", APPROVER)
            page.click("button[type=submit]")

            expect(page).to_have_url(f"{site.base}/review")
            expect(page.locator("header .who")).to_contain_text("alice")
            row = page.locator("table.queue tbody tr", has=page.locator(f"a[href='/review/{approval.id}']"))
            expect(row).to_have_count(1)
            expect(row.locator(".state")).to_have_text("pending")
            expect(row.locator("td.num")).to_have_text("3")
            states = page.locator("table.queue tbody tr .state").all_inner_texts()
            assert states.index("pending") < states.index("rejected"), states
            page.screenshot(path=str(_artifacts() / "review-queue.png"), full_page=True)

            row.locator("a.open").click()
            expect(page).to_have_url(f"{site.base}/review/{approval.id}")
            expect(page.locator("#state")).to_have_text("pending")
            expect(page.locator("#arguments")).to_contain_text('"amount_cents": 12999')
            update = page.locator("table.diff-update")
            status = update.locator("tr", has=page.locator("th", has_text="status"))
            expect(status).to_have_attribute("data-changed", "true")
            expect(status.locator("td.before")).to_have_text("delivered")
            expect(status.locator("td.after")).to_have_text("refunded")
            untouched = update.locator("tr", has=page.locator("th", has_text="note"))
            expect(untouched).to_have_class("same")
            expect(page.locator("table.diff-insert caption")).to_contain_text("refunds")
            expect(page.locator("table.diff-delete caption")).to_contain_text("holds")
            expect(page.locator("#checks")).to_contain_text("order_delivered")

            page.fill("#approve-reason", "supervisor ok, damage photos attached")
            page.screenshot(path=str(_artifacts() / "review-request.png"), full_page=True)
            page.click("#approve")
            expect(page).to_have_url(f"{site.base}/review/{approval.id}?done=approved")
            expect(page.locator("#state")).to_have_text("approved")
            expect(page.locator(".flash-ok")).to_contain_text("Approved")
            expect(page.locator("#approve")).to_have_count(0)
            event = page.locator("#history tr.event-approved")
            expect(event).to_contain_text("alice")
            expect(event).to_contain_text("supervisor ok, damage photos attached")
            page.screenshot(path=str(_artifacts() / "review-approve.png"), full_page=True)

            dialogs: list[str] = []

            def dismiss(dialog: Dialog) -> None:
                dialogs.append(dialog.message)
                dialog.dismiss()

            page.on("dialog", dismiss)
            page.goto(f"{site.base}/review/{hostile.id}")
            expect(page.locator("#arguments")).to_contain_text(XSS)
            expect(page.locator("table.diff-insert td.after")).to_have_text(XSS_IMG)
            assert dialogs == []
        finally:
            browser.close()

    decided = site.store.get(approval.id)
    assert decided.state is ApprovalState.APPROVED
    assert decided.decided_by == "alice"
    assert decided.reason == "supervisor ok, damage photos attached"
    assert [e.action for e in site.store.history(approval.id)] == ["requested", "approved"]
    records = [json.loads(line) for line in site.audit_path.read_text().splitlines()]
    assert any(r.get("approval_id") == approval.id and r.get("reviewer") == "alice" for r in records)


# -- plain HTTP ---------------------------------------------------------------------------------------


def test_not_logged_in_is_sent_to_the_login_form(site: Site) -> None:
    approval = seed(site)
    with site.client() as http:
        queue = http.get("/review")
        assert queue.status_code == 303
        assert queue.headers["location"] == "/review/login?next=%2Freview"
        detail = http.get(f"/review/{approval.id}")
        assert detail.headers["location"] == f"/review/login?next=%2Freview%2F{approval.id}"
        forged = post(http, approval.id, "approve", {"csrf": "x"})
        assert forged.status_code == 303
        assert forged.headers["location"].startswith("/review/login")
    with site.client("not-a-token") as http:
        stale = http.get("/review")
        assert stale.status_code == 303
        assert f'{REVIEW_COOKIE}=""' in stale.headers["set-cookie"]
    unchanged(site, approval)


def test_login_sets_a_strict_httponly_cookie_and_refuses_other_tokens(site: Site) -> None:
    with site.client() as http:
        form = http.get("/review/login")
        assert form.status_code == 200
        assert 'name="token"' in form.text
        for wrong in ("nope", AGENT, ""):
            refused = http.post("/review/login", data={"token": wrong, "next": "/review"})
            assert refused.status_code == 401
            assert "flash-error" in refused.text
            assert "set-cookie" not in refused.headers
        ok = http.post("/review/login", data={"token": VIEWER, "next": "https://evil.example/"})
        assert ok.status_code == 303
        assert ok.headers["location"] == "/review"
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith(f"{REVIEW_COOKIE}={VIEWER};")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert "Path=/review" in cookie
        back = http.post("/review/login", data={"token": VIEWER, "next": "/review/apr_abc"})
        assert back.headers["location"] == "/review/apr_abc"


def test_logout_needs_its_csrf_token(site: Site) -> None:
    with site.client(VIEWER) as http:
        assert http.post("/review/logout", data={}).status_code == 403
        out = http.post("/review/logout", data={"csrf": csrf_token(VIEWER, "logout")})
        assert out.status_code == 303
        assert out.headers["location"] == "/review/login"
        assert f'{REVIEW_COOKIE}=""' in out.headers["set-cookie"]


def test_viewer_sees_no_forms_and_a_forged_post_is_403(site: Site) -> None:
    approval = seed(site)
    with site.client(VIEWER) as http:
        page = http.get(f"/review/{approval.id}")
        assert page.status_code == 200
        assert "/approve" not in page.text
        assert "/reject" not in page.text
        assert "viewer" in page.text
        for action, reason in (("approve", ""), ("reject", "no")):
            forged = post(
                http, approval.id, action, {"csrf": form_token(VIEWER, approval.id), "reason": reason}
            )
            assert forged.status_code == 403
            assert "viewer" in flash_error(forged)
    unchanged(site, approval)


def test_missing_or_wrong_csrf_is_403(site: Site) -> None:
    approval = seed(site)
    other = seed(site)
    with site.client(APPROVER) as http:
        for data in (
            {},
            {"csrf": ""},
            {"csrf": "0" * 64},
            {"csrf": form_token(APPROVER, other.id)},
            {"csrf": form_token(OTHER_APPROVER, approval.id)},
        ):
            refused = post(http, approval.id, "approve", data)
            assert refused.status_code == 403, data
            assert "CSRF" in refused.text
        json_body = http.post(
            f"/review/{approval.id}/approve", json={"csrf": form_token(APPROVER, approval.id)}
        )
        assert json_body.status_code == 403
    unchanged(site, approval)


def test_unknown_id_is_404(site: Site) -> None:
    with site.client(APPROVER) as http:
        assert http.get("/review/apr_doesnotexist").status_code == 404
        forged = post(http, "apr_doesnotexist", "approve", {"csrf": form_token(APPROVER, "apr_doesnotexist")})
        assert forged.status_code == 404
        assert "no approval request" in forged.text


def test_reject_needs_a_reason_then_records_it(site: Site) -> None:
    approval = seed(site)
    csrf = form_token(APPROVER, approval.id)
    with site.client(APPROVER) as http:
        for blank in ("", "   "):
            refused = post(http, approval.id, "reject", {"csrf": csrf, "reason": blank})
            assert refused.status_code == 400
            assert "needs a reason" in flash_error(refused)
        too_long = post(http, approval.id, "reject", {"csrf": csrf, "reason": "x" * 2001})
        assert too_long.status_code == 400
        unchanged(site, approval)
        done = post(http, approval.id, "reject", {"csrf": csrf, "reason": "amount exceeds what was paid"})
        assert done.status_code == 303
        assert done.headers["location"] == f"/review/{approval.id}?done=rejected"
        shown = http.get(done.headers["location"])
        assert "Rejected. The agent receives your reason." in shown.text
    rejected = site.store.get(approval.id)
    assert rejected.state is ApprovalState.REJECTED
    assert rejected.reason == "amount exceeds what was paid"


def test_deciding_twice_or_late_is_409_and_changes_nothing(site: Site) -> None:
    approval = seed(site)
    site.store.decide(approval.id, approve=True, reviewer="bob", reason=None)
    expired = seed(site, expires_at=utcnow() - timedelta(seconds=1))
    with site.client(APPROVER) as http:
        again = post(http, approval.id, "reject", {"csrf": form_token(APPROVER, approval.id), "reason": "no"})
        assert again.status_code == 409
        assert "Nothing was changed" in flash_error(again)
        late = post(http, expired.id, "approve", {"csrf": form_token(APPROVER, expired.id)})
        assert late.status_code == 409
        page = http.get(f"/review/{expired.id}")
        assert 'id="approve"' not in page.text
        assert "expired" in page.text
    assert site.store.get(approval.id).decided_by == "bob"
    assert site.store.get(approval.id).state is ApprovalState.APPROVED
    assert site.store.get(expired.id).state is ApprovalState.EXPIRED
    assert [e.action for e in site.store.history(expired.id)] == ["requested", "expired"]


def test_own_request_cannot_be_decided(site: Site) -> None:
    approval = seed(site, principal="alice")
    with site.client(APPROVER) as http:
        page = http.get(f"/review/{approval.id}")
        assert 'id="approve"' not in page.text
        assert "your own name" in page.text
        forged = post(http, approval.id, "approve", {"csrf": form_token(APPROVER, approval.id)})
        assert forged.status_code == 403
        assert "own name" in flash_error(forged) or "own request" in flash_error(forged)
    unchanged(site, approval)


def test_everything_the_agent_controls_is_escaped(site: Site) -> None:
    approval = seed(
        site,
        principal=XSS,
        session_id=XSS,
        tool="send_note",
        arguments={"note": XSS, XSS_IMG: 1},
        rule_source=PolicySource(ref=XSS, quote=XSS_IMG),
        preview=ChangeSet(changes=[RowChange(table="notes", key=XSS, op="insert", after={XSS_IMG: XSS})]),
        checks=[CheckResult(rule_id="no_markup", passed=False, message=XSS)],
    )
    with site.client(APPROVER) as http:
        for path in (f"/review/{approval.id}", "/review"):
            page = http.get(path)
            assert page.status_code == 200
            assert "<script>alert" not in page.text
            assert "<img src=x" not in page.text
            assert "&lt;script&gt;alert(" in page.text
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp
            assert "script-src" not in csp


def test_queue_filters_by_state_and_refuses_unknown_states(site: Site) -> None:
    pending = seed(site, tool="grant_access")
    rejected = seed(site, tool="grant_access")
    site.store.decide(rejected.id, approve=False, reviewer="bob", reason="no")
    with site.client(VIEWER) as http:
        everything = http.get("/review", params={"tool": "grant_access"}).text
        assert everything.index(pending.id) < everything.index(rejected.id)
        only = http.get("/review", params={"state": "rejected", "tool": "grant_access"}).text
        assert rejected.id in only
        assert pending.id not in only
        bad = http.get("/review", params={"state": "<b>nope</b>"})
        assert bad.status_code == 400
        assert "&lt;b&gt;nope&lt;/b&gt;" in bad.text


def test_stylesheet_ships_and_is_linked(site: Site) -> None:
    with site.client(VIEWER) as http:
        page = http.get("/review")
        (href,) = re.findall(r'<link rel="stylesheet" href="([^"]+)">', page.text)
        css = http.get(href)
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert "table.diff" in css.text


def test_diff_marks_changed_inserted_and_deleted_cells() -> None:
    update, insert, delete = change_diffs(refund_preview())
    assert update.op == "update"
    cells = {c.column: c for c in update.cells}
    assert cells["status"].changed
    assert cells["status"].before is not None and cells["status"].before.text == "delivered"
    assert cells["refunded_cents"].after is not None and cells["refunded_cents"].after.text == "12999"
    assert cells["refunded_cents"].after.literal
    assert not cells["id"].changed
    assert not cells["note"].changed
    assert cells["note"].before is not None and cells["note"].before.text == "null"
    assert insert.op == "insert" and all(c.changed and c.before is None for c in insert.cells)
    assert delete.op == "delete" and all(c.changed and c.after is None for c in delete.cells)
    twice = ChangeSet(
        changes=[
            RowChange(table="t", key="1", op="update", before={"v": 1}, after={"v": 2}),
            RowChange(table="t", key="1", op="update", before={"v": 2}, after={"v": 3}),
        ]
    )
    (net,) = change_diffs(twice)
    assert net.cells[0].before is not None and net.cells[0].before.text == "1"
    assert net.cells[0].after is not None and net.cells[0].after.text == "3"
