"""The Redis approval store: one queue shared by every proxy replica pointed at the same Redis.

Keys, all under a prefix (default ``shadowguard:approvals:``)::

    <prefix>a:<id>                 hash: state, created, expires, used (µs since the epoch), data (JSON)
    <prefix>ev:<id>                list of ApprovalEvent JSON, oldest first (append-only)
    <prefix>idx:all                zset id → created
    <prefix>idx:state:<state>      zset id → created, one per state
    <prefix>idx:due                zset id → expires, pending approvals only
    <prefix>idx:session:<id>, idx:principal:<name>, idx:tool:<name>     zset id → created

A new approval is written in one MULTI/EXEC; every transition is one Lua script that checks the
compare-and-set conditions, rewrites the record, moves it between indexes and appends its event, so a
decision and a consumption each happen once however many replicas race for them.
"""

from __future__ import annotations

import re
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.typing import EncodableT, FieldT

from guard.approvals.models import (
    Approval,
    ApprovalEvent,
    ApprovalQuery,
    ApprovalState,
    utcnow,
)
from guard.approvals.transitions import Clock, TransitionStore, redact_url, to_micros

DEFAULT_KEY_PREFIX = "shadowguard:approvals:"
_PREFIX = re.compile(r"^[A-Za-z0-9_:.\-]{1,100}$")
_CONNECT_TIMEOUT_S = 5.0
_SOCKET_TIMEOUT_S = 10.0
"""A command whose answer does not come within this long fails (redis.TimeoutError: the store is
unavailable) instead of holding the call: a server that stops answering, or a partition. Every
command of the store is one short key operation or script."""
_STATE_REPLIES = frozenset({"MISCONF", "NOREPLICAS", "BUSY"})
"""Error replies of a server that cannot serve a write now, for which redis-py has no class (it maps
``READONLY``, ``OOM``, ``LOADING`` and ``MASTERDOWN`` to the classes in ``_unreachable``)."""
_PAGE = 200

_SWAP = """
local rec = redis.call('HMGET', KEYS[1], 'state', 'expires', 'used', 'created')
if not rec[1] or rec[1] ~= ARGV[2] then return 0 end
local expires, now = tonumber(rec[2]), tonumber(ARGV[3])
if ARGV[4] == '1' then
  if expires > now then return 0 end
elseif expires <= now then return 0 end
if ARGV[5] == '1' and rec[3] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[6], 'data', ARGV[7])
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'used', ARGV[9]) end
if ARGV[6] ~= ARGV[2] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[4], rec[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
end
redis.call('RPUSH', KEYS[2], ARGV[8])
return 1
"""
"""KEYS: record, events, from-state index, to-state index, due index. ARGV: id, expected state, now,
due (1: expiry must be <= now, 0: > now), unused (1: ``used`` must be unset), new state, new data,
event JSON, used (µs, or empty)."""


