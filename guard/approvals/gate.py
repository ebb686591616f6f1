"""ApprovalGate: the guard's side of a held call, transport-independent (docs/approvals.md).

A :class:`~guard.session.GuardSession` given a gate asks it, for every call that needs a person (an
approval rule matched, or an irreversible call on a backend that cannot rehearse) and for every call
that names an approval id, what to do:

* **request** — no usable approval yet: rehearse (when the backend can), roll back, and
  :meth:`ApprovalGate.request` a new one with the preview. The call is held.
* **hold** — the approval is pending: held again under the same id; nothing runs.
* **run** — the approval was approved and is now consumed (once, atomically, across replicas):
  execute for real. On a rehearsing backend the executed call's net change set must equal the
  preview, or the call is rolled back and a new request made ("returns to review").
* **refuse** — rejected (the reviewer's reason is told), expired (not done), cancelled, already used,
  bound to another session, principal, tool or arguments, a changed policy pack, or an unknown id.

Which approval a call refers to: the id it names explicitly (``_meta["shadowguard/approval"]`` in
the proxy), else the newest approval of the same session, principal, tool and arguments digest. An
explicit id must match the call exactly and be usable. A match found without an id is a convenience
for agents that simply send the same call again: a pending or approved one is used, a rejected or
expired one is reported once (so that the agent learns the outcome), and after that, or when it was
used or cancelled, or made under another policy pack, a new request is made.

The gate keeps no lock and no transaction open while a person decides: the store is the only state
that outlives the call, and every transition in it is a compare-and-set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from guard.approvals.models import (
    Approval,
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalRequest,
    ApprovalState,
    ApprovalStore,
    CheckResult,
    arguments_digest,
    utcnow,
)
from guard.errors import (
    ApprovalExpired,
    ApprovalRejected,
    Conflict,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    ToolFailure,
)
from guard.models import ChangeSet, EffectClass, PolicySource, ToolCall
from guard.policy import PolicyPack

USED = "used"
"""The ``approval_state`` an outcome reports for an approval it consumed (approved, then used)."""

_MATCH_SCAN = 200


def policy_version(pack: PolicyPack) -> str:
    """``sha256:`` over the pack's validated content and its Python module file, if it has one (for a
    package's ``__init__.py``, every ``.py`` file of the package).

    The model's canonical JSON is hashed rather than the YAML text, so comments and layout do not
    invalidate approvals; anything that can change a verdict (a rule, a threshold, a check's SQL or
    Python) does. Compute it once per loaded pack: it reads the module file.
    """
    digest = hashlib.sha256()
    content = pack.model.model_dump(mode="json")
    digest.update(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())
    module = pack.model.module
    if module is not None and module.endswith(".py"):
        base = pack.path.parent if pack.path is not None else Path.cwd()
        path = base / module
        digest.update(b"\0module\0")
        digest.update(path.read_bytes())
        if path.name == "__init__.py":
            for part in sorted(path.parent.rglob("*.py")):
                if part != path:
                    digest.update(b"\0" + part.relative_to(path.parent).as_posix().encode() + b"\0")
                    digest.update(part.read_bytes())
    return "sha256:" + digest.hexdigest()


def same_changes(executed: ChangeSet, preview: ChangeSet) -> bool:
    """Whether two change sets have the same net effect (row order does not matter)."""

    def canonical(changes: ChangeSet) -> list[str]:
        return sorted(
            json.dumps(c.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
            for c in changes.net()
        )

    return canonical(executed) == canonical(preview)


def _live(approval: Approval) -> bool:
    """Still able to run a call: pending, or approved and not used yet."""
    return approval.state is ApprovalState.PENDING or (
        approval.state is ApprovalState.APPROVED and approval.used_at is None
    )


Action = Literal["request", "hold", "run", "refuse"]


@dataclass(frozen=True)
class Resolution:
    """What the gate decided for one call (see the module docstring)."""

    action: Action
    approval: Approval | None = None
    """hold: the pending approval; run: the consumed one; refuse: the one refused, if any."""
    failure: ToolFailure | None = None
    """refuse: what the agent is told."""
    rule_id: str | None = None
    """refuse: the violation's rule id (``approval_rejected``, ``approval_used``, ...)."""
    reason: str | None = None
    """refuse: the full message (the failure's is bounded), e.g. with the reviewer's whole reason."""


_REQUEST = Resolution("request")


