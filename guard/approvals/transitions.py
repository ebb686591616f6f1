"""The approval state machine, shared by every store: the stores differ only in how they compare-and-set.

A store implements six primitives (:meth:`TransitionStore._load`, ``_insert``, ``_swap``, ``_due_ids``,
``_select``, ``_events``); this base turns them into the :class:`~guard.approvals.models.ApprovalStore`
protocol. Every transition reads the record, builds the new one, and asks the backend to swap it in
atomically *only if* the fields the transition depends on are still what was read (state, ``used_at``
unset, expiry on the right side of ``now``). A failed swap means another replica got there first; the
record is read again and the caller gets :class:`ApprovalConflict` with what is there now.

Why building the new record from the read one is safe: the fields a transition changes are all unset
while an approval is pending, and only ``used_at``/``used_by`` change once it is approved, so a record
that still matches the swap's conditions is exactly the one that was read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from guard.approvals.models import (
    Approval,
    ApprovalConflict,
    ApprovalEvent,
    ApprovalNotFound,
    ApprovalQuery,
    ApprovalRequest,
    ApprovalState,
    ApprovalStoreUnavailable,
)

Clock = Callable[[], datetime]
TransitionListener = Callable[[ApprovalEvent, Approval], None]
"""Told about a transition a store object carried out: its event and the record as it is now."""

SHADOWGUARD_ACTOR = "shadowguard"
"""The actor recorded for what the proxy does on its own (expiry, cancellation)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """Microseconds since the Unix epoch: an exact, comparable integer for every backend's index."""
    if at.tzinfo is None:
        raise ValueError(f"approval timestamps must be timezone-aware, got naive {at.isoformat()}")
    return (at - _EPOCH) // _MICROSECOND


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for error messages and logs)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    if password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


