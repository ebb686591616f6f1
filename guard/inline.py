"""The guard's pipeline on the event loop, for calls whose guarding is small work.

A proxy drives :class:`~guard.session.GuardSession` from async code. Its synchronous pipeline runs in
a worker thread, and the executor reaches the upstream back on the event loop: two thread hops per
call. For a call that needs nothing from the backend but its savepoint, its change set and its
release, and those ride on the call itself (a journal, or a participant that piggybacks them),
:func:`run_inline` runs the same steps (guard.steps) on the event loop and awaits the upstream:

    allow → validate → before-call checks → approval → shadow execute with retries (awaited)
          → after-call checks → keep

:func:`inline_ok` says which calls qualify: a read, or a write on a transactional backend (not an
irreversible call); no ``before_call`` check applies to the tool, and the ``after_call`` checks that
apply are SQL checks whose queries the backend answers with the call (docs/adr/015); no approval
rule matches it, no approval named, and a backend whose savepoints cost no round trip. On a
participant that serves ``watch`` (docs/adr/013), a read's savepoint is a watch: no savepoint of its
own on the upstream. Anything on the way that does talk to the backend (undoing a failed attempt or
a call whose checks broke, a change set or a check query the upstream did not answer, restarting the
transaction, a retry's wait) is handed to ``offload``, which runs it off the event loop (a worker
thread, as the whole call would otherwise). The outcome is the one :meth:`GuardSession.run` gives.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from guard.backend import AsksAhead, Backend, BackendError, Piggybacking, conforms
from guard.checks import SqlCheck, queries_ahead
from guard.effects import classify
from guard.errors import ToolFailure
from guard.models import ChangeSet, EffectClass, ToolOutcome
from guard.retry import Attempt
from guard.session import FORWARDING, Forwarded, GuardSession, ToolResult
from guard.steps import (
    CallState,
    after_call,
    after_call_broken,
    allow,
    approval,
    before_call,
    executed,
    keep_or_undo,
    retry_terms,
    undo_broken,
    validate,
)

T = TypeVar("T")

AsyncExecutor = Callable[[str, Mapping[str, Any]], Coroutine[Any, Any, ToolResult]]
"""Forwards one call to the upstream (awaited on the event loop)."""


class Offload(Protocol):
    """Runs blocking work (anything that talks to the backend) off the event loop; returns its result."""

    def __call__(self, work: Callable[[], T], /) -> Awaitable[T]: ...


INLINE_PHASES = ("before_call", "after_call")


@runtime_checkable
class WatchesReads(Protocol):
    """A backend whose savepoint for a read-classified call may be a *watch* (docs/adr/013: no
    savepoint of its own; a change the read made is still reported, and undone exactly or refused):
    :class:`guard.txext.RemoteBackend`."""

    def reading(self) -> AbstractContextManager[None]:
        """The next savepoint opened inside is for a read-classified call."""
        ...


def _piggybacks(backend: Backend) -> TypeGuard[Piggybacking]:
    return conforms(backend, Piggybacking)


def _watches_reads(backend: Backend) -> TypeGuard[WatchesReads]:
    return conforms(backend, WatchesReads)


def _asks_ahead(backend: Backend) -> TypeGuard[AsksAhead]:
    return conforms(backend, AsksAhead)


def ops_ride_on_calls(backend: Backend) -> bool:
    """Savepoint and release cost no round trip: a journal, or a participant that piggybacks them."""
    if not backend.transactional:
        return True
    return _piggybacks(backend) and backend.piggybacking


def answers_ride_on_calls(backend: Backend) -> bool:
    """The queries of after-call checks are answered with the call (docs/adr/015)."""
    return _asks_ahead(backend) and backend.answering


def inline_ok(
    session: GuardSession, tool: str, arguments: Mapping[str, Any], approval_id: str | None
) -> bool:
    """``tool`` can be guarded by :func:`run_inline` (see the module docstring); an unknown or
    hidden tool can (it is refused before anything runs)."""
    backend = session.backend
    if approval_id is not None or session.closed or not ops_ride_on_calls(backend):
        return False
    info = session.tools.get(tool)
    if info is None:
        return True
    effect = classify(info, arguments, session.policy.effect_of(tool))[0]
    if effect is EffectClass.IRREVERSIBLE or session.needs_person(False, effect):
        return False
    if effect is EffectClass.WRITE and not backend.transactional:
        return False
    applying = [c for c in session.checks if c.phase in INLINE_PHASES and c.applies_to(tool)]
    if any(c.phase == "before_call" or not isinstance(c, SqlCheck) for c in applying):
        return False
    if applying and not answers_ride_on_calls(backend):
        return False
    return session.policy.approval_for(tool, effect, arguments, None) is None


async def run_inline(
    session: GuardSession, tool: str, arguments: Mapping[str, Any], send: AsyncExecutor, offload: Offload
) -> tuple[ToolOutcome, ToolResult | None]:
    """:meth:`GuardSession.run` for a call :func:`inline_ok` accepted, with ``send`` as executor."""
    state = session.begin_call(tool, arguments, None)
    outcome = allow(session, state) or validate(session, state)
    outcome = outcome or before_call(session, state) or approval(session, state)
    if outcome is None:
        outcome = await _execute(session, state, send, offload)
    if outcome is None:
        outcome = await _after(session, state, offload)
    if session.ends_blocking(outcome):
        return await offload(functools.partial(session.end_call, state, outcome))
    return session.end_call(state, outcome)


async def _execute(
    session: GuardSession, state: CallState, send: AsyncExecutor, offload: Offload
) -> ToolOutcome | None:
    """guard.steps.execute with the attempts awaited (a retry's wait is offloaded)."""
    idempotent, max_attempts = retry_terms(session, state)
    clock = session.retry.clock

    async def sleep(seconds: float) -> None:
        await offload(functools.partial(clock.sleep, seconds))

    async def attempt() -> Attempt[Forwarded]:
        return await _forward(session, state, send, offload)

    last, failed = await session.retry.run_async(
        attempt,
        effect=state.effect,
        sleep=sleep,
        idempotent=idempotent,
        max_attempts=max_attempts,
    )
    return executed(session, state, last, failed)


async def _forward(
    session: GuardSession, state: CallState, send: AsyncExecutor, offload: Offload
) -> Attempt[Forwarded]:
    """:meth:`GuardSession.forward` with the upstream awaited."""
    call, backend = state.call, session.backend
    read = state.effect is EffectClass.READ
    reading = backend.reading() if read and _watches_reads(backend) else contextlib.nullcontext()
    with reading:
        savepoint = session.open_attempt(call)
    result: ToolResult | None = None
    failure: ToolFailure | None
    try:
        token = FORWARDING.set(call)
        try:
            result = await send(call.tool, call.arguments)
        except BackendError:
            raise
        except Exception as exc:
            failure = session.judge(call, None, exc)
        else:
            failure = session.judge(call, result, None)
        finally:
            FORWARDING.reset(token)
        changes = await _changes(backend, savepoint, offload)
    except BaseException:
        # The upstream may have written before it failed; its outcome is unknown, so undo it.
        await offload(functools.partial(backend.rollback_to, savepoint))
        raise
    if failure is None:
        return session.close_attempt(savepoint, result, failure, changes)
    return await offload(functools.partial(session.close_attempt, savepoint, result, failure, changes))


async def _changes(backend: Backend, savepoint: str, offload: Offload) -> ChangeSet:
    """The attempt's change set: read on the loop when the call reported it, else asked for."""
    if not backend.transactional or (_piggybacks(backend) and backend.reported(savepoint)):
        return backend.changes(savepoint)
    changes: ChangeSet = await offload(functools.partial(backend.changes, savepoint))
    return changes


async def _after(session: GuardSession, state: CallState, offload: Offload) -> ToolOutcome:
    """The after-call checks and keep-or-undo: on the loop when every query of the checks came with
    the call (docs/adr/015) and none broke, so only releasing the savepoint is left (it rides on the
    next request); undoing a broken call, or checks whose queries must be sent, are offloaded."""
    backend = session.backend
    ahead = queries_ahead(session.checks, "after_call", state.call)
    if ahead and not (_asks_ahead(backend) and all(backend.answered(*q) for q in ahead)):
        outcome: ToolOutcome = await offload(
            lambda: after_call(session, state) or keep_or_undo(session, state)
        )
        return outcome
    broken = after_call_broken(session, state)
    if broken:
        undone: ToolOutcome = await offload(functools.partial(undo_broken, session, state, broken))
        return undone
    return keep_or_undo(session, state)
