"""Static memory planning: give every buffer an offset in one arena.

Buffers whose lifetimes overlap in time must not overlap in space; the arena is as small as
possible. This is two-dimensional strip packing with fixed x positions (NP-hard), so two modes:

* ``"heuristic"`` (default): best-fit / first-fit placement over several orderings, keeping
  the smallest arena. TFLite's greedy-by-size is one of the candidates, so the result is never
  worse than it by construction.
* ``"exact"``: MiniMalloc's canonical branch-and-bound search (see
  :mod:`oxiwork.optimizer._minimalloc`), starting from the heuristic's arena and tightening
  toward the lower bound (or aiming straight for a given ``capacity``) within a time limit;
  with a long limit (:data:`LNS_MIN_SECONDS`), when tightening stalls it also probes
  capacities, restarts the search randomised and re-solves neighbourhoods of its best plan
  (strategy ``"minimalloc+lns"`` when that won).
* ``"auto"`` (the memory pass's default): the exact search within a budget that grows with the
  number of intervals (:func:`auto_time_limit`), skipped when the heuristic meets the lower
  bound or the input is too large for the search; the plan says whether the search stopped
  early (``stopped_early``) and the bound it proved (``proved_bound``).

The heuristic's candidates include an online best fit in start order (each buffer, as its
lifetime begins, into the smallest free gap among the live ones: what a plain best-fit
allocator does at run time), so its plan is never worse than the better of greedy-by-size and
online best fit.

Lifetimes are half-open ``[start, end)`` step intervals, as the liveness analysis produces.

References
----------
* TFLite Micro ``GreedyMemoryPlanner`` (greedy by size, first fit).
* XLA ``GlobalDecreasingSizeBestFitHeap`` (spatial and temporal orderings, best fit).
* Y. Pisarchyk and J. Lee, "Efficient Memory Management for Deep Neural Net Inference",
  arXiv:2001.03288, 2020 (greedy by size; offset calculation).
* M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
  Learning", ASPLOS 2023.

Example
-------
>>> plan = plan_intervals([(0, 2, 64), (1, 3, 32), (2, 4, 64)])
>>> plan.arena_bytes, plan.lower_bound, plan.optimal
(96, 96, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from oxiwork.error import InvalidArgument

__all__ = [
    "DEFAULT_ALIGNMENT",
    "DEFAULT_TIME_LIMIT",
    "LNS_MIN_SECONDS",
    "MODES",
    "IntervalPlan",
    "MemoryPlan",
    "auto_time_limit",
    "greedy_by_size",
    "lower_bound",
    "plan_buffers",
    "plan_intervals",
]

DEFAULT_ALIGNMENT = 256
"""Per-buffer alignment used by :func:`plan_buffers` when a buffer names none (cudaMalloc
returns 256-byte aligned pointers, and coalesced access wants at least that)."""

DEFAULT_TIME_LIMIT = 60.0
"""Seconds the exact mode searches when no ``time_limit`` is given."""

MODES = ("heuristic", "exact", "auto")

LNS_MIN_SECONDS = 300.0
"""Shortest ``time_limit`` for which the exact mode's minimisation also probes capacities,
restarts randomised and re-solves neighbourhoods (``_minimalloc.improve(lns=True)``).

Measured on MiniMalloc's instance D, the plain tightening against the schedule with those
stages, run side by side (issue 14): with 120 s budgets (about 42 s of CPU each on the
loaded machine) 1,059,840 and 1,061,888 B against 1,070,080 and 1,069,056 B; with 240 s
(91 s of CPU) 1,051,648 against 1,057,792 B; with 600 s (447 s of CPU) 1,038,336 against
1,030,144 B. The stages cost more than they find in a short search, so shorter budgets,
the default's 60 s among them, keep the plain tightening.
"""

AUTO_SECONDS = 0.05
"""The ``"auto"`` mode's fixed search budget, in seconds (see :func:`auto_time_limit`)."""

AUTO_SECONDS_PER_INTERVAL = 2.5e-4
"""The ``"auto"`` mode's budget per interval: 0.3 s for 1,000 intervals."""

AUTO_MAX_SECONDS = 1.0
"""The most the ``"auto"`` mode searches, however many intervals."""


def auto_time_limit(n: int) -> float:
    """Seconds the ``"auto"`` mode gives the exact search on ``n`` intervals.

    ``AUTO_SECONDS + n * AUTO_SECONDS_PER_INTERVAL``, at most :data:`AUTO_MAX_SECONDS`: it grows
    with the graph, as the heuristic's own cost does, and stays under a second, so a plan built
    interactively never waits long. (Above ``_minimalloc.MAX_EXACT_INTERVALS`` intervals the
    search does not run at all: the heuristic is all that fits.)

    >>> auto_time_limit(0), auto_time_limit(1000), auto_time_limit(100_000)
    (0.05, 0.3, 1.0)
    """
    return min(AUTO_MAX_SECONDS, AUTO_SECONDS + n * AUTO_SECONDS_PER_INTERVAL)


# Above this many intervals the heuristic runs only _CHEAP: greedy by size (so it is never
# worse) and first fit by size, which share their ordering and so one pass over the waves
# (about 0.35 s for both at 100k random short-lived intervals; each further ordering costs
# about as much again).
_MANY_INTERVALS = 20_000


