"""Held calls: the proxy's side of human approvals (docs/approvals.md "How a held call flows").

The guard decides what is held and what an approval allows (:mod:`guard.approvals.gate`); this
module is what the proxy adds around it:

* one :class:`~guard.approvals.gate.ApprovalGate` per agent session and upstream, bound to the
  upstream's policy pack version (computed once per pack);
* waiting for a decision: a held ``tools/call`` polls the store (in a worker thread) until a
  reviewer decides, the request expires, or ``approvals.wait_s`` runs out. Nothing is locked while it
  waits: not the session (other calls and the sessions API go on), not a database transaction. The
  store is shared, so a decision taken through another replica releases the call too;
* what a session's end does to its pending requests (cancelled, with the reason), and the
  refusal of a commit while some are pending;
* notifications of new requests (the webhook) and the background expiry sweep.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

import anyio
import anyio.abc
import anyio.to_thread

from guard.approvals.gate import ApprovalGate, policy_version
from guard.approvals.models import (
    Approval,
    ApprovalConflict,
    ApprovalQuery,
    ApprovalState,
    ApprovalStore,
    ApprovalStoreError,
    utcnow,
)
from proxy.upstreams import Upstream

logger = logging.getLogger(__name__)

APPROVAL_META_KEY = "shadowguard/approval"
"""The ``_meta`` key an agent names an approval with, to run the call it approved (optional: sending
the same call again finds it too)."""

SWEEP_EVERY_S = 30.0

CANCEL_REASONS = {
    "agent": "the agent rolled its session back before a decision",
    "api": "the session was rolled back through the sessions API before a decision",
    "idle": "the session was idle past its timeout and was rolled back before a decision",
    "closed": "the agent's connection closed before a decision",
    "shutdown": "the proxy shut down before a decision",
}
"""Why a session's pending requests were cancelled, by how the session ended."""


class ApprovalNotifier(Protocol):
    """Told about every new request (the webhook: ``proxy.approvals.webhook.WebhookNotifier``)."""

    async def requested(self, approval: Approval) -> None: ...


def replica_name() -> str:
    """Names this proxy process on the approvals it executes (``used_by``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class HeldCalls:
    """The approval store plus what the proxy does with it (see the module docstring).

    ``wait_s``/``poll_s``: how long a held call waits for a decision and how often it looks.
    ``sweep_every_s``: how often pending requests past their expiry are marked expired (reads expire
    them lazily too; the sweep makes the queue and the webhook-less reviewer see it).
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        expires_after_s: float,
        wait_s: float,
        poll_s: float,
        consumer: str | None = None,
        notifier: ApprovalNotifier | None = None,
        sweep_every_s: float = SWEEP_EVERY_S,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.expires_after_s = expires_after_s
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.consumer = consumer if consumer is not None else replica_name()
        self.notifier = notifier
        self.sweep_every_s = sweep_every_s
        self.clock = clock
        self._versions: dict[str, str] = {}
        self._tasks: anyio.abc.TaskGroup | None = None

    # -- the guard side
    def gate(self, upstream: Upstream) -> ApprovalGate:
        """A gate for one session's calls to ``upstream`` (keep it for the session's life)."""
        version = self._versions.get(upstream.name)
        if version is None:
            version = self._versions[upstream.name] = policy_version(upstream.policy)
        return ApprovalGate(
            self.store,
            policy_version=version,
            consumer=self.consumer,
            expires_after_s=self.expires_after_s,
            clock=self.clock,
            upstream=upstream.name,
            tool_prefix=upstream.prefix,
        )

    # -- waiting
    async def wait(self, approval_id: str, deadline: float) -> Approval:
        """The approval once it is no longer pending, or as it is when ``deadline`` (anyio time) passes."""
        while True:
            approval: Approval = await anyio.to_thread.run_sync(self.store.get, approval_id)
            left = deadline - anyio.current_time()
            if approval.state is not ApprovalState.PENDING or left <= 0:
                return approval
            await anyio.sleep(min(self.poll_s, left))

    # -- sessions
    def pending(self, session_id: str, principal: str | None) -> list[Approval]:
        """The session's pending requests (worker thread)."""
        query = ApprovalQuery(states=[ApprovalState.PENDING], session_id=session_id, principal=principal)
        return [a for a in self.store.list(query) if a.principal == principal]

    def cancel_pending(self, session_id: str, principal: str | None, reason: str) -> list[Approval]:
        """Cancel the session's pending requests (worker thread); returns those cancelled.

        One decided or expired meanwhile is left as it is: it is no longer pending either way.
        """
        cancelled = []
        for approval in self.pending(session_id, principal):
            try:
                cancelled.append(self.store.cancel(approval.id, reason=reason))
            except ApprovalConflict as exc:
                logger.info(
                    "approval %s was %s before it could be cancelled", approval.id, exc.approval.state
                )
        return cancelled

    # -- notifications
    async def notify(self, approvals: Sequence[Approval]) -> None:
        """Tell the notifier about new requests: in the background while :meth:`run` runs."""
        if self.notifier is None:
            return
        for approval in approvals:
            if self._tasks is not None:
                self._tasks.start_soon(self._notify, approval)
            else:
                await self._notify(approval)

    async def _notify(self, approval: Approval) -> None:
        assert self.notifier is not None
        try:
            await self.notifier.requested(approval)
        except Exception:  # a notice that cannot be sent must not fail the agent's call
            logger.exception("could not send the notice of approval request %s", approval.id)

    # -- background
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send notices in the background and sweep expired requests, until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                task_status.started()
                while True:
                    await anyio.sleep(self.sweep_every_s)
                    await self.sweep()
            finally:
                self._tasks = None

    async def sweep(self) -> list[Approval]:
        """Mark pending requests past their expiry expired; a store that cannot be reached is logged."""
        try:
            expired: list[Approval] = list(await anyio.to_thread.run_sync(self.store.expire_due))
        except ApprovalStoreError as exc:
            logger.warning("approval expiry sweep failed: %s", exc)
            return []
        if expired:
            logger.info("%d approval request(s) expired without a decision", len(expired))
        return expired

    def close(self) -> None:
        self.store.close()
