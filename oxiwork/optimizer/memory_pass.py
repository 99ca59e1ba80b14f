"""The graph-level memory pass: place every arena buffer so that the stream schedule is safe.

Two buffers may share bytes only if every access of one happens before every access of
the other, where "happens before" is what the GPU enforces: stream order plus event
record -> wait pairs (graph edges order nothing by themselves). Plain liveness over one
topological order is not enough once nodes run on several streams: a buffer that is dead
"after step 7" of the issue order may still be in use by a concurrent stream.

Ordering test. Take the issue order ``L`` (:func:`oxiwork.optimizer.stream.issue_order`:
a topological order consistent with every stream, sorted by simulated start time so that
the streams advance together) and the vector clocks of
:mod:`oxiwork.analysis.happens_before` (``clock[x][s]``: the last position on stream ``s``
that happens before or equals ``x``). For a buffer ``i`` with accesses ``A_i`` let

* ``last_i[s]``: the last position on stream ``s`` of an access (``-1`` if none), i.e.
  ``access_clock(A_i)``;
* ``from_i[s]``: ``min`` over ``b`` in ``A_i`` of ``clock[b][s]``, lowered to
  ``first_i[s] - 1`` where ``first_i[s]`` is the first position of an access on ``s``.

Every access of ``i`` happens strictly before every access of ``j`` iff
``from_j[s] >= last_i[s]`` for every stream ``s``. Indeed ``a`` happens before ``b``
(``a != b``) iff ``clock[b][stream(a)] >= position(a)``, which over all pairs is
``min_b clock[b][s] >= last_i[s]``; and given that, the two access sets are disjoint iff
``first_j[s] > last_i[s]`` (a shared node on ``s`` would sit at or before ``last_i[s]``, and
an access ``b`` of ``j`` at exactly ``last_i[s]`` is that shared node). So two buffers may
share bytes iff one's ``from`` dominates the other's ``last``: an S-dimensional dominance
test, vectorised with numpy over all placed buffers at once.

Safe intervals. For a buffer, ``first`` is the smallest index in ``L`` of an access and
``end`` the smallest index such that every node at or after it in ``L`` happens strictly
after all accesses. Per stream the clocks never decrease, so the stream's first node past
the accesses is the largest of one ``searchsorted`` per clock component (each component's
condition is monotone along the stream); the nodes of that stream before it must lie before
``end``. If two intervals are disjoint, say ``end_1 <= first_2``, every access of buffer 2
is strictly after all of buffer 1's: they are ordered. On one stream ``end`` is the last
access + 1, i.e. plain liveness.

Placement. Two plans are made and the smaller arena wins; both are safe.

1. The exact placement: buffers in up to three orders (by first access, by
   conflict-weighted degree, by safe-interval length), each into the best-fitting aligned
   gap among the placed buffers it conflicts with (the best fit of XLA's heap simulator,
   over happens-before conflicts instead of time overlaps). In first-access order a placed
   buffer whose safe interval ended before the current buffer's first access is ordered
   before it and every later one, so it is dropped from the scan: that ordering tests only
   the pairs of overlapping safe intervals, yet meets every conflicting pair, so it also
   yields each buffer's conflict-weighted degree (the total size of the buffers it may be
   live with). The first-access ordering always runs; the others only while the pairs they
   test are at most :data:`MAX_EXACT_PAIRS` (all pairs: ``O(n**2 S)`` element operations)
   and no earlier ordering met the lower bound. Above that many pairs the first-access
   ordering runs as a sweep that lists no pairs (:func:`_place_sweep`: per stream, the free
   runs of bytes whose last owner that stream has passed; ``O(n S log n)``), with the same
   offsets wherever it was compared with the pairwise test (the layered and transformer
   examples of 1k-30k nodes, 4 streams); the conflicting pairs are then not counted.
2. The interval plan: :func:`oxiwork.optimizer.memory.plan_buffers` on the safe intervals.
   The intervals are conservative on several streams (``end`` waits until *every* stream
   has synchronised past the buffer), so where they overlap a lot their plan is poor and
   slow; it is skipped when more than :data:`MAX_INTERVAL_PAIRS` interval pairs overlap
   or when the placement already meets the lower bound (nothing beats it), unless
   ``mode="exact"``.
3. The conflict search (modes ``"auto"`` and ``"exact"``, up to
   :data:`MAX_SEARCH_BUFFERS` buffers, run when the placement misses the lower bound,
   within the search's time limit): a depth-first search over the placements in canonical
   form (:func:`_search_placement`): turns that decide whether the lowest arena not yet
   ruled out fits, and turns that descend from the placement's arena. It ends when it
   meets the lower bound, runs out of time (``stopped_early``), or has tried every
   canonical placement below its best arena, which proves it minimal; ``lower_bound`` is
   raised to what it ruled out. On 75 zoo models of tests/importers/test_torch_zoo.py on
   2, 4 and 8 streams (``bench/zoo_memory.py``) the default plan meets the bound on all 225,
   where a plain descent from the placement met it on 198.

Measured on the fused, stream-assigned ``examples.synthetic(n, "layered", 0)`` (4 streams),
arena / conflict lower bound and pass CPU seconds (best of 5, ``bench/memory_bench.py
--pass-only --baseline REV``), one run on a shared 2-core machine: 1k nodes 1.025 (0.21 s,
0.16 s before the conflict bound and ordering: the clique search and the extra ordering),
10k 1.009 (0.43 s against 0.41 s). Earlier, against the liveness bound:
1k nodes 1.07 (0.10 s), 5k 1.02 (0.17 s), 10k 1.01 (0.43 s). With the ordering by size as
well and the length ordering up to 40M pairs (same arenas): 0.14 s, 0.47 s and 1.23 s; at
100k that version took 26 s (1.01). Before that (a Python conflict list capped at 4M pairs,
the interval plan always run): 1.03 (0.6 s), 1.83 (4.1 s), 1.81 (16.7 s), 1.79 (358 s, and
up to 23 GB in the interval planner's overlap graph). The placement is ``O(conflicting pairs
x S)``: at 10k most of the time goes to the 15M unordered pairs the first-access ordering
meets, at 100k to 1.5 billion.

Lower bounds. Call two buffers *in conflict* when neither is ordered before the other. A
safe placement gives buffers in conflict disjoint bytes, so the total size of any clique of
the conflict graph -- buffers pairwise in conflict -- is a lower bound on every safe arena:
the clique's ranges are pairwise disjoint inside ``[0, arena)``. Sizes are rounded up to the
buffer's alignment, as every planner here reserves them (and the arena counts them), so the
bounds are over such placements.

* ``liveness_lower_bound``: the most bytes live at once under plain liveness over ``L``.
  The buffers live at one index ``t`` form a clique: if every access of ``i`` happened
  before every access of ``j``, ``L`` (topological, and happens-before implies edge order)
  would put ``last_i < first_j``, while both live at ``t`` gives ``first_j <= t <= last_i``;
  a node at ``t`` accessing both is not ordered with itself.
* ``conflict_lower_bound``: a heavier clique when several streams run at once (buffers of
  concurrent streams conflict without being live at one index of ``L``). Buffers in
  conflict have overlapping safe intervals (disjoint ones are ordered), so by Helly's
  theorem every clique lies in the set ``P(t)`` of safe intervals containing some step
  ``t``, whose weight (the safe-interval profile at ``t``) bounds the clique. The search
  visits the steps ``t = end - 1`` (where ``P(t)`` is maximal) by decreasing profile, builds
  ``P(t)``'s conflict matrix and runs the greedy for maximum-weight clique twice (from
  nothing, and from the buffers live at ``t``); it stops once the profile is no heavier
  than the best clique (that clique is then a maximum one). Caps: at most
  :data:`MAX_CLIQUE_STEPS` steps are visited, and a step whose matrix would take the
  entries built past :data:`MAX_CLIQUE_PAIRS` is skipped, so the search costs
  ``O(n log n + MAX_CLIQUE_STEPS n + MAX_CLIQUE_PAIRS S)`` (it does nothing beyond the
  profiles on the 10k-node layered example, whose sets ``P(t)`` hold thousands). The clique
  of the liveness peak is the fallback, so the bound is never below the liveness bound,
  and by the same Helly argument never above ``interval_lower_bound``.

  On several streams, when the placement misses the greedy bound and at most
  :data:`MAX_ANTICHAIN_PAIRS` safe-interval pairs overlap, the exact maximum-weight clique
  is computed too (:func:`_max_antichain`): "``i``'s accesses all happen before ``j``'s" is
  a strict partial order, the conflict graph its incomparability graph, so a maximum clique
  is a maximum-weight antichain, one maximum flow (weighted Dilworth).
  ``conflict_lower_bound`` is the heavier of the two, so it is exact whenever the flow ran,
  on one stream (the liveness peak is a maximum clique of intervals) and when the arena
  meets it; it may be the greedy clique's, below the maximum, only above that size (the flow is pure-Python networkx: about 2 s on the
  fused 1k-node layered example's 210k overlapping pairs, where the greedy takes 0.04 s).
  On that example (2 and 4 streams) the exact bound is 3.3% and 2.5% above the greedy one.

``lower_bound`` (and ``ratio``, ``optimal``) use the larger, i.e. the conflict bound.
On ``examples.transformer_block()`` (298 nodes, 161 arena buffers) with ``max_streams`` 1,
2, 4, 8 the liveness bound is 96 KiB throughout while the conflict bound is 96, 104, 112 and
112 KiB -- each a maximum clique (checked against networkx's exact search) and each met by
the arena; before the conflict-degree ordering the arenas were 96, 104, 160 and 128 KiB.

External buffers are never placed; buffers no node touches get offset 0 (they need no
memory and nothing can race on them).

References
----------
* L. Lamport, CACM 1978; C. J. Fidge 1988; F. Mattern 1989 (happens-before, vector clocks).
* L. R. Ford, D. R. Fulkerson, "Flows in Networks", 1962 (Dilworth's theorem by flows);
  R. H. Moehring, "Algorithmic aspects of comparability graphs and interval graphs", 1985.
* E. Helly 1923 (pairwise-intersecting intervals share a point); D. S. Johnson, "Approximation
  algorithms for combinatorial problems", JCSS 1974 (greedy cliques); M. C. Golumbic,
  "Algorithmic Graph Theory and Perfect Graphs", 1980 (clique bounds for colouring).
* Y. Pisarchyk, J. Lee, arXiv:2001.03288, 2020; M. D. Moffitt, "MiniMalloc", ASPLOS 2023
  (the interval planner); XLA ``GlobalDecreasingSizeBestFitHeap`` (best fit).

Example
-------
>>> from oxiwork.examples import quick_start
>>> res = plan_memory(quick_start())
>>> report = res.artefacts["memory"]
>>> report.arena_bytes, report.lower_bound
(8192, 8192)
>>> [b.offset for b in res.graph.buffers]
[0, 4096, 0]
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import time
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from oxiwork.analysis import liveness, paused_gc
from oxiwork.analysis.happens_before import graph_clock_arrays
from oxiwork.graph import ComputeGraph, _positional
from oxiwork.node import Buffer, BufferId, NodeId
from oxiwork.ops.program import share_bound
from oxiwork.optimizer import PassResult
from oxiwork.optimizer.memory import (
    DEFAULT_TIME_LIMIT,
    MemoryPlan,
    auto_time_limit,
    plan_buffers,
)
from oxiwork.optimizer.stream import issue_positions

__all__ = [
    "MAX_ANTICHAIN_PAIRS",
    "MAX_EXACT_PAIRS",
    "MAX_INTERVAL_PAIRS",
    "MemoryReport",
    "buffer_intervals",
    "plan_memory",
]


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """What the memory pass did (artefact ``"memory"``).

    Attributes
    ----------
    plan : MemoryPlan
        The interval planner's result on the safe intervals (offsets, sizes, lifetimes).
        When the interval planner was skipped (see :data:`MAX_INTERVAL_PAIRS`, or the
        placement met the lower bound) it carries the
        exact placement instead, with the same sizes and lifetimes, the interval lower bound
        and the exact placement's strategy.
    offsets : dict
        Buffer id -> arena offset, for every non-external buffer (what the plan uses: the
        interval plan's or the exact placement's, whichever is smaller).
    intervals : dict
        Buffer id -> the happens-before-safe ``[first, end)`` interval over ``order``.
    order : tuple of NodeId
        The issue order the intervals index.
    arena_bytes : int
        Bytes the arena needs (``max(offset + size rounded to the alignment)``).
    lower_bound : int
        The best proven lower bound on every safe arena: ``max(liveness_lower_bound,
        conflict_lower_bound)`` (in practice the conflict bound, which is never below the
        other), or more where the conflict search ruled out smaller arenas (the heaviest
        maximal clique it listed, and each arena below which it tried every placement).
    liveness_lower_bound : int
        Most bytes live at once under plain liveness over ``order``. Buffers live at the
        same step can never be ordered by happens-before (the order is topological), so
        no safe placement beats it. (This was ``lower_bound`` before the conflict bound.)
    conflict_lower_bound : int
        Total aligned size of ``conflict_clique``: buffers pairwise not ordered by
        happens-before must occupy pairwise-disjoint bytes (module docstring, "Lower
        bounds"). Equals the liveness bound on one stream when the liveness peak is a
        maximum clique.
    conflict_clique : tuple of BufferId
        The buffers of that clique, sorted by id (pairwise "may be live at once").
    interval_lower_bound : int
        Most bytes live at once over the safe intervals: what any placement of the
        intervals needs (the exact placement may go below it).
    ratio : float
        ``arena_bytes / lower_bound``.
    strategy, mode : str
        The winning placement (the interval planner's strategy,
        ``"conflict_best_fit_<ordering>"`` or ``"conflict_search"``) and the mode asked for.
    optimal : bool
        The arena meets ``lower_bound`` (so it is a minimum safe arena).
    fits : bool or None
        Whether the arena fits the ``capacity`` asked for (None without one).
    message : str or None
        Why the plan falls short, if it does.
    conflict_pairs : int or None
        Buffer pairs not ordered by happens-before (counted by the exact placement; None
        where the sweep placed the buffers without listing them).
    seconds : float
        Time the whole pass took.
    stopped_early : bool
        The exact search of the intervals or the conflict search (modes ``"exact"`` and
        ``"auto"``) ran out of time, or the interval search was skipped for too many buffers,
        before proving its arena minimal; ``plan.message`` says which of the interval
        search's. False when no search ran or they finished.
    search_bound : int
        The least arena any placement of the safe intervals needs, as proved (the safe
        intervals' peak, or more where the search refuted smaller arenas). The safe
        placement may beat it on several streams; on one stream it also bounds
        ``lower_bound``.
    search_nodes : int
        Search nodes the exact search of the intervals and the conflict search visited (0
        when none ran).
    """

    plan: MemoryPlan
    offsets: dict[BufferId, int]
    intervals: dict[BufferId, tuple[int, int]]
    order: tuple[NodeId, ...]
    arena_bytes: int
    lower_bound: int
    liveness_lower_bound: int
    conflict_lower_bound: int
    conflict_clique: tuple[BufferId, ...]
    interval_lower_bound: int
    ratio: float
    strategy: str
    mode: str
    optimal: bool
    fits: bool | None
    message: str | None
    conflict_pairs: int | None
    seconds: float
    stopped_early: bool = False
    search_bound: int = 0
    search_nodes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for the widget): the report and one row per buffer.

        >>> from oxiwork.examples import quick_start
        >>> d = plan_memory(quick_start()).artefacts["memory"].to_dict()
        >>> d["arena_bytes"], [b["offset"] for b in d["buffers"]]
        (8192, [0, 4096, 0])
        """
        out = self.plan.to_dict()
        for row in out["buffers"]:
            row["offset"] = int(self.offsets[BufferId(row["id"])])
        out.update(
            arena_bytes=self.arena_bytes,
            lower_bound=self.lower_bound,
            liveness_lower_bound=self.liveness_lower_bound,
            conflict_lower_bound=self.conflict_lower_bound,
            conflict_clique=[int(b) for b in self.conflict_clique],
            interval_lower_bound=self.interval_lower_bound,
            ratio=self.ratio,
            strategy=self.strategy,
            optimal=self.optimal,
            fits=self.fits,
            message=self.message,
            conflict_pairs=self.conflict_pairs,
            seconds=self.seconds,
            stopped_early=self.stopped_early,
            search_bound=self.search_bound,
            search_nodes=self.search_nodes,
        )
        return out


MAX_EXACT_PAIRS = 5_000_000
"""Most buffer pairs the orderings by conflict-weighted degree and by safe-interval length of
the exact placement may test (each: all pairs).

A placement step tests the buffer against the placed buffers it may conflict with, a few
numpy operations per stream over all of them (about 10-20 ns per pair on 4 streams). The
ordering by length tests all ``n (n - 1) / 2`` pairs, so it runs up to about 3,000 buffers,
where it costs at most a few tenths of a second; on 126 graphs (layered, transformer, chain
and random op DAGs of 100-3,000 nodes, 2-8 streams) it beat the first-access ordering twice,
by 0.1% and 0.4%, so above that it is not worth its time (a third of the pass at 10k
nodes). The ordering by first access always runs: it tests only the pairs whose safe
intervals overlap, the very pairs the interval planner visits (once per candidate ordering),
so it is never the slower of the two (100k-node layered example: 26 s against 358 s).

The ordering by conflict-weighted degree (largest first, ties by size) was added for the
transformer block the workbench opens with: on 4 and 8 streams the first-access and length
orderings left it at 1.43x and 1.14x the conflict bound, while it meets the bound (so does
ordering by the end of the safe interval). On 57 graphs (that block on 2-8 streams, layered
and transformer graphs of 200-3,000 nodes, random op DAGs of 120 and 400 nodes, 2-8 streams)
it was among the best orderings 44 times (first access 51, length 43) and has the lowest
total; it runs before the length ordering and, like it, only while the bound is not met."""

MAX_INTERVAL_PAIRS = 1_000_000
"""Above this many overlapping safe-interval pairs the interval planner is skipped (unless
``mode="exact"``): it visits every such pair once per candidate ordering (3.8 s on the
10k-node layered example's 16M pairs), and safe intervals that crowded are long, so its plan
loses to the exact placement anyway (1.8x against 1.01x the lower bound there)."""

MAX_CLIQUE_STEPS = 64
"""Most steps ``t`` the conflict-clique search (``conflict_lower_bound``) visits, by decreasing
safe-interval profile; one whose matrix fits :data:`MAX_CLIQUE_PAIRS` costs an ``O(n)`` scan
for ``P(t)`` and the matrix. The transformer block's maximum cliques are found within 16."""

MAX_CLIQUE_PAIRS = 500_000
"""Most conflict-matrix entries the clique search builds over all its steps (each a dominance
test over the streams, then ``O(k**2)`` greedy work): about 13 ms on the fused 1k-node layered
example (4 streams, where the bound is 1.025x the liveness bound); 2M entries took 55 ms for
0.3% more, 100k entries 5 ms for 2% less. On 35 small graphs (the transformer block and
layered, transformer and random op DAGs of 100-600 nodes, 2-8 streams) the clique found was
a maximum one (networkx's exact search) 31 times, and at most 2.6% lighter otherwise."""

MAX_ANTICHAIN_PAIRS = 300_000
"""Most overlapping safe-interval pairs for which the exact bound (:func:`_max_antichain`, a
maximum flow in networkx, pure Python) is computed; above it the greedy clique of
:func:`_conflict_clique` alone is the bound. The flow network has ``O(n + comparable
overlapping pairs)`` edges."""

MAX_SEARCH_BUFFERS = 500
"""Most buffers the conflict search (:func:`_search_placement`) takes on. A search node scans
every unplaced buffer (``O(n)`` Python steps), so a descent is ``O(n**2)``: about 0.1 s at
this many. At 1,800 buffers (the fused 3k-node layered example, 4 streams, 1.02x the bound)
it visited 768 nodes in about 0.75 s and found nothing better; the models where it meets the
bound have tens to a few hundred buffers."""

# Placed conflicts up to this many are gap-scanned in Python; more go through numpy.
_DENSE = 32


def buffer_intervals(
    graph: ComputeGraph,
) -> tuple[dict[BufferId, tuple[int, int]], dict[BufferId, tuple[int, int]], tuple[NodeId, ...]]:
    """Happens-before-safe and plain-liveness intervals of the accessed arena buffers.

    Returns ``(safe, live, order)``: ``safe[b] = (first, end)`` as in the module docstring,
    ``live[b] = (first, last + 1)``, both over ``order = issue_order(graph)``.

    >>> from oxiwork.examples import quick_start
    >>> safe, live, _ = buffer_intervals(quick_start())
    >>> safe == live
    True
    """
    a = _analyse(graph)
    return a.safe, a.live, a.order


@dataclass(frozen=True, slots=True)
class _Analysis:
    """Per accessed arena buffer (row ``k`` is ``ids[k]``), as numpy arrays."""

    ids: list[BufferId]
    order: tuple[NodeId, ...]
    first: np.ndarray  # (n,) first access index in ``order``
    last: np.ndarray  # (n,) last access index
    end: np.ndarray  # (n,) end of the safe interval
    last_clock: np.ndarray  # (n, S) ``last_i`` of the module docstring
    from_clock: np.ndarray  # (n, S) ``from_i``
    # (n, S) per stream, the first position strictly after every access (the stream's
    # length if none is) and the first position of an access (-1 if none)
    past: np.ndarray
    first_pos: np.ndarray
    members: list[np.ndarray]  # per stream index, its items (indices into ``order``)
    stream_of: np.ndarray  # (len(order),) stream index of each item
    index: np.ndarray  # (n,) index in ``graph.buffers`` of each row
    in_arena: np.ndarray  # (len(graph.buffers),) not external, not a view

    @property
    def safe(self) -> dict[BufferId, tuple[int, int]]:
        return dict(
            zip(self.ids, zip(self.first.tolist(), self.end.tolist(), strict=True), strict=False)
        )

    @property
    def live(self) -> dict[BufferId, tuple[int, int]]:
        return dict(
            zip(
                self.ids,
                zip(self.first.tolist(), (self.last + 1).tolist(), strict=True),
                strict=False,
            )
        )


def _analyse(graph: ComputeGraph) -> _Analysis:
    # The issue order as positions: the clocks and the accesses below work on positions.
    arrays, order = graph_clock_arrays(graph, liveness.order_at(graph, issue_positions(graph)))
    members_of = arrays.members()
    # Plain liveness (first and last access of each arena buffer over the issue order) is
    # the liveness analysis's; the safe intervals below extend it by happens-before.
    acc = liveness.arena_accesses(graph, order)
    ids = list(acc.buffers)
    n = len(ids)
    clocks, width = arrays.clocks, arrays.clocks.shape[1]
    rb, x, first, last = acc.row, acc.step, acc.first, acc.last
    # ``last_i`` and ``from_i`` of the module docstring, as the race detector computes them,
    # and per stream the first position of an access (-1 if none)
    last_clock, from_clock, first_pos = arrays.spans(rb, x, n)
    end = last + 1
    past = np.zeros((n, width), dtype=np.int64)
    # Each component's queries sorted once for every stream: numpy's binary search resumes
    # from the previous key when the keys ascend (1.5 ms against 6.5 ms per search of 66k
    # keys in 25k clocks), and a scatter puts the answers back by row.
    by_key = [np.argsort(last_clock[:, c], kind="stable") for c in range(width)]
    keys = [last_clock[o, c] for c, o in enumerate(by_key)]
    found = np.empty(n, dtype=np.int64)
    for s, mem in enumerate(members_of):
        if not len(mem) or not n:
            continue
        # First position on s strictly after the accesses: later than last_clock[:, s] and
        # dominating last_clock; each component's condition is monotone along the stream.
        # (Component s is the position along s, 0, 1, ...: its search would give at most
        # last_clock[:, s], below the start.)
        q = last_clock[:, s] + 1
        for c in range(width):
            if c != s:
                found[by_key[c]] = np.searchsorted(clocks[mem, c], keys[c], side="left")
                np.maximum(q, found, out=q)
        np.minimum(q, len(mem), out=q)
        past[:, s] = q
        np.maximum(end, np.where(q > 0, mem[q - 1] + 1, 0), out=end)
    return _Analysis(
        ids,
        order,
        first,
        last,
        end,
        last_clock,
        from_clock,
        past,
        first_pos,
        members_of,
        arrays.stream_index,
        acc.index,
        acc.in_arena,
    )


def _place_exact(
    perm: np.ndarray,
    size: np.ndarray,
    align: np.ndarray,
    a: _Analysis,
    prune: bool,
    every: int = 64,
    degrees: bool = False,
) -> tuple[np.ndarray, int, int, np.ndarray | None]:
    """Best-fit placement of the buffers in ``perm`` order, against happens-before conflicts.

    Each buffer goes into the smallest aligned gap (lowest on ties) among the placed buffers
    it conflicts with, or on top of them. With ``prune`` (``perm`` sorted by first access)
    placed buffers whose safe interval ends at or before the current first access are
    dropped (every ``every`` steps): they are ordered before every buffer still to come.
    Returns the offsets (by row), the arena, the number of conflicting pairs met and, with
    ``degrees`` (else None), by row the total size of the buffers met that conflict with it:
    its conflict-weighted degree, as every conflicting pair is met (with ``prune`` too: a
    dropped buffer is ordered before every later one). That costs a few passes over the
    conflicting pairs (a fifth of the placement at 10k nodes), hence the flag.
    """
    n, width = len(perm), a.last_clock.shape[1]
    psize = size[perm]
    sz, al = psize.tolist(), align[perm].tolist()
    begin = a.first[perm].tolist()
    # One row per field, one column per buffer (in ``perm`` order): last and from clocks
    # (positions, so int32 when they fit: half the memory traffic of the dominance test), and
    # offset, top and end of the safe interval, and the column. The placed buffers still in play are kept
    # compacted and sorted by offset in ``act_c``/``act``, so that inserting or pruning is a
    # copy and a gap scan needs no sort.
    ctype = np.int32 if len(a.order) < 2**31 - 1 else np.int64
    clk = np.empty((2 * width, n), dtype=ctype)
    clk[:width] = a.last_clock[perm].T
    clk[width:] = a.from_clock[perm].T
    rows = np.empty((4, n), dtype=np.int64)
    rows[2] = a.end[perm]
    rows[3] = np.arange(n)
    met = np.zeros(n, dtype=np.int64)
    act_c = np.empty_like(clk)
    act = np.empty_like(rows)
    m = 0
    off = rows[0]
    arena = conflicts = 0
    since = 0
    for k in range(n):
        if prune and since >= every and m:
            keep = np.flatnonzero(act[2, :m] > begin[k])
            if len(keep) < m:
                m = len(keep)
                act_c[:, :m] = act_c[:, keep]
                act[:, :m] = act[:, keep]
            since = 0
        s_k, a_k = sz[k], al[k]
        cand = 0
        if m:
            # Placed before k: from_k dominates its last clock; k before placed: the reverse.
            # Conflicts are the placed buffers ordered neither way.
            col = clk[:, k : k + 1]
            ok = (act_c[:width, :m] <= col[width:]).all(axis=0)
            ok |= (act_c[width:, :m] >= col[:width]).all(axis=0)
            hit = np.flatnonzero(~ok)
            conflicts += len(hit)
            if degrees and len(hit):
                other = act[3, hit]
                met[other] += s_k  # columns are distinct: a plain fancy-index add
                met[k] += int(psize[other].sum())
            if 0 < len(hit) <= _DENSE:
                cand = _gap_small(act[0, hit].tolist(), act[1, hit].tolist(), s_k, a_k)
            elif len(hit):
                cand = _gap_dense(act[0, hit], act[1, hit], s_k, a_k)
        rows[0, k] = cand
        rows[1, k] = cand + s_k
        at = int(np.searchsorted(act[0, :m], cand, side="right"))
        if at < m:
            act_c[:, at + 1 : m + 1] = act_c[:, at:m]
            act[:, at + 1 : m + 1] = act[:, at:m]
        act_c[:, at] = clk[:, k]
        act[:, at] = rows[:, k]
        m += 1
        since += 1
        arena = max(arena, cand + s_k)
    out = np.empty(n, dtype=np.int64)
    out[perm] = off
    if not degrees:
        return out, arena, conflicts, None
    degree = np.empty(n, dtype=np.int64)
    degree[perm] = met
    return out, arena, conflicts, degree


class _FreeRuns:
    """The free byte runs of one stream during :func:`_place_sweep`, coalesced: ``tail``, the
    start of the run reaching to the top of every address, and the finite runs below it,
    each in ``end_of`` (start -> end) and ``start_of`` (end -> start), and ``by_len``, those
    runs as ``(length, start)`` sorted, for best fit, each pair as the int ``length << shift
    | start`` (``2**shift`` bounds every address): one int comparison instead of a tuple's in
    every bisection. The tail is kept apart because most updates touch it (a placement on top
    takes its bottom bytes; on the fused 100k-node layered example 114k of 213k updates):
    there they cost one comparison.

    Runs are found by their ends rather than by a bisection of sorted start and end lists:
    freeing a range merges only with a run ending at its start or starting at its end, and
    nearly every take removes a whole run or the front of one (a run starting at the taken
    range; on that example all but 2 of 38k finite takes), which dict look-ups find without
    the lists' insertions and deletions (memmoves of ~1.6k pointers per edit there). A range
    starting inside a run or over several is cut out of the runs a scan of ``end_of`` finds:
    ``O(runs)``, as a list edit is, and that rare (a handful of takes on the synthetic
    layered, transformer and chain graphs of 1.5k-100k nodes on 3-8 streams)."""

    __slots__ = ("by_len", "end_of", "shift", "start_of", "tail")

    def __init__(self, shift: int) -> None:
        self.tail = 0
        self.end_of: dict[int, int] = {}
        self.start_of: dict[int, int] = {}
        self.by_len: list[int] = []
        self.shift = shift

    @property
    def starts(self) -> list[int]:
        """The finite runs' starts, ascending (for tests)."""
        return sorted(self.end_of)

    @property
    def ends(self) -> list[int]:
        """The finite runs' ends, in the order of :attr:`starts` (for tests)."""
        return sorted(self.start_of)

    def add(self, s: int, e: int) -> None:
        """Mark ``[s, e)`` free (it is not): merge with the runs it touches."""
        by_len, sh = self.by_len, self.shift
        ls = self.start_of.pop(s, None)
        if ls is not None:  # a run ends where the range starts: they join
            del self.end_of[ls]
            del by_len[bisect_left(by_len, (s - ls) << sh | ls)]
            s = ls
        if e == self.tail:  # grows the tail downwards
            self.tail = s
            return
        re = self.end_of.pop(e, None)
        if re is not None:  # a run starts where the range ends: they join
            del self.start_of[re]
            del by_len[bisect_left(by_len, (re - e) << sh | e)]
            e = re
        self.end_of[s] = e
        self.start_of[e] = s
        insort(by_len, (e - s) << sh | s)

    def take(self, s: int, e: int) -> None:
        """Mark ``[s, e)`` not free, whatever part of it is."""
        tail = self.tail
        if s >= tail:  # inside the tail: it starts above the range, below it a finite run
            if s > tail:
                self._put(tail, s)
            self.tail = e
            return
        re = self.end_of.get(s)
        if re is not None and re >= e:  # the front of a run (the usual case: all of it)
            self._drop(s, re)
            if re > e:
                self._put(e, re)
            return
        # the finite runs meeting [s, e): cut out of them, then out of the tail
        for rs in sorted(k for k, v in self.end_of.items() if k < e and v > s):
            re = self.end_of[rs]
            self._drop(rs, re)
            if rs < s:
                self._put(rs, s)
            if re > e:
                self._put(e, re)
        if e > tail:  # the range reaches into the tail (which starts above s here)
            self.tail = e

    def _put(self, s: int, e: int) -> None:
        """Add the finite run ``[s, e)`` (no run touches it)."""
        self.end_of[s] = e
        self.start_of[e] = s
        insort(self.by_len, (e - s) << self.shift | s)

    def _drop(self, s: int, e: int) -> None:
        """Remove the finite run ``[s, e)``."""
        del self.end_of[s], self.start_of[e]
        del self.by_len[bisect_left(self.by_len, (e - s) << self.shift | s)]


def _place_sweep(
    perm: np.ndarray, size: np.ndarray, align: np.ndarray, a: _Analysis
) -> tuple[np.ndarray, int]:
    """Best-fit placement in first-access order (``perm``) without listing conflicting pairs.

    Equivalent to :func:`_place_exact` in that order for buffers accessed on one stream,
    in ``O(n S log n)`` instead of ``O(conflicting pairs x S)``. Placing in first-access
    order, a later buffer ``j`` is never ordered before a placed ``i`` (the issue order is
    topological), so they may share bytes iff ``i`` is before ``j``: iff on every stream
    ``t`` where ``j`` has an access, its first one there is at or after ``past[i, t]``, the
    first position on ``t`` strictly after all of ``i``'s accesses (the clocks along a
    stream never decrease). Every address range is owned by the buffer placed there last
    ("before" is transitive, so its earlier occupants are before whatever follows it), and
    each stream keeps the runs of bytes whose owner it has passed: a sweep over the issue
    order hands the owner's bytes to stream ``t``'s free runs when it reaches position
    ``past[i, t]``. A buffer accessed on one stream ``t`` then goes into the best-fitting
    free run of ``t`` (smallest, lowest on ties) exactly as the pairwise best fit would, or
    on top; one accessed on several takes the best run of its first stream that is free on
    its other streams too as of now (conservative: those streams may free more bytes before
    it gets there), trying :data:`_SWEEP_TRIES` runs before going on top.

    Bookkeeping (the same offsets as the plain version kept in
    tests/optimizer/_sweep_reference.py, which the tests compare it with): each address
    segment also carries the set of streams whose free runs hold it (a bit mask), so a
    placement gives up its range only on those streams, without a search on every stream;
    each row counts the segments it still owns, so a stream passing a buffer whose bytes
    have all been taken over costs nothing; segment owners and masks are dicts by segment
    start (one list to insert into, not three); free runs are keyed by one int each.
    Sizes are positive (the graph refuses empty buffers), so a range is never empty.

    Cost (fused 100k-node layered example, 4 streams, 66k buffers, 107k release events):
    the first three fifths of the buffers are mostly accessed on several streams and go on
    top (the tail updates and segment appends of the fast paths), while nearly all the
    releases come in the last two fifths (26k owned releases in the last fifth against 4k
    in the first), each an edit of the free runs of a stream that by then holds ~4.5k of
    them, and the placements there split segments inside the 28k-entry segment list
    instead of appending: so the last fifth costs 3-4x as much per buffer. Blocked sorted
    lists (at most 512 pointers moved per edit) and dicts for the neighbours next to the
    sorted start and end lists were tried and cost as much as they saved; dicts instead of
    those lists (:class:`_FreeRuns`, only the best-fit keys still sorted) took the sweep
    from 0.53-0.59 s to 0.42-0.47 s.
    """
    n, width = len(perm), a.past.shape[1]
    out = np.zeros(len(size), dtype=np.int64)
    if not n:
        return out, 0
    # Release events (item of the order where stream t passes buffer k, t, k), by item.
    rel_item = np.full((len(size), width), -1, dtype=np.int64)
    for t, members in enumerate(a.members):
        if len(members):
            mem = np.append(members, -1)
            rel_item[:, t] = mem[a.past[:, t]]
    rk, rt = np.nonzero(rel_item >= 0)
    ri = rel_item[rk, rt]
    o = np.argsort(ri, kind="stable")
    ev_item, ev_t, ev_k = ri[o].tolist(), rt[o].tolist(), rk[o].tolist()
    ev_item.append(_TOP)  # a sentinel: no bound check in the loop
    shift = int(size.sum() + align.sum()).bit_length() + 1
    low = (1 << shift) - 1
    runs = [_FreeRuns(shift) for _ in range(width)]
    # address segments [seg_s[i], seg_s[i+1]) -> the row placed there last (-1: none), and
    # the streams (bit t) whose free runs hold it; how many segments each row owns
    seg_s: list[int] = [0]
    seg_o: dict[int, int] = {0: -1}  # by segment start
    seg_m: dict[int, int] = {0: (1 << width) - 1}
    owned = [0] * len(size)
    offs = [0] * len(size)
    sz = size.tolist()
    fpos = a.first_pos.T.tolist()  # per stream, per row (no list per row)
    past_of = a.past.T.tolist()  # per stream, per row
    # per row, the streams other than its first access's where it is accessed
    on = a.first_pos >= 0
    t_first = a.stream_of[a.first]
    other_on = on.copy()
    other_on[np.arange(len(size)), t_first] = False
    if width <= 62:  # as bit masks, one tuple per distinct set
        bits = (other_on.astype(np.int64) << np.arange(width, dtype=np.int64)).sum(axis=1)
        combos = {m: tuple(t for t in range(width) if m >> t & 1) for m in set(bits.tolist())}
        others_in_order = map(combos.__getitem__, bits[perm].tolist())  # placement order
    else:
        others_in_order = (tuple(np.flatnonzero(other_on[k]).tolist()) for k in perm.tolist())
    # Per mask of streams, their free runs (the streams that give up a placed range).
    runs_of = _RunsOf(runs)
    bit_of = [1 << t for t in range(width)]
    ev = 0
    arena = 0
    # per buffer in placement order, what the loop reads of it (one zip, no indexing)
    items = zip(
        perm.tolist(),
        a.first[perm].tolist(),
        size[perm].tolist(),
        align[perm].tolist(),
        a.stream_of[a.first[perm]].tolist(),
        others_in_order,
        strict=True,
    )
    for k, x, s, g, t0, others in items:
        while ev_item[ev] <= x:  # streams passing placed buffers: free bytes
            i = ev_k[ev]
            left = owned[i]
            if left:
                t = ev_t[ev]
                bit = bit_of[t]
                free_t = runs[t]
                lo = offs[i]
                hi = lo + sz[i]
                j = bisect_right(seg_s, lo) - 1
                # i's segments lie inside its range (k's range is one segment when placed,
                # and later placements only split or overwrite it)
                while (sj := seg_s[j]) < hi:
                    if seg_o[sj] == i:
                        free_t.add(sj, seg_s[j + 1])
                        seg_m[sj] |= bit
                        left -= 1
                        if not left:
                            break
                    j += 1
            ev += 1
        free = runs[t0]
        by_len = free.by_len
        cand = -1
        if not others:
            for r in range(bisect_left(by_len, s << shift), len(by_len)):
                key = by_len[r]
                length, rs = key >> shift, key & low
                c = -(-rs // g) * g
                if c + s <= rs + length:
                    cand = c
                    break
            if cand < 0:
                cand = -(-free.tail // g) * g
        elif (not by_len or by_len[-1] < s << shift) and (c := -(-free.tail // g) * g) >= seg_s[-1]:
            # no finite run is large enough, and the bytes from t0's tail up were never
            # placed (the top segment's owner is -1): the window scan below would stop at
            # its first segment
            cand = c
        else:
            # bytes free on t0 whose owner is also before k's first access on the others
            if len(others) == 1:
                col, lim = past_of[others[0]], fpos[others[0]][k]

                def ok(i: int, col: list[int] = col, lim: int = lim) -> bool:
                    return i < 0 or col[i] <= lim
            else:
                checks = [(past_of[t], fpos[t][k]) for t in others]

                def ok(i: int, checks: list[tuple[list[int], int]] = checks) -> bool:
                    if i >= 0:
                        for col, lim in checks:
                            if col[i] > lim:
                                return False
                    return True

            budget = [_SWEEP_SCAN]
            for r in range(bisect_left(by_len, s << shift), len(by_len)):
                key = by_len[r]
                length, rs = key >> shift, key & low
                cand = _window(seg_s, seg_o, rs, rs + length, s, g, ok, budget)
                if cand >= 0 or budget[0] <= 0:
                    break
            if cand < 0:
                budget[0] = _SWEEP_SCAN
                cand = _window(seg_s, seg_o, free.tail, _TOP, s, g, ok, budget)
            if cand < 0:  # on top of every byte some stream of k has not passed
                top = max(runs[t].tail for t in (t0, *others))
                cand = -(-top // g) * g
        offs[k] = cand
        end = cand + s
        if end > arena:
            arena = end
        # the range now belongs to k alone (sizes are positive: it is at least one byte)
        if cand >= (prev := seg_s[-1]):
            # on top of every placed byte (the usual case while the arena grows): the top
            # segment (owner -1, never placed) splits at cand and end; nobody loses bytes
            mask = seg_m[prev]
            if prev != cand:
                seg_s.append(cand)
            seg_s.append(end)
            seg_o[end] = -1
            seg_m[end] = mask
            seg_o[cand] = k
            seg_m[cand] = 0
            owned[k] = 1
            _give_up(runs_of[mask], cand, end)
            continue
        lo_i = bisect_right(seg_s, cand) - 1
        if seg_s[lo_i] == cand and seg_s[lo_i + 1] == end:
            # exactly one segment (a freed range of the same size: the usual case once
            # buffers are reused): it changes owner, no boundary moves
            mask = seg_m[cand]
            o = seg_o[cand]
            if o >= 0:
                owned[o] -= 1
            seg_o[cand] = k
            seg_m[cand] = 0
            owned[k] = 1
            _give_up(runs_of[mask], cand, end)
            continue
        if (prev := seg_s[lo_i]) != cand:
            lo_i += 1
            seg_s.insert(lo_i, cand)
            o = seg_o[cand] = seg_o[prev]
            seg_m[cand] = seg_m[prev]
            if o >= 0:
                owned[o] += 1
        hi_i = bisect_right(seg_s, end) - 1
        if (prev := seg_s[hi_i]) != end:
            hi_i += 1
            seg_s.insert(hi_i, end)
            o = seg_o[end] = seg_o[prev]
            seg_m[end] = seg_m[prev]
            if o >= 0:
                owned[o] += 1
        mask = 0
        for j in range(lo_i, hi_i):
            sj = seg_s[j]
            mask |= seg_m[sj]
            o = seg_o[sj]
            if o >= 0:
                owned[o] -= 1
            if j > lo_i:
                del seg_o[sj], seg_m[sj]
        if hi_i - lo_i != 1:
            seg_s[lo_i:hi_i] = [cand]
        seg_o[cand] = k
        seg_m[cand] = 0
        owned[k] = 1
        # the streams whose free runs held part of the range give it up
        _give_up(runs_of[mask], cand, end)
    out[:] = offs
    return out, arena


def _give_up(free_runs: list[_FreeRuns], lo: int, hi: int) -> None:
    """The streams whose free runs are ``free_runs`` (``_RunsOf``'s entry for a mask) take
    ``[lo, hi)`` out of them; placing on a stream's top run only moves its tail."""
    for free in free_runs:
        if lo == free.tail:  # take()'s first case, inline
            free.tail = hi
        else:
            free.take(lo, hi)


class _RunsOf(dict):
    """Per bit mask of streams (bit ``t``: stream ``t``), the list of their free runs, made
    the first time a mask is asked for (a sweep meets few distinct masks).

    >>> runs_of = _RunsOf(["run of 0", "run of 1", "run of 2"])
    >>> runs_of[0b101], runs_of[0]
    (['run of 0', 'run of 2'], [])
    """

    __slots__ = ("runs",)

    def __init__(self, runs: list[Any]) -> None:
        super().__init__()
        self.runs = runs

    def __missing__(self, mask: int) -> list[Any]:
        runs = self.runs
        value = self[mask] = [runs[t] for t in range(mask.bit_length()) if mask >> t & 1]
        return value


def _window(
    seg_s: list[int],
    seg_o: dict[int, int],
    lo: int,
    hi: int,
    size: int,
    align: int,
    ok: Any,
    budget: list[int],
) -> int:
    """Lowest aligned ``c`` with ``[c, c + size)`` inside ``[lo, hi)`` whose owners (address
    segments ``seg_s``/``seg_o``) all pass ``ok``; -1 if none, or once ``budget[0]``
    segments have been looked at."""
    c = -(-lo // align) * align
    j = bisect_right(seg_s, c) - 1
    last = len(seg_s) - 1
    while c + size <= hi:
        while True:
            budget[0] -= 1
            if not ok(seg_o[seg_s[j]]):
                nxt = seg_s[j + 1]
                c = -(-nxt // align) * align
                j = bisect_right(seg_s, c) - 1
                break
            if j == last or seg_s[j + 1] >= c + size:
                return c
            j += 1
        if budget[0] <= 0:
            return -1
    return -1


_TOP = 1 << 62  # the end of the tail run: beyond any arena
_SWEEP_SCAN = 256  # address segments a buffer on several streams may scan for a place


def _gap_small(offs: list[int], tops: list[int], sz: int, al: int) -> int:
    """Best-fit gap among a few placed ranges sorted by offset, in Python (cheaper than numpy's
    overhead there)."""
    cand, best, best_gap = 0, -1, 0
    for o, t in zip(offs, tops, strict=True):
        gap = o - cand
        if gap >= sz and (best < 0 or gap < best_gap):
            best, best_gap = cand, gap
        if t > cand:
            cand = -(-t // al) * al
    return best if best >= 0 else cand


def _gap_dense(o: np.ndarray, t: np.ndarray, sz: int, al: int) -> int:
    """:func:`_gap_small` in numpy: free space before each range starts at the aligned
    highest top below it."""
    start = np.empty_like(o)
    start[0] = 0
    np.maximum.accumulate(t[:-1], out=start[1:])
    if al & (al - 1) == 0:  # power of two (as the builder enforces): a mask, no division
        start += al - 1
        start &= -al
    else:
        start = -(-start // al) * al
    gap = o - start
    gap[gap < sz] = _NO_GAP
    i = int(gap.argmin())
    if gap[i] == _NO_GAP:
        return -(-max(int(start[-1]), int(t[-1])) // al) * al
    return int(start[i])


# Marks gaps too small to hold the buffer in _gap_dense (larger than any real gap).
_NO_GAP = np.iinfo(np.int64).max


def _search_placement(
    size: np.ndarray,
    align: np.ndarray,
    conflict: np.ndarray,
    incumbent: int,
    target: int,
    deadline: float,
) -> tuple[np.ndarray | None, int, str, int, int]:
    """A placement of arena below ``incumbent`` bytes with no two buffers in ``conflict``
    sharing a byte; ``(offsets by row or None, arena, status, nodes, proved)``. Status
    ``"target"``: the arena meets ``target`` (a lower bound); ``"exhausted"``: no placement
    beats the arena returned (``incumbent`` when the offsets are None); ``"timeout"``:
    ``deadline`` (a ``time.perf_counter()`` value) passed first. ``proved``: a lower bound on
    every placement's arena, at least ``target`` (the arena returned, when exhausted).

    Rounds of two turns of :class:`_ConflictSearch`, each round under one preorder: one turn
    *decides* whether the buffers fit in the lowest arena not yet ruled out (at first the
    heavier of ``target`` and the heaviest clique found), which prunes hardest, and each
    time it has tried every canonical placement that arena is ruled out (the next multiple
    of the alignments is tried); the other *descends* from the best arena found, which
    improves plans whose bound is not met. A turn stops after a node limit; every round
    after the first restarts under a perturbed preorder, and the limit doubles every
    :data:`_SEARCH_ROUNDS` rounds, so a search given the time still tries every placement.
    On the zoo's instances a descent alone had missed the bound on 25 of 55 in their
    default time (on 4 streams: Phi, Qwen3-MoE, ERNIE 4.5 MoE, DeepSeek-V3, each no better
    given 5 s, Qwen3-MoE given a minute), where CP-SAT met it on each in under half a
    second.

    >>> conflict = np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=bool)  # 0 with 1 and 2
    >>> off, arena, status, _, _ = _search_placement(
    ...     np.array([4, 2, 3]), np.array([1, 1, 1]), conflict, 9, 7, time.perf_counter() + 1)
    >>> off.tolist(), arena, status  # 1 and 2 share bytes above 0
    ([0, 4, 4], 7, 'target')

    References: M. D. Moffitt, "MiniMalloc", ASPLOS 2023 (canonical solutions, dominance,
    section inference and restarts, there over time intervals; here over a conflict graph,
    its maximal cliques standing in for the sections); C. Bron and J. Kerbosch, "Algorithm
    457", CACM 1973, with E. Tomita et al.'s pivot (TCS 2006)."""
    search = _ConflictSearch(size, align, conflict, deadline)
    unit = math.gcd(*align.tolist(), *size.tolist()) if len(size) else 1
    lo = -(-max(target, search.heaviest) // unit) * unit  # the lowest arena not ruled out
    best, best_off, nodes = incumbent, None, 0
    limit = max(_SEARCH_NODES, 2 * len(size))  # (a descent visits one node per buffer)
    rng = random.Random(0)  # (seeded: the same graph gets the same plan)
    turn = 0
    order = search.order(None)
    while True:
        if best <= lo:  # the best arena meets what is proven
            status = "target" if best <= target else "exhausted"
            break
        if _now() > deadline:  # (turns ruled out at their root visit no node)
            status = "timeout"
            break
        deciding = turn % 2 == 0
        off, arena, status, spent = search.run(lo + 1 if deciding else best, lo, order, limit)
        nodes += spent
        if off is not None:
            best, best_off = arena, off
        if status == "exhausted":
            # deciding: nothing fits in ``lo``, the next arena up is the lowest left;
            # descending: nothing beats ``best``
            lo = (lo // unit + 1) * unit if deciding else best
            continue
        if status == "timeout":
            break
        turn += 1
        if turn % 2 == 0:  # a round (deciding, descending) ended: restart perturbed
            order = search.order(rng)
            if turn % (2 * _SEARCH_ROUNDS) == 0:
                limit *= 2
    proved = max(lo, target)
    if best_off is None:
        return None, incumbent, status, nodes, min(proved, incumbent)
    return np.array(best_off, dtype=np.int64), best, status, nodes, min(proved, best)


CONFLICT_SEARCH_SCALE = 4
"""The ``"auto"`` mode's conflict search gets ``auto_time_limit(CONFLICT_SEARCH_SCALE * n)``
for ``n`` buffers: 0.05 s plus 1 ms per buffer, at most 1 s (0.55 s at the most buffers it
takes on, :data:`MAX_SEARCH_BUFFERS`), spent only where the placement missed the proven
bound. With the interval search's 0.25 ms per buffer it met the bound on 54 of the zoo's 56
instances (75 models, 2, 4 and 8 streams), missing RecurrentGemma on 4 streams by 14.6%,
which it meets after about 0.2 s; with 1 ms per buffer on all 56."""

# The conflict search's clock (tests stop the search at chosen nodes through it).
_now = time.perf_counter

_SEARCH_NODES = 256
"""Node limit of the conflict search's first turns (:func:`_search_placement`), or twice the
buffers if more (a descent without backtracking visits one node per buffer); it doubles
every :data:`_SEARCH_ROUNDS` rounds."""

_SEARCH_ROUNDS = 8
"""Rounds (a deciding and a descending turn, one preorder) of the conflict search per node
limit. Searches of one instance vary widely with the preorder (heavy tails: Gomes et al.),
so many short restarts with perturbed preorders beat one long search: on the 56 zoo
instances the search ran on (75 models, 2, 4 and 8 streams) these restarts met the bound on
every one within 0.22 s (1.1 s in all), where one long search per preorder missed 7 in 2 s
each. Of the schedules tried (keys weighed by factors of 0.7-1.3, 0.5-1.5, 0.3-1.7 or
0.1-1.9; 1, 2, 4 or 8 nodes per buffer; 4, 8, 12 or 16 rounds per doubling) this one had about
the shortest longest search; 0.7-1.3 with 4 nodes per buffer took up to 0.6 s, the two widest
missed some in 3 s."""

MAX_SEARCH_CLIQUES = 2048
"""Most maximal cliques of the conflict graph the search's pruning tracks (each costs a
little on every node); listing them stops there, or after ``8 * MAX_SEARCH_CLIQUES``
expansions of Bron-Kerbosch. Any set of cliques prunes soundly: fewer only prune less. The
small zoo models on 4 streams have 70-140."""


def _maximal_cliques(
    nbr: list[int], cap: int, steps: int, deadline: float = math.inf
) -> list[list[int]]:
    """Maximal cliques of two or more vertices of the graph whose neighbour sets are the
    bitsets ``nbr``, by Bron-Kerbosch with Tomita's pivot (the vertex of ``P | X`` with most
    neighbours in ``P``); at most ``cap`` of them, within ``steps`` expansions and before
    ``deadline`` (a ``_now()`` value).

    >>> _maximal_cliques([0b110, 0b101, 0b011, 0b0000], 10, 100)  # a triangle and a loner
    [[0, 1, 2]]
    """
    out: list[list[int]] = []
    stack = [(0, (1 << len(nbr)) - 1, 0)]  # (R, P, X) as bitsets
    while stack and len(out) < cap and steps > 0:
        steps -= 1
        if not steps % 256 and _now() > deadline:  # (an expansion is O(n) big-int steps)
            break
        r, p, x = stack.pop()
        if not p:
            if not x and r & (r - 1):  # maximal, and two or more vertices
                out.append([v for v in range(r.bit_length()) if r >> v & 1])
            continue
        pivot, most, q = 0, -1, p | x
        while q:
            low = q & -q
            q ^= low
            u = low.bit_length() - 1
            c = (p & nbr[u]).bit_count()
            if c > most:
                pivot, most = u, c
        cand = p & ~nbr[pivot]
        while cand:
            low = cand & -cand
            cand ^= low
            v = low.bit_length() - 1
            stack.append((r | low, p & nbr[v], x & nbr[v]))
            p &= ~low
            x |= low
    return out


class _ConflictSearch:
    """Depth-first search over the canonical placements of buffers under a conflict graph
    (the turns of :func:`_search_placement` share its set-up).

    A node places one more buffer at its *floor*: the lowest offset aligned for it above
    every placed buffer it conflicts with; offsets never decrease along a path, and buffers
    at one offset go in preorder. Every placement is covered: push each buffer of any
    placement down to its floor among the buffers below it, in order of offset, until none
    moves; the arena never grows, and so an optimum whose offsets sum least is reached
    without any of the cuts below firing.

    * an unplaced buffer whose floor plus size reaches the best arena, or whose top (floor
      plus size) is at or below the last offset, ends the node (the latter could sit below
      every later buffer: the path placing it earlier reaches that placement);
    * dominance: a buffer is not placed at or above another unplaced buffer's top (that one
      would drop below it);
    * clique inference: the unplaced members of a clique stack above the higher of the last
      offset and the top of its placed members (every unplaced member's floor is above the
      latter), so that plus their sizes must stay below the best arena.
    """

    def __init__(self, size: np.ndarray, align: np.ndarray, conflict: np.ndarray, deadline: float):
        n = len(size)
        self.n, self.deadline = n, deadline
        self.sz, self.al = size.tolist(), align.tolist()
        self.nbr = [np.flatnonzero(row).tolist() for row in conflict]
        bits = [sum(1 << j for j in row) for row in self.nbr]
        cliques = _maximal_cliques(bits, MAX_SEARCH_CLIQUES, 8 * MAX_SEARCH_CLIQUES, deadline)
        weight = [sum(self.sz[i] for i in c) for c in cliques]
        self.weight = np.array(weight, dtype=np.int64)
        self.heaviest = max(weight, default=max(self.sz, default=0))
        of: list[list[int]] = [[] for _ in range(n)]
        for c, members in enumerate(cliques):
            for i in members:
                of[i].append(c)
        self.of = [np.array(o, dtype=np.int64) for o in of]
        # The preorder's key: the bytes a buffer conflicts with, which decided the four zoo
        # models a descent had missed within 200 nodes, where size (first fit decreasing)
        # and the heaviest clique a buffer is in did not on one or two of them.
        self.conflicting = [sum(map(self.sz.__getitem__, row)) for row in self.nbr]

    def order(self, rng: random.Random | None) -> list[int]:
        """The rows by descending bytes they conflict with (then size, then row), each
        weighed by a factor drawn from ``[0.5, 1.5]`` if ``rng`` is given (a restart's
        perturbation, as Gomes et al.'s randomised tie-breaking)."""
        n, sz, conflicting = self.n, self.sz, self.conflicting
        noise = [1.0] * n if rng is None else [rng.uniform(0.5, 1.5) for _ in range(n)]
        return sorted(range(n), key=lambda i: (-conflicting[i] * noise[i], -sz[i], i))

    def run(
        self, best: int, enough: int, order: list[int], limit: int
    ) -> tuple[list[int] | None, int, str, int]:
        """Search for an arena below ``best`` trying buffers in ``order`` (a preorder of the
        rows), lowering its own best as it finds placements, until one is ``enough`` or
        lower; ``(offsets or None, best arena, status, nodes)``, status ``"found"`` (that
        one), ``"exhausted"`` (no placement beats the arena returned), ``"aborted"``
        (``limit`` nodes visited) or ``"timeout"``."""
        n, sz, al, nbr, of = self.n, self.sz, self.al, self.nbr, self.of
        rank = [0] * n
        for r, i in enumerate(order):
            rank[i] = r
        unplaced = self.weight.copy()  # per clique: bytes of its unplaced members
        high = np.zeros(len(unplaced), dtype=np.int64)  # per clique: top of its placed members
        check = len(unplaced) > 0
        off, floor = [-1] * n, [0] * n
        best_off: list[int] | None = None

        def branches(water: int, last: int) -> list[tuple[int, int]] | None:
            # (aligned floor, row) of the buffers that may come next; None: cut off
            if check and int((np.maximum(high, water) + unplaced).max()) >= best:
                return None
            out = []
            lowest_top = best
            after = rank[last] if last >= 0 else -1
            for i in order:  # (no min/max calls: this loop is most of the search's time)
                if off[i] < 0:
                    a = al[i]
                    f = -(-floor[i] // a) * a
                    top = f + sz[i]
                    if top <= water or (top if f > water else water + sz[i]) >= best:
                        return None
                    if top < lowest_top:
                        lowest_top = top
                    if f > water or (f == water and rank[i] > after):
                        out.append((f, i))
            out = [b for b in out if b[0] < lowest_top]
            out.sort(key=operator.itemgetter(0))  # stable: preorder among equal floors
            return out

        root = branches(0, -1)
        # a frame: [branches, next branch, the arena below it, the choice made (row, undo)]
        stack: list[list[Any]] = [[root, 0, 0, None]] if root else []
        placed, nodes, status = 0, 0, "exhausted"
        while stack:
            frame = stack[-1]
            if frame[3] is not None:  # undo this frame's last choice
                i, undo, old_unplaced, old_high = frame[3]
                off[i] = -1
                for j, old in undo:
                    floor[j] = old
                unplaced[of[i]], high[of[i]] = old_unplaced, old_high
                frame[3] = None
                placed -= 1
            opts, k = frame[0], frame[1]
            if k >= len(opts):
                stack.pop()
                continue
            frame[1] = k + 1
            f, i = opts[k]
            if f + sz[i] >= best:  # (the best arena fell since the branches were listed)
                continue
            nodes += 1
            if _now() > self.deadline:  # (a node is O(n) steps: checked at each)
                status = "timeout"
                break
            if nodes > limit:
                status = "aborted"
                break
            off[i], t = f, f + sz[i]
            undo = []
            for j in nbr[i]:
                if off[j] < 0 and floor[j] < t:
                    undo.append((j, floor[j]))
                    floor[j] = t
            mine = of[i]
            old_unplaced, old_high = unplaced[mine], high[mine]
            unplaced[mine] = old_unplaced - sz[i]
            high[mine] = np.maximum(old_high, t)
            frame[3] = (i, undo, old_unplaced, old_high)
            placed += 1
            arena = max(frame[2], t)
            if placed == n:  # below best: every buffer was placed under it
                best, best_off = arena, list(off)
                if best <= enough:
                    status = "found"
                    break
                continue
            nxt = branches(f, i)
            if nxt:
                stack.append([nxt, 0, arena, None])
        return best_off, best, status, nodes


def _conflict_matrix(a: _Analysis, rows: np.ndarray) -> np.ndarray:
    """``(k, k)`` bool: buffers ``rows[i]`` and ``rows[j]`` are unordered by happens-before
    (the dominance test of the module docstring; the diagonal is False)."""
    lc, fc = a.last_clock[rows], a.from_clock[rows]
    before = np.ones((len(rows), len(rows)), dtype=bool)
    for s in range(lc.shape[1]):  # one stream at a time: 2-d temporaries only
        before &= lc[:, s, None] <= fc[None, :, s]
    conflict = ~(before | before.T)
    np.fill_diagonal(conflict, False)
    return conflict


def _heavy_clique(conflict: np.ndarray, weight: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Greedy heavy clique of ``conflict`` containing the clique ``start``: repeatedly add the
    candidate (a vertex adjacent to every member) of largest weight plus weight of its
    candidate neighbours, the classic greedy for maximum-weight clique (Johnson 1974). The
    scores are updated as candidates drop out, so a run is ``O(k**2)``."""
    cand = np.ones(len(weight), dtype=bool)
    if len(start):
        cand &= conflict[start].all(axis=0)
    adj = conflict.astype(np.float64)  # BLAS products; exact, sums stay far below 2**53
    w = weight.astype(np.float64)
    score = w + adj[:, cand] @ w[cand]
    chosen = start.tolist()
    while True:
        idx = np.flatnonzero(cand)
        if not len(idx):
            return np.array(chosen, dtype=np.int64)
        j = int(idx[score[idx].argmax()])
        chosen.append(j)
        keep = cand & conflict[j]
        gone = np.flatnonzero(cand & ~keep)  # j and the candidates it is ordered with
        score -= w[gone] @ adj[gone]  # rows, not columns: contiguous (adj is symmetric)
        cand = keep


def _conflict_clique(a: _Analysis, size: np.ndarray) -> np.ndarray:
    """Rows of pairwise-unordered buffers of large total size (see ``conflict_lower_bound``
    in :class:`MemoryReport` for why it bounds every safe arena, and the caps).

    Two unordered buffers have overlapping safe intervals, so by Helly's theorem for
    intervals every clique of the conflict graph lies in the set ``P(t)`` of safe intervals
    containing one step ``t``, and ``P(t)`` weighs at most the safe-interval profile at
    ``t``. The steps where ``P(t)`` is maximal (``t = end - 1`` of some buffer) are visited
    by decreasing profile, and the search stops once that profile is no heavier than the
    best clique (branch and bound: then the clique found is a maximum one) or after
    :data:`MAX_CLIQUE_STEPS` steps or :data:`MAX_CLIQUE_PAIRS` matrix entries. At each step
    the greedy of :func:`_heavy_clique` runs twice on ``P(t)``: from nothing and from the
    buffers live at ``t`` under plain liveness (a clique: see ``liveness_lower_bound``).
    The buffers live at the plain-liveness peak are the fallback, so the bound is never
    below the liveness bound.
    """
    n, steps = len(size), len(a.order)
    if not n:
        return np.zeros(0, dtype=np.int64)
    live_w = _profile(a.first, a.last + 1, size, steps)
    peak = int(live_w.argmax())
    best = np.flatnonzero((a.first <= peak) & (a.last >= peak))
    best_w = int(size[best].sum())
    safe_w = _profile(a.first, a.end, size, steps)
    safe_n = _profile(a.first, a.end, np.ones(n, dtype=np.int64), steps)
    tops = np.unique(a.end - 1)
    tops = tops[np.argsort(-safe_w[tops], kind="stable")]
    budget = MAX_CLIQUE_PAIRS
    for t in tops[:MAX_CLIQUE_STEPS].tolist():
        if safe_w[t] <= best_w:
            break  # no clique at this or any later step can be heavier
        k = int(safe_n[t])
        if k * k > budget:
            continue
        budget -= k * k
        rows = np.flatnonzero((a.first <= t) & (a.end > t))
        conflict = _conflict_matrix(a, rows)
        live = np.flatnonzero(a.last[rows] >= t)
        for start in (np.zeros(0, dtype=np.int64), live):
            got = _heavy_clique(conflict, size[rows], start)
            got_w = int(size[rows[got]].sum())
            if got_w > best_w:
                best, best_w = rows[got], got_w
    return np.sort(best)


def _max_antichain(a: _Analysis, size: np.ndarray) -> np.ndarray:
    """Rows of a maximum-weight set of pairwise-unordered buffers (an exact maximum-weight
    clique of the conflict graph), by one maximum flow.

    "Every access of ``i`` happens strictly before every access of ``j``" is a strict
    partial order on the accessed buffers (irreflexive: an access does not happen before
    itself; transitive: through any access of the middle buffer, happens-before being
    transitive). The conflict graph is its incomparability graph, so a maximum clique is a
    maximum-weight antichain, which weighted Dilworth / Koenig gives as ``sum(w) - `` the
    minimum cut of the split network ``s -> L_i`` (capacity ``w_i``), ``R_i -> t`` (``w_i``),
    ``R_i -> L_i`` and ``L_i -> R_j`` for ``i`` before ``j`` (unbounded): a finite cut
    puts each buffer in ``A`` (``s -> L_i`` cut), ``B`` (``R_i -> t`` cut) or neither, and the
    buffers in neither are an antichain; conversely an antichain ``C`` gives the cut ``A``
    = the buffers below ``C``, ``B`` = the rest outside ``C``, of weight ``sum(w) - w(C)``.
    The edges ``L_i -> R_j`` need only generate the order (``R_i -> L_i`` carries the
    constraint along a chain), so the pairs with disjoint safe intervals (always ordered,
    ``end_i <= first_j``) go through a chain of weightless time points ``T_t``: ``L_i ->
    T_{end_i}``, ``T_t -> T_{t'}`` for consecutive ``t < t'``, ``T_{first_j} -> R_j``;
    every path they add joins ordered pairs only. The overlapping pairs are tested one by one
    (the dominance test of the module docstring).

    References: L. R. Ford, D. R. Fulkerson, "Flows in Networks", 1962, ch. II.9 (Dilworth's
    theorem by flows); R. H. Moehring, "Algorithmic aspects of comparability graphs and
    interval graphs", 1985 (weighted antichains of posets in polynomial time).
    """
    import networkx as nx  # only when the exact bound runs

    n = len(size)
    order = np.argsort(a.first, kind="stable")
    stop = np.searchsorted(a.first[order], a.end[order], side="left")
    cnt = np.maximum(stop - np.arange(1, n + 1), 0)
    # sorted position k overlaps the positions k + 1 .. stop[k] - 1 (as _overlapping_pairs)
    pi = np.repeat(order, cnt)
    within = np.arange(len(pi)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    pj = order[np.repeat(np.arange(1, n + 1), cnt) + within]
    lc, fc = a.last_clock, a.from_clock
    fwd = np.all(lc[pi] <= fc[pj], axis=1)
    bwd = np.all(lc[pj] <= fc[pi], axis=1)
    g = nx.DiGraph()
    w = size.tolist()
    for i in range(n):
        g.add_edge("s", ("L", i), capacity=w[i])
        g.add_edge(("R", i), "t", capacity=w[i])
        g.add_edge(("R", i), ("L", i))  # no capacity: unbounded
        g.add_edge(("L", i), ("T", int(a.end[i])))
        g.add_edge(("T", int(a.first[i])), ("R", i))
    times = np.unique(np.concatenate([a.first, a.end])).tolist()
    g.add_edges_from((("T", t), ("T", u)) for t, u in itertools.pairwise(times))
    g.add_edges_from(
        (("L", i), ("R", j)) for i, j in zip(pi[fwd].tolist(), pj[fwd].tolist(), strict=True)
    )
    g.add_edges_from(
        (("L", j), ("R", i)) for i, j in zip(pi[bwd].tolist(), pj[bwd].tolist(), strict=True)
    )
    cut, (side, _) = nx.minimum_cut(g, "s", "t")
    rows = [i for i in range(n) if ("L", i) in side and ("R", i) not in side]
    assert sum(w[i] for i in rows) == sum(w) - cut  # the cut's antichain is the whole bound
    return np.array(rows, dtype=np.int64)


def _profile(start: np.ndarray, stop: np.ndarray, weight: np.ndarray, steps: int) -> np.ndarray:
    """Total weight of the half-open intervals containing each step ``0..steps-1``."""
    d = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(d, start, weight)
    np.add.at(d, stop, -weight)
    return np.cumsum(d[:steps])


def _overlapping_pairs(first: np.ndarray, end: np.ndarray) -> int:
    """Pairs of half-open intervals that overlap (sorted by start, j overlaps the later i
    with ``first[i] < end[j]``)."""
    order = np.argsort(first, kind="stable")
    stop = np.searchsorted(first[order], end[order], side="left")
    return int(np.maximum(stop - np.arange(1, len(first) + 1), 0).sum())


def _peak(start: np.ndarray, end: np.ndarray, size: np.ndarray) -> int:
    """Most bytes live at once over half-open intervals (ends before starts at one time)."""
    if not len(start):
        return 0
    t = np.concatenate([start, end])
    d = np.concatenate([size, -size])
    o = np.lexsort((d, t))
    return max(int(np.cumsum(d[o]).max()), 0)


_ALIGNMENT = operator.attrgetter("alignment")
_SIZE = operator.attrgetter("size_bytes")
_ID = operator.attrgetter("id")
_OFFSET = operator.attrgetter("offset")


def _offset_copier() -> Any:
    """Make :func:`_with_offsets`: one loop that copies each buffer's fields by plain
    attribute stores into an object of :func:`oxiwork.graph._positional`'s class for Buffer
    (Buffer's very slots; it also checks that Buffer is a plain slotted dataclass), then
    makes it a Buffer by ``__class__`` assignment, as that constructor does.

    ``dataclasses.replace``, or even ``Buffer(*values)``, runs the generated frozen
    ``__init__`` (11 ``object.__setattr__`` calls per buffer); a ``map`` of each slot
    descriptor over all the buffers costs a method-wrapper call per field, and the
    positional constructor a call with 11 arguments per buffer: 0.25 s, and 0.2 s against
    0.05 s for this loop on the 66k buffers of the 100k-node layered example. Buffer has no
    ``__post_init__`` (the graph checks buffers, not their constructor), so the objects are
    the ones ``__init__`` would build; tests/optimizer/test_memory_pass.py compares them
    with ``replace``'s.
    """
    names = tuple(f.name for f in fields(Buffer))
    stores = "".join(
        f"        new.{f} = {'offset' if f == 'offset' else 'old.' + f}\n" for f in names
    )
    code = (
        "def _with_offsets(buffers, offsets):\n"
        "    out = []\n"
        "    push = out.append\n"
        "    for old, offset in zip(buffers, offsets, strict=True):\n"
        "        new = _new(_Fields)\n"
        f"{stores}"
        "        new.__class__ = _Buffer\n"
        "        push(new)\n"
        "    return out\n"
    )
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_Fields": _positional(Buffer),
        "_Buffer": Buffer,
    }
    exec(code, scope)
    return scope["_with_offsets"]


_copy_with_offsets = _offset_copier()


def _with_offsets(buffers: list[Buffer], offsets: list[int]) -> list[Buffer]:
    """``[replace(b, offset=o) for b, o in zip(buffers, offsets)]``, without running
    Buffer's frozen ``__init__`` per buffer (see :func:`_offset_copier`).

    >>> from oxiwork.node import BufferId
    >>> _with_offsets([Buffer(BufferId(0), "x", 64)], [256])[0].offset
    256
    """
    return _copy_with_offsets(buffers, offsets)


def plan_memory(
    graph: ComputeGraph,
    *,
    mode: str = "auto",
    time_limit: float | None = None,
    capacity: int | None = None,
) -> PassResult:
    """Give every non-external buffer an arena offset that is safe for the stream schedule.

    Parameters
    ----------
    graph : ComputeGraph
        Usually the stream pass's output; nodes without a stream count as stream 0.
    mode : {"auto", "heuristic", "exact"}
        Passed to the interval planner (``"exact"`` is MiniMalloc's search, and always runs
        the interval planner). ``"auto"`` (default) runs that search within
        :func:`oxiwork.optimizer.memory.auto_time_limit` of the number of buffers, and only
        where it could help: the placement above misses the lower bound and the safe
        intervals' own bound is below it. The report says whether it stopped early
        (``stopped_early``) and what it proved (``search_bound``). Both modes also run
        the conflict search (module docstring, item 3) where the placement misses the
        lower bound, with a time limit of its own: ``time_limit``, else
        :data:`CONFLICT_SEARCH_SCALE` times ``auto_time_limit``'s per-buffer share in
        ``"auto"`` and ``memory.DEFAULT_TIME_LIMIT`` in ``"exact"`` (which without
        ``time_limit`` may so take twice that); ``"heuristic"`` runs neither.
    time_limit : float, optional
        Seconds the exact (or auto) search may take.
    capacity : int, optional
        Arena bytes the plan should fit in; a plan that does not is still returned, with
        ``fits=False`` and a ``message`` in the report.

    Returns
    -------
    PassResult
        The graph with placed buffers and artefact ``"memory"``: a :class:`MemoryReport`.

    Raises
    ------
    InvalidArgument
        A bad mode, time limit or capacity (from the planner).

    References
    ----------
    Lamport 1978; Pisarchyk & Lee 2020; Moffitt 2023; XLA's best-fit heap (see the module
    docstring).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> plan_memory(quick_start()).artefacts["memory"].ratio
    1.0
    """
    t0 = time.perf_counter()
    # Check the options up front, as the planner would (it may not run): an empty plan.
    plan_buffers({}, {}, {}, mode=mode, time_limit=time_limit, capacity=capacity)
    with paused_gc():  # many acyclic allocations: a GC pass would rescan them all
        return _plan_memory(graph, mode, time_limit, capacity, t0)


def _plan_memory(
    graph: ComputeGraph, mode: str, time_limit: float | None, capacity: int | None, t0: float
) -> PassResult:
    a = _analyse(graph)
    n = len(a.ids)
    is_row = np.zeros(len(graph.buffers), dtype=bool)
    is_row[a.index] = True  # (ascending: the rows are the buffers picked in graph order)
    row_buffers = list(itertools.compress(graph.buffers, is_row.tolist()))
    align = np.fromiter(map(_ALIGNMENT, row_buffers), dtype=np.int64, count=n)
    raw_size = np.fromiter(map(_SIZE, row_buffers), dtype=np.int64, count=n)
    size = -(-raw_size // align) * align
    rows = np.arange(n)
    length = a.end - a.first
    overlapping = _overlapping_pairs(a.first, a.end)
    everything = n * (n - 1) // 2
    live_lb = _peak(a.first, a.last + 1, size)
    clique = _conflict_clique(a, size)
    clique_lb = int(size[clique].sum())
    lower = max(live_lb, clique_lb)
    # The first-access ordering always runs: it tests the same pairs the interval planner
    # visits, in numpy rather than Python, and meets every conflicting pair, so it also
    # yields each buffer's conflict-weighted degree. The others test all pairs, so they run
    # only up to MAX_EXACT_PAIRS and while the arena is above the bound.
    more = everything <= MAX_EXACT_PAIRS  # will the other orderings run (if needed)?
    by_first = np.lexsort((rows, -size, a.first))
    if more:
        off, top, conflict_pairs, degree = _place_exact(
            by_first, size, align, a, True, degrees=True
        )
    else:
        # the same placement without listing the conflicting pairs (too many to count)
        off, top = _place_sweep(by_first, size, align, a)
        conflict_pairs, degree = None, None
    exact = (off, top, "conflict_best_fit_start")
    # name -> np.lexsort keys, most significant last (see MAX_EXACT_PAIRS for the choice).
    orderings = {
        "conflicts": (rows, -size, -degree) if degree is not None else (),
        "length": (rows, -size, -length),
    }
    for name, keys in orderings.items():
        if not more or exact[1] <= lower:
            break
        off, top, _, _ = _place_exact(np.lexsort(keys), size, align, a, False)
        if top < exact[1]:
            exact = (off, top, f"conflict_best_fit_{name}")
    if exact[1] > lower and len(a.members) > 1 and overlapping <= MAX_ANTICHAIN_PAIRS:
        # The placement misses the greedy bound on several streams: compute the exact one
        # (one stream: the liveness peak already is a maximum clique; a met bound is exact).
        heavier = _max_antichain(a, size)
        if int(size[heavier].sum()) > clique_lb:
            clique, clique_lb = heavier, int(size[heavier].sum())
            lower = max(live_lb, clique_lb)
    searched, search_stopped = 0, False
    if exact[1] > lower and mode != "heuristic" and 1 < n <= MAX_SEARCH_BUFFERS:
        limit = time_limit
        if limit is None:
            limit = (
                DEFAULT_TIME_LIMIT
                if mode == "exact"
                else auto_time_limit(CONFLICT_SEARCH_SCALE * n)
            )
        found, top, status, searched, proved = _search_placement(
            size, align, _conflict_matrix(a, rows), exact[1], lower, time.perf_counter() + limit
        )
        if found is not None:
            exact = (found, top, "conflict_search")
        # what the search ruled out (every canonical placement below it tried): no safe
        # arena is smaller
        lower = max(lower, proved)
        search_stopped = status == "timeout"
    safe = a.safe
    interval_lb = _peak(a.first, a.end, size)
    # When the placement meets the lower bound no plan beats it: the interval planner is
    # run only if it might (or when asked for the exact search).
    if mode == "exact" or (overlapping <= MAX_INTERVAL_PAIRS and exact[1] > lower):
        sizes = dict(zip(a.ids, raw_size.tolist(), strict=True))
        aligns = dict(zip(a.ids, align.tolist(), strict=True))
        run = mode
        if mode == "auto" and (exact[1] <= lower or interval_lb >= exact[1]):
            # the placement meets the bound, or no plan of the safe intervals can beat it
            run = "heuristic"
        plan = plan_buffers(sizes, aligns, safe, mode=run, time_limit=time_limit, capacity=capacity)
        if plan.proved_bound > lower and len(a.members) <= 1:
            # one stream: the safe intervals are plain liveness and two buffers conflict
            # exactly when they overlap, so the search's bound holds for every safe arena
            lower = plan.proved_bound
        # by row (every accessed buffer has one in the plan; 0 as before if not)
        chosen = np.fromiter(
            map(plan.offsets.get, a.ids, itertools.repeat(0)), dtype=np.int64, count=n
        )
        arena, strategy = int(plan.arena_bytes), plan.strategy
        if exact[1] < arena:
            chosen = exact[0]
            arena, strategy = exact[1], exact[2]
    else:
        chosen = exact[0]
        arena, strategy = exact[1], exact[2]
        plan = MemoryPlan(
            offsets=dict(zip(a.ids, chosen.tolist(), strict=True)),
            sizes=dict(zip(a.ids, size.tolist(), strict=True)),
            lifetimes=safe,
            arena_bytes=arena,
            lower_bound=interval_lb,
            optimal=arena <= interval_lb,
            ratio=arena / interval_lb if interval_lb else 1.0,
            seconds=time.perf_counter() - t0,
            strategy=strategy,
            mode=mode,
            fits=None if capacity is None else arena <= capacity,
            proved_bound=interval_lb,
        )
    # Every arena buffer (not external, not a view: a view's address is its base's + its
    # offset) gets its row's offset, or 0 if no node accesses it; only those whose offset
    # changes are rebuilt.
    by_index = np.zeros(len(graph.buffers), dtype=np.int64)
    by_index[a.index] = chosen
    arena_pos = np.flatnonzero(a.in_arena)
    arena_index = arena_pos.tolist()
    arena_buffers = list(itertools.compress(graph.buffers, a.in_arena.tolist()))
    new_offsets = by_index[arena_pos].tolist()
    offsets: dict[BufferId, int] = dict(zip(map(_ID, arena_buffers), new_offsets, strict=True))
    changed = list(map(operator.ne, map(_OFFSET, arena_buffers), new_offsets))
    placed = _with_offsets(
        list(itertools.compress(arena_buffers, changed)),
        list(itertools.compress(new_offsets, changed)),
    )
    buffers = list(graph.buffers)
    for k, b in zip(itertools.compress(arena_index, changed), placed, strict=True):
        buffers[k] = b
    fits = None if capacity is None else arena <= capacity
    message = None
    if fits is False:
        message = (
            f"the arena needs {arena} bytes, more than the capacity of {capacity} (lower "
            f"bound {lower}); raise the capacity, use fewer streams, or mode='exact'"
        )
    report = MemoryReport(
        plan=plan,
        offsets=offsets,
        intervals=safe,
        order=a.order,
        arena_bytes=arena,
        lower_bound=lower,
        liveness_lower_bound=live_lb,
        conflict_lower_bound=clique_lb,
        conflict_clique=tuple(map(a.ids.__getitem__, clique.tolist())),
        interval_lower_bound=interval_lb,
        ratio=arena / lower if lower else 1.0,
        strategy=strategy,
        mode=mode,
        optimal=arena == lower,
        fits=fits,
        message=message,
        conflict_pairs=conflict_pairs,
        seconds=time.perf_counter() - t0,
        stopped_early=plan.stopped_early or search_stopped,
        search_bound=plan.proved_bound,
        search_nodes=plan.nodes + searched,
    )
    # The new buffers are the graph's with aligned offsets (every planner places at
    # multiples of the alignment; verify_graph and verify_plan check them again).
    planned = graph.with_changes(buffers=buffers, checked_buffers=placed)
    share_bound(graph, planned, offsets_only=True)  # offsets do not change what a kernel computes
    liveness.share_accesses(graph, planned)  # nor what a node accesses
    return PassResult(planned, {"memory": report})
