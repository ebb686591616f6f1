"""What a transactional upstream runs: :class:`TransactionParticipant` serves ``shadowguard/tx`` on a
low-level ``mcp.server.Server`` (one open transaction per session, leases, renew, piggybacked
operations) and advertises it in both protocol eras.

The host supplies two things: the session key of a request (transactions belong to sessions), and a
:class:`BackendAccess` that runs a function against the session's backend, in a worker thread,
serialised with that session's tool calls (one connection must never be used by two threads at
once). A server with one SQLAlchemy connection::

    backend = SqlBackend(connection, tables)
    access = serialized(backend)
    tx = TransactionParticipant(session_key=lambda ctx: "main", access=access)
    tx.install(server)                          # before create_initialization_options()

    async def on_call_tool(ctx, params):
        name = tx.transaction_of(ctx)           # the _meta tx id, validated, or None

        def run(backend):
            with tx.calling("main", name, backend):   # refuses a tx id that is not open here
                return my_tool(backend.connection, params)

        return await access("main", run)
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from guard.backend import Backend, Watchable, conforms
from guard.models import ChangeSet
from guard.txext import points
from guard.txext.after import Query, parse_after, run_after
from guard.txext.carried import CARRIED, CarriedOps, parse_ops, report, run_ops
from guard.txext.leases import BackendAccess, reap, renew_after, run_in_lifespan
from guard.txext.protocol import (
    AFTER,
    AFTER_META_KEY,
    BEGIN,
    CHANGES,
    COMMIT,
    DEFAULT_LEASE_S,
    EXTENSION,
    FEATURES,
    METHODS,
    OPS_META_KEY,
    PIGGYBACK,
    QUERY,
    RELEASE,
    RENEW,
    ROLLBACK,
    ROLLBACK_TO,
    SAVEPOINT,
    TX_FAILED,
    TX_META_KEY,
    WATCH,
    TxParams,
    TxSavepointResult,
    check_id,
    error,
    settings,
)
from guard.txext.registry import OpenTransaction, Registry, mapped

__all__ = ["BackendAccess", "TransactionParticipant", "serialized"]

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")
Handler = Callable[[Ctx, TxParams], Awaitable[BaseModel | dict[str, Any] | None]]


def serialized(backend: Backend) -> BackendAccess:
    """A :class:`BackendAccess` for a server with one backend: one lock, worker threads."""
    lock = anyio.Lock()

    async def access(key: str, work: Callable[[Backend], T], /) -> T:
        async with lock:
            return await anyio.to_thread.run_sync(work, backend)

    return access


async def _advertise_in_handshake(ctx: Ctx, call_next: CallNext, *, entry: dict[str, Any]) -> HandlerResult:
    """Add the entry to ``capabilities.experimental`` of an ``initialize`` result (handshake era)."""
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        capabilities = dict(result.get("capabilities") or {})
        capabilities["experimental"] = {**(capabilities.get("experimental") or {}), EXTENSION: entry}
        result = {**result, "capabilities": capabilities}
    return result


class TransactionParticipant:
    """Serves the extension's methods for one low-level ``Server``; one open transaction per session."""

    def __init__(
        self,
        *,
        session_key: Callable[[Ctx], str],
        access: BackendAccess,
        features: Collection[str] = FEATURES,
        lease_s: float | None = DEFAULT_LEASE_S,
        on_lapse: Callable[[str], Awaitable[object]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        writers: int | None = None,
    ) -> None:
        if writers is not None and writers < 1:
            raise ValueError(f"writers must be a positive number or None, got {writers!r}")
        self.writers = writers
        """Transactions that can hold uncommitted writes at once (advertised; None: no limit)."""
        if lease_s is not None and not lease_s > 0:
            raise ValueError(f"lease_s must be a positive number of seconds or None, got {lease_s!r}")
        unknown = sorted(set(features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(FEATURES)}")
        for needs_piggyback in (WATCH, AFTER):
            if needs_piggyback in features and PIGGYBACK not in features:
                raise ValueError(
                    f"feature {needs_piggyback!r} rides on piggybacked operations: it needs {PIGGYBACK!r}"
                )
        self.session_key = session_key
        self.access = access
        self.features = tuple(f for f in FEATURES if f in features)
        """The optional features served (all by default; ``()`` behaves as a participant that
        predates them: piggybacked operations are refused with INVALID_PARAMS). ``watch`` is
        answered at ``begin`` only for a backend that can watch (:class:`guard.backend.Watchable`)."""
        self.lease_s = lease_s
        """A transaction no request named for this long is rolled back (None: never)."""
        self.on_lapse = on_lapse
        """Told the session key of each transaction rolled back for its lapsed lease (after the
        rollback), e.g. to free what the session holds (a pooled schema, a connection)."""
        self._registry = Registry(lease_s=lease_s, clock=clock)

    def install(self, server: Server[Any]) -> None:
        """Register the methods and advertise the extension in both protocol eras."""
        handlers: dict[str, Handler] = {
            BEGIN: self._begin,
            SAVEPOINT: self._savepoint,
            ROLLBACK_TO: self._rollback_to,
            RELEASE: self._release,
            CHANGES: self._changes,
            QUERY: self._query,
            COMMIT: self._commit,
            ROLLBACK: self._rollback,
            RENEW: self._renew,
        }
        for method, handler in handlers.items():
            server.add_request_handler(method, TxParams, handler)
        entry = settings(self.features, self.writers)
        server.extensions[EXTENSION] = entry
        server.middleware.append(functools.partial(_advertise_in_handshake, entry=entry))
        server.middleware.append(self._carry_ops)
        server.middleware.append(renew_after(self._registry, self.session_key))
        if self.lease_s is not None:
            run_in_lifespan(server, self.run_reaper)

    async def reap(self) -> list[str]:
        """Roll back every transaction whose lease lapsed (:func:`guard.txext.leases.reap`); the
        session keys, after ``on_lapse``."""
        return await reap(self._registry, self.access, self.on_lapse)

    async def run_reaper(self) -> None:
        """:meth:`reap` every quarter lease until cancelled (``install`` runs it in the server's lifespan)."""
        if self.lease_s is None:
            return
        while True:
            await anyio.sleep(max(self.lease_s / 4, 0.05))
            await self.reap()

    # -- what hosts call from their tools/call handler
    @staticmethod
    def transaction_of(ctx: Ctx) -> str | None:
        """The transaction id a request names in ``_meta`` (validated), or None."""
        meta: Mapping[str, Any] = ctx.meta or {}
        if TX_META_KEY not in meta:
            return None
        return check_id(meta[TX_META_KEY], f"_meta[{TX_META_KEY!r}]")

    def check_call(self, key: str, tx: str | None, backend: Backend) -> None:
        """Refuse (before it runs) a call naming a transaction that is not open in its session.

        Call it inside :attr:`access`, with the backend it hands out, so that the check and the
        call see the same state. A call without a transaction id is the host's to place. The
        call's piggybacked operations (savepoint, release) are applied here, in the same worker
        thread and lock hold; a failed one raises its error and the tool must not run.
        """
        if tx is None:
            return
        carried = CARRIED.get()
        if carried is not None and not carried.started and (carried.key, carried.tx) == (key, tx):
            run_ops(self._registry, carried, backend)
        self._registry.current(key, tx, backend)

    @contextlib.contextmanager
    def calling(self, key: str, tx: str | None, backend: Backend) -> Iterator[None]:
        """:meth:`check_call`, then the tool (the ``with`` block), then the call's report (its
        change sets and the answers to its queries) taken right there, in the same worker thread
        and lock hold, whether the tool returned or raised. A host whose tool runs in one access
        uses it instead of :meth:`check_call` and saves the report its own access (one worker-thread
        hop) per call."""
        self.check_call(key, tx, backend)
        try:
            yield
        finally:
            carried = CARRIED.get()
            if tx is not None and carried is not None and carried.reports(key, tx):
                carried.reported = report(self._registry, carried, backend)

    async def _carry_ops(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Server middleware: apply a tools/call's piggybacked operations before its tool (in
        :meth:`check_call`, or here when the host never called it), then report the change sets
        and answer the queries it asked for after the tool (in one access)."""
        meta: Mapping[str, Any] = ctx.meta or {}
        carries = OPS_META_KEY in meta or AFTER_META_KEY in meta
        if not carries or (ctx.method in METHODS and PIGGYBACK in self.features):
            return await call_next(ctx)
        if OPS_META_KEY in meta and PIGGYBACK not in self.features:
            raise error(types.INVALID_PARAMS, f"_meta[{OPS_META_KEY!r}]: this participant does not piggyback")
        if ctx.method != "tools/call":
            raise error(
                types.INVALID_PARAMS,
                f"_meta[{OPS_META_KEY!r}] and _meta[{AFTER_META_KEY!r}] ride only on tools/call and "
                f"{EXTENSION} requests",
            )
        key, tx = self._selectors(ctx, "tools/call")
        ops = parse_ops(meta[OPS_META_KEY], watch=WATCH in self.features) if OPS_META_KEY in meta else []
        carried = CarriedOps(key, tx, ops, after=self._after_of(meta))
        apply = functools.partial(run_ops, self._registry, carried)
        token = CARRIED.set(carried)
        try:
            result = await call_next(ctx)
        except Exception:
            if carried.failure is not None:
                raise carried.failure from None
            if not carried.started:
                await self.access(key, apply)
            raise
        finally:
            CARRIED.reset(token)
        if carried.failure is not None:  # the host turned the failure into a result: the tool did not run
            raise carried.failure
        if not carried.started:
            await self.access(key, apply)
        if not carried.opened and not carried.after:
            return result
        reported = carried.reported
        if reported is None:
            reported = await self.access(key, functools.partial(report, self._registry, carried))
        # The SDK's runner serializes a handler's result inside the chain, so this is its wire dict
        # (no second dump); a model only comes from a later middleware that answers by itself.
        if isinstance(result, BaseModel):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        wire = dict(result or {})
        wire["_meta"] = {**(wire.get("_meta") or {}), TX_META_KEY: reported}
        return wire

    def _after_of(self, meta: Mapping[str, Any]) -> list[Query]:
        """The queries a request asks to run after its work (none if it asks for none)."""
        if AFTER_META_KEY not in meta:
            return []
        if AFTER not in self.features:
            raise error(
                types.INVALID_PARAMS,
                f"_meta[{AFTER_META_KEY!r}]: this participant does not answer queries after a request",
            )
        return parse_after(meta[AFTER_META_KEY])

    # -- handlers
    @staticmethod
    def _accept(method: str, params: TxParams, allowed: Collection[str]) -> None:
        given = (params.model_fields_set | set(params.model_extra or {})) - {"meta"}
        unknown = sorted(given - set(allowed))
        if unknown:
            expected = ", ".join(sorted(allowed)) or "none"
            raise error(
                types.INVALID_PARAMS, f"{method}: unknown parameter(s) {unknown}; expected: {expected}"
            )

    def _selectors(self, ctx: Ctx, method: str) -> tuple[str, str]:
        tx = self.transaction_of(ctx)
        if tx is None:
            raise error(types.INVALID_PARAMS, f"{method}: _meta[{TX_META_KEY!r}] names no transaction")
        return self.session_key(ctx), tx

    async def _within(
        self, ctx: Ctx, method: str, op: Callable[[Backend, OpenTransaction], T], *, ends: bool = False
    ) -> T:
        key, tx = self._selectors(ctx, method)
        meta: Mapping[str, Any] = ctx.meta or {}
        if AFTER_META_KEY in meta and method != CHANGES:
            raise error(
                types.INVALID_PARAMS, f"_meta[{AFTER_META_KEY!r}] rides only on tools/call and {CHANGES}"
            )
        ops = parse_ops(meta[OPS_META_KEY], watch=WATCH in self.features) if OPS_META_KEY in meta else None
        carried = None if ops is None else CarriedOps(key, tx, ops)
        registry = self._registry

        def work(backend: Backend) -> T:
            if carried is not None:
                run_ops(registry, carried, backend)
            entry = registry.current(key, tx, backend)
            try:
                result = mapped(method, lambda b: op(b, entry), backend)
            except MCPError as exc:
                if ends and exc.code == TX_FAILED:  # a refusal keeps the transaction; a failure ends it
                    registry.forget(key, tx)
                raise
            if ends:
                registry.forget(key, tx)
            return result

        return await self.access(key, work)

    async def _begin(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(BEGIN, params, ())
        key, tx = self._selectors(ctx, BEGIN)
        if OPS_META_KEY in (ctx.meta or {}):
            raise error(types.INVALID_PARAMS, f"{BEGIN}: nothing can be piggybacked before a transaction")

        def work(backend: Backend) -> bool:
            self._registry.register(key, tx, backend)
            try:
                mapped(BEGIN, lambda b: b.begin(), backend)
            except BaseException:
                self._registry.forget(key, tx)
                raise
            return conforms(backend, Watchable)

        watchable = await self.access(key, work)
        features = [f for f in self.features if f != WATCH or watchable]
        answer: dict[str, Any] = {"features": features} if features else {}
        if self.lease_s is not None:
            answer["lease_s"] = self.lease_s
        return answer

    async def _savepoint(self, ctx: Ctx, params: TxParams) -> TxSavepointResult:
        self._accept(SAVEPOINT, params, ())
        name = await self._within(ctx, SAVEPOINT, lambda b, _: b.savepoint())
        return TxSavepointResult(savepoint=name)

    async def _rollback_to(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK_TO, params, ("savepoint",))
        name = check_id(params.savepoint, f"{ROLLBACK_TO}: savepoint")

        await self._within(ctx, ROLLBACK_TO, lambda b, entry: points.rollback_to(entry, name, b))
        return {}

    async def _release(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(RELEASE, params, ("savepoint",))
        name = check_id(params.savepoint, f"{RELEASE}: savepoint")

        await self._within(ctx, RELEASE, lambda b, entry: points.release(entry, name, b))
        return {}

    async def _changes(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(CHANGES, params, ("since",))
        since = None if params.since is None else check_id(params.since, f"{CHANGES}: since")
        after = self._after_of(ctx.meta or {})

        def op(backend: Backend, entry: OpenTransaction) -> tuple[ChangeSet, list[dict[str, Any]]]:
            return points.changes_since(entry, since, backend), run_after(after, backend)

        changes, answers = await self._within(ctx, CHANGES, op)
        result = changes.model_dump(mode="json")
        if after:
            result["_meta"] = {TX_META_KEY: {"after": answers}}
        return result

    async def _query(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(QUERY, params, ("sql", "params"))
        if not isinstance(params.sql, str) or not params.sql.strip():
            raise error(types.INVALID_PARAMS, f"{QUERY}: sql must be a non-empty string")
        if params.params is not None and not isinstance(params.params, Mapping):
            raise error(types.INVALID_PARAMS, f"{QUERY}: params must be an object of :name -> value")
        sql, bound = params.sql, dict(params.params or {})
        rows = await self._within(ctx, QUERY, lambda b, _: b.query(sql, bound))
        return {"rows": to_jsonable_python(rows)}

    async def _commit(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(COMMIT, params, ())
        await self._within(ctx, COMMIT, lambda b, _: b.commit(), ends=True)
        return {}

    async def _rollback(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        self._accept(ROLLBACK, params, ())
        await self._within(ctx, ROLLBACK, lambda b, _: b.rollback(), ends=True)
        return {}

    async def _renew(self, ctx: Ctx, params: TxParams) -> dict[str, Any]:
        """The guard is alive and the transaction still wanted: its lease starts again."""
        self._accept(RENEW, params, ())
        await self._within(ctx, RENEW, lambda b, _: None)
        return {}
