"""The graph-level memory pass: place every arena buffer so that the stream schedule is safe.

Two buffers may share bytes only if every access of one happens before every access of
the other, where "happens before" is what the GPU enforces: stream order plus event
record -> wait pairs (graph edges order nothing by themselves). Plain liveness over one
topological order is not enough once nodes run on several streams: a buffer that is dead
"after step 7" of the issue order may still be in use by a concurrent stream.

Method. Take the issue order ``L`` (:func:`oxiwork.optimizer.stream.issue_order`: a
topological order consistent with every stream, sorted by simulated start time so that
the streams advance together) and the vector clocks of
:mod:`oxiwork.executor.happens_before`. For a buffer with accesses ``A``:

* ``first`` is the smallest index in ``L`` of an access;
* ``end`` is the smallest index such that every node at or after it in ``L`` happens
  strictly after all of ``A``. Per stream, the clocks never decrease, so a binary search
  finds the stream's first node past ``A``; the nodes of that stream before it must lie
  before ``end``, so ``end`` is one more than the latest of them over all streams.

The intervals ``[first, end)`` go to :func:`oxiwork.optimizer.memory.plan_buffers`, which
honours each buffer's alignment. If two intervals are disjoint, say ``end_1 <= first_2``,
every access of buffer 2 is at index ``>= end_1`` and so strictly after all accesses of
buffer 1: sharing bytes is safe. On one stream ``end`` is the last access + 1, i.e. plain
liveness.

External buffers are never placed; buffers no node touches get offset 0 (they need no
memory and nothing can race on them).

References
----------
* L. Lamport, CACM 1978; C. J. Fidge 1988; F. Mattern 1989 (happens-before, vector clocks).
* Y. Pisarchyk, J. Lee, arXiv:2001.03288, 2020; M. D. Moffitt, "MiniMalloc", ASPLOS 2023
  (the interval planner this pass feeds).

Example
-------
>>> from oxiwork.examples import quick_start
>>> res = plan_memory(quick_start())
>>> report = res.artefacts["memory"]
>>> report.arena_bytes, report.live_lower_bound
(8192, 8192)
>>> [b.offset for b in res.graph.buffers]
[0, 4096, 0]
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from oxiwork.analysis._util import paused_gc
from oxiwork.executor.happens_before import graph_clocks
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, NodeId
from oxiwork.optimizer.memory import MemoryPlan, plan_buffers
from oxiwork.optimizer.stream import issue_order
from oxiwork.pipeline import PassResult

__all__ = ["MemoryReport", "buffer_intervals", "plan_memory"]


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """What the memory pass did (artefact ``"memory"``).

    Attributes
    ----------
    plan : MemoryPlan
        The interval planner's result (offsets, sizes, lifetimes by buffer id).
    offsets : dict
        Buffer id -> arena offset, for every non-external buffer.
    intervals : dict
        Buffer id -> the happens-before-safe ``[first, end)`` interval over ``order``.
    order : tuple of NodeId
        The issue order the intervals index.
    arena_bytes : int
        Bytes the arena needs.
    lower_bound : int
        Most bytes live at once over the safe intervals: no placement of them beats it.
    live_lower_bound : int
        Most bytes live at once under plain liveness over ``order`` (last access + 1):
        what a single-stream run of the same order would need at best.
    ratio : float
        ``arena_bytes / lower_bound``.
    strategy, mode : str
        The planner's winning strategy and the mode asked for.
    optimal : bool
        The planner proved its arena minimal for the intervals.
    fits : bool or None
        Whether the arena fits the ``capacity`` asked for (None without one).
    message : str or None
        Why the plan falls short, if it does.
    seconds : float
        Time the whole pass took.
    """

    plan: MemoryPlan
    offsets: dict[BufferId, int]
    intervals: dict[BufferId, tuple[int, int]]
    order: tuple[NodeId, ...]
    arena_bytes: int
    lower_bound: int
    live_lower_bound: int
    ratio: float
    strategy: str
    mode: str
    optimal: bool
    fits: bool | None
    message: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for the widget)."""
        out = self.plan.to_dict()
        out.update(
            live_lower_bound=self.live_lower_bound,
            seconds=self.seconds,
            offsets={str(int(b)): o for b, o in self.offsets.items()},
        )
        return out


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
    vc, order = graph_clocks(graph, issue_order(graph))
    where = {nid: i for i, nid in enumerate(order)}
    accesses: dict[BufferId, list[int]] = {}
    for node in graph.nodes:
        i = where[node.id]
        for bid in (*node.inputs, *node.outputs):
            accesses.setdefault(bid, []).append(i)
    safe: dict[BufferId, tuple[int, int]] = {}
    live: dict[BufferId, tuple[int, int]] = {}
    for buf in graph.buffers:
        items = accesses.get(buf.id)
        if buf.external or not items:
            continue
        first, last = min(items), max(items)
        live[buf.id] = (first, last + 1)
        clock = vc.access_clock(items)
        end = last + 1
        for s, members in enumerate(vc.members):
            # Every node of stream s from position q on is past the accesses; the ones
            # before q must come before `end` in the order.
            q = vc.past(s, clock)
            if q > 0:
                end = max(end, members[q - 1] + 1)
        safe[buf.id] = (first, end)
    return safe, live, order


