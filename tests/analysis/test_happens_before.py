"""Tests of oxiwork.analysis.happens_before's array form against item-by-item clocks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.analysis.happens_before import groups_ordered, vector_clocks


@st.composite
def schedules(draw):
    """Random streams, sync pairs (record before wait) and groups of items."""
    n = draw(st.integers(1, 20))
    streams = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8))
    sync = [(a, b) for a, b in pairs if a < b]
    groups = draw(st.integers(1, 6))
    member = draw(
        st.lists(st.tuples(st.integers(0, groups - 1), st.integers(0, n - 1)), max_size=20)
    )
    return vector_clocks(streams, sync), groups, member


@settings(max_examples=200, deadline=None)
@given(sched=schedules())
def test_array_tests_match_item_tests(sched):
    vc, groups, member = sched
    ca = vc.arrays()
    n = len(vc)
    a, b = np.divmod(np.arange(n * n), n)
    assert ca.happens_before(a, b).tolist() == [
        vc.happens_before(x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)
    ]
    group = np.array([g for g, _ in member], dtype=np.int64)
    item = np.array([x for _, x in member], dtype=np.int64)
    last, floor = ca.bounds(group, item, groups)
    items = [sorted({x for g2, x in member if g2 == g}) for g in range(groups)]
    for g in range(groups):
        assert last[g].tolist() == vc.access_clock(items[g])
    gs, hs = np.divmod(np.arange(groups * groups), groups)
    got = groups_ordered(last, floor, gs, hs).tolist()
    for k, (g, h) in enumerate(zip(gs.tolist(), hs.tolist(), strict=True)):
        pairs = [(x, y) for x in items[g] for y in items[h]]
        before = all(vc.happens_before(x, y) for x, y in pairs)
        after = all(vc.happens_before(y, x) for x, y in pairs)
        assert got[k] == (before or after), (g, h, items[g], items[h])


@settings(max_examples=200, deadline=None)
@given(sched=schedules())
def test_vector_clocks_are_the_item_by_item_recurrence(sched):
    # vector_clocks visits only the waits (issue 14); the recurrence over every item it
    # replaced is the oracle: the same streams, positions, members and clocks.
    from oxiwork.analysis.happens_before import _vector_clocks_by_item, clock_arrays

    vc, _, _ = sched
    streams = [vc.streams[s] for s in vc.stream_index]
    sync = [(a, b) for b in range(len(vc)) for a in range(b) if vc.happens_before(a, b)]
    got, ref = vector_clocks(streams, sync), _vector_clocks_by_item(streams, sync)
    assert (got.streams, got.stream_index, got.position, got.members, got.clocks) == (
        ref.streams,
        ref.stream_index,
        ref.position,
        ref.members,
        ref.clocks,
    )
    assert clock_arrays(streams, sync).clocks.tolist() == ref.clocks
    assert [m.tolist() for m in got.arrays().members()] == ref.members


@settings(max_examples=100, deadline=None)
@given(
    streams=st.lists(st.integers(0, 5), min_size=1, max_size=25),
    pairs=st.lists(st.tuples(st.integers(0, 24), st.integers(0, 24)), max_size=10),
)
def test_sync_pairs_are_checked_as_before(streams, pairs):
    # Out of range or backwards pairs: the same refusal (message included) as the recurrence.
    from oxiwork.analysis.happens_before import _vector_clocks_by_item
    from oxiwork.error import InvalidPlan

    def outcome(fn):
        try:
            return fn(streams, pairs).clocks
        except InvalidPlan as e:
            return str(e)

    assert outcome(vector_clocks) == outcome(_vector_clocks_by_item)


@settings(max_examples=200, deadline=None)
@given(
    streams=st.lists(st.integers(0, 3), min_size=2, max_size=30),
    pairs=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=15),
)
def test_one_record_per_wait_is_the_item_by_item_recurrence(streams, pairs):
    # The loop for one record per wait (what the stream pass inserts, issue 14) against the
    # recurrence over every item: the same clocks, in any pair order.
    from oxiwork.analysis.happens_before import _vector_clocks_by_item, clock_arrays

    n = len(streams)
    sync, waits = [], set()
    for a, b in pairs:
        a, b = sorted((a % n, b % n))
        if a < b and b not in waits:
            waits.add(b)
            sync.append((a, b))
    ref = _vector_clocks_by_item(streams, sync)
    assert clock_arrays(streams, sync).clocks.tolist() == ref.clocks
    assert vector_clocks(streams, sync[::-1]).clocks == ref.clocks


@settings(max_examples=200, deadline=None)
@given(sched=schedules())
def test_spans_are_their_definitions(sched):
    # ClockArrays.spans reduces by flat and per-stream ufunc.at (issue 14): per group and
    # stream, the last and first positions of its items and the least clock lowered to one
    # before the first position, item by item over the lists of VectorClocks.
    vc, groups, member = sched
    group = np.array([g for g, _ in member], dtype=np.int64)
    item = np.array([x for _, x in member], dtype=np.int64)
    last, floor, first = vc.arrays().spans(group, item, groups)
    big = np.iinfo(np.int64).max
    for g in range(groups):
        items = [x for g2, x in member if g2 == g]
        for s in range(len(vc.streams)):
            on = [vc.position[x] for x in items if vc.stream_index[x] == s]
            assert last[g, s] == max(on, default=-1)
            assert first[g, s] == min(on, default=-1)
            low = min((vc.clocks[x][s] for x in items), default=big)
            assert floor[g, s] == min(low, min(on) - 1 if on else big - 1)
    assert [a.tolist() for a in vc.arrays().bounds(group, item, groups)] == [
        last.tolist(),
        floor.tolist(),
    ]