class ApprovalGate:
    """Resolves and requests approvals for one guard session's calls against ``store``.

    ``policy_version`` is :func:`policy_version` of the session's pack; ``consumer`` names the
    replica that executes approved calls (recorded on the approval); ``expires_after_s`` is how long a
    request waits for a decision; ``clock`` gives the time a request's expiry is counted from.
    ``upstream`` and ``tool_prefix`` say where the calls go and what the agent calls the tools
    (approvals name the tool as the agent sees it). A gate remembers which rejections and expiries
    it has reported, so use one per agent session.
    """

    def __init__(
        self,
        store: ApprovalStore,
        *,
        policy_version: str,
        consumer: str,
        expires_after_s: float,
        clock: Callable[[], datetime] = utcnow,
        upstream: str | None = None,
        tool_prefix: str = "",
    ) -> None:
        if expires_after_s <= 0:
            raise ValueError("expires_after_s must be positive")
        self.store = store
        self.policy_version = policy_version
        self.consumer = consumer
        self.expires_after_s = expires_after_s
        self.clock = clock
        self.upstream = upstream
        self.tool_prefix = tool_prefix
        self.requested: list[Approval] = []
        """Requests made since the owner last took them (:meth:`take_requested`), oldest first."""
        self._reported: set[str] = set()

    def exposed(self, tool: str) -> str:
        """The tool's name as the agent calls it."""
        return self.tool_prefix + tool

    def take_requested(self) -> list[Approval]:
        """The new requests since the last call (for notifications), and forget them."""
        taken, self.requested = self.requested, []
        return taken

    # -- resolving a call ----------------------------------------------------------------------
    def resolve(self, call: ToolCall, approval_id: str | None = None) -> Resolution:
        """What to do with ``call`` (see the module docstring). Store errors propagate."""
        session_id = self._session(call)
        tool = self.exposed(call.tool)
        digest = arguments_digest(tool, call.arguments)
        if approval_id is not None:
            try:
                approval = self.store.get(approval_id)
            except ApprovalNotFound:
                return self._refuse(
                    NotFound(
                        f"No approval request has the id {approval_id!r}.",
                        tool=call.tool,
                        rule="approval_not_found",
                        next_step="Send the call without an approval id: a new request is made if needed.",
                    ),
                    "approval_not_found",
                )
            mismatch = self._mismatch(approval, call, session_id, tool, digest)
            if mismatch is not None:
                return mismatch
            return self._by_state(approval, call, explicit=True)
        match = self._newest_match(call, session_id, tool, digest)
        if match is None:
            return _REQUEST
        if match.policy_version != self.policy_version:
            if match.state is ApprovalState.PENDING:
                self._cancel_stale(match)
            return _REQUEST
        return self._by_state(match, call, explicit=False)

    def _session(self, call: ToolCall) -> str:
        if call.session_id is None:
            raise ValueError("a call held for approval must belong to a session (session_id)")
        return call.session_id

    def _newest_match(self, call: ToolCall, session_id: str, tool: str, digest: str) -> Approval | None:
        """The newest approval of this exact call; of two made at the same instant, a live one."""
        query = ApprovalQuery(session_id=session_id, principal=call.principal, tool=tool, limit=_MATCH_SCAN)
        matches = [
            a
            for a in self.store.list(query)
            if a.arguments_digest == digest and a.principal == call.principal and a.session_id == session_id
        ]
        if not matches:
            return None
        return max(matches, key=lambda a: (a.created_at, _live(a)))

    def _cancel_stale(self, approval: Approval) -> None:
        # Decided or expired meanwhile: finished either way, and a new request follows.
        with contextlib.suppress(ApprovalConflict):
            self.store.cancel(
                approval.id, reason="the policy pack changed before a decision; the call was asked again"
            )

    def _mismatch(
        self, approval: Approval, call: ToolCall, session_id: str, tool: str, digest: str
    ) -> Resolution | None:
        again = "Send the call without an approval id to ask for a new approval."
        if approval.session_id != session_id or approval.principal != call.principal:
            return self._refuse(
                PermissionDenied(
                    f"Approval {approval.id} belongs to another session or principal.",
                    tool=call.tool,
                    rule="approval_mismatch",
                    next_step=again,
                ),
                "approval_mismatch",
                approval,
            )
        if approval.tool != tool or approval.arguments_digest != digest:
            what = f"the tool {approval.tool}" if approval.tool != tool else "other arguments"
            return self._refuse(
                PreconditionFailed(
                    f"Approval {approval.id} was given for {what}, not for this call.",
                    tool=call.tool,
                    rule="approval_mismatch",
                    next_step="Send exactly the approved call (same tool and arguments), or "
                    + again[0].lower()
                    + again[1:],
                ),
                "approval_mismatch",
                approval,
            )
        if approval.policy_version != self.policy_version:
            return self._refuse(
                PreconditionFailed(
                    f"Approval {approval.id} was given under a policy pack that has changed since.",
                    tool=call.tool,
                    rule="approval_policy_changed",
                    next_step=again,
                ),
                "approval_policy_changed",
                approval,
            )
        return None

    def _by_state(self, approval: Approval, call: ToolCall, *, explicit: bool) -> Resolution:
        state = approval.state
        if state is ApprovalState.PENDING:
            return Resolution("hold", approval)
        if state is ApprovalState.APPROVED and approval.used_at is None:
            try:
                used = self.store.consume(approval.id, consumer=self.consumer)
            except ApprovalConflict as exc:
                current = exc.approval
                if current.state is ApprovalState.APPROVED and current.used_at is None:
                    # approved but past its expiry: the store refused to run it
                    return self._finished(current, call, explicit=explicit, expired=True)
                return self._by_state(current, call, explicit=explicit)
            return Resolution("run", used)
        return self._finished(approval, call, explicit=explicit)

    def _finished(
        self, approval: Approval, call: ToolCall, *, explicit: bool, expired: bool = False
    ) -> Resolution:
        """A decided or ended approval: refused with its outcome, or (found without an id) superseded."""
        state = approval.state
        reportable = expired or state in (ApprovalState.REJECTED, ApprovalState.EXPIRED)
        if not explicit and (not reportable or approval.id in self._reported):
            return _REQUEST
        if reportable:
            self._reported.add(approval.id)
        if state is ApprovalState.REJECTED:
            by = f" by {approval.decided_by}" if approval.decided_by else ""
            why = f": {approval.reason}" if approval.reason else ""
            message = f"Approval request {approval.id} was rejected{by}{why}"
            return self._refuse(
                ApprovalRejected(message, tool=call.tool, rule="approval_rejected"),
                "approval_rejected",
                approval,
                reason=message,
            )
        if reportable:
            message = (
                f"Approval request {approval.id} expired at {approval.expires_at.isoformat()} "
                "before it was used; the call was not done."
            )
            return self._refuse(
                ApprovalExpired(message, tool=call.tool, rule="approval_expired"),
                "approval_expired",
                approval,
            )
        if state is ApprovalState.CANCELLED:
            why = f" ({approval.reason})" if approval.reason else ""
            return self._refuse(
                PreconditionFailed(
                    f"Approval request {approval.id} was cancelled{why}; the call was not done.",
                    tool=call.tool,
                    rule="approval_cancelled",
                    next_step="Send the call without an approval id to ask for a new approval.",
                ),
                "approval_cancelled",
                approval,
            )
        used = approval.used_at.isoformat() if approval.used_at is not None else "before"
        return self._refuse(
            Conflict(
                f"Approval {approval.id} was already used (at {used}); an approval runs one call once.",
                tool=call.tool,
                rule="approval_used",
                next_step=(
                    "The approved call was already done: read the current state. To do it again, send "
                    "the call without an approval id to ask for a new approval."
                ),
            ),
            "approval_used",
            approval,
        )

    @staticmethod
    def _refuse(
        failure: ToolFailure, rule_id: str, approval: Approval | None = None, *, reason: str | None = None
    ) -> Resolution:
        return Resolution("refuse", approval, failure=failure, rule_id=rule_id, reason=reason)

    # -- requesting ----------------------------------------------------------------------------
    def request(
        self,
        call: ToolCall,
        *,
        effect: EffectClass,
        rule_id: str,
        rule_source: PolicySource | None,
        preview: ChangeSet,
        rehearsed: bool,
        checks: Sequence[CheckResult] = (),
    ) -> Approval:
        """Queue a new pending approval bound to ``call`` (its preview is stored net)."""
        request = ApprovalRequest(
            principal=call.principal,
            session_id=self._session(call),
            upstream=self.upstream,
            tool=self.exposed(call.tool),
            arguments=dict(call.arguments),
            effect=effect,
            rule_id=rule_id,
            rule_source=rule_source,
            preview=preview.net(),
            rehearsed=rehearsed,
            checks=list(checks),
            policy_version=self.policy_version,
            expires_at=self.clock() + timedelta(seconds=self.expires_after_s),
        )
        approval = self.store.create(request)
        self.requested.append(approval)
        return approval
