"""Tell someone a call is waiting for them: a signed JSON POST for every new approval request.

The notice is a courtesy, not the queue: the approval store is the source of truth, and a reviewer who
never got the notice still finds the request in the API, the CLI and the ``/review`` page. So a
delivery that fails (after retrying transport errors and 5xx answers) is logged at ERROR with the
approval id and the cause and is never raised into the agent's call: the request stands. Every notice
is counted once in ``shadowguard_webhook_deliveries_total{result="delivered"|"failed"}`` (a failed one
after its retries), so an alert can catch a receiver that stopped taking them.

The body (``Content-Type: application/json``)::

    {"event": "approval.requested",
     "approval": {"id", "tool", "principal", "session_id", "effect", "rule_id", "expires_at",
                  "rows_changed", "tables"},
     "review_url": "<review page>/<id>" | null}

It carries no arguments and no row contents (they may hold personal data); the reviewer sees those on
the authenticated page. With ``webhook.secret_env`` set, ``X-Shadowguard-Signature: sha256=<hex>`` is
the HMAC-SHA256 of the exact body bytes under that key; receivers should compare it in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from typing import Any
from urllib.parse import urlsplit

import httpx2
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from guard.approvals import Approval
from proxy import telemetry
from proxy.config import ConfigError, WebhookConfig

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Shadowguard-Signature"
EVENT_REQUESTED = "approval.requested"


class _ServerError(Exception):
    """A 5xx answer: the receiver may recover, so the delivery is retried."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the receiver answered HTTP {status}")


class _Refused(Exception):
    """A 4xx (or 1xx/3xx) answer: sending the same notice again will not help, so it is not retried."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the receiver refused the notice with HTTP {status}")


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, httpx2.TransportError | _ServerError)


def sign(body: bytes, secret: bytes) -> str:
    """The ``X-Shadowguard-Signature`` value for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookNotifier:
    """POSTs :data:`EVENT_REQUESTED` notices to one URL; see the module docstring for the contract.

    ``review_url`` is the reviewer page's URL (``http://host:port/review``); each notice links to
    ``<review_url>/<approval id>``. ``backoff_s`` is the first retry's wait (then doubling, at most
    5 s); a delivery therefore takes at most about ``max_attempts * timeout_s`` plus the waits.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: bytes | None = None,
        review_url: str | None = None,
        timeout_s: float = 5.0,
        max_attempts: int = 3,
        backoff_s: float = 0.2,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.url = url
        self.review_url = review_url.rstrip("/") if review_url else None
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._secret = secret

    @classmethod
    def from_config(cls, config: WebhookConfig, *, review_url: str | None) -> WebhookNotifier | None:
        """The notifier the config asks for, or None when ``webhook.url`` is unset.

        Raises :class:`~proxy.config.ConfigError` at startup when ``secret_env`` names an environment
        variable that is unset or empty: unsigned notices must not go out by accident.
        """
        if config.url is None:
            return None
        secret: bytes | None = None
        if config.secret_env is not None:
            value = os.environ.get(config.secret_env)
            if not value:
                raise ConfigError(
                    f"webhook.secret_env: environment variable {config.secret_env} is not set"
                    " (it must hold the key that signs webhook notices)",
                    field="webhook.secret_env",
                )
            secret = value.encode()
        return cls(
            config.url,
            secret=secret,
            review_url=review_url,
            timeout_s=config.timeout_s,
            max_attempts=config.max_attempts,
        )

    def notice(self, approval: Approval) -> dict[str, Any]:
        """The JSON document sent for a new request."""
        preview = approval.preview.net()
        return {
            "event": EVENT_REQUESTED,
            "approval": {
                "id": approval.id,
                "tool": approval.tool,
                "principal": approval.principal,
                "session_id": approval.session_id,
                "effect": approval.effect.value,
                "rule_id": approval.rule_id,
                "expires_at": approval.expires_at.isoformat(),
                "rows_changed": len(preview),
                "tables": sorted(preview.tables),
            },
            "review_url": f"{self.review_url}/{approval.id}" if self.review_url else None,
        }

    async def requested(self, approval: Approval) -> None:
        """Deliver the notice for a new request. Never raises for a failed delivery (it is logged and
        counted); awaiting it takes as long as the delivery and its retries, so run it as a task if the
        caller must not wait."""
        body = json.dumps(self.notice(approval), separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign(body, self._secret)
        delivered = False
        try:
            async with httpx2.AsyncClient(timeout=self.timeout_s) as client:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(self.max_attempts),
                    wait=wait_exponential(multiplier=self.backoff_s, min=self.backoff_s, max=5.0),
                    retry=retry_if_exception(_retryable),
                    reraise=True,
                ):
                    with attempt:
                        await self._post(client, body, headers)
            delivered = True
        except (httpx2.HTTPError, _ServerError, _Refused) as exc:
            logger.error(
                "webhook notice for approval %s not delivered to %s: %s (the request stands in the queue)",
                approval.id,
                _origin(self.url),
                _describe(exc),
            )
        finally:
            telemetry.record_webhook_delivery(delivered)

    async def _post(self, client: httpx2.AsyncClient, body: bytes, headers: dict[str, str]) -> None:
        response = await client.post(self.url, content=body, headers=headers)
        if response.status_code >= 500:
            raise _ServerError(response.status_code)
        if not 200 <= response.status_code < 300:
            raise _Refused(response.status_code)


def _origin(url: str) -> str:
    """Scheme, host and port only: webhook URLs often carry a secret token in their path."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
