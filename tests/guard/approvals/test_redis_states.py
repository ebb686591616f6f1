"""A Redis approval store whose server answers but cannot serve a write (out of memory, demoted to a
replica) is unavailable (``approvals_unavailable`` for the agent), not an internal error; once the
server can write again, so can the store. A redis-server of the test's own, put in those states with
CONFIG SET and REPLICAOF (the shared server is left alone)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from guard.approvals import ApprovalRequest, ApprovalStoreUnavailable, RedisApprovalStore
from tests.support.approvals import delete_note_request

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    admin = redis.Redis(port=port, socket_timeout=5)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield admin
    finally:
        admin.close()
        proc.kill()
        proc.wait(timeout=30)


def request_for(session: str) -> ApprovalRequest:
    return delete_note_request(datetime.now(UTC) + timedelta(hours=1)).model_copy(
        update={"session_id": session}
    )


def _store(admin: redis.Redis) -> RedisApprovalStore:
    port = admin.connection_pool.connection_kwargs["port"]
    return RedisApprovalStore(f"redis://127.0.0.1:{port}/0?prefix=t-states:")


def test_a_server_out_of_memory_makes_the_store_unavailable_until_it_has_room(own_redis: redis.Redis) -> None:
    store = _store(own_redis)
    try:
        store.create(request_for("s-1"))
        own_redis.config_set("maxmemory-policy", "noeviction")
        own_redis.config_set("maxmemory", "1")
        with pytest.raises(ApprovalStoreUnavailable, match="maxmemory"):
            store.create(request_for("s-1"))
        own_redis.config_set("maxmemory", "0")
        assert store.create(request_for("s-1")).session_id == "s-1"
    finally:
        store.close()


def test_a_server_demoted_to_a_replica_makes_writes_unavailable(own_redis: redis.Redis) -> None:
    store = _store(own_redis)
    try:
        created = store.create(request_for("s-2"))
        with socket.create_server(("127.0.0.1", 0)) as nowhere:  # a primary that is not there
            own_redis.replicaof("127.0.0.1", nowhere.getsockname()[1])
        with pytest.raises(ApprovalStoreUnavailable, match=r"READONLY|replica"):
            store.cancel(created.id, reason="the session ended")
        own_redis.replicaof("NO", "ONE")
        assert store.cancel(created.id, reason="the session ended").state.value == "cancelled"
    finally:
        store.close()


def test_an_error_reply_that_is_no_server_state_is_raised_as_it_is(own_redis: redis.Redis) -> None:
    store = _store(own_redis)
    try:
        own_redis.set("t-states:approval:not-a-hash", "x")
        with pytest.raises(redis.ResponseError) as raised, store._unavailable("read"):
            store._redis.hgetall("t-states:approval:not-a-hash")  # WRONGTYPE: a bug, not an outage
        assert not isinstance(raised.value, ApprovalStoreUnavailable)
    finally:
        store.close()