def _peak(intervals: Mapping[BufferId, tuple[int, int]], size: Mapping[BufferId, int]) -> int:
    delta: dict[int, int] = {}
    for bid, (a, b) in intervals.items():
        delta[a] = delta.get(a, 0) + size[bid]
        delta[b] = delta.get(b, 0) - size[bid]
    live = peak = 0
    for t in sorted(delta):
        live += delta[t]
        peak = max(peak, live)
    return peak


def plan_memory(
    graph: ComputeGraph,
    *,
    mode: str = "heuristic",
    time_limit: float | None = None,
    capacity: int | None = None,
) -> PassResult:
    """Give every non-external buffer an arena offset that is safe for the stream schedule.

    Parameters
    ----------
    graph : ComputeGraph
        Usually the stream pass's output; nodes without a stream count as stream 0.
    mode : {"heuristic", "exact"}
        Passed to the interval planner (``"exact"`` is MiniMalloc's search).
    time_limit : float, optional
        Seconds the exact mode may search.
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
    Lamport 1978; Pisarchyk & Lee 2020; Moffitt 2023 (see the module docstring).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> plan_memory(quick_start()).artefacts["memory"].ratio
    1.0
    """
    t0 = time.perf_counter()
    with paused_gc():  # O(n) acyclic allocations; see oxiwork.analysis._util
        safe, live, order = buffer_intervals(graph)
    sizes = {b.id: b.size_bytes for b in graph.buffers}
    aligns = {b.id: b.alignment for b in graph.buffers}
    plan = plan_buffers(sizes, aligns, safe, mode=mode, time_limit=time_limit, capacity=capacity)
    offsets: dict[BufferId, int] = {}
    buffers = []
    for b in graph.buffers:
        if b.external:
            buffers.append(b)
            continue
        off = int(plan.offsets.get(b.id, 0))
        offsets[b.id] = off
        buffers.append(replace(b, offset=off))
    rounded = dict(plan.sizes)
    live_lb = _peak(live, {b: rounded.get(b, sizes[b]) for b in live})
    report = MemoryReport(
        plan=plan,
        offsets=offsets,
        intervals=safe,
        order=order,
        arena_bytes=plan.arena_bytes,
        lower_bound=plan.lower_bound,
        live_lower_bound=live_lb,
        ratio=plan.ratio,
        strategy=plan.strategy,
        mode=mode,
        optimal=plan.optimal,
        fits=plan.fits,
        message=plan.message,
        seconds=time.perf_counter() - t0,
    )
    return PassResult(graph.with_changes(buffers=buffers), {"memory": report})
