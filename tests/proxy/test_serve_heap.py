"""``proxy.serve.settle_heap``: start-up's garbage is collected, what survives is frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from proxy.serve import settle_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_settle_heap_collects_start_up_garbage_and_freezes_the_rest() -> None:
    kept = _Node()
    cycle_a, cycle_b = _Node(), _Node()
    cycle_a.other, cycle_b.other = cycle_b, cycle_a
    dropped = weakref.ref(cycle_a)
    del cycle_a, cycle_b
    frozen_before = gc.get_freeze_count()

    settle_heap()

    assert dropped() is None, "a garbage cycle built before settling must be collected, not frozen"
    assert gc.get_freeze_count() > frozen_before
    assert all(kept is not o for o in gc.get_objects()), "a surviving start-up object is frozen"


@pytest.mark.usefixtures("unfrozen")
def test_objects_built_after_settling_are_still_collected() -> None:
    settle_heap()
    later_a, later_b = _Node(), _Node()
    later_a.other, later_b.other = later_b, later_a
    dropped = weakref.ref(later_a)
    del later_a, later_b

    gc.collect()

    assert dropped() is None
