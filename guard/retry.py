"""Retry policy: send a failed call again only when that is recoverable *and* safe.

The decision table (:func:`decide`, pure, property-tested) in the order it is applied:

    1. the class is not retryable (guard.errors)                      -> stop: not_retryable
    2. resending is not safe: the failure does not prove the call left
       no effect, the tool is not read-only, not idempotent, and it is
       not a reversible write whose savepoint the guard rolled back     -> stop: outcome_unknown
    3. the class's retry budget (or the pack's max_attempts) is spent   -> stop: budget
    4. waiting (backoff, or Retry-After when longer) passes the
       per-call deadline                                               -> stop: deadline
    5. otherwise                                                       -> retry after that delay

An irreversible call is never resent on the strength of a savepoint rollback: "irreversible" means
the guard cannot vouch that undoing its rows undid its effect. Backoff is exponential with equal
jitter (half fixed, half random) from a seedable random source; the loop itself is tenacity's.
The clock is injectable: the benchmark runs retries on a virtual clock, so delays are accounted
for, not slept.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

import tenacity

from guard.errors import ErrorClass, ToolFailure
from guard.models import EffectClass

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Monotonic time and real sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class RetryStopped(Exception):
    """A retry's wait was cut short because its process is stopping; the call is not sent again."""


class StoppableClock(SystemClock):
    """Monotonic time and sleeps that end when ``stop`` is set (raising :class:`RetryStopped`), so that
    a process shutting down does not wait for retry loops to run out their deadline."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def sleep(self, seconds: float) -> None:
        if self.stop.wait(max(seconds, 0.0)):
            raise RetryStopped("the process is stopping; the call was not retried")


class VirtualClock:
    """Time that passes only when someone sleeps or advances it (benchmarks, tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start
        self.slept = 0.0

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += max(seconds, 0.0)
        self.slept += max(seconds, 0.0)

    def advance(self, seconds: float) -> None:
        self.time += max(seconds, 0.0)


class Reason(StrEnum):
    RETRY = "retry"
    NOT_RETRYABLE = "not_retryable"
    OUTCOME_UNKNOWN = "outcome_unknown"
    BUDGET = "budget"
    DEADLINE = "deadline"


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    reason: Reason
    delay: float = 0.0


def safe_to_resend(failure: ToolFailure, effect: EffectClass, idempotent: bool, rolled_back: bool) -> bool:
    """Whether sending the call again cannot apply its effect twice."""
    return (
        failure.safe_to_retry
        or effect is EffectClass.READ
        or idempotent
        or (rolled_back and effect is EffectClass.WRITE)
    )


def decide(
    failure: ToolFailure,
    *,
    effect: EffectClass,
    idempotent: bool,
    rolled_back: bool,
    retries_left: int,
    elapsed: float,
    deadline: float,
    backoff: float,
) -> RetryDecision:
    """The decision table of the module docstring."""
    if not failure.retryable:
        return RetryDecision(False, Reason.NOT_RETRYABLE)
    if not safe_to_resend(failure, effect, idempotent, rolled_back):
        return RetryDecision(False, Reason.OUTCOME_UNKNOWN)
    if retries_left <= 0:
        return RetryDecision(False, Reason.BUDGET)
    delay = max(backoff, failure.retry_after or 0.0)
    if elapsed + delay > deadline:
        return RetryDecision(False, Reason.DEADLINE, delay)
    return RetryDecision(True, Reason.RETRY, delay)


@dataclass
class Attempt(Generic[T]):
    """One try of a call: its payload, the failure (None = success) and whether it was rolled back."""

    value: T
    failure: ToolFailure | None = None
    rolled_back: bool = False
    decision: RetryDecision | None = None
    at: float = 0.0
    """Clock time when the attempt ended."""


DEFAULT_BUDGETS: Mapping[ErrorClass, int] = {ErrorClass.TRANSIENT: 8, ErrorClass.RATE_LIMITED: 8}


@dataclass
class RetryPolicy:
    """Budgets per class (retries, not attempts), backoff shape, per-call deadline, clock and jitter."""

    budgets: Mapping[ErrorClass, int] = field(default_factory=lambda: dict(DEFAULT_BUDGETS))
    base_delay: float = 0.1
    max_delay: float = 2.0
    """Backoff stays short: an agent is waiting on the call (Retry-After may ask for longer)."""
    deadline: float = 30.0
    """Seconds from the first attempt after which no retry starts."""
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.base_delay < 0 or self.max_delay < self.base_delay or self.deadline < 0:
            raise ValueError("need 0 <= base_delay <= max_delay and deadline >= 0")
        if any(n < 0 for n in self.budgets.values()):
            raise ValueError("retry budgets must be >= 0")
        self._envelope = tenacity.wait_exponential(multiplier=self.base_delay, max=self.max_delay)

    def backoff(self, state: tenacity.RetryCallState) -> float:
        """Equal jitter over tenacity's exponential envelope: between half of it and all of it."""
        envelope = float(self._envelope(state))
        return envelope / 2 + self.rng.uniform(0, envelope / 2)

    def run(
        self,
        attempt: Callable[[], Attempt[T]],
        *,
        effect: EffectClass,
        idempotent: bool = False,
        max_attempts: int | None = None,
    ) -> tuple[Attempt[T], list[Attempt[T]]]:
        """Call ``attempt`` until it succeeds or :func:`decide` stops; (last attempt, failed attempts).

        ``attempt`` reports failures in its result, never by raising: an exception from it is the
        guard's own fault and propagates at once.
        """
        failed: list[Attempt[T]] = []
        should_retry, wait = self._terms(failed, effect, idempotent, max_attempts)
        retrying = tenacity.Retrying(
            retry=should_retry, wait=wait, stop=tenacity.stop_never, sleep=self.clock.sleep, reraise=True
        )
        last: Attempt[T] = retrying(attempt)
        return last, failed

    async def run_async(
        self,
        attempt: Callable[[], Awaitable[Attempt[T]]],
        *,
        effect: EffectClass,
        sleep: Callable[[float], Awaitable[None]],
        idempotent: bool = False,
        max_attempts: int | None = None,
    ) -> tuple[Attempt[T], list[Attempt[T]]]:
        """:meth:`run` for an attempt that is awaited (the same decisions); ``sleep`` waits out a
        retry's delay (e.g. :attr:`clock`'s sleep, run off the event loop).

        The first attempt is awaited before tenacity is set up: one that succeeds (most calls) is
        the whole run, as tenacity would end it, without its machinery (issue 18: about 0.1 ms of
        a passthrough read's proxy CPU); one that failed is handed to tenacity as its first."""
        failed: list[Attempt[T]] = []
        should_retry, wait = self._terms(failed, effect, idempotent, max_attempts)
        first = await attempt()
        if first.failure is None:
            first.at = self.clock.now()  # as ``should_retry`` stamps a successful attempt
            return first, failed
        made = [first]

        async def attempts() -> Attempt[T]:
            return made.pop() if made else await attempt()

        retrying = tenacity.AsyncRetrying(
            retry=should_retry, wait=wait, stop=tenacity.stop_never, sleep=sleep, reraise=True
        )
        last: Attempt[T] = await retrying(attempts)
        return last, failed

    def _terms(
        self, failed: list[Attempt[T]], effect: EffectClass, idempotent: bool, max_attempts: int | None
    ) -> tuple[Callable[[tenacity.RetryCallState], bool], Callable[[tenacity.RetryCallState], float]]:
        """The retry loop's ``retry`` and ``wait`` callbacks: each failed attempt is appended to
        ``failed`` with its :func:`decide` decision."""
        started = self.clock.now()
        per_class: Counter[ErrorClass] = Counter()

        def should_retry(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            if outcome is None or outcome.failed:
                return False
            current: Attempt[T] = outcome.result()
            current.at = self.clock.now()
            if current.failure is None:
                return False
            cls = current.failure.error_class
            left = self.budgets.get(cls, 0) - per_class[cls]
            if max_attempts is not None:
                left = min(left, max_attempts - 1 - sum(per_class.values()))
            current.decision = decide(
                current.failure,
                effect=effect,
                idempotent=idempotent,
                rolled_back=current.rolled_back,
                retries_left=left,
                elapsed=current.at - started,
                deadline=self.deadline,
                backoff=self.backoff(state),
            )
            failed.append(current)
            if current.decision.retry:
                per_class[cls] += 1
            return current.decision.retry

        def wait(state: tenacity.RetryCallState) -> float:
            assert state.outcome is not None
            decision = state.outcome.result().decision
            return decision.delay if decision is not None else 0.0

        return should_retry, wait
