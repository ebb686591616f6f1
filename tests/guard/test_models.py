"""ChangeSet.net() on its own: the netted change set is the difference between the first and last state.

Change sequences are generated from a random walk over a small row store, so every sequence is one a
backend could really report (an insert only for an absent key, update/delete only for a present one).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from guard.models import ChangeSet, Op, RowChange

Store = dict[tuple[str, str], dict[str, Any]]

TABLES = ("a", "b")
KEYS = ("1", "2", "3")
values = st.fixed_dictionaries({"v": st.integers(0, 2), "w": st.sampled_from(["x", "y"])})


@st.composite
def walks(draw: st.DrawFn) -> tuple[Store, ChangeSet, Store]:
    """(initial store, the changes of a random walk from it, final store)."""
    initial: Store = {}
    for ident in draw(st.sets(st.tuples(st.sampled_from(TABLES), st.sampled_from(KEYS)))):
        initial[ident] = draw(values)
    store = dict(initial)
    changes = []
    for _ in range(draw(st.integers(0, 14))):
        table, key = draw(st.sampled_from(TABLES)), draw(st.sampled_from(KEYS))
        current = store.get((table, key))
        if current is None:
            row = draw(values)
            changes.append(RowChange(table=table, key=key, op="insert", after=row))
            store[(table, key)] = row
        elif draw(st.booleans()):
            changes.append(RowChange(table=table, key=key, op="delete", before=current))
            del store[(table, key)]
        else:
            row = draw(values)
            changes.append(RowChange(table=table, key=key, op="update", before=current, after=row))
            store[(table, key)] = row
    return initial, ChangeSet(changes=changes), store


def apply(store: Store, changes: ChangeSet) -> Store:
    """Replay a change set on a store, checking each change's before image against the store."""
    out = dict(store)
    for c in changes:
        ident = (c.table, c.key)
        assert out.get(ident) == c.before, f"{c} does not start from {out.get(ident)}"
        if c.after is None:
            del out[ident]
        else:
            out[ident] = c.after
    return out


def diff(initial: Store, final: Store) -> dict[tuple[str, str], RowChange]:
    out = {}
    for ident in initial.keys() | final.keys():
        before, after = initial.get(ident), final.get(ident)
        if before == after:
            continue
        op: Op = "insert" if before is None else "delete" if after is None else "update"
        out[ident] = RowChange(table=ident[0], key=ident[1], op=op, before=before, after=after)
    return out


@settings(max_examples=120)
@given(walks())
def test_net_is_the_difference_between_first_and_last_state(walk: tuple[Store, ChangeSet, Store]) -> None:
    initial, changes, final = walk
    net = changes.net()
    assert apply(initial, changes) == final
    assert {(c.table, c.key): c for c in net} == diff(initial, final)
    assert len({(c.table, c.key) for c in net}) == len(net)
    assert apply(initial, net) == final


@settings(max_examples=120)
@given(walks())
def test_net_is_idempotent_and_keeps_first_change_order(walk: tuple[Store, ChangeSet, Store]) -> None:
    _, changes, _ = walk
    net = changes.net()
    assert net.net() == net
    first_seen = list(dict.fromkeys((c.table, c.key) for c in changes))
    order = [(c.table, c.key) for c in net]
    assert order == [ident for ident in first_seen if ident in set(order)]


@settings(max_examples=120)
@given(walks(), st.data())
def test_net_composes_over_any_split(walk: tuple[Store, ChangeSet, Store], data: st.DataObject) -> None:
    """Netting per savepoint and then over the session gives the session's net (order aside)."""
    _, changes, _ = walk
    cut = data.draw(st.integers(0, len(changes)))
    head, tail = ChangeSet(changes=changes.changes[:cut]), ChangeSet(changes=changes.changes[cut:])
    joined = head.net().extend(tail.net()).net()
    assert sorted(joined, key=repr) == sorted(changes.net(), key=repr)


def test_net_examples() -> None:
    ins = RowChange(table="t", key="1", op="insert", after={"v": 1})
    upd = RowChange(table="t", key="1", op="update", before={"v": 1}, after={"v": 2})
    back = RowChange(table="t", key="1", op="update", before={"v": 2}, after={"v": 1})
    dele = RowChange(table="t", key="1", op="delete", before={"v": 2})
    assert ChangeSet(changes=[ins, upd]).net().changes == [
        RowChange(table="t", key="1", op="insert", after={"v": 2})
    ]
    assert ChangeSet(changes=[ins, upd, dele]).net().changes == []
    assert ChangeSet(changes=[upd, back]).net().changes == []
    assert ChangeSet(changes=[upd, dele]).net().changes == [
        RowChange(table="t", key="1", op="delete", before={"v": 1})
    ]
    reinsert = RowChange(table="t", key="1", op="insert", after={"v": 3})
    assert ChangeSet(changes=[upd, dele, reinsert]).net().changes == [
        RowChange(table="t", key="1", op="update", before={"v": 1}, after={"v": 3})
    ]
    assert ChangeSet(changes=[ins, upd, dele, reinsert]).net().changes == [reinsert]


def test_change_set_helpers() -> None:
    a = RowChange(table="a", key="1", op="insert", after={"v": 1})
    b = RowChange(table="b", key="1", op="delete", before={"v": 1})
    cs = ChangeSet(changes=[a]).extend([b])
    assert list(cs) == [a, b] and len(cs) == 2 and cs and not ChangeSet()
    assert cs.tables == {"a", "b"}
    assert cs.by_table() == {"a": [a], "b": [b]}
    assert ChangeSet.model_validate_json(cs.model_dump_json()) == cs
