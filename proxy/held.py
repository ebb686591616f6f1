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
* notifications of new requests (the webhook) and the background expiry sweep;
* the approval metrics and the ``shadowguard.approval.wait`` span (:mod:`proxy.telemetry`; what each
  counts: docs/approvals.md "Metrics and traces").
"""

from __future__ import annotations

import logging
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import anyio
import anyio.abc
import anyio.to_thread

from guard.approvals.gate import ApprovalGate, Resolution, policy_version
from guard.approvals.models import (
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalQuery,
    ApprovalState,
    ApprovalStore,
    ApprovalStoreError,
    utcnow,
)
from guard.approvals.transitions import TransitionStore
from guard.effects import classify
from guard.errors import ErrorClass
from guard.models import ChangeSet, EffectClass, ErrorHint, ToolCall, ToolOutcome, Verdict, Violation
from proxy import telemetry
from proxy.catalog import ToolRoute
from proxy.upstreams import Upstream

logger = logging.getLogger(__name__)

APPROVAL_META_KEY = "shadowguard/approval"
"""The ``_meta`` key an agent names an approval with, to run the call it approved (optional: sending
the same call again finds it too)."""

SWEEP_EVERY_S = 30.0
PAGE = 1000
READY_TIMEOUT_S = 2.0
"""How long /readyz waits for the approval store to answer."""
"""Pending requests read per query when the sweep counts the queue."""
_TIMED_MAX = 4096
"""How many decisions a replica remembers having timed, so that two calls waiting for one request
observe its wait once."""

NO_REVIEWER_REASON = "no reviewer who could approve it is configured (auth.reviewers has no approver)"

CANCEL_REASONS = {
    "agent": "the agent rolled its session back before a decision",
    "api": "the session was rolled back through the sessions API before a decision",
    "idle": "the session was idle past its timeout and was rolled back before a decision",
    "lease": "the agent's client went away (no request within the session lease) before a decision",
    "closed": "the agent's connection closed before a decision",
    "shutdown": "the proxy shut down before a decision",
}
"""Why a session's pending requests were cancelled, by how the session ended."""


class NoReviewerError(RuntimeError):
    """``approvals.require_reviewers`` is set, some tools' calls are held for a reviewer, and no
    reviewer could approve them (the message names the tools)."""


def tools_held_for_review(routes: Mapping[str, ToolRoute]) -> list[str]:
    """The agent-visible tools whose calls may be held for a reviewer: irreversible by the pack or by
    their annotations (``destructiveHint``), SQL tools (their DROP, TRUNCATE, unbounded DELETE or
    UPDATE), and tools a pack's approval rule may name."""
    held = []
    for exposed, route in routes.items():
        upstream, name = route.upstream, route.name
        info = upstream.tool_info(name)
        effect, _ = classify(info, {}, upstream.policy.effect_of(name))
        named = any(
            (rule.tools is None or name in rule.tools) and rule.effect in (None, effect)
            for rule in upstream.policy.model.approvals
        )
        if effect is EffectClass.IRREVERSIBLE or info.sql_dialect is not None or named:
            held.append(exposed)
    return held


