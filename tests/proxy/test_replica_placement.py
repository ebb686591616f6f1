"""Placement across replicas without subprocesses: owner keys of (principal, id), the directory on
the real Redis (two :class:`ReplicaDirectory` objects standing for two replicas), and the sessions
API's forwarding decision (proxy/replica_api.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from proxy.replica_api import ApiPlacement, decide
from proxy.replicas import Placement, ReplicaDirectory, SessionKey
from tests.support.services import REDIS_URL, require_redis

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


principals = st.one_of(st.none(), st.text(min_size=1, max_size=12))
ids = st.text(min_size=1, max_size=12)


@given(principals, ids, principals, ids)
def test_owner_keys_of_two_sessions_differ(p1: str | None, id1: str, p2: str | None, id2: str) -> None:
    """(principal, id) -> key is one-to-one: no principal or id can end inside another's key."""
    same = SessionKey(id1, p1).name == SessionKey(id2, p2).name
    assert same == ((p1 or None, id1) == (p2 or None, id2))


def test_an_mcp_session_id_is_placed_whoever_sends_it() -> None:
    """The SDK holds an HTTP session in the process that minted it: its key names no principal."""
    assert SessionKey("abc", "alice", era="http").name == SessionKey("abc", "bob", era="http").name
    assert SessionKey("abc", "alice").name != SessionKey("abc", "bob").name


A = Placement("forward", "ra", "http://a.test")
A2 = Placement("forward", "ra", "http://a.test")
B = Placement("forward", "rb", "http://b.test")
LOST = Placement("lost", "rc")
HERE = Placement("here", "me", "http://me.test")


@pytest.mark.parametrize(
    ("placements", "forwarded", "expected"),
    [
        pytest.param([], False, ApiPlacement("here"), id="no-owner-answer-here"),
        pytest.param([HERE], False, ApiPlacement("here"), id="owned-here-but-not-open-answer-here"),
        pytest.param([A], False, ApiPlacement("forward", "http://a.test", "ra"), id="owner-elsewhere"),
        pytest.param([A], True, ApiPlacement("here"), id="never-forwarded-twice"),
        pytest.param([LOST], False, ApiPlacement("lost", owner="rc"), id="owner-dead-lost"),
        pytest.param([A, A2], False, ApiPlacement("forward", "http://a.test", "ra"), id="two-on-one-owner"),
        pytest.param([A, B], False, ApiPlacement("conflict"), id="two-owners-conflict"),
        pytest.param([A, LOST], False, ApiPlacement("conflict"), id="one-live-one-lost-conflict"),
        pytest.param(
            [HERE, A], False, ApiPlacement("forward", "http://a.test", "ra"), id="stale-here-ignored"
        ),
    ],
)
def test_the_sessions_api_forwarding_decision(
    placements: list[Placement], forwarded: bool, expected: ApiPlacement
) -> None:
    assert decide(placements, forwarded=forwarded) == expected


@pytest.fixture
def session_id() -> Iterator[str]:
    """A fresh id; every directory key of it is removed afterwards."""
    require_redis()
    sid = f"placement-{uuid.uuid4().hex}"
    yield sid
    with redis.Redis.from_url(REDIS_URL) as client:
        keys = [*client.scan_iter(match=f"shadowguard:session-*{sid}")]
        if keys:
            client.delete(*keys)


def _directory(url: str) -> ReplicaDirectory:
    return ReplicaDirectory(REDIS_URL, url, heartbeat_s=30, session_lease_s=60)


async def test_two_principals_with_one_id_are_placed_and_lost_apart(session_id: str) -> None:
    a, b = _directory("http://a.test"), _directory("http://b.test")
    alice, bob, carol = (SessionKey(session_id, p) for p in ("alice", "bob", "carol"))
    async with b.running():
        async with a.running():
            assert (await a.place(alice)).where == "here"
            assert await b.place(bob) == Placement("here", b.replica_id, b.url), "bob's is not alice's"
            assert await b.place(alice) == Placement("forward", a.replica_id, a.url)
            assert await a.place(bob) == Placement("forward", b.replica_id, b.url)
            assert await b.principals(session_id) == ["alice", "bob"]
        # a has stopped (its alive key is gone, as when its lease runs out): alice's session is lost
        assert await b.place(alice) == Placement("lost", a.replica_id)
        assert await b.locate(alice) == Placement("lost", a.replica_id)
        assert await b.place(bob) == Placement("here", b.replica_id, b.url), "bob's was not lost with it"
        assert (await b.place(carol)).where == "here", "a fresh session of the id is not refused"


async def test_locating_a_session_never_claims_it(session_id: str) -> None:
    a = _directory("http://a.test")
    async with a.running():
        assert await a.locate(SessionKey(session_id, "alice")) is None
        assert await a.locate(SessionKey(session_id, era="http")) is None
        assert await a.principals(session_id) == []
        with redis.Redis.from_url(REDIS_URL) as client:
            assert not [*client.scan_iter(match=f"shadowguard:session-*{session_id}")]


async def test_sessions_without_agent_auth_are_indexed_as_no_principal(session_id: str) -> None:
    a = _directory("http://a.test")
    async with a.running():
        await a.place(SessionKey(session_id))
        assert await a.principals(session_id) == [None]
        assert await a.locate(SessionKey(session_id)) == Placement("here", a.replica_id, a.url)
