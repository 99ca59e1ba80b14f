"""Buffer liveness over an execution order: lifetimes, dead buffers, peak live bytes.

A step is an index into the order of nodes. A buffer is live from its first access (its
first write, or its first read when nothing writes it first: external inputs, or buffers
nobody writes) to its last access, as the half-open interval ``[first, last + 1)``. Two
buffers whose intervals do not overlap may share memory; the largest sum of sizes live at
one step (``max_live_bytes``) is the lower bound every memory plan is judged against.

A view (:attr:`Buffer.base <oxiwork.node.Buffer.base>`) holds no bytes of its own: each
access to it counts as an access to its base too, so the base lives as long as any view of
it is used, and the view itself is never placed, counted in live bytes, or dead.

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

import array
import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from oxiwork.analysis._util import paused_gc
from oxiwork.error import InvalidArgument
from oxiwork.graph import ComputeGraph, _edges_np
from oxiwork.node import BufferId, NodeId

__all__ = [
    "ArenaAccesses",
    "LivenessInfo",
    "analyze",
    "arena_accesses",
    "dead_buffers",
    "max_live_bytes",
    "max_live_bytes_merged",
    "order_at",
    "positions_of",
    "share_accesses",
]


@dataclass(frozen=True, slots=True)
class LivenessInfo:
    """The result of :func:`analyze`.

    Read-only: ``intervals`` is a ``types.MappingProxyType``, the rest tuples and
    frozensets, so the memory pass, the simulator and the widget can share one result.

    Attributes
    ----------
    order
        The node order the steps index (step ``i`` runs ``order[i]``).
    intervals
        ``buffer id -> (first, last + 1)``, half-open step interval of every accessed
        buffer, external ones included.
    dead
        Buffers written but never read that are neither external nor views: their values are never
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
    intervals: Mapping[BufferId, tuple[int, int]]
    dead: frozenset[BufferId]
    unused: frozenset[BufferId]
    live_bytes: tuple[int, ...]
    max_live_bytes: int
    peak_step: int

    def live_at(self, step: int) -> frozenset[BufferId]:
        """Buffers whose interval contains ``step`` (linear scan; for tests and the UI)."""
        return frozenset(b for b, (s, e) in self.intervals.items() if s <= step < e)


@dataclass(frozen=True, slots=True)
class ArenaAccesses:
    """The accesses of the arena buffers (accessed, not external, not views; a view's
    accesses count as its base's) over an order, as arrays.

    For passes that work on arrays rather than dicts (the memory pass). Every array is
    read-only.

    Attributes
    ----------
    order
        The node order the steps index.
    buffers
        Row ``k`` is buffer ``buffers[k]`` (graph order).
    first, last
        ``(n,)`` first and last step of an access of each row: the interval of
        :attr:`LivenessInfo.intervals` is ``(first, last + 1)``.
    row, step
        One entry per access of a row (node by node in graph order, inputs then outputs):
        its row and its step.
    index
        ``(n,)`` the index in ``graph.buffers`` of each row (ascending).
    in_arena
        ``(len(graph.buffers),)`` by buffer index: whether the buffer is in the arena (not
        external, not a view), accessed or not.
    """

    order: tuple[NodeId, ...]
    buffers: tuple[BufferId, ...]
    first: np.ndarray
    last: np.ndarray
    row: np.ndarray
    step: np.ndarray
    index: np.ndarray
    in_arena: np.ndarray


