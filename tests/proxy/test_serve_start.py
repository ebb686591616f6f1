"""What ``shadowguard serve`` does before it serves: the event loop it asks for (``loop_options``) and
the heap it settles (``settle_heap``: start-up's garbage is collected, what survives is frozen)."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from proxy.config import ConfigError, ProxyConfig
from proxy.serve import loop_options, settle_heap


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


def test_uvloop_is_the_default_loop_and_asyncio_can_be_asked_for() -> None:
    assert ProxyConfig().proxy.event_loop == "uvloop"
    assert loop_options("uvloop") == {"use_uvloop": True}
    assert loop_options("asyncio") == {"use_uvloop": False}


def test_uvloop_that_cannot_be_imported_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an absent package makes ``import`` do

    with pytest.raises(ConfigError, match=r"proxy\.event_loop is uvloop, but uvloop cannot be imported"):
        loop_options("uvloop")


def test_an_unknown_event_loop_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="event_loop"):
        ProxyConfig.model_validate({"proxy": {"event_loop": "trio"}})