@dataclass(frozen=True, slots=True)
class IntervalPlan:
    """Result of :func:`plan_intervals`: one offset per interval, in input order.

    Attributes
    ----------
    offsets : tuple of int
        Byte offset of each interval's buffer in the arena.
    arena_bytes : int
        ``max(offset + size)`` (sizes rounded up to the alignment); 0 for no intervals.
    lower_bound : int
        Largest number of (rounded) bytes live at one time: no plan can beat it.
    optimal : bool
        True only when the arena is proved minimal (it meets ``lower_bound``, or an exhaustive
        search showed that one byte less is infeasible).
    ratio : float
        ``arena_bytes / lower_bound`` (1.0 when both are 0).
    seconds : float
        Wall-clock time spent planning.
    strategy : str
        The ordering or method whose plan won, e.g. ``"best_fit_size"`` or ``"minimalloc"``.
    fits : bool or None
        None without a ``capacity``; else whether ``arena_bytes <= capacity``.
    message : str or None
        Why the plan falls short (capacity not met, time limit hit), else None.
    nodes : int
        Search nodes visited by the exact mode (0 in heuristic mode).
    proved_bound : int
        The best lower bound known for these intervals: ``lower_bound``, or higher where the
        exact search proved smaller arenas infeasible (equal to the arena when ``optimal``).
    stopped_early : bool
        The exact or auto mode's search ran out of time (or was skipped for too many
        intervals) before proving the arena minimal; ``message`` says which.
    """

    offsets: tuple[int, ...]
    arena_bytes: int
    lower_bound: int
    optimal: bool
    ratio: float
    seconds: float
    strategy: str
    fits: bool | None = None
    message: str | None = None
    nodes: int = 0
    proved_bound: int = 0
    stopped_early: bool = False


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Report-friendly memory plan over named buffers (what :func:`plan_buffers` returns).

    Attributes
    ----------
    offsets : Mapping[int, int]
        Buffer id -> byte offset in the arena.
    sizes : Mapping[int, int]
        Buffer id -> bytes reserved (size rounded up to the buffer's alignment).
    lifetimes : Mapping[int, tuple[int, int]]
        Buffer id -> half-open ``[start, end)`` step interval.
    arena_bytes, lower_bound, optimal, ratio, seconds, strategy, fits, message, mode
        As in :class:`IntervalPlan`; ``mode`` is the mode asked for.
    nodes, proved_bound, stopped_early
        As in :class:`IntervalPlan`.
    """

    offsets: Mapping[int, int]
    sizes: Mapping[int, int]
    lifetimes: Mapping[int, tuple[int, int]]
    arena_bytes: int
    lower_bound: int
    optimal: bool
    ratio: float
    seconds: float
    strategy: str
    mode: str
    fits: bool | None = None
    message: str | None = None
    nodes: int = field(default=0)
    proved_bound: int = 0
    stopped_early: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data for the widget and reports.

        >>> plan = plan_buffers({0: 100, 1: 100}, {}, {0: (0, 2), 1: (1, 3)})
        >>> d = plan.to_dict()
        >>> d["arena_bytes"], [b["offset"] for b in d["buffers"]]
        (512, [0, 256])
        """
        return {
            "arena_bytes": int(self.arena_bytes),
            "lower_bound": int(self.lower_bound),
            "optimal": bool(self.optimal),
            "ratio": float(self.ratio),
            "seconds": float(self.seconds),
            "strategy": self.strategy,
            "mode": self.mode,
            "fits": self.fits,
            "message": self.message,
            "nodes": int(self.nodes),
            "proved_bound": int(self.proved_bound),
            "stopped_early": bool(self.stopped_early),
            "buffers": [
                {
                    "id": int(bid),
                    "offset": int(self.offsets[bid]),
                    "size": int(self.sizes[bid]),
                    "start": int(self.lifetimes[bid][0]),
                    "end": int(self.lifetimes[bid][1]),
                }
                for bid in sorted(self.offsets)
            ],
        }


# --------------------------------------------------------------------------------------------
# Validation and problem set-up
# --------------------------------------------------------------------------------------------


def _is_int(x: object) -> bool:
    # bool is an int subclass but a True size is surely a mistake; numpy integers are fine.
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_alignment(alignment: object, what: str) -> int:
    if not _is_int(alignment) or int(alignment) < 1 or (int(alignment) & (int(alignment) - 1)):
        raise InvalidArgument(
            f"{what} must be a power of two >= 1 (1, 2, 4, ..., 256), got {alignment!r}"
        )
    return int(alignment)


def _interval_error(k: int, iv: object, label: Callable[[int], str]) -> InvalidArgument | None:
    """The error for one bad interval, or None when it is fine (the slow, precise path)."""
    try:
        start, end, size = iv  # type: ignore[misc]
    except (TypeError, ValueError):
        return InvalidArgument(f"{label(k)} must be a (start, end, size) triple, got {iv!r}")
    if not (_is_int(start) and _is_int(end) and _is_int(size)):
        return InvalidArgument(
            f"{label(k)} {(start, end, size)!r}: start, end and size must be integers"
        )
    if int(size) <= 0:
        return InvalidArgument(
            f"{label(k)} {(start, end, size)!r}: size must be > 0 bytes (drop empty buffers "
            "before planning)"
        )
    if int(end) <= int(start):
        return InvalidArgument(
            f"{label(k)} {(start, end, size)!r}: end must be > start (lifetimes are half-open "
            "[start, end); a buffer used only at step t lives over (t, t + 1))"
        )
    return None


def _validate_intervals(
    intervals: Iterable[Sequence[int]],
    label: Callable[[int], str] = lambda k: f"interval {k}",
) -> np.ndarray:
    """Check every interval and return them as an ``(n, 3)`` int64 array.

    Vectorised for large inputs; on any failure the per-interval path finds the first bad one
    and names it through ``label``.
    """
    items = list(intervals)
    if not items:
        return np.zeros((0, 3), dtype=np.int64)
    try:
        arr = np.array(items)
        kinds_ok = arr.ndim == 2 and arr.shape[1] == 3 and arr.dtype.kind in "iu"
        # np.array turns a stray bool into 1 and an int past 2**63 into an object array.
        types_ok = kinds_ok and not ({type(v) for v in chain.from_iterable(items)} & _BOOLS)
        if types_ok:
            arr = arr.astype(np.int64)
            if (arr[:, 2] > 0).all() and (arr[:, 1] > arr[:, 0]).all():
                return arr
    except (TypeError, ValueError, OverflowError):
        pass
    for k, iv in enumerate(items):
        err = _interval_error(k, iv, label)
        if err is not None:
            raise err
    # Every item passed one by one (e.g. integers too large for int64).
    raise InvalidArgument("interval values must fit in 64-bit integers")


_BOOLS = frozenset({bool, np.bool_})


def _check_options(mode: str, capacity: object, time_limit: object) -> None:
    if mode not in MODES:
        raise InvalidArgument(f"mode must be one of {MODES}, got {mode!r}")
    if capacity is not None and (not _is_int(capacity) or int(capacity) <= 0):
        raise InvalidArgument(f"capacity must be a positive integer of bytes, got {capacity!r}")
    if time_limit is not None and (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, (int, float))
        or not time_limit > 0
    ):
        raise InvalidArgument(
            f"time_limit must be a positive number of seconds, got {time_limit!r}"
        )


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True, slots=True)
class _Problem:
    """Validated intervals as numpy arrays; sizes already rounded up to each alignment."""

    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    align: np.ndarray

    @property
    def n(self) -> int:
        return len(self.size)