def check_reviewers(routes: Mapping[str, ToolRoute], decidable: bool, *, require: bool) -> None:
    """At start-up: warn (or, with ``require``, raise :class:`NoReviewerError`) when some tools' calls
    are held for a reviewer and no reviewer can approve them: each such call would be refused."""
    if decidable:
        return
    held = tools_held_for_review(routes)
    if not held:
        return
    message = (
        f"calls to {', '.join(held)} may be held for a human approval, but no reviewer can decide "
        "(auth.reviewers has no approver): such calls are refused at once. Configure an approver "
        "(docs/approvals.md) or a policy pack that classifies these tools"
    )
    if require:
        raise NoReviewerError(f"approvals.require_reviewers is true: {message}")
    logger.warning("%s.", message)


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
    them lazily too; the sweep makes the queue and the webhook-less reviewer see it) and the
    ``shadowguard_approvals_pending`` gauge is refreshed.

    ``store`` must report its transitions (a :class:`~guard.approvals.transitions.TransitionStore`,
    as every store :func:`~guard.approvals.stores.open_approval_store` opens does): the requested,
    expired and cancelled counts come from there, so each is counted once, by the replica that made it.
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
        decidable: bool = True,
    ) -> None:
        self.store = store
        self.decidable = decidable
        """Some reviewer can approve a request here; False: a held call is refused at once instead."""
        self.expires_after_s = expires_after_s
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.consumer = consumer if consumer is not None else replica_name()
        self.notifier = notifier
        self.sweep_every_s = sweep_every_s
        self.clock = clock
        self._versions: dict[str, str] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._timed: OrderedDict[str, None] = OrderedDict()
        if not isinstance(store, TransitionStore):
            raise TypeError(
                f"{type(store).__name__} does not report its transitions: held calls need an approval "
                "store built on guard.approvals.transitions.TransitionStore (the metrics count them)"
            )
        store.add_listener(self._transition)

    def _transition(self, event: ApprovalEvent, approval: Approval) -> None:
        """The store's transitions this replica made (worker threads): counted here."""
        if event.action == "requested":
            telemetry.record_approval_requested(approval)
        elif event.action in ("expired", "cancelled"):
            telemetry.record_approval_finished(event.action)

    # -- the guard side
    def gate(self, upstream: Upstream) -> ApprovalGate:
        """A gate for one session's calls to ``upstream`` (keep it for the session's life)."""
        version = self._versions.get(upstream.name)
        if version is None:
            version = self._versions[upstream.name] = policy_version(upstream.policy)
        return CountedGate(
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
        """The approval once it is no longer pending, or as it is when ``deadline`` (anyio time) passes.

        Traced as ``shadowguard.approval.wait`` (the approval id, and the state the wait ended on as
        ``outcome``: ``pending`` when the deadline passed first). A decision seen here is timed, once
        per replica, in ``shadowguard_approval_wait_seconds``.
        """
        with telemetry.span("shadowguard.approval.wait", **{"shadowguard.approval.id": approval_id}) as span:
            while True:
                approval: Approval = await anyio.to_thread.run_sync(self.store.get, approval_id)
                left = deadline - anyio.current_time()
                if approval.state is not ApprovalState.PENDING or left <= 0:
                    break
                await anyio.sleep(min(self.poll_s, left))
            span.set_attribute("shadowguard.approval.outcome", approval.state.value)
            if approval.state in (ApprovalState.APPROVED, ApprovalState.REJECTED):
                self._time_decision(approval)
            return approval

    def _time_decision(self, approval: Approval) -> None:
        if approval.id in self._timed:
            return
        self._timed[approval.id] = None
        if len(self._timed) > _TIMED_MAX:
            self._timed.popitem(last=False)
        telemetry.record_approval_wait(approval)

    # -- sessions
    def pending(self, session_id: str, principal: str | None) -> list[Approval]:
        """The session's pending requests (worker thread)."""
        query = ApprovalQuery(states=[ApprovalState.PENDING], session_id=session_id, principal=principal)
        return [a for a in self.store.list(query) if a.principal == principal]

    def cancel(self, approval_id: str, reason: str) -> Approval | None:
        """Cancel one request (worker thread); None when it was no longer pending."""
        try:
            return self.store.cancel(approval_id, reason=reason)
        except ApprovalConflict as exc:
            logger.info("approval %s was %s before it could be cancelled", approval_id, exc.approval.state)
            return None

    def refuse_unapprovable(self, held: ToolOutcome) -> ToolOutcome:
        """A held call no reviewer can approve (none is configured, :attr:`decidable` is False): refused
        now and its request cancelled (worker thread), so that it neither waits ``approvals.wait_s``
        nor blocks the session's commit."""
        if held.approval_id is not None:
            try:
                self.cancel(held.approval_id, NO_REVIEWER_REASON)
            except ApprovalStoreError as exc:
                logger.warning("approval %s not cancelled: %s", held.approval_id, exc)
        tool = held.call.tool
        rule = f" (rule {held.violations[0].rule_id})" if held.violations else ""
        message = (
            f"{tool} needs a human approval{rule}, and no reviewer who could approve it is configured on "
            "this proxy (auth.reviewers has no approver), so it was refused. It did not run; nothing changed."
        )
        step = (
            "Do not send it again: it cannot be approved here. Tell the user that this action needs a "
            "reviewer (the operator configures one: docs/approvals.md), or do without it."
        )
        source = held.violations[0].source if held.violations else None
        return held.model_copy(
            update={
                "verdict": Verdict.REFUSED,
                "changes": ChangeSet(),
                "error_class": ErrorClass.PERMISSION_DENIED.value,
                "violations": [Violation(rule_id="no_reviewer", message=message, hint=step, source=source)],
                "hint": ErrorHint(
                    error_class=ErrorClass.PERMISSION_DENIED.value, message=message, next_step=step
                ),
                "approval_id": None,
                "approval_state": None,
                "approval_expires_at": None,
            }
        )

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
                    await self.sweep()
                    await anyio.sleep(self.sweep_every_s)
            finally:
                self._tasks = None

    async def sweep(self) -> list[Approval]:
        """Mark pending requests past their expiry expired, then count the queue for the
        ``shadowguard_approvals_pending`` gauge. A store that cannot be reached is logged, and the
        gauge keeps the last count it had."""
        try:
            expired: list[Approval] = list(await anyio.to_thread.run_sync(self.store.expire_due))
        except ApprovalStoreError as exc:
            logger.warning("approval expiry sweep failed: %s", exc)
            return []
        if expired:
            logger.info("%d approval request(s) expired without a decision", len(expired))
        try:
            pending = await anyio.to_thread.run_sync(self.count_pending)
        except ApprovalStoreError as exc:
            logger.warning(
                "could not count the pending approval requests (the gauge keeps its value): %s", exc
            )
        else:
            telemetry.record_approvals_swept(pending)
        return expired

    async def reachable(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Whether the store answers a read within ``timeout_s`` (``/readyz``: held calls and commits
        fail closed while it does not, so the replica should not take traffic)."""
        probe = ApprovalQuery(states=[ApprovalState.PENDING], limit=1)
        with anyio.move_on_after(timeout_s):
            try:
                await anyio.to_thread.run_sync(self.store.list, probe, abandon_on_cancel=True)
            except ApprovalStoreError as exc:
                logger.warning("readiness: the approval store cannot be read: %s", exc)
                return False
            return True
        logger.warning("readiness: the approval store did not answer within %.1f s", timeout_s)
        return False

    def count_pending(self) -> int:
        """How many requests in the store await a decision (worker thread; reads them page by page)."""
        count = 0
        while True:
            query = ApprovalQuery(states=[ApprovalState.PENDING], limit=PAGE, offset=count)
            page = len(self.store.list(query))
            count += page
            if page < PAGE:
                return count

    def close(self) -> None:
        self.store.close()


class CountedGate(ApprovalGate):
    """The gate :meth:`HeldCalls.gate` gives sessions: it tells, for
    ``shadowguard_approvals_finished_total``, an approval whose call was executed (``used``) from one
    whose call changed something other than what the reviewer saw and went back to review as a new
    request (``returned_to_review``). Both consumed the approval in the store; only the call's end
    tells them apart. The session takes the gate's new requests after every call
    (:meth:`take_requested`), which is when a consumed approval not returned to review counts as used.
    """

    _running_since: int | None = None
    """While a call runs under a consumed approval: how many requests the gate held when it began.
    A request made after that mark is the call returning to review (the only request a run can make)."""

    def resolve(self, call: ToolCall, approval_id: str | None = None) -> Resolution:
        self._settle()
        resolution = super().resolve(call, approval_id)
        if resolution.action == "run":
            self._running_since = len(self.requested)
        return resolution

    def take_requested(self) -> list[Approval]:
        self._settle()
        return super().take_requested()

    def _settle(self) -> None:
        if self._running_since is not None:
            returned = len(self.requested) > self._running_since
            self._running_since = None
            telemetry.record_approval_finished("returned_to_review" if returned else "used")