class RedisApprovalStore(TransitionStore):
    """Approvals in Redis (redis-py, sync), safe across replicas sharing the server.

    ``url`` is ``redis://[:password@]host:port/db`` (``rediss://`` for TLS); an optional ``prefix=...``
    query parameter (default ``shadowguard:approvals:``) is the key prefix and is removed before redis-py
    sees the URL. Raises :class:`ValueError` for a URL it cannot use and :class:`ApprovalStoreUnavailable`
    when the server cannot be reached.
    """

    _unreachable = (
        redis.ConnectionError,
        redis.TimeoutError,
        redis.exceptions.InvalidResponse,  # not a Redis server, or a broken stream
        redis.exceptions.ReadOnlyError,  # a replica (a failover demoted the server)
        redis.exceptions.OutOfMemoryError,  # maxmemory reached with noeviction
        redis.exceptions.ClusterDownError,  # MasterDownError (MASTERDOWN) too
        redis.exceptions.TryAgainError,
    )

    def _is_unreachable(self, exc: Exception) -> bool:
        """Also a server that answers but cannot serve a write now: its error reply starts with a state
        code redis-py has no class for (``MISCONF``: snapshots failing; ``NOREPLICAS``; ``BUSY``: a
        script running). Any other error reply (a bug) is raised as it is."""
        if isinstance(exc, redis.ResponseError) and str(exc).split(" ", 1)[0] in _STATE_REPLIES:
            return True
        return super()._is_unreachable(exc)

    def __init__(self, url: str, *, clock: Clock = utcnow) -> None:
        super().__init__(clock)
        self.url = redact_url(url)
        client_url, self.key_prefix = _parse(url)
        try:
            self._redis = redis.Redis.from_url(
                client_url,
                decode_responses=True,
                socket_connect_timeout=_CONNECT_TIMEOUT_S,
                socket_timeout=_SOCKET_TIMEOUT_S,
            )
        except ValueError as exc:
            raise ValueError(f"approval store {self.url}: {exc}") from exc
        self._swap_script = self._redis.register_script(_SWAP)
        with self._opening():
            self._redis.ping()

    def close(self) -> None:
        self._redis.close()

    def purge(self) -> int:
        """Delete every key under this store's prefix (test teardown); returns how many."""
        deleted = 0
        with self._unavailable("purge"):
            batch: list[str] = []
            for key in self._redis.scan_iter(match=self.key_prefix + "*", count=500):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += self._redis.delete(*batch)
                    batch.clear()
            if batch:
                deleted += self._redis.delete(*batch)
        return deleted

    # -- primitives --------------------------------------------------------------------------------

    def _load(self, approval_id: str) -> Approval | None:
        with self._unavailable("read"):
            data = cast(str | None, self._redis.hget(self._record(approval_id), "data"))
        return None if data is None else Approval.model_validate_json(data)

    def _insert(self, approval: Approval, event: ApprovalEvent) -> None:
        created = to_micros(approval.created_at)
        record: dict[FieldT, EncodableT] = {
            "state": approval.state.value,
            "created": str(created),
            "expires": str(to_micros(approval.expires_at)),
            "data": approval.model_dump_json(),
        }
        indexes = [self._key("idx:all"), self._state_index(approval.state)]
        indexes.append(self._key(f"idx:session:{approval.session_id}"))
        indexes.append(self._key(f"idx:tool:{approval.tool}"))
        if approval.principal is not None:
            indexes.append(self._key(f"idx:principal:{approval.principal}"))
        with self._unavailable("write"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(self._record(approval.id), mapping=record)
            for index in indexes:
                pipe.zadd(index, {approval.id: created})
            if approval.state is ApprovalState.PENDING:
                pipe.zadd(self._key("idx:due"), {approval.id: to_micros(approval.expires_at)})
            pipe.rpush(self._events_key(approval.id), event.model_dump_json())
            pipe.execute()

    def _swap(
        self, before: Approval, after: Approval, event: ApprovalEvent, *, now: int, due: bool, unused: bool
    ) -> bool:
        keys = [
            self._record(before.id),
            self._events_key(before.id),
            self._state_index(before.state),
            self._state_index(after.state),
            self._key("idx:due"),
        ]
        args = [
            before.id,
            before.state.value,
            str(now),
            "1" if due else "0",
            "1" if unused else "0",
            after.state.value,
            after.model_dump_json(),
            event.model_dump_json(),
            "" if after.used_at is None else str(to_micros(after.used_at)),
        ]
        with self._unavailable("write"):
            return cast(int, self._swap_script(keys=keys, args=args)) == 1

    def _due_ids(self, now: int) -> list[str]:
        with self._unavailable("read"):
            return cast(list[str], self._redis.zrangebyscore(self._key("idx:due"), "-inf", now))

    def _select(self, query: ApprovalQuery) -> list[Approval]:
        states = None if query.states is None else {state.value for state in query.states}
        if query.session_id is not None:
            index = self._key(f"idx:session:{query.session_id}")
        elif query.principal is not None:
            index = self._key(f"idx:principal:{query.principal}")
        elif query.tool is not None:
            index = self._key(f"idx:tool:{query.tool}")
        elif query.states is not None and len(query.states) == 1:
            index = self._state_index(query.states[0])
        else:
            index = self._key("idx:all")
        page: list[Approval] = []
        skip = query.offset
        start = 0
        with self._unavailable("read"):
            while len(page) < query.limit:
                ids = cast(list[str], self._redis.zrevrange(index, start, start + _PAGE - 1))
                if not ids:
                    break
                start += len(ids)
                pipe = self._redis.pipeline(transaction=False)
                for approval_id in ids:
                    pipe.hget(self._record(approval_id), "data")
                for data in cast(list[str | None], pipe.execute()):
                    if data is None:
                        continue
                    approval = Approval.model_validate_json(data)
                    if not _matches(approval, query, states):
                        continue
                    if skip:
                        skip -= 1
                        continue
                    page.append(approval)
                    if len(page) == query.limit:
                        break
        return page

    def _events(self, approval_id: str) -> list[ApprovalEvent]:
        with self._unavailable("read"):
            items = cast(list[str], self._redis.lrange(self._events_key(approval_id), 0, -1))
        return [ApprovalEvent.model_validate_json(item) for item in items]

    # -- helpers -----------------------------------------------------------------------------------

    def _key(self, suffix: str) -> str:
        return self.key_prefix + suffix

    def _record(self, approval_id: str) -> str:
        return self._key(f"a:{approval_id}")

    def _events_key(self, approval_id: str) -> str:
        return self._key(f"ev:{approval_id}")

    def _state_index(self, state: ApprovalState) -> str:
        return self._key(f"idx:state:{state.value}")


def _matches(approval: Approval, query: ApprovalQuery, states: set[str] | None) -> bool:
    return (
        (states is None or approval.state.value in states)
        and (query.session_id is None or approval.session_id == query.session_id)
        and (query.principal is None or approval.principal == query.principal)
        and (query.tool is None or approval.tool == query.tool)
    )


def _parse(url: str) -> tuple[str, str]:
    """The URL for redis-py (without ``prefix``) and the key prefix."""
    parts = urlsplit(url)
    params: list[tuple[str, Any]] = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for name, value in params if name == "prefix"]
    if len(prefixes) > 1:
        raise ValueError(f"approval store {redact_url(url)}: prefix given more than once")
    prefix = prefixes[0] if prefixes else DEFAULT_KEY_PREFIX
    if not _PREFIX.match(prefix):
        raise ValueError(f"approval store {redact_url(url)}: prefix must be 1-100 letters, digits or _ : . -")
    rest = urlencode([(name, value) for name, value in params if name != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix
