"""The approval webhook against a real HTTP receiver on a loopback port (http.server in a thread)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from guard.approvals import Approval, ApprovalRequest
from guard.models import ChangeSet, EffectClass, RowChange
from proxy.approvals.webhook import SIGNATURE_HEADER, WebhookNotifier
from proxy.config import ConfigError, WebhookConfig
from tests.support.webhook import WebhookReceiver

pytestmark = pytest.mark.anyio

SECRET = "webhook-test-key"
LOGGER = "proxy.approvals.webhook"


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[WebhookReceiver]:
    """A started receiver answering with the test's statuses (``indirect`` parameter; default 204)."""
    state = WebhookReceiver(statuses=list(getattr(request, "param", [204])))
    state.start()
    yield state
    state.stop()


def approval() -> Approval:
    now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    preview = ChangeSet(
        changes=[
            RowChange(table="orders", key="o-1", op="update", before={"s": "paid"}, after={"s": "refunding"}),
            RowChange(
                table="orders", key="o-1", op="update", before={"s": "refunding"}, after={"s": "refunded"}
            ),
            RowChange(table="refunds", key="r-9", op="insert", after={"amount": 120}),
        ]
    )
    request = ApprovalRequest(
        principal="agent-7",
        session_id="sess-1",
        tool="refund_order",
        arguments={"order_id": "o-1", "card": "4111111111111111"},
        effect=EffectClass.IRREVERSIBLE,
        rule_id="refunds-over-100",
        preview=preview,
        policy_version="sha256:policy-v1",
        expires_at=now + timedelta(hours=1),
    )
    return Approval.from_request(request, now=now)


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.ERROR]


def test_no_url_means_no_notifier() -> None:
    assert WebhookNotifier.from_config(WebhookConfig(), review_url="http://127.0.0.1:8790/review") is None


def test_a_named_but_unset_secret_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SG_TEST_WEBHOOK_SECRET", raising=False)
    config = WebhookConfig(url="http://127.0.0.1:9/hook", secret_env="SG_TEST_WEBHOOK_SECRET")
    with pytest.raises(ConfigError, match="SG_TEST_WEBHOOK_SECRET is not set") as raised:
        WebhookNotifier.from_config(config, review_url=None)
    assert raised.value.field == "webhook.secret_env"


async def test_signed_notice_is_delivered(
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SG_TEST_WEBHOOK_SECRET", SECRET)
    config = WebhookConfig(url=receiver.url, secret_env="SG_TEST_WEBHOOK_SECRET")
    notifier = WebhookNotifier.from_config(config, review_url="http://127.0.0.1:8790/review/")
    assert notifier is not None
    held = approval()

    await notifier.requested(held)

    [(headers, body)] = receiver.received
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers[SIGNATURE_HEADER.lower()], expected)
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "event": "approval.requested",
        "approval": {
            "id": held.id,
            "tool": "refund_order",
            "principal": "agent-7",
            "session_id": "sess-1",
            "effect": "irreversible",
            "rule_id": "refunds-over-100",
            "expires_at": "2026-03-01T10:00:00+00:00",
            "rows_changed": 2,
            "tables": ["orders", "refunds"],
        },
        "review_url": f"http://127.0.0.1:8790/review/{held.id}",
    }
    assert b"4111111111111111" not in body
    assert errors(caplog) == []


async def test_unsigned_without_a_secret(receiver: WebhookReceiver) -> None:
    notifier = WebhookNotifier.from_config(WebhookConfig(url=receiver.url), review_url=None)
    assert notifier is not None

    await notifier.requested(approval())

    [(headers, body)] = receiver.received
    assert SIGNATURE_HEADER.lower() not in headers
    assert json.loads(body)["review_url"] is None


@pytest.mark.parametrize("receiver", [[500, 503, 200]], indirect=True)
async def test_server_errors_are_retried_until_delivered(
    receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = WebhookNotifier(receiver.url, secret=SECRET.encode(), max_attempts=3, backoff_s=0.01)

    await notifier.requested(approval())

    assert len(receiver.received) == 3
    assert len({body for _, body in receiver.received}) == 1
    assert errors(caplog) == []


@pytest.mark.parametrize(
    ("receiver", "attempts"),
    [
        pytest.param([500], 4, id="a-failing-receiver-is-tried-max_attempts-times"),
        pytest.param([403], 1, id="a-refusal-is-not-retried"),
    ],
    indirect=["receiver"],
)
async def test_a_receiver_that_always_answers_an_error_is_logged_not_raised(
    receiver: WebhookReceiver, attempts: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Every answer of the receiver is its one status: a server error is retried up to
    ``max_attempts`` (4), a refusal is not; either way one error is logged and nothing raised."""
    notifier = WebhookNotifier(receiver.url, max_attempts=4, backoff_s=0.01)
    held = approval()

    await notifier.requested(held)

    assert len(receiver.received) == attempts
    [message] = errors(caplog)
    assert held.id in message and f"HTTP {receiver.statuses[0]}" in message


async def test_an_unreachable_receiver_is_logged_without_the_url_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    notifier = WebhookNotifier(f"http://127.0.0.1:{port}/hooks/t0ken-in-path", max_attempts=2, backoff_s=0.01)
    held = approval()

    await notifier.requested(held)

    [message] = errors(caplog)
    assert held.id in message and "ConnectError" in message
    assert f"127.0.0.1:{port}" in message and "t0ken-in-path" not in message