def _order_positions(graph: ComputeGraph, order: Sequence[NodeId] | None) -> Sequence[int]:
    """The node positions of ``order`` (``graph.dense().topo`` for None), checked: every
    node once, dependencies first (:class:`InvalidArgument` naming what is wrong)."""
    d = graph.dense()
    if order is None:
        return d.topo
    pos = d.pos
    if isinstance(order, (str, bytes)) or not isinstance(order, Iterable):
        raise InvalidArgument(
            f"order must be a list of node ids, got {type(order).__name__}; pass every node once"
        )
    order = order if isinstance(order, Sequence) else list(order)
    n = len(d.ids)
    out = positions_of(graph, order)
    if out is None:
        for nid in order:
            try:
                p = pos.get(nid)
            except TypeError:  # unhashable: not an id
                p = None
            if p is None:
                raise InvalidArgument(
                    f"order names {nid!r}, which is not a node of this graph; pass node ids of it"
                )
        raise AssertionError("unreachable: every entry is a node id")  # pragma: no cover
    distinct = int(np.count_nonzero(np.bincount(out, minlength=n))) if len(out) else 0
    if len(out) != n or distinct != n:
        raise InvalidArgument(
            f"order has {len(out)} entries ({distinct} distinct) but the graph has {n} "
            "nodes; pass every node exactly once"
        )
    step = np.empty(n, dtype=np.int64)
    step[out] = np.arange(n, dtype=np.int64)
    # every edge forward: over the graph's own edge arrays (cached when it was built)
    _, _, src, dst = _edges_np(graph)
    if (step[dst] < step[src]).any():
        # name the first in (position, successor) order, as a loop over d.succ meets it
        src, dst = _edge_positions(graph)
        bad = np.flatnonzero(step[dst] < step[src])
        a, b = int(src[bad[0]]), int(dst[bad[0]])
        raise InvalidArgument(
            f"order runs {graph.nodes[b].name!r} (step {step[b]}) before its "
            f"dependency {graph.nodes[a].name!r} (step {step[a]}); pass a "
            "topological order"
        )
    return out


def positions_of(graph: ComputeGraph, order: Sequence[NodeId]) -> np.ndarray | None:
    """The node positions of the ids in ``order`` (read-only), or None if one is not a node
    id of ``graph``; nothing else is checked. The last tuple asked for is cached per graph
    (by identity, so only immutable orders: the memory pass asks for the issue order's
    twice, once for the clocks and once for the accesses).

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> positions_of(g, g.topological_order()).tolist(), positions_of(g, [99])
    ([0, 1, 2, 3], None)
    """
    cached = graph._cache.get("analysis.order_positions")
    if cached is not None and cached[0] is order:
        return cached[1]
    pos = graph.dense().pos
    try:
        out = np.fromiter(map(pos.__getitem__, order), dtype=np.int64, count=len(order))
    except (KeyError, TypeError):  # not a node id (or unhashable)
        return None
    out.setflags(write=False)
    if isinstance(order, tuple):
        graph._cache["analysis.order_positions"] = (order, out)
    return out


def order_at(graph: ComputeGraph, positions: Sequence[int]) -> tuple[NodeId, ...]:
    """The node ids at ``positions`` (node positions of ``graph``, not checked here), as
    an order whose positions :func:`positions_of` then knows (cached as for an order it
    looked up): for a caller that computed an order as positions, so that the analyses
    of that order do not look every id up again.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> order = order_at(g, [0, 2, 1, 3])
    >>> positions_of(g, order).tolist(), [g.node(n).name for n in order]
    ([0, 2, 1, 3], ['upload', 'scale', 'relu', 'download'])
    """
    out = np.array(positions, dtype=np.int64)  # a copy: nobody else may write into it
    out.setflags(write=False)
    order = _ids(graph, out)
    graph._cache["analysis.order_positions"] = (order, out)
    graph._cache["analysis.order_ids"] = order  # made of NodeIds (for _as_ids)
    return order


def _ids(graph: ComputeGraph, positions: Sequence[int]) -> tuple[NodeId, ...]:
    """The node ids at ``positions``."""
    ids = graph.dense().ids
    at = np.asarray(positions).tolist()
    if len(at) < 2:  # (itemgetter of one position gives the id itself, of none raises)
        return tuple(map(ids.__getitem__, at))
    # one C call picks them all: half the time of a map of getitem at 100k nodes
    return operator.itemgetter(*at)(ids)


def _as_ids(
    graph: ComputeGraph, order: Sequence[NodeId], positions: Sequence[int]
) -> tuple[NodeId, ...]:
    """``order`` (checked: its ``positions``) as a tuple of NodeId: itself when it already
    is one (the memory pass's issue order), else :func:`_ids`."""
    # (the last order order_at made holds the graph's own ids: no pass over its types)
    if order is graph._cache.get("analysis.order_ids") or (
        isinstance(order, tuple) and set(map(type, order)) <= {NodeId}
    ):
        return order
    return _ids(graph, positions)


