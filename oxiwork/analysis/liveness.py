"""Buffer liveness over an execution order: lifetimes, dead buffers, peak live bytes.

A step is an index into the order of nodes. A buffer is live from its first access (its
first write, or its first read when nothing writes it first: external inputs, or buffers
nobody writes) to its last access, as the half-open interval ``[first, last + 1)``. Two
buffers whose intervals do not overlap may share memory; the largest sum of sizes live at
one step (``max_live_bytes``) is the lower bound every memory plan is judged against.

This is the lifetime analysis of memory planners for static graphs (compare JAX's
``last_used`` and tinygrad's ``schedule/memory.py``; the interval formulation follows
Y. Pisarchyk, J. Lee, "Efficient memory management for deep neural net inference",
arXiv:2001.03288, 2020, and P. Lamprakos et al., "MiniMalloc", ASPLOS 2023).

Example
-------
>>> from oxiwork import GraphBuilder, MemcpyDir
>>> from oxiwork.analysis import liveness
>>> b = GraphBuilder()
>>> x, y = b.alloc_buffer("x", 256), b.alloc_buffer("y", 512)
>>> _ = b.add_memset("zero", 256, 0, dst=x)
>>> _ = b.add_kernel("k", 1, 32).inputs([x]).outputs([y]).finish()
>>> _ = b.add_memcpy("down", MemcpyDir.DeviceToHost, 512, src=y)
>>> info = liveness.analyze(b.build())
>>> info.intervals[x], info.intervals[y], info.max_live_bytes, info.live_bytes
((0, 2), (1, 3), 768, (256, 768, 512))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from oxiwork.analysis._util import paused_gc
from oxiwork.error import InvalidArgument
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, NodeId

__all__ = ["LivenessInfo", "analyze"]


@dataclass(frozen=True, slots=True)
class LivenessInfo:
    """The result of :func:`analyze`.

    Attributes
    ----------
    order
        The node order the steps index (step ``i`` runs ``order[i]``).
    intervals
        ``buffer id -> (first, last + 1)``, half-open step interval of every accessed
        buffer, external ones included.
    dead
        Buffers written but never read that are not external: their values are never
        used (a buffer read by a DeviceToHost copy counts as read).
    unused
        Buffers no node reads or writes (they need no memory at all).
    live_bytes
        ``live_bytes[i]``: bytes of non-external buffers live at step ``i``.
    max_live_bytes
        ``max(live_bytes)`` (0 for no steps): the lower bound for the arena of any
        memory plan of this order. External buffers are excluded because they are
        user-owned and never placed in the arena. Sizes are raw ``size_bytes``; padding
        to alignment only makes real plans larger, so the bound stays a bound.
    peak_step
        The first step at which ``max_live_bytes`` is reached (-1 for no steps).
    """

    order: tuple[NodeId, ...]
    intervals: dict[BufferId, tuple[int, int]]
    dead: frozenset[BufferId]
    unused: frozenset[BufferId]
    live_bytes: tuple[int, ...]
    max_live_bytes: int
    peak_step: int

    def live_at(self, step: int) -> frozenset[BufferId]:
        """Buffers whose interval contains ``step`` (linear scan; for tests and the UI)."""
        return frozenset(b for b, (s, e) in self.intervals.items() if s <= step < e)


def _order_positions(graph: ComputeGraph, order: Sequence[NodeId] | None) -> list[int]:
    d = graph.dense()
    if order is None:
        return d.topo
    pos = d.pos
    out: list[int] = []
    for nid in order:
        p = pos.get(nid)
        if p is None:
            raise InvalidArgument(
                f"order names {nid!r}, which is not a node of this graph; pass node ids of it"
            )
        out.append(p)
    n = len(d.ids)
    if len(out) != n or len(set(out)) != n:
        raise InvalidArgument(
            f"order has {len(out)} entries ({len(set(out))} distinct) but the graph has {n} "
            "nodes; pass every node exactly once"
        )
    step = [0] * n
    for i, p in enumerate(out):
        step[p] = i
    for a, succ in enumerate(d.succ):
        for b in succ:
            if step[b] < step[a]:
                raise InvalidArgument(
                    f"order runs {graph.nodes[b].name!r} (step {step[b]}) before its "
                    f"dependency {graph.nodes[a].name!r} (step {step[a]}); pass a "
                    "topological order"
                )
    return out


def analyze(graph: ComputeGraph, order: Sequence[NodeId] | None = None) -> LivenessInfo:
    """Liveness intervals of every buffer of ``graph`` over ``order``.

    Parameters
    ----------
    graph
        The DAG.
    order
        The execution order (node ids, each once, dependencies first); default
        ``graph.topological_order()``. :class:`~oxiwork.error.InvalidArgument` if it is
        not a topological order of ``graph``.

    Returns
    -------
    LivenessInfo

    Notes
    -----
    One pass over the order records first and last access per buffer; live bytes per
    step come from a difference array (+size at ``first``, -size at ``last + 1``) and a
    prefix sum, so the whole analysis is O(V + accesses + B).

    Examples
    --------
    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> x, spare = b.alloc_buffer("x", 64), b.alloc_buffer("spare", 64)
    >>> _ = b.add_memset("zero", 64, 0, dst=x)
    >>> info = analyze(b.build())
    >>> sorted(info.dead), sorted(info.unused)
    ([BufferId(0)], [BufferId(1)])
    """
    with paused_gc():
        return _analyze(graph, order)


def _analyze(graph: ComputeGraph, order: Sequence[NodeId] | None) -> LivenessInfo:
    positions = _order_positions(graph, order)
    nodes = graph.nodes
    buffers = graph.buffers
    nb = len(buffers)
    first = [-1] * nb
    last = [-1] * nb
    read = [False] * nb
    if nb and buffers[-1].id == nb - 1:
        # Ids are unique and sorted, so they are exactly 0..nb-1 (every builder-made
        # graph): index the lists by id and skip a dict lookup per access.
        for step, node in enumerate(map(nodes.__getitem__, positions)):
            for i in node.inputs:
                if first[i] < 0:
                    first[i] = step
                last[i] = step
                read[i] = True
            for i in node.outputs:
                if first[i] < 0:
                    first[i] = step
                last[i] = step
    else:
        bindex = {b.id: i for i, b in enumerate(buffers)}
        for step, node in enumerate(map(nodes.__getitem__, positions)):
            for bid in node.inputs:
                i = bindex[bid]
                if first[i] < 0:
                    first[i] = step
                last[i] = step
                read[i] = True
            for bid in node.outputs:
                i = bindex[bid]
                if first[i] < 0:
                    first[i] = step
                last[i] = step

    steps = len(positions)
    delta = [0] * (steps + 1)
    intervals: dict[BufferId, tuple[int, int]] = {}
    dead: list[BufferId] = []
    unused: list[BufferId] = []
    for i, b in enumerate(buffers):
        s = first[i]
        if s < 0:
            unused.append(b.id)
            continue
        e = last[i] + 1
        intervals[b.id] = (s, e)
        if b.external:
            continue
        if not read[i]:
            dead.append(b.id)
        delta[s] += b.size_bytes
        delta[e] -= b.size_bytes

    live = list(accumulate(delta[:steps]))
    peak = max(live, default=0)
    return LivenessInfo(
        order=tuple([graph.dense().ids[p] for p in positions]),
        intervals=intervals,
        dead=frozenset(dead),
        unused=frozenset(unused),
        live_bytes=tuple(live),
        max_live_bytes=peak,
        peak_step=live.index(peak) if live else -1,
    )
