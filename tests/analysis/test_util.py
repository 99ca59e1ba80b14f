"""paused_gc: the collector is paused, restored, and a big region's objects promoted."""

from __future__ import annotations

import gc
import weakref

import pytest

from oxiwork.analysis._util import PROMOTE_AFTER, paused_gc


class _Cell:
    """A weak-referenceable object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    assert gc.get_freeze_count() == 0
    yield
    if gc.get_freeze_count():
        gc.unfreeze()
    if not was:
        gc.disable()


def test_pauses_and_restores(collector_on):
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: the inner one leaves the collector off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_leaves_a_disabled_collector_disabled(collector_on):
    gc.disable()
    with paused_gc():
        xs = [[i] for i in range(PROMOTE_AFTER + 10)]
    assert not gc.isenabled()
    assert len(xs) == PROMOTE_AFTER + 10


def test_big_region_promoted_to_oldest_generation(collector_on):
    gc.collect()
    with paused_gc():
        xs = [[i] for i in range(PROMOTE_AFTER + 10)]
    # promoted: nothing is left for a young collection to scan ...
    assert gc.get_count()[0] < 1000
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(x) in oldest for x in xs[:: PROMOTE_AFTER // 97])
    # ... and nothing is frozen for good
    assert gc.get_freeze_count() == 0


def test_small_region_not_promoted(collector_on):
    gc.collect()
    with paused_gc():
        xs = [[i] for i in range(100)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert all(id(x) in young for x in xs)


def test_promoted_cycles_still_collected(collector_on):
    gc.collect()
    with paused_gc():
        a, b = _Cell(), _Cell()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        filler = [[i] for i in range(PROMOTE_AFTER)]
    del a, b
    assert probe() is not None  # a cycle: reference counting alone cannot free it
    gc.collect()
    assert probe() is None
    assert len(filler) == PROMOTE_AFTER


def test_callers_frozen_objects_stay_frozen(collector_on):
    keep = [[i] for i in range(50)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    with paused_gc():
        xs = [[i] for i in range(PROMOTE_AFTER + 10)]
    assert gc.get_freeze_count() == frozen
    assert len(xs) + len(keep) == PROMOTE_AFTER + 60
