"""Tests for the memory planner: invariants over random inputs, not golden offsets."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import GraphError, InvalidArgument
from oxiwork.optimizer.memory import (
    DEFAULT_ALIGNMENT,
    LNS_MIN_SECONDS,
    IntervalPlan,
    MemoryPlan,
    greedy_by_size,
    lower_bound,
    plan_buffers,
    plan_intervals,
)

BENCH = Path("/work/shared/bench-data/minimalloc")
BENCH_CAPACITY = 1_048_576
# From the benchmark README: lower bound and TFLite greedy-by-size arena per instance.
README = {
    "A": (1_048_576, 1_374_208),
    "B": (1_048_576, 1_432_576),
    "C": (1_039_360, 1_417_216),
    "D": (986_112, 1_339_392),
    "E": (1_048_576, 1_513_472),
}


def _round(size: int, align: int) -> int:
    return -(-size // align) * align


def assert_valid(intervals, offsets, aligns, arena: int) -> None:
    """No two time-overlapping buffers share a byte; offsets aligned; arena is the top."""
    sizes = [_round(z, a) for (_, _, z), a in zip(intervals, aligns, strict=True)]
    assert len(offsets) == len(intervals)
    for o, a in zip(offsets, aligns, strict=True):
        assert o >= 0 and o % a == 0
    assert arena == max((o + z for o, z in zip(offsets, sizes, strict=True)), default=0)
    # Sweep by start time: only intervals live at the same moment are compared.
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    live: list[int] = []
    for i in order:
        s = intervals[i][0]
        live = [j for j in live if intervals[j][1] > s]
        for j in live:
            lo_i, hi_i = offsets[i], offsets[i] + sizes[i]
            lo_j, hi_j = offsets[j], offsets[j] + sizes[j]
            assert hi_i <= lo_j or hi_j <= lo_i, f"intervals {i} and {j} overlap in space"
        live.append(i)


def brute_force(intervals, aligns) -> int:
    """Optimum by trying every order, each buffer dropped onto the ones placed before it.

    Every optimal plan can be pushed down until each buffer rests on 0 or on a buffer below
    it; listing those buffers by offset gives an order this enumeration tries.
    """
    n = len(intervals)
    if n == 0:
        return 0
    sizes = [_round(z, a) for (_, _, z), a in zip(intervals, aligns, strict=True)]
    best = None
    for perm in itertools.permutations(range(n)):
        off: dict[int, int] = {}
        for i in perm:
            top = 0
            for j, o in off.items():
                if intervals[j][0] < intervals[i][1] and intervals[i][0] < intervals[j][1]:
                    top = max(top, o + sizes[j])
            off[i] = _round(top, aligns[i])
        arena = max(off[i] + sizes[i] for i in range(n))
        best = arena if best is None else min(best, arena)
    return best


@st.composite
def interval_lists(draw, max_n: int = 40, max_size: int = 5000):
    n = draw(st.integers(0, max_n))
    out = []
    for _ in range(n):
        start = draw(st.integers(0, 30))
        out.append((start, start + draw(st.integers(1, 15)), draw(st.integers(1, max_size))))
    return out


ALIGNS = st.sampled_from([1, 2, 8, 256])


@st.composite
def mixed_intervals(draw, max_n: int = 70):
    """(start, end, size, alignment) rows: many short lifetimes, some long-lived ones spanning
    most of the horizon (as weights do), equal starts, and mixed per-buffer alignments."""
    n = draw(st.integers(1, max_n))
    horizon = draw(st.integers(1, 40))
    long_share = draw(st.sampled_from([0, 8, 3]))  # none, about 1 in 8, about 1 in 3
    rows = []
    for _ in range(n):
        start = draw(st.integers(0, horizon))
        if long_share and draw(st.integers(0, long_share - 1)) == 0:
            length = draw(st.integers(horizon // 2 + 1, 2 * horizon + 1))
        else:
            length = draw(st.integers(1, 6))
        size = draw(st.integers(1, 3000))
        rows.append((start, start + length, size, draw(st.sampled_from([1, 2, 8, 64, 256]))))
    return rows


def reference_placement(intervals, size, align, order, best_fit) -> tuple[list[int], int]:
    """Place in ``order`` against all earlier-placed time-overlapping intervals (all pairs).

    Written from the definition, not from the planner's scan: a buffer can only rest at 0 or
    at a neighbour's top rounded up to its alignment. First fit takes the lowest such offset
    where it overlaps no placed neighbour; best fit the one with the least room up to the
    next neighbour above (lowest on ties), and the lowest free offset above every neighbour
    when no such bounded gap holds it.
    """
    off: dict[int, int] = {}
    for i in order:
        s, e, _ = intervals[i]
        nb = [
            (off[j], off[j] + size[j]) for j in off if intervals[j][0] < e and s < intervals[j][1]
        ]
        a, z = align[i], size[i]
        spots = sorted({0} | {_round(t, a) for _, t in nb})
        free = [x for x in spots if all(t <= x or x + z <= o for o, t in nb)]
        if best_fit:
            bounded = [
                (min(o for o, _ in nb if o >= x) - x, x) for x in free if any(o >= x for o, _ in nb)
            ]
            off[i] = min(bounded)[1] if bounded else free[-1]
        else:
            off[i] = free[0]
    offsets = [off[i] for i in range(len(intervals))]
    return offsets, max((o + z for o, z in zip(offsets, size, strict=True)), default=0)


class TestValidation:
    def test_raises_nonpositive_size(self):
        with pytest.raises(InvalidArgument, match=r"interval 1 \(0, 2, 0\): size must be > 0"):
            plan_intervals([(0, 1, 4), (0, 2, 0)])

    def test_raises_end_not_after_start(self):
        with pytest.raises(InvalidArgument, match=r"interval 0 \(3, 3, 8\): end must be > start"):
            plan_intervals([(3, 3, 8)])

    @pytest.mark.parametrize("bad", [(0, 1.5, 4), (0, 1, "4"), (True, 2, 4), (0, 2, 4.0)])
    def test_raises_non_integer(self, bad):
        with pytest.raises(InvalidArgument, match=r"interval 1 .*must be integers"):
            plan_intervals([(0, 1, 4), bad])

    @pytest.mark.parametrize("bad", [(0, 1), 5, (0, 1, 2, 3)])
    def test_raises_not_a_triple(self, bad):
        with pytest.raises(InvalidArgument, match=r"interval 0 must be a \(start, end, size\)"):
            plan_intervals([bad])

    @pytest.mark.parametrize("alignment", [0, 3, -4, 2.0, True])
    def test_raises_bad_alignment(self, alignment):
        with pytest.raises(InvalidArgument, match="alignment must be a power of two"):
            plan_intervals([(0, 1, 4)], alignment=alignment)

    def test_raises_bad_mode(self):
        with pytest.raises(
            InvalidArgument, match=r"mode must be one of \('heuristic', 'exact', 'auto'\)"
        ):
            plan_intervals([(0, 1, 4)], mode="optimal")

    @pytest.mark.parametrize("capacity", [0, -1, 1.5])
    def test_raises_bad_capacity(self, capacity):
        with pytest.raises(InvalidArgument, match="capacity must be a positive integer"):
            plan_intervals([(0, 1, 4)], capacity=capacity)

    @pytest.mark.parametrize("limit", [0, -1.0, "5", True])
    def test_raises_bad_time_limit(self, limit):
        with pytest.raises(InvalidArgument, match="time_limit must be a positive number"):
            plan_intervals([(0, 1, 4)], mode="exact", time_limit=limit)

    def test_errors_are_graph_errors(self):
        with pytest.raises(GraphError):
            lower_bound([(0, 1, -1)])
        with pytest.raises(GraphError):
            greedy_by_size([(1, 0, 1)])

    def test_plan_buffers_names_the_buffer(self):
        with pytest.raises(InvalidArgument, match=r"buffer 7 \(2, 1, 8\): end must be > start"):
            plan_buffers({3: 8, 7: 8}, {}, {3: (0, 1), 7: (2, 1)})
        with pytest.raises(InvalidArgument, match="buffer 9 has a lifetime but no size"):
            plan_buffers({}, {}, {9: (0, 1)})
        with pytest.raises(InvalidArgument, match="alignment of buffer 4 must be a power of two"):
            plan_buffers({4: 8}, {4: 48}, {4: (0, 1)})
        with pytest.raises(InvalidArgument, match=r"lifetime of buffer 4 must be a \(start, end\)"):
            plan_buffers({4: 8}, {}, {4: 3})


class TestHeuristic:
    def test_empty(self):
        plan = plan_intervals([])
        assert (plan.offsets, plan.arena_bytes, plan.lower_bound, plan.optimal) == ((), 0, 0, True)
        assert plan.ratio == 1.0

    @settings(max_examples=300, deadline=None)
    @given(interval_lists(), ALIGNS)
    def test_invariants(self, intervals, alignment):
        plan = plan_intervals(intervals, alignment=alignment)
        aligns = [alignment] * len(intervals)
        assert_valid(intervals, plan.offsets, aligns, plan.arena_bytes)
        assert plan.lower_bound == lower_bound(intervals, alignment)
        assert plan.arena_bytes >= plan.lower_bound
        assert plan.optimal == (plan.arena_bytes == plan.lower_bound)
        assert plan.fits is None and plan.message is None

    @settings(max_examples=300, deadline=None)
    @given(interval_lists(), ALIGNS)
    def test_never_worse_than_greedy_by_size(self, intervals, alignment):
        greedy = greedy_by_size(intervals, alignment)
        assert_valid(intervals, greedy.offsets, [alignment] * len(intervals), greedy.arena_bytes)
        plan = plan_intervals(intervals, alignment=alignment)
        assert plan.arena_bytes <= greedy.arena_bytes

    @settings(max_examples=300, deadline=None)
    @given(interval_lists(), ALIGNS)
    def test_never_worse_than_online_best_fit(self, intervals, alignment):
        # An online best-fit allocator (start order, ties in input order, the smallest gap
        # among the live buffers), written from the definition: the heuristic never loses to
        # the better of it and greedy by size.
        n = len(intervals)
        size = [_round(z, alignment) for _, _, z in intervals]
        order = sorted(range(n), key=lambda i: (intervals[i][0], i))
        online = reference_placement(intervals, size, [alignment] * n, order, True)
        assert_valid(intervals, online[0], [alignment] * n, online[1])
        plan = plan_intervals(intervals, alignment=alignment)
        best = min(online[1], greedy_by_size(intervals, alignment).arena_bytes)
        assert plan.arena_bytes <= best

    @settings(max_examples=200, deadline=None)
    @given(interval_lists(), ALIGNS)
    def test_lower_bound_is_peak_live_bytes(self, intervals, alignment):
        # From the definition: the most rounded bytes live at any one step.
        peak = max(
            (
                sum(_round(z, alignment) for s, e, z in intervals if s <= t < e)
                for t in {s for s, _, _ in intervals}
            ),
            default=0,
        )
        assert lower_bound(intervals, alignment) == peak

    def test_lower_bound_rounds_sizes(self):
        assert lower_bound([(0, 2, 10), (1, 3, 10)], alignment=1) == 20
        assert lower_bound([(0, 2, 10), (1, 3, 10)], alignment=64) == 128

    def test_capacity_not_met_is_reported(self):
        intervals = _heuristic_misses_lower_bound()
        plan = plan_intervals(intervals, capacity=lower_bound(intervals))
        assert plan.fits is False and not plan.optimal
        assert f"no plan within capacity {plan.lower_bound} bytes found" in plan.message
        assert_valid(intervals, plan.offsets, [1] * len(intervals), plan.arena_bytes)

    def test_capacity_met(self):
        plan = plan_intervals([(0, 2, 100), (1, 3, 100)], capacity=200)
        assert plan.fits is True and plan.message is None

    @settings(max_examples=200, deadline=None)
    @given(interval_lists(), ALIGNS, st.booleans())
    def test_numpy_scan_matches_python_scan(self, intervals, alignment, best_fit):
        # Intervals with many neighbours are placed by a numpy scan; it must agree exactly.
        from oxiwork.optimizer import memory

        p = memory._make_problem(memory._validate_intervals(intervals), alignment)
        ptr, cols = memory._overlaps(p)
        args = (list(range(p.n)), p.size.tolist(), p.align.tolist(), ptr, cols, best_fit)
        assert memory._place(*args, dense=-1) == memory._place(*args, dense=10**9)

    @settings(max_examples=150, deadline=None)
    @given(mixed_intervals(), st.booleans())
    def test_time_index_matches_all_pairs_reference(self, rows, uniform):
        # The heuristic finds neighbours through the time index and places them in batches;
        # for every candidate ordering, both the numpy and the Python scan must give exactly
        # the placement of a plain all-pairs reference.
        from oxiwork.optimizer import memory

        if uniform:
            rows = [(s, e, z, rows[0][3]) for s, e, z, _ in rows]
        intervals = [(s, e, z) for s, e, z, _ in rows]
        aligns = [a for *_, a in rows]
        p = memory._make_problem(memory._validate_intervals(intervals), aligns)
        size, align = p.size.tolist(), p.align.tolist()
        perm = np.argsort(p.start, kind="stable")
        inv = np.empty(p.n, dtype=np.int64)
        inv[perm] = np.arange(p.n)
        index = memory._TimeIndex(p.start[perm], p.end[perm])
        tot = memory._section_total(p)
        for name, (_, best_fit) in memory._ORDERINGS.items():
            order = memory._order(p, name, tot)
            expected = reference_placement(intervals, size, align, order.tolist(), best_fit)
            for dense in (-1, 10**9):
                off, arena = memory._place_with(
                    index,
                    inv[order],
                    [size[k] for k in perm.tolist()],
                    [align[k] for k in perm.tolist()],
                    best_fit,
                    dense,
                )
                got = [off[k] for k in inv.tolist()]
                assert (got, arena) == expected, (name, dense)
            heur, arena, _ = memory._heuristic(p, (name,))
            assert (heur, arena) == expected, name
        assert_valid(intervals, expected[0], align, expected[1])

    @settings(max_examples=100, deadline=None)
    @given(mixed_intervals(), st.booleans(), st.sampled_from([(0, 128), (62, 0), (0, 0)]))
    def test_fallback_paths_match_reference(self, rows, best_fit, limits):
        # The wave scan packs (member, offset, top) into one sort key when it fits (else it
        # argsorts), and after a wave it places stragglers through numpy rather than syncing
        # to Python (_SYNC_RATIO); forcing each path must not change the placement.
        from oxiwork.optimizer import memory

        intervals = [(s, e, z) for s, e, z, _ in rows]
        aligns = [a for *_, a in rows]
        p = memory._make_problem(memory._validate_intervals(intervals), aligns)
        perm = np.argsort(p.start, kind="stable")
        inv = np.empty(p.n, dtype=np.int64)
        inv[perm] = np.arange(p.n)
        order = np.lexsort([np.arange(p.n), -p.size])
        size, align = p.size.tolist(), p.align.tolist()
        expected = reference_placement(intervals, size, align, order.tolist(), best_fit)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(memory, "_PACK_BITS", limits[0])
            mp.setattr(memory, "_SYNC_RATIO", limits[1])
            for dense in (-1, 8, 10**9):
                off, arena = memory._place_with(
                    memory._TimeIndex(p.start[perm], p.end[perm]),
                    inv[order],
                    p.size[perm].tolist(),
                    p.align[perm].tolist(),
                    best_fit,
                    dense,
                )
                assert ([off[k] for k in inv.tolist()], arena) == expected, dense
            # Both fits of one ordering in one pass (what _heuristic does for such pairs).
            other = reference_placement(intervals, size, align, order.tolist(), not best_fit)
            both = memory._place_many(
                memory._TimeIndex(p.start[perm], p.end[perm]),
                inv[order],
                p.size[perm].tolist(),
                p.align[perm].tolist(),
                (best_fit, not best_fit),
                8,
            )
            got = [([off[k] for k in inv.tolist()], arena) for off, arena in both]
            assert got == [expected, other]

    def test_large_input_orderings_never_worse_than_greedy(self, monkeypatch):
        # Above _MANY_INTERVALS only _CHEAP runs; it must still contain greedy by size.
        import random

        from oxiwork.optimizer import memory

        assert "greedy_by_size" in memory._CHEAP
        monkeypatch.setattr(memory, "_MANY_INTERVALS", 10)
        rng = random.Random(5)
        for _ in range(20):
            intervals = []
            for k in range(rng.randint(11, 200)):
                s = rng.randrange(100)
                length = rng.randint(50, 100) if k % 25 == 0 else rng.randint(1, 10)
                intervals.append((s, s + length, rng.randint(1, 1 << 12)))
            plan = plan_intervals(intervals, alignment=8)
            assert_valid(intervals, plan.offsets, [8] * len(intervals), plan.arena_bytes)
            assert plan.strategy in memory._CHEAP
            assert plan.arena_bytes <= greedy_by_size(intervals, 8).arena_bytes
            size = [_round(z, 8) for _, _, z in intervals]
            order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], i))
            online = reference_placement(intervals, size, [8] * len(intervals), order, True)
            assert plan.arena_bytes <= online[1]

    def test_long_lived_buffers_are_valid(self):
        import random

        rng = random.Random(3)
        intervals = []
        for k in range(2000):
            s = rng.randrange(2000)
            length = rng.randint(500, 2000) if k % 50 == 0 else rng.randint(1, 20)
            intervals.append((s, s + length, rng.randint(1, 1 << 16)))
        plan = plan_intervals(intervals, alignment=256)
        assert_valid(intervals, plan.offsets, [256] * len(intervals), plan.arena_bytes)
        assert plan.arena_bytes <= greedy_by_size(intervals, 256).arena_bytes

    def test_large_input_is_valid(self):
        import random

        rng = random.Random(7)
        intervals = []
        for _ in range(3000):
            s = rng.randrange(3000)
            intervals.append((s, s + rng.randint(1, 40), rng.randint(1, 1 << 16)))
        plan = plan_intervals(intervals, alignment=256)
        assert_valid(intervals, plan.offsets, [256] * len(intervals), plan.arena_bytes)
        assert plan.arena_bytes <= greedy_by_size(intervals, 256).arena_bytes


class TestAuto:
    """The default of the memory pass: the exact search within a budget that scales."""

    def test_budget_grows_with_the_input_and_is_capped(self):
        from oxiwork.optimizer import memory

        limits = [memory.auto_time_limit(n) for n in (0, 10, 1000, 10**6)]
        assert limits == sorted(limits) and limits[0] > 0
        assert limits[-1] == memory.AUTO_MAX_SECONDS

    @settings(max_examples=100, deadline=None)
    @given(interval_lists(max_n=6, max_size=40), st.sampled_from([1, 4]))
    def test_proves_what_it_claims(self, intervals, alignment):
        # The proved bound never exceeds the optimum, the arena never beats it; a search
        # that did not stop early ends at the optimum.
        best = brute_force(intervals, [alignment] * len(intervals))
        plan = plan_intervals(intervals, mode="auto", alignment=alignment)
        assert_valid(intervals, plan.offsets, [alignment] * len(intervals), plan.arena_bytes)
        assert plan.lower_bound <= plan.proved_bound <= best <= plan.arena_bytes
        assert plan.arena_bytes <= plan_intervals(intervals, alignment=alignment).arena_bytes
        if not plan.stopped_early:
            assert plan.arena_bytes == best and plan.optimal

    @pytest.mark.skipif(not BENCH.exists(), reason="MiniMalloc instances not available")
    def test_stopping_early_is_reported(self):
        # Instance D's minimum is not found in a fraction of a second: the plan says so, with
        # the bound it did prove.
        (path,) = BENCH.glob("D.*.csv")
        with path.open() as f:
            iv = [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)]
        plan = plan_intervals(iv, mode="auto", time_limit=0.2)
        assert plan.stopped_early and not plan.optimal
        assert plan.message is not None and "time limit" in plan.message
        assert plan.lower_bound <= plan.proved_bound < plan.arena_bytes
        assert_valid(iv, plan.offsets, [1] * len(iv), plan.arena_bytes)


class TestExact:
    @pytest.mark.parametrize(
        ("mode", "limit", "lns"),
        [
            ("exact", 1.0, False),
            ("exact", None, False),
            ("exact", LNS_MIN_SECONDS, True),
            ("auto", LNS_MIN_SECONDS, False),
        ],
    )
    def test_only_long_exact_searches_take_the_lns_stages(self, monkeypatch, mode, limit, lns):
        # LNS_MIN_SECONDS: the probe, restart and descent stages lost to plain tightening in
        # every short side-by-side run on instance D, and won with 600 s.
        from oxiwork.optimizer import _minimalloc

        seen = []
        real = _minimalloc.improve

        def spy(*args, **kw):
            seen.append(kw["lns"])
            return real(*args, **kw)

        monkeypatch.setattr(_minimalloc, "improve", spy)
        iv = [(0, 2, 3), (1, 3, 2), (0, 1, 2), (2, 3, 2)]
        plan = plan_intervals(iv, mode=mode, time_limit=limit)
        assert seen == [lns]
        assert plan.optimal and plan.arena_bytes == brute_force(iv, [1] * len(iv))

    @settings(max_examples=150, deadline=None)
    @given(interval_lists(max_n=6, max_size=40), st.sampled_from([1, 4]))
    def test_reaches_brute_force_optimum(self, intervals, alignment):
        best = brute_force(intervals, [alignment] * len(intervals))
        plan = plan_intervals(intervals, mode="exact", alignment=alignment, time_limit=30)
        assert_valid(intervals, plan.offsets, [alignment] * len(intervals), plan.arena_bytes)
        assert plan.arena_bytes == best
        assert plan.optimal
        assert plan.message is None

    @settings(max_examples=150, deadline=None)
    @given(interval_lists(max_n=6, max_size=40))
    def test_optimal_flag_only_when_optimal(self, intervals):
        best = brute_force(intervals, [1] * len(intervals))
        for mode in ("heuristic", "exact"):
            plan = plan_intervals(intervals, mode=mode, time_limit=30)
            if plan.optimal:
                assert plan.arena_bytes == best

    @settings(max_examples=100, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.integers(0, 8),
                st.integers(1, 5),
                st.integers(1, 40),
                st.sampled_from([1, 2, 8, 16]),
            ),
            max_size=6,
        )
    )
    def test_mixed_alignments_reach_optimum(self, rows):
        lifetimes = {10 + k: (s, s + d) for k, (s, d, _, _) in enumerate(rows)}
        sizes = {10 + k: z for k, (_, _, z, _) in enumerate(rows)}
        aligns = {10 + k: a for k, (_, _, _, a) in enumerate(rows)}
        ids = list(lifetimes)
        intervals = [(*lifetimes[b], sizes[b]) for b in ids]
        best = brute_force(intervals, [aligns[b] for b in ids])
        for mode in ("heuristic", "exact"):
            plan = plan_buffers(sizes, aligns, lifetimes, mode=mode, time_limit=30)
            offsets = [plan.offsets[b] for b in ids]
            assert_valid(intervals, offsets, [aligns[b] for b in ids], plan.arena_bytes)
            assert plan.arena_bytes >= best
            if mode == "exact":
                assert plan.arena_bytes == best and plan.optimal

    def test_capacity_below_lower_bound_is_reported(self):
        for mode in ("heuristic", "exact"):
            plan = plan_intervals([(0, 2, 100), (1, 3, 100)], mode=mode, capacity=150)
            assert plan.fits is False
            assert "no plan fits in capacity 150 bytes: 200 bytes are live" in plan.message

    def test_capacity_proved_infeasible_by_search(self):
        # Alignment makes the lower bound (10) unreachable: the optimum is 11.
        lifetimes = {0: (3, 4), 1: (0, 3), 2: (2, 5), 3: (0, 1)}
        sizes = {0: 3, 1: 1, 2: 6, 3: 8}
        aligns = {0: 4, 1: 1, 2: 1, 3: 4}
        ids = sorted(lifetimes)
        intervals = [(*lifetimes[b], sizes[b]) for b in ids]
        assert brute_force(intervals, [aligns[b] for b in ids]) == 11
        plan = plan_buffers(sizes, aligns, lifetimes, mode="exact", capacity=10, time_limit=30)
        assert plan.lower_bound == 10 and plan.fits is False
        assert "proved that no plan fits in capacity 10 bytes" in plan.message
        exact = plan_buffers(sizes, aligns, lifetimes, mode="exact", time_limit=30)
        assert exact.arena_bytes == 11 and exact.optimal and exact.message is None

    def test_capacity_is_searched_for(self):
        # Greedy by size stacks the two long buffers and leaves no room for the third;
        # the search finds the plan that fits exactly.
        intervals = [(0, 2, 2), (1, 3, 2), (0, 1, 1), (2, 3, 1), (0, 3, 1)]
        best = brute_force(intervals, [1] * 5)
        plan = plan_intervals(intervals, mode="exact", capacity=best, time_limit=30)
        assert plan.fits is True and plan.arena_bytes <= best
        assert_valid(intervals, plan.offsets, [1] * 5, plan.arena_bytes)

    def test_too_many_intervals_keeps_heuristic(self, monkeypatch):
        from oxiwork.optimizer import _minimalloc

        monkeypatch.setattr(_minimalloc, "MAX_EXACT_INTERVALS", 5)
        intervals = _heuristic_misses_lower_bound()
        heuristic = plan_intervals(intervals)
        plan = plan_intervals(intervals, mode="exact", time_limit=10)
        assert plan.message.startswith("exact search skipped: 12 intervals is more than 5")
        assert plan.offsets == heuristic.offsets and not plan.optimal

    def test_minimises_without_capacity(self):
        intervals = _heuristic_misses_lower_bound()
        plan = plan_intervals(intervals, mode="exact", time_limit=30)
        assert plan.arena_bytes < plan_intervals(intervals).arena_bytes or plan.optimal
        assert plan.optimal and plan.message is None
        assert_valid(intervals, plan.offsets, [1] * len(intervals), plan.arena_bytes)

    @pytest.mark.skipif(not BENCH.exists(), reason="MiniMalloc benchmark data not present")
    def test_time_limit_reached_is_reported(self):
        intervals = _load("A")
        plan = plan_intervals(intervals, mode="exact", capacity=BENCH_CAPACITY, time_limit=0.05)
        assert plan.fits is False
        assert plan.message.startswith("time limit reached")
        assert_valid(intervals, plan.offsets, [1] * len(intervals), plan.arena_bytes)


class TestPlanBuffers:
    def test_default_alignment_and_to_dict(self):
        plan = plan_buffers({1: 100, 2: 300}, {}, {1: (0, 2), 2: (1, 3)})
        assert isinstance(plan, MemoryPlan)
        assert all(o % DEFAULT_ALIGNMENT == 0 for o in plan.offsets.values())
        d = json.loads(json.dumps(plan.to_dict()))
        assert d["arena_bytes"] == plan.arena_bytes == 768
        assert d["lower_bound"] == 768 and d["optimal"] is True and d["mode"] == "heuristic"
        assert [(b["id"], b["size"], b["start"], b["end"]) for b in d["buffers"]] == [
            (1, 256, 0, 2),
            (2, 512, 1, 3),
        ]

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.integers(0, 20),
                st.integers(1, 10),
                st.integers(1, 3000),
                st.sampled_from([1, 4, 64, 256, 1024]),
            ),
            max_size=30,
        )
    )
    def test_mixed_alignment_invariants(self, rows):
        lifetimes = {k: (s, s + d) for k, (s, d, _, _) in enumerate(rows)}
        sizes = {k: z for k, (_, _, z, _) in enumerate(rows)}
        aligns = {k: a for k, (_, _, _, a) in enumerate(rows)}
        plan = plan_buffers(sizes, aligns, lifetimes)
        ids = list(lifetimes)
        intervals = [(*lifetimes[b], sizes[b]) for b in ids]
        assert_valid(
            intervals, [plan.offsets[b] for b in ids], [aligns[b] for b in ids], plan.arena_bytes
        )
        assert plan.arena_bytes >= plan.lower_bound
        assert plan.sizes == {b: _round(sizes[b], aligns[b]) for b in ids}


def brute_force_floors(intervals, base) -> int:
    """Optimum when buffer ``i`` may not go below ``base[i]`` (unit alignment), by every order.

    As in :func:`brute_force`: an optimal plan pushed down has each buffer resting on its floor
    or on a buffer below it, and listing them by offset gives an order tried here.
    """
    n = len(intervals)
    best = None
    for perm in itertools.permutations(range(n)):
        off: dict[int, int] = {}
        for i in perm:
            top = base[i]
            for j, o in off.items():
                if intervals[j][0] < intervals[i][1] and intervals[i][0] < intervals[j][1]:
                    top = max(top, o + intervals[j][2])
            off[i] = top
        arena = max(off[i] + intervals[i][2] for i in range(n))
        best = arena if best is None else min(best, arena)
    return best


class TestFloorsAndDescend:
    """The search above per-buffer floors, and the large-neighbourhood descent built on it."""

    @settings(max_examples=60, deadline=None)
    @given(
        interval_lists(max_n=6, max_size=40).filter(bool),
        st.lists(st.integers(0, 60), min_size=6, max_size=6),
        st.integers(-3, 3),
    )
    def test_floors_search_matches_brute_force(self, intervals, base, slack):
        import time

        from oxiwork.optimizer import _minimalloc
        from oxiwork.optimizer.memory import _make_problem

        base = base[: len(intervals)]
        best = brute_force_floors(intervals, base)
        p = _make_problem(np.array(intervals, dtype=np.int64), 1)
        capacity = max(best + slack, 1)
        solver = _minimalloc._Solver(p, base)
        status, off, _ = _minimalloc.search(p, capacity, time.perf_counter() + 30, solver)
        assert status == ("found" if best <= capacity else "infeasible")
        if off is not None:
            assert all(o >= b for o, b in zip(off, base, strict=True))
            arena = max(o + z for o, (_, _, z) in zip(off, intervals, strict=True))
            assert_valid(intervals, off, [1] * len(intervals), arena)
            assert arena <= capacity

    @settings(max_examples=30, deadline=None)
    @given(interval_lists(max_n=7, max_size=40).filter(bool), st.integers(0, 3))
    def test_descend_keeps_valid_plans_and_never_worsens(self, intervals, seed):
        import time

        from oxiwork.optimizer import _minimalloc
        from oxiwork.optimizer.memory import _make_problem

        p = _make_problem(np.array(intervals, dtype=np.int64), 1)
        start = greedy_by_size(intervals)
        off, arena, _ = _minimalloc.descend(
            p, start.offsets, time.perf_counter() + 0.05, seed=seed, free_range=(1, 7)
        )
        assert_valid(intervals, off, [1] * len(intervals), arena)
        assert brute_force(intervals, [1] * len(intervals)) <= arena <= start.arena_bytes

    @settings(max_examples=30, deadline=None)
    @given(interval_lists(max_n=7, max_size=40).filter(bool), st.integers(0, 3))
    def test_probe_and_restarts_claim_only_the_truth(self, intervals, seed):
        # The probe's and the restarts' plans are valid and never beat the optimum; the
        # bounds they prove (exhausted searches) never exceed it.
        import random
        import time

        from oxiwork.optimizer import _minimalloc
        from oxiwork.optimizer.memory import _make_problem

        p = _make_problem(np.array(intervals, dtype=np.int64), 1)
        best = brute_force(intervals, [1] * len(intervals))
        start = greedy_by_size(intervals)
        lb = lower_bound(intervals)
        solver = _minimalloc._Solver(p)
        found, arena, lo, _ = _minimalloc._probe(
            solver, lb, start.arena_bytes, 1, time.perf_counter() + 5
        )
        assert lb <= lo <= best <= arena <= start.arena_bytes
        if found is not None:
            assert_valid(intervals, found, [1] * len(intervals), arena)
        off, arena, _, proof = _minimalloc._local(
            p,
            solver,
            list(start.offsets),
            start.arena_bytes - 1,
            time.perf_counter() + 0.05,
            random.Random(seed),
            seed,
        )
        assert_valid(intervals, off, [1] * len(intervals), arena)
        assert best <= arena <= start.arena_bytes
        assert proof <= best


def _heuristic_misses_lower_bound() -> list[tuple[int, int, int]]:
    """A small fixed input on which the heuristic plan is above the lower bound."""
    import random

    rng = random.Random(0)
    for _ in range(1000):
        intervals = []
        for _ in range(12):
            s = rng.randrange(10)
            intervals.append((s, s + rng.randint(1, 5), rng.randint(1, 50)))
        if plan_intervals(intervals).arena_bytes > lower_bound(intervals):
            return intervals
    raise AssertionError("no such input found")


def _load(name: str) -> list[tuple[int, int, int]]:
    (path,) = BENCH.glob(f"{name}.*.csv")
    with path.open() as f:
        return [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)]


@pytest.mark.skipif(not BENCH.exists(), reason="MiniMalloc benchmark data not present")
class TestMiniMallocBenchmarks:
    @pytest.mark.parametrize("name", sorted(README))
    def test_greedy_matches_published_numbers(self, name):
        intervals = _load(name)
        lb, greedy_arena = README[name]
        greedy = greedy_by_size(intervals)
        assert greedy.lower_bound == lb
        assert greedy.arena_bytes == greedy_arena
        plan = plan_intervals(intervals)
        assert plan.arena_bytes <= greedy.arena_bytes
        assert_valid(intervals, plan.offsets, [1] * len(intervals), plan.arena_bytes)

    @pytest.mark.slow
    @pytest.mark.parametrize("name", sorted(README))
    def test_exact_fits_capacity(self, name):
        intervals = _load(name)
        plan = plan_intervals(intervals, mode="exact", capacity=BENCH_CAPACITY, time_limit=120)
        assert plan.fits is True, plan.message
        assert plan.strategy == "minimalloc"
        assert_valid(intervals, plan.offsets, [1] * len(intervals), plan.arena_bytes)
        assert plan.nodes > 0
        # Where the capacity equals the lower bound, fitting it is optimal and is reported so.
        assert plan.optimal == (plan.arena_bytes == README[name][0])


def test_interval_plan_is_frozen():
    plan = plan_intervals([(0, 1, 1)])
    assert isinstance(plan, IntervalPlan)
    with pytest.raises(AttributeError):
        plan.arena_bytes = 0  # type: ignore[misc]