def _edge_positions(graph: ComputeGraph) -> tuple[np.ndarray, np.ndarray]:
    """Every dependency as (source, destination) node positions, by source position then
    successor order (cached per graph)."""
    edges = graph._cache.get("analysis.edge_positions")
    if edges is None:
        succ = graph.dense().succ
        counts = np.fromiter(map(len, succ), dtype=np.int64, count=len(succ))
        dst = np.fromiter(
            itertools.chain.from_iterable(succ), dtype=np.int64, count=int(counts.sum())
        )
        src = np.repeat(np.arange(len(succ), dtype=np.int64), counts)
        for arr in (src, dst):
            arr.setflags(write=False)
        edges = graph._cache["analysis.edge_positions"] = (src, dst)
    return edges


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


def _accesses(graph: ComputeGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every buffer access as flat arrays (node position, buffer index, is a read).

    Built once per graph with one Python pass over the nodes and cached in the graph's
    ``_cache``: each analysis over a new order is then a handful of numpy operations
    instead of a Python loop chasing 100k node objects in that order.
    """
    acc = graph._cache.get("analysis.accesses")
    if acc is None:
        buffers, nodes = graph.buffers, graph.nodes
        nb = len(buffers)
        dense_ids = not nb or buffers[-1].id == nb - 1  # sorted unique ids: 0..nb-1
        # Node by node, inputs then outputs: each node's inputs and outputs go to their
        # slots of the flat arrays (a few C-level passes instead of a Python loop).
        ins = list(map(_INPUTS, nodes))
        outs = list(map(_OUTPUTS, nodes))
        nin = np.fromiter(map(len, ins), dtype=np.int64, count=len(nodes))
        nout = np.fromiter(map(len, outs), dtype=np.int64, count=len(nodes))
        bin_ = np.fromiter(itertools.chain.from_iterable(ins), dtype=np.int64, count=int(nin.sum()))
        bout = np.fromiter(
            itertools.chain.from_iterable(outs), dtype=np.int64, count=int(nout.sum())
        )
        bindex = None
        if not dense_ids:
            # ids to indices by a binary search of the sorted ids (a dict of every buffer
            # and a look-up per access cost 0.15 s at 100k nodes), checked to hit
            # (from the cached id tuple: array.array reads int subclasses' values in C,
            # np.fromiter converts each object on its own, twice as slow)
            sorted_ids = np.frombuffer(array.array("q", _buffer_table(graph)[0]), dtype=np.int64)
            hit = [np.searchsorted(sorted_ids, x).clip(0, nb - 1) for x in (bin_, bout)]
            if all((sorted_ids[h] == x).all() for h, x in zip(hit, (bin_, bout), strict=True)):
                bin_, bout = hit
            else:  # an id that is no buffer (not a checked graph): the look-up raises
                bindex = {b.id: i for i, b in enumerate(buffers)}
                bin_, bout = (
                    np.fromiter(map(bindex.__getitem__, x.tolist()), dtype=np.int64, count=len(x))
                    for x in (bin_, bout)
                )
        per = nin + nout
        start = np.cumsum(per) - per  # each node's first slot
        node_in = np.repeat(np.arange(len(nodes), dtype=np.int64), nin)
        node_out = np.repeat(np.arange(len(nodes), dtype=np.int64), nout)
        slot_in = start[node_in] + np.arange(len(bin_)) - np.repeat(np.cumsum(nin) - nin, nin)
        slot_out = (
            (start + nin)[node_out] + np.arange(len(bout)) - np.repeat(np.cumsum(nout) - nout, nout)
        )
        total = len(bin_) + len(bout)
        pos = np.empty(total, dtype=np.int64)
        buf = np.empty(total, dtype=np.int64)
        read = np.zeros(total, dtype=bool)
        pos[slot_in], pos[slot_out] = node_in, node_out
        buf[slot_in], buf[slot_out] = bin_, bout
        read[slot_in] = True
        acc = (pos, buf, read)
        views = graph.views()
        if views:
            # An access to a view is an access to its base too: the base lives while any
            # view of it is used (the view keeps its own interval, but holds no bytes).
            if not dense_ids and bindex is None:
                bindex = {b.id: i for i, b in enumerate(buffers)}
            index = (lambda b: b) if bindex is None else bindex.__getitem__
            root = np.arange(nb, dtype=np.int64)
            root[[index(v) for v in views]] = [index(b) for b in views.values()]
            through = np.flatnonzero(root[acc[1]] != acc[1])
            acc = (
                np.concatenate([acc[0], acc[0][through]]),
                np.concatenate([acc[1], root[acc[1][through]]]),
                np.concatenate([acc[2], acc[2][through]]),
            )
        graph._cache["analysis.accesses"] = acc
    return acc


def _buffer_table(graph: ComputeGraph) -> tuple[tuple[BufferId, ...], np.ndarray, np.ndarray]:
    """Buffer ids, "not in the arena" flags (external buffers, and views: their bytes are
    their base's) and sizes by buffer index (cached per graph).

    Reading three attributes of every buffer object is a pass over objects scattered in
    memory; the graph is immutable, so it is done once, like :func:`_accesses`.
    """
    table = graph._cache.get("analysis.buffer_table")
    if table is None:
        buffers = graph.buffers
        nb = len(buffers)
        # attribute getters mapped in C rather than generator expressions
        external = np.fromiter(map(_EXTERNAL, buffers), bool, count=nb)
        external |= np.fromiter(
            map(operator.is_not, map(_BASE, buffers), itertools.repeat(None)), bool, count=nb
        )
        table = (
            tuple(map(_ID, buffers)),
            external,
            np.fromiter(map(_SIZE, buffers), dtype=np.int64, count=nb),
        )
        graph._cache["analysis.buffer_table"] = table
    return table


_ID = operator.attrgetter("id")
_INPUTS = operator.attrgetter("inputs")
_OUTPUTS = operator.attrgetter("outputs")
_EXTERNAL = operator.attrgetter("external")
_BASE = operator.attrgetter("base")
_SIZE = operator.attrgetter("size_bytes")


def _steps(positions: Sequence[int]) -> np.ndarray:
    """``step_of[p]``: the step at which the node at position ``p`` runs."""
    steps = len(positions)
    step_of = np.empty(steps, dtype=np.int64)
    step_of[np.asarray(positions, dtype=np.int64)] = np.arange(steps, dtype=np.int64)
    return step_of


def _default_steps(graph: ComputeGraph) -> np.ndarray:
    """:func:`_steps` of the graph's own topological order (cached per graph)."""
    step_of = graph._cache.get("analysis.default_steps")
    if step_of is None:
        step_of = _steps(graph.dense().topo)
        step_of.setflags(write=False)  # shared by every call: nobody may write into it
        graph._cache["analysis.default_steps"] = step_of
    return step_of


def dead_buffers(graph: ComputeGraph) -> frozenset[BufferId]:
    """:attr:`LivenessInfo.dead` without an order (it depends on none): buffers written but
    never read that are not external. Cached per graph.

    The executors capture these right after their last writer (a graph output nobody
    downloads), so the simulator and the GPU lowering ask this function which they are.

    >>> from oxiwork.examples import quick_start
    >>> dead_buffers(quick_start())
    frozenset()
    """
    dead = graph._cache.get("analysis.dead")
    if dead is None:
        _, acc_buf, acc_read = _accesses(graph)
        bids, external, _ = _buffer_table(graph)
        nb = len(bids)
        read = np.zeros(nb, dtype=bool)
        read[acc_buf[acc_read]] = True
        used = np.zeros(nb, dtype=bool)
        used[acc_buf] = True
        dead = frozenset(map(bids.__getitem__, np.flatnonzero(used & ~external & ~read).tolist()))
        graph._cache["analysis.dead"] = dead
    return dead


def share_accesses(src: ComputeGraph, dst: ComputeGraph) -> None:
    """Let ``dst`` reuse what is cached on ``src`` of its accesses, buffer table and dead
    buffers, for a caller that vouches that ``dst`` holds ``src``'s very nodes and its
    buffers but for their arena offsets (the memory pass): none of these reads an offset.

    Without it the lowering's :func:`dead_buffers` of the planned graph reads every node's
    inputs and outputs again (0.1-0.18 s CPU on the fused 100k-node layered example). Does
    nothing unless the two graphs share their node tuple and have as many buffers.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> h = g.with_changes(buffers=g.buffers)
    >>> _ = arena_accesses(g)
    >>> share_accesses(g, h)
    >>> h._cache["analysis.accesses"] is g._cache["analysis.accesses"]
    True
    """
    if src.nodes is not dst.nodes or len(src.buffers) != len(dst.buffers):
        return
    for key in ("analysis.accesses", "analysis.buffer_table", "analysis.dead"):
        if key in src._cache and key not in dst._cache:
            dst._cache[key] = src._cache[key]


def arena_accesses(graph: ComputeGraph, order: Sequence[NodeId] | None = None) -> ArenaAccesses:
    """The accesses of the arena buffers over ``order`` (default: the graph's topological
    order) as arrays; see :class:`ArenaAccesses`. The same first and last accesses as
    :func:`analyze`, for the memory pass.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> acc = arena_accesses(g)
    >>> [(b, int(f), int(e) + 1) for b, f, e in zip(acc.buffers, acc.first, acc.last)] == [
    ...     (b, *iv) for b, iv in analyze(g).intervals.items() if not g.buffer(b).external]
    True
    """
    with paused_gc():
        positions = _order_positions(graph, order)
        step_of = _default_steps(graph) if order is None else _steps(positions)
        acc_pos, acc_buf, _ = _accesses(graph)
        bids, external, _ = _buffer_table(graph)
        keep = ~external[acc_buf]
        buf = acc_buf[keep]
        step = step_of[acc_pos[keep]]
        # the accessed buffer indices, ascending (graph order): a mask, not a sort
        used = np.zeros(len(bids), dtype=bool)
        used[buf] = True
        rows = np.flatnonzero(used)
        row_of = np.full(len(bids), -1, dtype=np.int64)
        row_of[rows] = np.arange(len(rows), dtype=np.int64)
        row = row_of[buf]
        n = len(rows)
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, -1, dtype=np.int64)
        np.minimum.at(first, row, step)
        np.maximum.at(last, row, step)
        in_arena = ~external
        for a in (first, last, row, step, rows, in_arena):
            a.setflags(write=False)
        return ArenaAccesses(
            order=graph.topological_order() if order is None else _as_ids(graph, order, positions),
            buffers=tuple(itertools.compress(bids, used.tolist())),  # (the ids of rows)
            first=first,
            last=last,
            row=row,
            step=step,
            index=rows,
            in_arena=in_arena,
        )


def max_live_bytes(graph: ComputeGraph, order: Sequence[NodeId] | None = None) -> int:
    """:attr:`LivenessInfo.max_live_bytes` of ``analyze(graph, order)``, without building
    the intervals (for callers that compare many graphs by their peak, such as fusion).

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> max_live_bytes(g) == analyze(g).max_live_bytes == 8192
    True
    """
    with paused_gc():
        positions = _order_positions(graph, order)
        live = _live(graph, positions, order is None)[-1]
        return int(live.max()) if len(live) else 0


def max_live_bytes_merged(
    graph: ComputeGraph, step_of: np.ndarray, dropped: Iterable[BufferId] = ()
) -> int:
    """:func:`max_live_bytes` of the graph that merging nodes of ``graph`` gives, without
    building it: the node at dense position ``p`` runs at step ``step_of[p]`` (nodes
    given one step become one node accessing all their buffers), and the ``dropped``
    buffers, accessed only by nodes merged into one, are gone.

    The order is the caller's: ``step_of`` must give the steps of a topological order of
    the merged graph, numbered from 0 without gaps (it is not checked here). Fusion asks
    this for every prefix of groups it tries, on one set of access arrays.

    >>> from oxiwork.examples import quick_start
    >>> import numpy as np
    >>> g = quick_start()  # upload, relu, scale, download
    >>> max_live_bytes_merged(g, np.arange(4)) == max_live_bytes(g, g.node_ids)
    True
    >>> mid = g.buffer_by_name("mid").id  # relu -> scale: merged, their buffer dropped
    >>> max_live_bytes_merged(g, np.array([0, 1, 1, 2]), [mid])  # input and output
    8192
    """
    with paused_gc():
        acc_pos, acc_buf, _ = _accesses(graph)
        bids, external, size = _buffer_table(graph)
        nb = len(bids)
        acc_step = np.asarray(step_of, dtype=np.int64)[acc_pos]
        steps = int(acc_step.max()) + 1 if len(acc_step) else 0
        out = external.copy()  # not in the arena: external, views, and the dropped
        dropped = list(dropped)
        if dropped:
            dense_ids = not nb or bids[-1] == nb - 1
            if not dense_ids:
                row = {b: i for i, b in enumerate(bids)}
                dropped = [row[b] for b in dropped]
            out[np.asarray(dropped, dtype=np.int64)] = True
        keep = ~out[acc_buf]
        first, end = _spans(acc_buf[keep], acc_step[keep], nb, steps)
        live = _live_bytes(first, end, first < steps, size, steps)
        return int(live.max()) if steps else 0


def _live(
    graph: ComputeGraph, positions: Sequence[int], default_order: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per buffer index: first step, end step (last + 1), read, used, placed (used and
    not external); and the live bytes at each step."""
    nb = len(graph.buffers)
    steps = len(positions)
    acc_pos, acc_buf, acc_read = _accesses(graph)

    step_of = _default_steps(graph) if default_order else _steps(positions)
    first, end = _spans(acc_buf, step_of[acc_pos], nb, steps)
    read = np.zeros(nb, dtype=bool)
    read[acc_buf[acc_read]] = True

    used = first < steps
    _, external, size = _buffer_table(graph)
    placed = used & ~external
    return first, end, read, used, placed, _live_bytes(first, end, placed, size, steps)


def _spans(
    acc_buf: np.ndarray, acc_step: np.ndarray, nb: int, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per buffer index, the first step it is accessed at and its end (last step + 1);
    ``steps`` and 0 for a buffer with no access."""
    first = np.full(nb, steps, dtype=np.int64)
    np.minimum.at(first, acc_buf, acc_step)
    end = np.zeros(nb, dtype=np.int64)
    np.maximum.at(end, acc_buf, acc_step + 1)
    return first, end


def _live_bytes(
    first: np.ndarray, end: np.ndarray, placed: np.ndarray, size: np.ndarray, steps: int
) -> np.ndarray:
    """The bytes of the ``placed`` buffers live at each of ``steps`` steps."""
    delta = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(delta, first[placed], size[placed])
    np.subtract.at(delta, end[placed], size[placed])
    return np.cumsum(delta[:steps])


def _analyze(graph: ComputeGraph, order: Sequence[NodeId] | None) -> LivenessInfo:
    positions = _order_positions(graph, order)
    first, end, _, used, _, live_steps = _live(graph, positions, order is None)
    bids = _buffer_table(graph)[0]
    live = live_steps.tolist()

    if used.all():  # the common case: no id lookups or masked copies needed
        used_ids: Sequence[BufferId] = bids
        spans = zip(first.tolist(), end.tolist(), strict=True)
    else:
        used_ids = list(map(bids.__getitem__, np.flatnonzero(used).tolist()))
        spans = zip(first[used].tolist(), end[used].tolist(), strict=True)
    intervals = dict(zip(used_ids, spans, strict=True))
    unused = map(bids.__getitem__, np.flatnonzero(~used).tolist())
    peak = max(live, default=0)
    return LivenessInfo(
        order=graph.topological_order() if order is None else _ids(graph, positions),
        intervals=MappingProxyType(intervals),
        dead=dead_buffers(graph),  # the same set for every order
        unused=frozenset(unused),
        live_bytes=tuple(live),
        max_live_bytes=peak,
        peak_step=live.index(peak) if live else -1,
    )