class TransitionStore(ABC):
    """The :class:`~guard.approvals.models.ApprovalStore` protocol on top of a backend's atomic swap."""

    url: str
    """The store's URL without its password (for messages)."""
    _unreachable: ClassVar[tuple[type[Exception], ...]]
    """The backend's errors that mean a lost connection or an unreachable server."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._listeners: list[TransitionListener] = []

    def add_listener(self, listener: TransitionListener) -> None:
        """Call ``listener`` after every transition this object carries out (creation included), in the
        calling thread, once the store has it. A compare-and-set succeeds for one caller only, so across
        replicas each transition is reported once, by the replica that made it; an expiry is reported by
        whichever read or sweep moved the request. A listener must not raise (the transition is done)."""
        self._listeners.append(listener)

    def _carried_out(self, event: ApprovalEvent, after: Approval) -> None:
        for listener in self._listeners:
            listener(event, after)

    @abstractmethod
    def close(self) -> None:
        """Release the backend's connections."""

    # -- backend access ----------------------------------------------------------------------------

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """Wrap a new store's first access: the backend unreachable is :class:`ApprovalStoreUnavailable`,
        and on any failure the store is closed before the error leaves the constructor."""
        try:
            with self._unavailable("open"):
                yield
        except BaseException:
            self.close()
            raise

    @contextmanager
    def _unavailable(self, doing: str) -> Iterator[None]:
        """Turn a lost connection or unreachable server into :class:`ApprovalStoreUnavailable`."""
        try:
            yield
        except Exception as exc:
            if not self._is_unreachable(exc):
                raise
            raise ApprovalStoreUnavailable(
                f"cannot {doing} the approval store {self.url}: {self._cause(exc)}"
            ) from exc

    def _is_unreachable(self, exc: Exception) -> bool:
        """``exc`` means the store cannot serve now (lost connection, server away or unable to write)."""
        return isinstance(exc, self._unreachable)

    @staticmethod
    def _cause(exc: Exception) -> str:
        """What went wrong, for :meth:`_unavailable`'s message."""
        return str(exc)

    # -- backend primitives ------------------------------------------------------------------------

    @abstractmethod
    def _load(self, approval_id: str) -> Approval | None:
        """The stored record, or None."""

    @abstractmethod
    def _insert(self, approval: Approval, event: ApprovalEvent) -> None:
        """Store a new approval and its ``requested`` event together."""

    @abstractmethod
    def _swap(
        self, before: Approval, after: Approval, event: ApprovalEvent, *, now: int, due: bool, unused: bool
    ) -> bool:
        """Atomically replace ``before`` by ``after`` and append ``event`` if, in the store, the record's
        state is still ``before.state``, its expiry is ``<= now`` (``due``) or ``> now`` (not ``due``),
        and, when ``unused``, ``used_at`` is unset. Returns whether it did (False: nothing changed)."""

    @abstractmethod
    def _due_ids(self, now: int) -> list[str]:
        """Ids of pending approvals whose expiry is ``<= now``."""

    @abstractmethod
    def _select(self, query: ApprovalQuery) -> list[Approval]:
        """The query's page, newest first (``created_at`` then id, descending)."""

    @abstractmethod
    def _events(self, approval_id: str) -> list[ApprovalEvent]:
        """The approval's events, oldest first (empty when it does not exist)."""

    # -- the protocol ------------------------------------------------------------------------------

    def create(self, request: ApprovalRequest) -> Approval:
        now = self._clock()
        approval = Approval.from_request(request, now=now)
        to_micros(approval.expires_at)
        event = self._event(approval, "requested", request.principal or SHADOWGUARD_ACTOR, now, None)
        self._insert(approval, event)
        self._carried_out(event, approval)
        return approval

    def get(self, approval_id: str) -> Approval:
        return self._expire_if_due(self._require(approval_id), self._clock())[0]

    def list(self, query: ApprovalQuery) -> Sequence[Approval]:
        self.expire_due()
        if query.states is not None and not query.states:
            return []
        return self._select(query)

    def decide(self, approval_id: str, *, approve: bool, reviewer: str, reason: str | None) -> Approval:
        now = self._clock()
        current = self._expire_if_due(self._require(approval_id), now)[0]
        if current.state is not ApprovalState.PENDING:
            raise ApprovalConflict(self._not_pending(current), current)
        state = ApprovalState.APPROVED if approve else ApprovalState.REJECTED
        after = current.model_copy(
            update={"state": state, "decided_at": now, "decided_by": reviewer, "reason": reason}
        )
        event = self._event(current, "approved" if approve else "rejected", reviewer, now, reason)
        if self._swap(current, after, event, now=to_micros(now), due=False, unused=False):
            self._carried_out(event, after)
            return after
        raced = self._expire_if_due(self._require(approval_id), now)[0]
        raise ApprovalConflict(self._not_pending(raced), raced)

    def consume(self, approval_id: str, *, consumer: str) -> Approval:
        now = self._clock()
        current = self._expire_if_due(self._require(approval_id), now)[0]
        self._check_consumable(current, now)
        after = current.model_copy(update={"used_at": now, "used_by": consumer})
        event = self._event(current, "used", consumer, now, None)
        if self._swap(current, after, event, now=to_micros(now), due=False, unused=True):
            self._carried_out(event, after)
            return after
        raced = self._expire_if_due(self._require(approval_id), now)[0]
        self._check_consumable(raced, now)
        raise ApprovalConflict(f"approval {approval_id} changed while it was being used", raced)

    def cancel(self, approval_id: str, *, reason: str) -> Approval:
        now = self._clock()
        current = self._expire_if_due(self._require(approval_id), now)[0]
        if current.state is not ApprovalState.PENDING:
            raise ApprovalConflict(self._not_pending(current), current)
        after = current.model_copy(update={"state": ApprovalState.CANCELLED, "reason": reason})
        event = self._event(current, "cancelled", SHADOWGUARD_ACTOR, now, reason)
        if self._swap(current, after, event, now=to_micros(now), due=False, unused=False):
            self._carried_out(event, after)
            return after
        raced = self._expire_if_due(self._require(approval_id), now)[0]
        raise ApprovalConflict(self._not_pending(raced), raced)

    def expire_due(self) -> Sequence[Approval]:
        now = self._clock()
        moved: list[Approval] = []
        for approval_id in self._due_ids(to_micros(now)):
            current = self._load(approval_id)
            if current is None:
                continue
            approval, expired_now = self._expire_if_due(current, now)
            if expired_now:
                moved.append(approval)
        return moved

    def history(self, approval_id: str) -> Sequence[ApprovalEvent]:
        self.get(approval_id)
        return self._events(approval_id)

    # -- shared steps ------------------------------------------------------------------------------

    def _require(self, approval_id: str) -> Approval:
        approval = self._load(approval_id)
        if approval is None:
            raise ApprovalNotFound(approval_id)
        return approval

    def _expire_if_due(self, approval: Approval, now: datetime) -> tuple[Approval, bool]:
        """``approval``, moved to expired if it is pending past its expiry; and whether this call moved it."""
        if approval.state is not ApprovalState.PENDING or approval.expires_at > now:
            return approval, False
        after = approval.model_copy(update={"state": ApprovalState.EXPIRED})
        event = self._event(approval, "expired", SHADOWGUARD_ACTOR, now, None)
        if self._swap(approval, after, event, now=to_micros(now), due=True, unused=False):
            self._carried_out(event, after)
            return after, True
        return self._require(approval.id), False

    @staticmethod
    def _event(
        approval: Approval, action: str, actor: str, at: datetime, reason: str | None
    ) -> ApprovalEvent:
        return ApprovalEvent.model_validate(
            {
                "approval_id": approval.id,
                "action": action,
                "actor": actor,
                "at": at,
                "reason": reason,
                "arguments_digest": approval.arguments_digest,
            }
        )

    @staticmethod
    def _not_pending(approval: Approval) -> str:
        state = approval.state
        if state in (ApprovalState.APPROVED, ApprovalState.REJECTED):
            by = f" by {approval.decided_by}" if approval.decided_by else ""
            return f"approval {approval.id} is already {state.value}{by}"
        if state is ApprovalState.EXPIRED:
            return (
                f"approval {approval.id} expired at {approval.expires_at.isoformat()}: the call was not done"
            )
        return f"approval {approval.id} is {state.value}, not pending"

    @staticmethod
    def _check_consumable(approval: Approval, now: datetime) -> None:
        if approval.state is not ApprovalState.APPROVED:
            raise ApprovalConflict(
                f"approval {approval.id} is {approval.state.value}, not approved: the call may not run",
                approval,
            )
        if approval.used_at is not None:
            raise ApprovalConflict(
                f"approval {approval.id} was already used at {approval.used_at.isoformat()}"
                f" by {approval.used_by}",
                approval,
            )
        if approval.expires_at <= now:
            raise ApprovalConflict(
                f"approval {approval.id} expired at {approval.expires_at.isoformat()} before it was used",
                approval,
            )