def _make_problem(arr: np.ndarray, aligns: Sequence[int] | np.ndarray) -> _Problem:
    n = len(arr)
    align = np.broadcast_to(np.asarray(aligns, dtype=np.int64), (n,))
    size = -(-arr[:, 2] // align) * align
    return _Problem(arr[:, 0].copy(), arr[:, 1].copy(), size, align)


def _live_profile(p: _Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compress time to event points; return (times, live bytes per segment, segment ranges).

    Segment ``k`` is ``[times[k], times[k+1])``; an interval covers segments
    ``[seg_lo[i], seg_hi[i])``.
    """
    # One sort of all events gives the distinct times and each event's rank among them
    # (cheaper than np.unique plus two binary searches).
    events = np.concatenate([p.start, p.end])
    by_time = np.argsort(events, kind="stable")
    srt = events[by_time]
    new = np.empty(len(srt), dtype=bool)
    new[:1] = True
    np.not_equal(srt[1:], srt[:-1], out=new[1:])
    times = srt[new]
    rank = np.empty(len(srt), dtype=np.int64)
    rank[by_time] = np.cumsum(new) - 1
    lo, hi = rank[: p.n], rank[p.n :]
    delta = np.zeros(len(times) + 1, dtype=np.int64)
    np.add.at(delta, lo, p.size)
    np.add.at(delta, hi, -p.size)
    live = np.cumsum(delta)[: max(len(times) - 1, 0)]
    return live, lo, hi


def lower_bound(intervals: Iterable[Sequence[int]], alignment: int = 1) -> int:
    """Largest number of bytes live at one time (sizes rounded up to ``alignment``).

    No placement can use a smaller arena, so a plan that meets it is optimal.

    >>> lower_bound([(0, 2, 10), (1, 3, 10), (2, 4, 10)])
    20
    >>> lower_bound([(0, 1, 10)], alignment=256)
    256
    """
    triples = _validate_intervals(intervals)
    align = _check_alignment(alignment, "alignment")
    if not len(triples):
        return 0
    live, _, _ = _live_profile(_make_problem(triples, align))
    return int(live.max()) if len(live) else 0


def _overlaps(p: _Problem) -> tuple[list[int], np.ndarray]:
    """Time-overlap graph in CSR form: neighbours of i are ``cols[ptr[i]:ptr[i+1]]``.

    Built with numpy: sorted by start, interval i overlaps exactly the later-starting j with
    ``start[j] < end[i]`` (their start is >= start[i], and end[j] > start[j] >= start[i]).
    """
    n = p.n
    order = np.argsort(p.start, kind="stable")
    s_sorted = p.start[order]
    stop = np.searchsorted(s_sorted, p.end[order], side="left")
    first = np.arange(1, n + 1)
    count = np.maximum(stop - first, 0)
    total = int(count.sum())
    if total == 0:
        return [0] * (n + 1), np.zeros(0, dtype=np.int64)
    # Pair (a, b) positions in sorted order: a repeated count[a] times, b = a+1 .. stop[a]-1.
    a_pos = np.repeat(np.arange(n), count)
    offs = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    b_pos = a_pos + 1 + offs
    u = order[a_pos]
    v = order[b_pos]
    rows = np.concatenate([u, v])
    cols = np.concatenate([v, u])
    rows = rows.astype(np.int32) if n < 2**31 else rows
    srt = np.argsort(rows, kind="stable")  # timsort: faster here than quicksort
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr.tolist(), cols[srt]


# --------------------------------------------------------------------------------------------
# Heuristic placement
# --------------------------------------------------------------------------------------------
#
# Placement is sequential (each buffer goes into a gap between the already placed buffers that
# overlap it in time), but a buffer's placement depends only on its time neighbours placed
# before it. So a buffer can be placed as soon as every neighbour earlier in the ordering is:
# the placer takes a window of the ordering, places at once ("a wave", one segmented numpy
# scan) every buffer of it that overlaps no earlier buffer of the window, and carries the
# others over to the next window, ahead of the rest of the ordering. This is the level-by-level
# schedule of the dependency DAG (list scheduling; T. C. Hu, "Parallel sequencing and assembly
# line problems", Oper. Res. 9(6), 1961), restricted to a sliding window so that the DAG is
# never built. On random short-lived lifetimes a wave holds hundreds of buffers (before, the
# window was cut at its first overlap: dozens), so the Python overhead is paid per wave, not
# per buffer. Where waves are tiny (every buffer overlaps its successors) it falls back to
# placing one buffer at a time, in Python for few neighbours and in numpy for many. Every path
# computes the same placement as the plain sequential one.

# A batch (or a single buffer) whose neighbour count exceeds this is scanned with numpy instead
# of a Python loop: numpy's per-call overhead pays off from about this many neighbours.
_DENSE = 256

# Start-sorted positions are grouped in chunks of this many for the time index (_TimeIndex).
_CHUNK = 8

# Ordering windows probed for a wave: between these sizes, adapted to the waves found (512
# measured fastest at 100k intervals, against 256, 1024 and 2048).
_WINDOW_MIN = 8
_WINDOW_MAX = 512

# A wave smaller than this means buffers overlap their successors: place the next _STRETCH
# buffers one at a time before probing for a wave again.
_SMALL_BATCH = 4
_STRETCH = 64

# See place_python in _place_with: items whose placement through numpy costs what syncing
# this many items from numpy to Python costs.
_SYNC_RATIO = 128

# Below this many neighbours a batch is sorted with numpy's stable sort (see _place_batch).
_SMALL_SORT = 8192

# Bits of an int64 sort key that packs (wave member, offset, top) in _place_batch; above it
# the wave is sorted with an argsort instead.
_PACK_BITS = 62

# Batches are sorted by (batch member, offset) as one int64 key: member * (arena + 1) + offset.
_KEY_LIMIT = 1 << 62

_Placed = list[tuple[int, int]]


def _ranges(
    lo: np.ndarray, hi: np.ndarray, owner: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``arange(lo[k], hi[k])`` for all k; also return ``owner[k]`` (default k)
    for every element."""
    lens = hi - lo
    total = int(lens.sum())
    seg = np.repeat(np.arange(len(lo)) if owner is None else owner, lens)
    idx = np.arange(total) + np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return idx, seg


class _Csr:
    """Time neighbours from an explicit overlap graph in CSR form (see :func:`_overlaps`)."""

    def __init__(self, ptr: Sequence[int], cols: np.ndarray) -> None:
        self.ptr = list(ptr)
        self.ptr_np = np.asarray(self.ptr, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        self.count = np.diff(self.ptr_np)
        self.rank = np.full(len(self.ptr) - 1, -1, dtype=np.int64)

    def gather(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of ``items`` and, for each, the index in ``items`` it belongs to."""
        idx, seg = _ranges(self.ptr_np[items], self.ptr_np[items + 1])
        return self.cols[idx], seg

    def placed(self, i: int, get: Callable[[int], tuple[int, int] | None]) -> _Placed:
        """(offset, top) of the placed neighbours of ``i``."""
        return list(filter(None, map(get, self.cols[self.ptr[i] : self.ptr[i + 1]].tolist())))


class _TimeIndex:
    """Time neighbours of intervals sorted by start, without materialising the overlap graph.

    With intervals sorted by start, those overlapping interval ``a`` are

    * the later-starting ones: positions ``a + 1 .. stop[a] - 1`` (start before ``a``'s end),
    * the earlier-starting ones still alive at ``a``'s start (``end > start[a]``).

    For the second group positions are grouped in chunks of :data:`_CHUNK`; an earlier
    interval alive at ``start[a]`` either starts in ``a``'s chunk (scan the chunk up to ``a``)
    or is alive at the chunk's first start, i.e. listed in the chunk's crossing set. The
    crossing sets hold about (overlap pairs / chunk) entries in all, so building the index is
    linear plus a sort of that small list, where the full overlap graph needs a sort of every
    pair (O(E log E), 14 M pairs with 1% long-lived buffers among 100k). It is a bucketed
    answer to the stabbing query that interval trees answer in general (H. Edelsbrunner,
    "Dynamic data structures for orthogonal intersection queries", TU Graz report F59, 1980;
    de Berg et al., *Computational Geometry*, 3rd ed., ch. 10).
    """

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        n = len(start)
        g = _CHUNK
        self.start, self.end = start, end
        stop = np.searchsorted(start, end, side="left")  # > position, since end > start
        pos = np.arange(n)
        # Interval p is in the crossing set of chunk k when p < k * g < stop[p].
        k_first = pos // g + 1
        cnt = np.maximum((stop - 1) // g - k_first + 1, 0)
        total = int(cnt.sum())
        ks = np.repeat(k_first - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
        members = np.repeat(pos, cnt)
        chunks = (n + g - 1) // g
        cptr = np.zeros(chunks + 1, dtype=np.int64)
        np.cumsum(np.bincount(ks, minlength=chunks), out=cptr[1:])
        ccols = members[np.argsort(ks, kind="stable")]
        # One pool to gather from: the crossing sets, then the positions themselves.
        self.pool = np.concatenate([ccols, pos])
        base = len(ccols)
        chunk = pos // g
        # Row a: the three ranges of pool positions to scan for interval a.
        self.lo = np.stack([cptr[chunk], base + chunk * g, base + pos + 1], axis=1)
        self.hi = np.stack([cptr[chunk + 1], base + pos, base + stop], axis=1)
        self.count = (self.hi - self.lo).sum(axis=1)  # candidates scanned, >= neighbours
        self.start_l, self.end_l, self.stop_l = start.tolist(), end.tolist(), stop.tolist()
        self.ccols_l, self.cptr_l = ccols.tolist(), cptr.tolist()

    def gather(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of ``items`` and, for each, the index in ``items`` it belongs to."""
        owner = np.repeat(np.arange(len(items)), 3)
        idx, seg = _ranges(self.lo[items].ravel(), self.hi[items].ravel(), owner)
        cand = self.pool[idx]
        keep = self.end[cand] > self.start[items][seg]
        return cand[keep], seg[keep]

    def placed(self, a: int, get: Callable[[int], tuple[int, int] | None]) -> _Placed:
        """(offset, top) of the placed neighbours of ``a``."""
        s = self.start_l[a]
        end = self.end_l
        k = a // _CHUNK
        out = [
            x
            for q in self.ccols_l[self.cptr_l[k] : self.cptr_l[k + 1]]
            if end[q] > s and (x := get(q)) is not None
        ]
        out += [x for q in range(k * _CHUNK, a) if end[q] > s and (x := get(q)) is not None]
        out += filter(None, map(get, range(a + 1, self.stop_l[a])))
        return out


def _place(
    order: Sequence[int],
    size: list[int],
    align: list[int],
    ptr: Sequence[int],
    cols: np.ndarray,
    best_fit: bool,
    dense: int = _DENSE,
) -> tuple[list[int], int]:
    """Place intervals in ``order`` with their time neighbours given as a CSR overlap graph.

    See :func:`_place_with`; ``dense=-1`` forces every scan through numpy and a huge ``dense``
    forces the plain Python scan (they must agree).
    """
    return _place_with(
        _Csr(ptr, cols), np.asarray(order, dtype=np.int64), size, align, best_fit, dense
    )


class _Placer:
    """One ordering's placement state for :func:`_place_many` (first or best fit)."""

    def __init__(
        self,
        nb: _Csr | _TimeIndex,
        size: list[int],
        align: list[int],
        size_np: np.ndarray,
        align_np: np.ndarray,
        best_fit: bool,
        dense: int,
    ) -> None:
        n = len(size)
        self.nb, self.size, self.align, self.best_fit, self.dense = nb, size, align, best_fit, dense
        self.size_np, self.align_np = size_np, align_np
        self.uniform = int(align_np[0]) if n and (align_np == align_np[0]).all() else 0
        # Offsets and tops are sums of sizes and multiples of alignments: multiples of the
        # lowest bit set in any of them (a power of two), which packed sort keys may drop.
        low = int(np.bitwise_or.reduce(size_np | align_np)) if n else 1
        self.unit = ((low & -low) or 1).bit_length() - 1
        # (offset, top) of each placed interval, None while unplaced: the Python scan collects
        # the placed neighbours with filter/map at C speed. The numpy scan reads off_np/top_np;
        # its results reach placed_at only when a Python scan is next (most large runs never
        # need it).
        self.placed_at: list[tuple[int, int] | None] = [None] * n
        self.unsynced: list[np.ndarray] = []
        self.pending = 0  # items in unsynced
        self.instead = 0  # numpy placements made instead of syncing them
        self.off_np = np.full(n, -1, dtype=np.int64)
        self.top_np = np.zeros(n, dtype=np.int64)
        self.count = nb.count.tolist()
        self.arena = 0

    def place_numpy(self, items: np.ndarray, cand: np.ndarray, seg: np.ndarray) -> None:
        res = _place_batch(
            items,
            cand,
            seg,
            self.off_np,
            self.top_np,
            self.size_np,
            self.align_np,
            self.uniform,
            self.best_fit,
            self.arena,
            self.unit,
        )
        top = res + self.size_np[items]
        self.off_np[items] = res
        self.top_np[items] = top
        self.arena = max(self.arena, int(top.max()))
        self.unsynced.append(items)
        self.pending += len(items)

    def place_python(self, j: int) -> None:
        # Syncing costs about as much per item as a numpy placement costs per _SYNC_RATIO
        # items: while more are pending, place through numpy and count the cost, so that a
        # few stragglers after a big wave do not pay for copying the whole arena.
        few = self.count[j] <= self.dense
        if not few or self.pending > _SYNC_RATIO * (self.instead + 1):
            self.instead += few
            one = np.array([j], dtype=np.int64)
            self.place_numpy(one, *self.nb.gather(one))
            return
        placed_at = self.placed_at
        if self.unsynced:
            items = np.concatenate(self.unsynced)
            self.unsynced.clear()
            self.pending = self.instead = 0
            for k, o, t in zip(
                items.tolist(),
                self.off_np[items].tolist(),
                self.top_np[items].tolist(),
                strict=True,
            ):
                placed_at[k] = (o, t)
        sz = self.size[j]
        a = self.align[j]
        placed = self.nb.placed(j, placed_at.__getitem__)
        placed.sort()
        cand = 0
        if self.best_fit:
            best = -1
            best_gap = 0
            for o, t in placed:
                gap = o - cand
                if gap >= sz and (best < 0 or gap < best_gap):
                    best, best_gap = cand, gap
                if t > cand:
                    cand = t if a == 1 else -(-t // a) * a
            if best >= 0:
                cand = best
        else:
            for o, t in placed:
                if o - cand >= sz:
                    break
                if t > cand:
                    cand = t if a == 1 else -(-t // a) * a
        placed_at[j] = (cand, cand + sz)
        self.off_np[j] = cand
        self.top_np[j] = cand + sz
        if cand + sz > self.arena:
            self.arena = cand + sz


def _place_with(
    nb: _Csr | _TimeIndex,
    order: np.ndarray,
    size: list[int],
    align: list[int],
    best_fit: bool,
    dense: int = _DENSE,
) -> tuple[list[int], int]:
    """Place intervals in ``order``; each goes into a gap between already placed neighbours.

    First fit takes the lowest gap that is large enough (TFLite); best fit the smallest such
    gap (XLA), lowest on ties; with no gap the interval goes on top of its neighbours. Only the
    time-overlapping neighbours (from ``nb``) are scanned, O(d log d) for d neighbours. Waves
    (the intervals of a window of the ordering that overlap no earlier interval of it, see the
    section comment) are placed together by :func:`_place_batch` when they have more than
    ``dense`` neighbours in all; single intervals with more than ``dense`` candidate
    neighbours go through it alone; the rest through Python.
    """
    ((off, arena),) = _place_many(nb, order, size, align, (best_fit,), dense)
    return off, arena


def _place_many(
    nb: _Csr | _TimeIndex,
    order: np.ndarray,
    size: list[int],
    align: list[int],
    fits: Sequence[bool],
    dense: int = _DENSE,
) -> list[tuple[list[int], int]]:
    """:func:`_place_with` for one ordering and several fits (best fit when True) at once.

    The waves depend only on the ordering, so the neighbours are gathered and the waves found
    once for all fits (first and best fit by size share their ordering).
    """
    n = len(size)
    size_np = np.asarray(size, dtype=np.int64)
    align_np = np.asarray(align, dtype=np.int64)
    placers = [_Placer(nb, size, align, size_np, align_np, bf, dense) for bf in fits]
    count = placers[0].count if placers else []
    i = 0
    width = _WINDOW_MIN * 4
    stretch = 0
    # Items of the ordering taken into a window but not placed yet (they overlap an earlier
    # unplaced one), in order; they come before order[i:].
    pool = order[:0]
    rank = np.full(n, n, dtype=np.int64)
    while i < n or len(pool):
        if stretch or (max(pl.arena for pl in placers) + 1) * width >= _KEY_LIMIT:
            # One at a time, in order: the waiting items first, as they come earlier. An item
            # with many neighbours would go through numpy anyway: a wave costs no more.
            j = int(pool[0]) if len(pool) else int(order[i])
            if count[j] <= dense or not stretch:
                pool, i = (pool[1:], i) if len(pool) else (pool, i + 1)
                for pl in placers:
                    pl.place_python(j)
                stretch = max(stretch - 1, 0)
                continue
            stretch = 0
        take = max(width - len(pool), 0)
        win = np.concatenate([pool[:width], order[i : i + take]])
        rest = pool[width:]
        i = min(i + take, n)
        # An item waits when a time neighbour comes before it in the window (the neighbours
        # are gathered anyway, for placing): rank is the position in the window, n outside.
        cand, seg = nb.gather(win)
        rank[win] = np.arange(len(win))
        blocked = seg[rank[cand] < seg]
        rank[win] = n
        # Only placed neighbours matter, and every placer has placed the same items.
        keep = placers[0].off_np[cand] >= 0
        if len(blocked):
            free = np.ones(len(win), dtype=bool)
            free[blocked] = False
            items = win[free]
            pool = np.concatenate([win[~free], rest])
            keep &= free[seg]
            cand, seg = cand[keep], (np.cumsum(free) - 1)[seg[keep]]
        else:
            items, pool = win, rest
            cand, seg = cand[keep], seg[keep]
        for pl in placers:
            if len(cand) > dense:
                pl.place_numpy(items, cand, seg)
            else:
                for j in items.tolist():
                    pl.place_python(j)
        if len(items) < _SMALL_BATCH and len(win) >= _WINDOW_MIN:
            stretch = _STRETCH
        width = min(max(2 * len(items), _WINDOW_MIN), _WINDOW_MAX)
    return [(pl.off_np.tolist(), pl.arena) for pl in placers]


def _place_batch(
    items: np.ndarray,
    cand: np.ndarray,
    seg: np.ndarray,
    off_np: np.ndarray,
    top_np: np.ndarray,
    size_np: np.ndarray,
    align_np: np.ndarray,
    uniform: int,
    best_fit: bool,
    arena: int,
    unit: int = 0,
) -> np.ndarray:
    """Offsets for time-disjoint ``items`` whose neighbours are ``cand`` (``seg`` = which item).

    The Python scan of :func:`_place_with` for all items at once: sort each item's placed
    neighbours by offset, take the running maximum of their tops (segmented by shifting each
    item's tops by ``item * (arena + 1)``), and look for the first (or smallest) gap.
    ``uniform`` is the alignment shared by all intervals, or 0 when they differ; every offset
    and top is a multiple of ``2**unit``.
    """
    res = np.zeros(len(items), dtype=np.int64)
    o = off_np[cand]
    placed = o >= 0
    if not placed.all():  # the wave loop passes placed neighbours only
        o, cand, seg = o[placed], cand[placed], seg[placed]
    if not len(o):
        return res
    t = top_np[cand]
    sg = seg
    bits = (arena >> unit).bit_length()
    if (len(items) - 1).bit_length() + 2 * bits <= _PACK_BITS:
        # Pack (item, offset, top) into one int64 and sort the values: no argsort and no
        # gathers to permute three arrays (ties in offset go by top, which is fine).
        mask = (1 << bits) - 1
        key = sg << (2 * bits)
        key |= (o >> unit) << bits
        key |= t >> unit
        key.sort()
        sg = key >> (2 * bits)
        o = (key >> bits) & mask
        o <<= unit
        shift = sg << bits
        run = key & mask
        run |= shift
        np.maximum.accumulate(run, out=run)
        run -= shift
        run <<= unit
    else:
        shift = sg * (arena + 1)  # offsets and tops are <= arena, so keys do not mix items
        # Equal offsets may come in any order (only the first can start a gap); numpy's
        # stable (radix/tim) sort is the faster one on small arrays, quicksort on large ones.
        idx = np.argsort(shift + o, kind="stable" if len(o) < _SMALL_SORT else "quicksort")
        o, t, sg, shift = o[idx], t[idx], sg[idx], shift[idx]
        run = np.maximum.accumulate(t + shift)
        run -= shift
    first = np.empty(len(sg), dtype=bool)
    first[0] = True
    np.not_equal(sg[1:], sg[:-1], out=first[1:])
    start = np.empty_like(run)  # the free space before each neighbour starts here
    start[0] = 0
    start[1:] = run[:-1]
    start[first] = 0
    last = np.empty_like(first)
    last[-1] = True
    last[:-1] = first[1:]
    sl = sg[last]
    top = run[last]
    # Round up to the (power of two) alignment with a mask: int64 division is slow.
    if uniform == 0:
        a = align_np[items][sg]
        start += a - 1
        start &= -a
        al = align_np[items][sl]
        top += al - 1
        top &= -al
    elif uniform > 1:
        start += uniform - 1
        start &= -uniform
        top += uniform - 1
        top &= -uniform
    res[sl] = top  # no gap: on top of the neighbours
    gap = o - start
    fits = np.flatnonzero(gap >= size_np[items][sg])
    if len(fits):
        fs = sg[fits]  # sorted, as sg is
        firsts = np.empty(len(fs), dtype=bool)
        firsts[0] = True
        np.not_equal(fs[1:], fs[:-1], out=firsts[1:])
        if best_fit:
            # Smallest gap per item, the lowest one on ties: keep the fits whose gap is their
            # item's minimum, then the first of those per item.
            g = gap[fits]
            heads = np.flatnonzero(firsts)
            least = np.minimum.reduceat(g, heads)
            best = np.flatnonzero(g == least[np.cumsum(firsts) - 1])
            fits, fs = fits[best], fs[best]
            firsts = np.empty(len(fs), dtype=bool)
            firsts[0] = True
            np.not_equal(fs[1:], fs[:-1], out=firsts[1:])
        res[fs[firsts]] = start[fits[firsts]]
    return res


def _section_total(
    p: _Problem, profile: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Per interval: the most bytes live at any moment of its lifetime (MiniMalloc's "total").

    ``profile`` is :func:`_live_profile` of ``p`` when the caller has it already.
    """
    live, lo, hi = _live_profile(p) if profile is None else profile
    if len(live) == 0:
        return np.zeros(p.n, dtype=np.int64)
    # Sparse table for range-maximum queries over the live profile, all in numpy.
    table = [live]
    k = 1
    while 2 * k <= len(live):
        prev = table[-1]
        table.append(np.maximum(prev[:-k], prev[k:]))
        k *= 2
    length = hi - lo
    lvl = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.zeros(p.n, dtype=np.int64)
    for j, row in enumerate(table):
        sel = lvl == j
        if sel.any():
            w = 1 << j
            out[sel] = np.maximum(row[lo[sel]], row[hi[sel] - w])
    return out


# Candidate orderings: name -> (sort keys, most significant last as np.lexsort wants; best_fit).
# All keys are descending (negated); the input index breaks ties, so results are deterministic.
_Keys = Callable[[_Problem, np.ndarray], list[np.ndarray]]
_ORDERINGS: dict[str, tuple[_Keys, bool]] = {
    # TFLite's greedy by size (arena planner, GPU delegate): size descending, best fit.
    "greedy_by_size": (lambda p, tot: [-p.size], True),
    # TFLite Micro's GreedyMemoryPlanner: size descending, first fit.
    "first_fit_size": (lambda p, tot: [-p.size], False),
    # XLA "spatial": size then lifetime length, best fit.
    "best_fit_size": (lambda p, tot: [-(p.end - p.start), -p.size], True),
    # XLA "temporal": lifetime length then size, best fit.
    "best_fit_length": (lambda p, tot: [-p.size, -(p.end - p.start)], True),
    # Area (bytes x steps), the order MiniMalloc uses to break ties.
    "best_fit_area": (lambda p, tot: [-(p.end - p.start) * p.size], True),
    "first_fit_area": (lambda p, tot: [-(p.end - p.start) * p.size], False),
    # MiniMalloc's static preorder: the most crowded moment a buffer lives through, then area.
    "best_fit_total": (lambda p, tot: [-(p.end - p.start) * p.size, -tot], True),
    "first_fit_total": (lambda p, tot: [-(p.end - p.start) * p.size, -tot], False),
    # An online best-fit allocator: buffers in start order (ties in input, i.e. issue,
    # order), each into the smallest gap among the buffers live then. On MobileNetV2's
    # one-order lifetimes it needs 1.074x the bound where greedy by size needs 1.487x.
    "best_fit_start": (lambda p, tot: [p.start], True),
}
# The candidates up to _MANY_INTERVALS. XLA's temporal ordering (best_fit_length) is left out:
# over MiniMalloc's 5 instances, 48 random inputs of 1k-100k intervals (bench/memory_bench.py
# --orderings) and the safe and live intervals of 27 synthetic graphs (layered, transformer and
# random op DAGs of 200-3,000 nodes on 1, 2 and 4 streams) it was never the only best (tied in
# 33 of the 54 graph cases, never on the others), and it costs a placement pass.
_DEFAULT = tuple(name for name in _ORDERINGS if name != "best_fit_length")

# The large-input pair, measured over MiniMalloc's instances and random inputs of 1k-100k
# intervals with 0-5% long-lived ones: first_fit_size beat best_fit_length in 47 of 52 (100k,
# 1% long-lived: 0.884x greedy's arena against 0.929x). The MiniMalloc preorder wins more
# often still (0.865x there) but groups buffers that share their most crowded moment, which
# all overlap: they must be placed one after another, about 3x slower at 100k.
_CHEAP = ("greedy_by_size", "first_fit_size", "best_fit_start")


# Orderings that sort by the same keys (they differ in first or best fit): name -> the first
# such name, so that _heuristic places them in one pass over the ordering.
_KEYS_OF = {
    "first_fit_size": "greedy_by_size",
    "first_fit_area": "best_fit_area",
    "first_fit_total": "best_fit_total",
}


def _order(p: _Problem, name: str, tot: np.ndarray) -> np.ndarray:
    keys, _ = _ORDERINGS[name]
    return np.lexsort([np.arange(p.n), *keys(p, tot)])


def _heuristic(
    p: _Problem,
    names: Sequence[str] | None = None,
    profile: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[list[int], int, str]:
    """Best placement over the orderings ``names`` (default: :data:`_DEFAULT`, or
    :data:`_CHEAP` for many intervals): offsets in input order, arena and the winning ordering's name.

    With ``profile`` (:func:`_live_profile` of ``p``) it stops at the first ordering whose
    arena meets the lower bound: no other can beat it.
    """
    if p.n == 0:
        return [], 0, "empty"
    # Work on start-sorted positions: the time index is built once and shared by every
    # candidate ordering; offsets are mapped back to input order at the end.
    perm = np.argsort(p.start, kind="stable")
    inv = np.empty(p.n, dtype=np.int64)
    inv[perm] = np.arange(p.n)
    index = _TimeIndex(p.start[perm], p.end[perm])
    size = p.size[perm].tolist()
    align = p.align[perm].tolist()
    if names is None:
        names = _DEFAULT if p.n <= _MANY_INTERVALS else _CHEAP
    needs_total = any(n.endswith("_total") for n in names)
    tot = _section_total(p, profile) if needs_total else np.zeros(0, dtype=np.int64)
    lb = int(profile[0].max()) if profile is not None and len(profile[0]) else -1
    best: tuple[list[int], int, str] | None = None
    # Orderings with the same sort keys (first and best fit) are placed together; the first
    # of ``names`` with the smallest arena wins, as if they ran one by one.
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(_KEYS_OF.get(name, name), []).append(name)
    done: dict[str, tuple[list[int], int]] = {}
    for name in names:
        if name not in done:
            group = groups[_KEYS_OF.get(name, name)]
            order = inv[_order(p, name, tot)]
            fits = [_ORDERINGS[nm][1] for nm in group]
            done.update(zip(group, _place_many(index, order, size, align, fits), strict=True))
        off, arena = done[name]
        if best is None or arena < best[1]:
            best = (off, arena, name)
        if arena <= lb:
            break
    assert best is not None
    off, arena, name = best
    return np.asarray(off, dtype=np.int64)[inv].tolist(), arena, name


def greedy_by_size(intervals: Iterable[Sequence[int]], alignment: int = 1) -> IntervalPlan:
    """TFLite's greedy-by-size planner: largest first, each into the smallest gap that fits.

    Buffers are sorted by size, descending (stable, so ties keep input order). Each goes into
    the smallest gap, between the already placed buffers that overlap it in time, that holds
    it (the lowest such gap on ties), or on top of them when none does. This is the baseline
    every heuristic plan must match or beat; it reproduces the TFLite numbers published with
    the MiniMalloc benchmarks (e.g. 1,374,208 bytes on instance A). TFLite Micro's variant
    takes the lowest gap instead (first fit); it is candidate ``"first_fit_size"``.

    References
    ----------
    Y. Pisarchyk and J. Lee, "Efficient Memory Management for Deep Neural Net Inference",
    arXiv:2001.03288 (2020), "greedy by size for offset calculation"; TFLite
    ``SimpleMemoryArena``; TFLite Micro ``GreedyMemoryPlanner``.

    >>> greedy_by_size([(0, 2, 32), (1, 3, 64), (2, 4, 32)]).offsets
    (64, 0, 64)
    """
    t0 = time.perf_counter()
    triples = _validate_intervals(intervals)
    align = _check_alignment(alignment, "alignment")
    p = _make_problem(triples, align)
    off, arena, _ = _heuristic(p, ("greedy_by_size",))
    return _result(p, off, arena, "greedy_by_size", None, t0)


def _result(
    p: _Problem,
    off: Sequence[int],
    arena: int,
    strategy: str,
    capacity: int | None,
    t0: float,
    *,
    proved: bool = False,
    message: str | None = None,
    nodes: int = 0,
    lb: int | None = None,
    proved_bound: int | None = None,
    stopped_early: bool = False,
) -> IntervalPlan:
    if lb is None:
        live, _, _ = _live_profile(p) if p.n else (np.zeros(0, dtype=np.int64), None, None)
        lb = int(live.max()) if len(live) else 0
    fits = None if capacity is None else arena <= capacity
    if fits is False and message is None and capacity is not None and lb > capacity:
        message = (
            f"no plan fits in capacity {capacity} bytes: {lb} bytes are live at one time (the "
            f"lower bound); raise the capacity to at least {lb}"
        )
    if fits is False and message is None:
        message = (
            f"no plan within capacity {capacity} bytes found: best arena is {arena} bytes "
            f"(lower bound {lb}); raise the capacity or use mode='exact' with a longer time_limit"
        )
    return IntervalPlan(
        offsets=tuple(int(o) for o in off),
        arena_bytes=int(arena),
        lower_bound=lb,
        optimal=bool(proved or arena == lb),
        ratio=(arena / lb) if lb else 1.0,
        seconds=time.perf_counter() - t0,
        strategy=strategy,
        fits=fits,
        message=message,
        nodes=nodes,
        proved_bound=int(arena if proved else max(lb, proved_bound or 0)),
        stopped_early=stopped_early,
    )


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def plan_intervals(
    intervals: Iterable[Sequence[int]],
    *,
    mode: str = "heuristic",
    alignment: int = 1,
    capacity: int | None = None,
    time_limit: float | None = None,
) -> IntervalPlan:
    """Assign arena offsets to ``(start, end, size)`` intervals with half-open lifetimes.

    Parameters
    ----------
    intervals : iterable of (int, int, int)
        ``[start, end)`` lifetime in steps and size in bytes of each buffer.
    mode : {"heuristic", "exact", "auto"}
        ``"heuristic"``: best of several greedy orderings (fast; never worse than TFLite's
        greedy-by-size or an online best fit). ``"exact"``: MiniMalloc's branch-and-bound from
        the heuristic plan. ``"auto"``: the exact search within :func:`auto_time_limit`.
    alignment : int
        Power of two; sizes are rounded up to it and every offset is a multiple of it.
    capacity : int, optional
        Arena size the plan must fit in. The exact mode then searches for any plan that fits;
        without it, it minimises the arena toward the lower bound. When no fitting plan is found
        (heuristic mode, or the time limit ran out) the best plan is still returned, with
        ``fits=False`` and a ``message`` saying so: nothing is raised.
    time_limit : float, optional
        Seconds the exact mode may search (default :data:`DEFAULT_TIME_LIMIT`; for
        ``"auto"``, :func:`auto_time_limit` of the number of intervals).

    Returns
    -------
    IntervalPlan

    Raises
    ------
    InvalidArgument
        A size <= 0, ``end <= start``, a non-integer field (naming the interval's index), an
        alignment that is not a power of two, an unknown mode, or a bad capacity/time limit.

    References
    ----------
    See the module docstring (TFLite, XLA, MiniMalloc).

    Examples
    --------
    >>> plan = plan_intervals([(0, 4, 100), (2, 6, 50)], alignment=64)
    >>> plan.offsets, plan.arena_bytes
    ((0, 128), 192)
    >>> plan_intervals([(0, 2, 3), (1, 3, 3), (0, 3, 2)], mode="exact").optimal
    True
    """
    triples = _validate_intervals(intervals)
    align = _check_alignment(alignment, "alignment")
    return _plan(triples, align, mode, capacity, time_limit)


def _plan(
    triples: np.ndarray,
    aligns: Sequence[int] | int,
    mode: str,
    capacity: int | None,
    time_limit: float | None,
) -> IntervalPlan:
    _check_options(mode, capacity, time_limit)
    t0 = time.perf_counter()
    p = _make_problem(triples, aligns)
    profile = _live_profile(p) if p.n else None
    off, arena, strategy = _heuristic(p, profile=profile)
    lb = int(profile[0].max()) if profile is not None and len(profile[0]) else 0
    if mode == "heuristic":
        return _result(p, off, arena, strategy, capacity, t0, lb=lb)
    from oxiwork.optimizer import _minimalloc

    if time_limit is not None:
        limit = float(time_limit)
    else:
        limit = DEFAULT_TIME_LIMIT if mode == "exact" else auto_time_limit(p.n)
    # auto keeps its plans: only the exact mode's long minimisations (LNS_MIN_SECONDS)
    lns = mode == "exact" and limit >= LNS_MIN_SECONDS
    return _minimalloc.improve(p, off, arena, strategy, capacity, t0, t0 + limit, lns=lns)


def plan_buffers(
    sizes: Mapping[int, int],
    alignments: Mapping[int, int],
    lifetimes: Mapping[int, tuple[int, int]],
    *,
    mode: str = "heuristic",
    time_limit: float | None = None,
    capacity: int | None = None,
) -> MemoryPlan:
    """Plan the buffers named in ``lifetimes``, honouring each one's alignment.

    The graph-level memory pass calls this with the liveness analysis' intervals. Each buffer's
    size is rounded up to its alignment and its offset is a multiple of it; with mixed
    alignments a buffer goes at the next aligned offset above its neighbours.

    Parameters
    ----------
    sizes : Mapping[int, int]
        Buffer id -> size in bytes (> 0). Must contain every id in ``lifetimes``.
    alignments : Mapping[int, int]
        Buffer id -> alignment (power of two); missing ids get :data:`DEFAULT_ALIGNMENT`.
    lifetimes : Mapping[int, tuple[int, int]]
        Buffer id -> half-open ``[start, end)`` step interval. Only these buffers are planned
        (dead buffers have no lifetime and need no memory).
    mode, time_limit, capacity
        As in :func:`plan_intervals`.

    Returns
    -------
    MemoryPlan

    Raises
    ------
    InvalidArgument
        A buffer with no size, a bad size or lifetime, or an alignment that is not a power of
        two (the message names the buffer id).

    References
    ----------
    See the module docstring.

    Examples
    --------
    >>> plan = plan_buffers({1: 1000, 2: 10}, {2: 64}, {1: (0, 2), 2: (1, 3)})
    >>> dict(plan.offsets), plan.arena_bytes
    ({1: 0, 2: 1024}, 1088)
    """
    for what, m in (("sizes", sizes), ("alignments", alignments), ("lifetimes", lifetimes)):
        if not isinstance(m, Mapping):
            raise InvalidArgument(
                f"{what} must be a dict keyed by buffer id, got {type(m).__name__}"
            )
    ids = list(lifetimes)
    aligns: list[int] = []
    rows: list[object] = []
    for bid in ids:
        if bid not in sizes:
            raise InvalidArgument(
                f"buffer {bid} has a lifetime but no size; pass its size in bytes in `sizes`"
            )
        align = alignments.get(bid, DEFAULT_ALIGNMENT)
        aligns.append(_check_alignment(align, f"alignment of buffer {bid}"))
        lt = lifetimes[bid]
        try:
            start, end = lt
        except (TypeError, ValueError):
            raise InvalidArgument(
                f"lifetime of buffer {bid} must be a (start, end) pair, got {lt!r}"
            ) from None
        rows.append((start, end, sizes[bid]))
    triples = _validate_intervals(rows, label=lambda k: f"buffer {ids[k]}")
    plan = _plan(triples, aligns, mode, capacity, time_limit)
    rounded = [_round_up(int(t[2]), a) for t, a in zip(triples, aligns, strict=True)]
    return MemoryPlan(
        offsets=dict(zip(ids, plan.offsets, strict=True)),
        sizes=dict(zip(ids, rounded, strict=True)),
        lifetimes={bid: (int(t[0]), int(t[1])) for bid, t in zip(ids, triples, strict=True)},
        arena_bytes=plan.arena_bytes,
        lower_bound=plan.lower_bound,
        optimal=plan.optimal,
        ratio=plan.ratio,
        seconds=plan.seconds,
        strategy=plan.strategy,
        mode=mode,
        fits=plan.fits,
        message=plan.message,
        nodes=plan.nodes,
        proved_bound=plan.proved_bound,
        stopped_early=plan.stopped_early,
    )
