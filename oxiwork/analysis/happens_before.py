"""Happens-before over a stream schedule, as vector clocks.

A GPU orders work in exactly two ways: the operations of one stream run in issue order,
and an event wait on one stream holds back everything after it until the matching event
record on another stream has completed. Graph edges order nothing by themselves. This
module turns a linear issue order (items ``0..n-1``, each on a stream) plus the
record -> wait pairs into one vector clock per item, from which "does ``a`` happen before
``b``?" is answered in O(1).

``clock[i][s]`` is the position, within stream ``s``, of the last item of ``s`` that
happens before or equals item ``i`` (``-1`` if none). Because each stream runs in order,
``a`` happens before ``b`` (``a != b``) exactly when ``clock[b][stream(a)] >= position(a)``.
Along one stream the clocks are component-wise non-decreasing, which is what lets the
memory pass and the race detector binary-search for the first item of a stream that is
past a set of accesses.

The memory pass, the plan verifier and the simulator's race detector all use this module,
so they agree on what "ordered" means.

References
----------
* L. Lamport, "Time, Clocks, and the Ordering of Events in a Distributed System",
  CACM 21(7), 1978 (happens-before).
* C. J. Fidge, "Timestamps in Message-Passing Systems That Preserve the Partial
  Ordering", 1988, and F. Mattern, "Virtual Time and Global States of Distributed
  Systems", 1989 (vector clocks).

Example
-------
>>> vc = vector_clocks([0, 1, 0, 1], [(0, 3)])   # item 0 (stream 0) signals item 3
>>> vc.happens_before(0, 3), vc.happens_before(2, 3), vc.happens_before(1, 2)
(True, False, False)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from oxiwork.analysis.liveness import positions_of
from oxiwork.error import InvalidPlan
from oxiwork.node import NodeId, NodeKind

if TYPE_CHECKING:
    from oxiwork.executor.plan import ExecutionPlan
    from oxiwork.graph import ComputeGraph

__all__ = [
    "ClockArrays",
    "VectorClocks",
    "clock_arrays",
    "graph_clock_arrays",
    "graph_clocks",
    "groups_ordered",
    "node_streams",
    "plan_clocks",
    "vector_clocks",
]


@dataclass(frozen=True, slots=True)
class VectorClocks:
    """Vector clocks of items ``0..n-1`` issued in that order onto streams.

    Attributes
    ----------
    streams : tuple of int
        The distinct stream ids, ascending; ``stream_index[i]`` indexes into it.
    stream_index : list of int
        Per item, the index of its stream in ``streams``.
    position : list of int
        Per item, its position within its stream (0, 1, ...).
    members : list of list of int
        Per stream index, its items in issue order.
    clocks : list of list of int
        Per item, one entry per stream (see the module docstring).
    """

    streams: tuple[int, ...]
    stream_index: list[int]
    position: list[int]
    members: list[list[int]]
    clocks: list[list[int]]
    # The same as arrays (read-only), when :func:`vector_clocks` computed them so.
    _arrays: ClockArrays | None = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.position)

    def happens_before(self, a: int, b: int) -> bool:
        """True if item ``a`` happens strictly before item ``b``.

        >>> vector_clocks([0, 0]).happens_before(0, 1)
        True
        """
        return a != b and self.clocks[b][self.stream_index[a]] >= self.position[a]

    def ordered(self, a: int, b: int) -> bool:
        """True if ``a`` and ``b`` are distinct and one happens before the other.

        >>> vector_clocks([0, 1]).ordered(0, 1)
        False
        """
        return self.happens_before(a, b) or self.happens_before(b, a)

    def access_clock(self, items: Iterable[int]) -> list[int]:
        """Per stream, the last position among ``items`` on it (``-1`` if none).

        An item is strictly after every one of ``items`` exactly when it is not one of
        them and its clock dominates this one (:meth:`dominates`).

        >>> vector_clocks([0, 1, 0]).access_clock([0, 1])
        [0, 0]
        """
        out = [-1] * len(self.streams)
        for i in items:
            s = self.stream_index[i]
            if self.position[i] > out[s]:
                out[s] = self.position[i]
        return out

    def dominates(self, item: int, clock: Sequence[int]) -> bool:
        """True if every position of ``clock`` happens before or equals ``item``.

        >>> vector_clocks([0, 1, 1], [(0, 2)]).dominates(2, [0, 0])
        True
        """
        return all(c <= m for c, m in zip(clock, self.clocks[item], strict=True))

    def past(self, stream: int, clock: Sequence[int]) -> int:
        """Position of the first item of stream index ``stream`` strictly after ``clock``.

        "Strictly after" means: later on ``stream`` than ``clock[stream]`` and dominating
        ``clock``. Clocks along a stream never decrease, so this is a binary search, and
        every later item of the stream is past ``clock`` too. Returns the stream's length
        if no item gets there.

        >>> vc = vector_clocks([0, 1, 0, 1], [(0, 3)])
        >>> vc.past(1, [0, -1])   # stream 1 = items 1, 3: item 3 (position 1) is after item 0
        1
        """
        members = self.members[stream]
        clocks = self.clocks
        lo, hi = max(clock[stream] + 1, 0), len(members)
        while lo < hi:
            mid = (lo + hi) // 2
            row = clocks[members[mid]]
            if all(c <= m for c, m in zip(clock, row, strict=True)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def arrays(self) -> ClockArrays:
        """The clocks as numpy arrays, for testing many pairs at once.

        The arrays are shared by every call and read-only: copy them to change them.

        >>> vector_clocks([0, 1, 1], [(0, 2)]).arrays().clocks.tolist()
        [[0, -1], [-1, 0], [0, 1]]
        """
        if self._arrays is not None:
            return self._arrays
        n, width = len(self.position), max(len(self.streams), 1)
        out = ClockArrays(
            np.array(self.clocks, dtype=np.int64).reshape(n, width),
            np.array(self.stream_index, dtype=np.int64),
            np.array(self.position, dtype=np.int64),
            self.streams,
        )
        for arr in (out.clocks, out.stream_index, out.position):
            arr.setflags(write=False)
        return out


@dataclass(frozen=True, slots=True)
class ClockArrays:
    """:class:`VectorClocks` as numpy arrays (from :meth:`VectorClocks.arrays`).

    Attributes
    ----------
    clocks : numpy.ndarray
        ``(n, S)`` int64: ``clocks[i, s]`` as in the module docstring.
    stream_index, position : numpy.ndarray
        ``(n,)`` int64: per item, its stream index and its position within the stream.
    streams : tuple of int, optional
        The distinct stream ids, ascending (as :attr:`VectorClocks.streams`).
    """

    clocks: np.ndarray
    stream_index: np.ndarray
    position: np.ndarray
    streams: tuple[int, ...] = ()

    def members(self) -> list[np.ndarray]:
        """Per stream index, its items in issue order (:attr:`VectorClocks.members` as
        int64 arrays; one per stream, none for no items).

        >>> [m.tolist() for m in clock_arrays([0, 1, 0]).members()]
        [[0, 2], [1]]
        """
        n = len(self.stream_index)
        if not n:
            return []
        by = np.argsort(self.stream_index, kind="stable")
        counts = np.bincount(self.stream_index, minlength=self.clocks.shape[1])
        return np.split(by, np.cumsum(counts)[:-1])

    def happens_before(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Elementwise :meth:`VectorClocks.happens_before` over item arrays ``a``, ``b``.

        >>> ca = vector_clocks([0, 1, 0, 1], [(0, 3)]).arrays()
        >>> ca.happens_before(np.array([0, 2, 1]), np.array([3, 3, 2])).tolist()
        [True, False, False]
        """
        return (a != b) & (self.clocks[b, self.stream_index[a]] >= self.position[a])

    def bounds(
        self, group: np.ndarray, item: np.ndarray, groups: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per group of items, the clocks that decide "all of one group before all of another".

        Item ``item[k]`` belongs to group ``group[k]`` (groups ``0..groups-1``; an item may
        be listed twice). Returns ``(last, floor)``, both ``(groups, S)`` int64: ``last[g, s]``
        is the last position on stream ``s`` of an item of ``g`` (``-1`` if none, i.e.
        :meth:`VectorClocks.access_clock`), ``floor[g, s]`` the least ``clocks[x, s]`` over
        the items ``x`` of ``g``, lowered to one before the first position of an item of
        ``g`` on ``s``. Every item of ``g`` happens strictly before every item of ``h`` (and
        none is shared) iff ``last[g] <= floor[h]`` componentwise: ``a`` happens before ``b``
        iff ``clocks[b, stream(a)] >= position(a)``, which over all pairs is
        ``min_b clocks[b, s] >= last[g, s]``, and the lowering excludes a shared item (it
        would sit at or before ``last[g, s]`` on its stream). See :func:`groups_ordered`.

        >>> ca = vector_clocks([0, 1, 0, 1], [(0, 3)]).arrays()
        >>> last, floor = ca.bounds(np.array([0, 1, 1]), np.array([0, 2, 3]), 2)
        >>> last.tolist(), floor.tolist()
        ([[0, -1], [1, 1]], [[-1, -1], [0, -1]])
        >>> bool((last[0] <= floor[1]).all())   # item 0 before items 2 (stream) and 3 (event)
        True
        """
        last, floor, _ = self.spans(group, item, groups)
        return last, floor

    def spans(
        self, group: np.ndarray, item: np.ndarray, groups: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`bounds` and, as a third ``(groups, S)`` int64 array, per group and stream
        the first position of an item of the group on the stream (``-1`` if none): what
        ``floor`` is lowered to one before, for a caller that needs both (the memory pass).

        Each reduction is one unbuffered ``ufunc.at`` over a flat index (group, stream) or,
        for the clock minimum, one per stream column: ``ufunc.at`` with a tuple of index
        arrays, or a sort by group and ``reduceat`` of the gathered clock rows, cost 4-6x as
        much (0.055 s against 0.01 s for 200k items in 66k groups on 4 streams).

        >>> ca = vector_clocks([0, 1, 0, 1], [(0, 3)]).arrays()
        >>> _, _, first = ca.spans(np.array([0, 1, 1]), np.array([0, 2, 3]), 2)
        >>> first.tolist()
        [[0, -1], [1, 1]]
        """
        width = self.clocks.shape[1]
        big = np.iinfo(np.int64).max
        pos = self.position[item]
        flat = group * width + self.stream_index[item]
        last = np.full(groups * width, -1, dtype=np.int64)
        first = np.full(groups * width, big, dtype=np.int64)
        np.maximum.at(last, flat, pos)
        np.minimum.at(first, flat, pos)
        last, first = last.reshape(groups, width), first.reshape(groups, width)
        floor = first - 1  # big - 1 where the group has no item on the stream
        # the least clock of the group's items, stream by stream (groups without items:
        # big, above floor's big - 1, so they keep it)
        low = np.full((width, groups), big, dtype=np.int64)
        by_stream = np.ascontiguousarray(self.clocks.T)
        for s in range(width):
            np.minimum.at(low[s], group, by_stream[s][item])
        np.minimum(floor, low.T, out=floor)
        first[first == big] = -1
        return last, floor, first


def groups_ordered(last: np.ndarray, floor: np.ndarray, g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Per pair ``(g[k], h[k])`` of groups: every item of one happens strictly before every
    item of the other (the dominance test of :meth:`ClockArrays.bounds`).

    ``O(len(g) x S)``; one stream column at a time keeps the temporaries one-dimensional.

    >>> ca = vector_clocks([0, 1, 0, 1], [(0, 3)]).arrays()
    >>> last, floor = ca.bounds(np.array([0, 1, 2]), np.array([0, 3, 2]), 3)
    >>> groups_ordered(last, floor, np.array([0, 1, 0]), np.array([1, 2, 2])).tolist()
    [True, False, True]
    """
    lt, ft = np.ascontiguousarray(last.T), np.ascontiguousarray(floor.T)
    before = np.ones(len(g), dtype=bool)
    after = np.ones(len(g), dtype=bool)
    for s in range(lt.shape[0]):
        before &= lt[s][g] <= ft[s][h]
        after &= lt[s][h] <= ft[s][g]
    return before | after


def vector_clocks(streams: Sequence[int], sync: Iterable[tuple[int, int]] = ()) -> VectorClocks:
    """Vector clocks for items issued in order ``0..n-1`` onto ``streams``.

    Parameters
    ----------
    streams : sequence of int
        ``streams[i]`` is the stream item ``i`` is issued on.
    sync : iterable of (int, int)
        Pairs ``(record, wait)``: item ``wait`` (and so everything after it on its stream)
        waits until item ``record`` has completed. ``record`` must come earlier.

    Returns
    -------
    VectorClocks

    Raises
    ------
    InvalidPlan
        A sync pair names an item out of range or a wait issued before its record.

    Notes
    -----
    A clock changes along its stream only at a wait: item ``i``'s clock is that of the last
    wait ``w`` at or before it on its stream (all ``-1`` if none) with its own component
    set to its position. So only the waits are visited one by one, in issue order (each
    takes the component-wise maximum of its stream's previous wait clock and its records'
    clocks, which are earlier, hence known); every other clock is a numpy gather:
    ``O(waits x S)`` Python steps and ``O(n S)`` array work instead of ``O(n S)`` Python
    steps (:func:`clock_arrays`; :func:`_vector_clocks_by_item` is the item-by-item
    recurrence it replaces, kept as the tests' oracle).

    References
    ----------
    Lamport (1978); Fidge (1988); Mattern (1989). See the module docstring.

    Examples
    --------
    >>> vc = vector_clocks([0, 1, 1], [(0, 2)])
    >>> vc.clocks
    [[0, -1], [-1, 0], [0, 1]]
    """
    ca = clock_arrays(streams, sync)
    n, width = len(ca.position), len(ca.streams)
    stream_index = ca.stream_index.tolist()
    return VectorClocks(
        ca.streams,
        stream_index,
        ca.position.tolist(),
        [m.tolist() for m in ca.members()],
        ca.clocks.tolist() if width else [[] for _ in range(n)],
        ca,
    )


def clock_arrays(streams: Sequence[int], sync: Iterable[tuple[int, int]] = ()) -> ClockArrays:
    """:func:`vector_clocks` as arrays only (no per-item Python lists): for passes that
    work on arrays (the memory pass). Same arguments, same errors; see its Notes.

    >>> clock_arrays([0, 1, 1], [(0, 2)]).clocks.tolist()
    [[0, -1], [-1, 0], [0, 1]]
    """
    st = np.asarray(streams, dtype=np.int64).reshape(-1)
    n = len(st)
    pairs = np.asarray(sync if isinstance(sync, Sequence) else list(sync), dtype=np.int64)
    pairs = pairs.reshape(-1, 2)
    bad = (pairs < 0).any(axis=1) | (pairs >= n).any(axis=1) | (pairs[:, 0] >= pairs[:, 1])
    if bad.any():
        a, b = pairs[int(np.flatnonzero(bad)[0])].tolist()
        raise InvalidPlan(
            f"sync pair {a} -> {b}: the wait (item {b}) must come after its record "
            f"(item {a}) and both must be among the {n} items; issue the record first"
        )
    ids_arr, stream_index = np.unique(st, return_inverse=True)
    stream_index = stream_index.reshape(-1).astype(np.int64)
    width = len(ids_arr)
    by = np.argsort(stream_index, kind="stable")  # items grouped by stream, in issue order
    counts = np.bincount(stream_index, minlength=width)
    starts = np.cumsum(counts) - counts
    position = np.empty(n, dtype=np.int64)
    position[by] = np.arange(n) - np.repeat(starts, counts)
    # Per item, the last wait at or before it on its stream (-1: none), as a wait index.
    waits = np.unique(pairs[:, 1])
    wait_no = np.full(n, -1, dtype=np.int64)
    wait_no[waits] = np.arange(len(waits))
    at = wait_no[by]
    np.maximum.accumulate(np.where(at >= 0, np.arange(n), -1), out=at)
    group_start = np.repeat(starts, counts)
    last_wait = np.empty(n, dtype=np.int64)
    last_wait[by] = np.where(at >= group_start, wait_no[by[np.maximum(at, 0)]], -1)
    # The waits' clocks, in issue order (a record is earlier than its wait, so its last
    # wait has been computed; the previous wait of the stream too).
    none = [-1] * width
    wclock: list[list[int]] = []
    prev_wait = [-1] * width  # per stream, the last wait visited
    si, pos = stream_index.tolist(), position.tolist()
    if len(waits) == len(pairs):
        # One record per wait (what the stream pass inserts): the pairs sorted by wait, and
        # what the loop reads of the record (its stream, position and last wait) gathered.
        rec = pairs[np.argsort(pairs[:, 1], kind="stable"), 0]
        for w, a_s, a_pos, k in zip(
            waits.tolist(),
            stream_index[rec].tolist(),
            position[rec].tolist(),
            last_wait[rec].tolist(),
            strict=True,
        ):
            s = si[w]
            p = prev_wait[s]
            # The record's clock is its last wait's with its own component set to its
            # position, which is at least that wait's there (the wait is earlier on the
            # same stream): the max with the wait's row, then with the position.
            if k >= 0:
                c = list(map(max, wclock[p], wclock[k])) if p >= 0 else wclock[k][:]
            else:
                c = wclock[p][:] if p >= 0 else none[:]
            if c[a_s] < a_pos:
                c[a_s] = a_pos
            c[s] = pos[w]
            prev_wait[s] = len(wclock)
            wclock.append(c)
    else:
        recs: dict[int, list[int]] = {}
        for a, b in pairs.tolist():
            recs.setdefault(b, []).append(a)
        lw = last_wait.tolist()
        for w in waits.tolist():
            s = si[w]
            p = prev_wait[s]
            c = wclock[p] if p >= 0 else none
            own = False  # c is a fresh list (not a row of wclock, nor none)
            for a in recs[w]:
                # (as above, for each record)
                k = lw[a]
                if k >= 0:
                    c, own = list(map(max, c, wclock[k])), True
                t = si[a]
                if c[t] < pos[a]:
                    if not own:
                        c, own = c[:], True
                    c[t] = pos[a]
            if not own:
                c = c[:]
            c[s] = pos[w]
            prev_wait[s] = len(wclock)
            wclock.append(c)
    table = np.full((len(waits) + 1, max(width, 1)), -1, dtype=np.int64)  # last row: none
    if len(waits) and width:
        table[:-1] = np.array(wclock, dtype=np.int64)
    clocks = table[last_wait]
    clocks[np.arange(n), stream_index] = position
    for arr in (clocks, stream_index, position):
        arr.setflags(write=False)
    return ClockArrays(clocks, stream_index, position, tuple(ids_arr.tolist()))


def _vector_clocks_by_item(
    streams: Sequence[int], sync: Iterable[tuple[int, int]] = ()
) -> VectorClocks:
    """:func:`vector_clocks` item by item (``O(n S)`` Python steps): the tests' oracle.

    >>> _vector_clocks_by_item([0, 1, 1], [(0, 2)]).clocks == vector_clocks([0, 1, 1], [(0, 2)]).clocks
    True
    """
    n = len(streams)
    ids = tuple(sorted(set(streams)))
    index = {s: k for k, s in enumerate(ids)}
    width = len(ids)
    preds: dict[int, list[int]] = {}
    for a, b in sync:
        if not (0 <= a < n and 0 <= b < n) or a >= b:
            raise InvalidPlan(
                f"sync pair {a} -> {b}: the wait (item {b}) must come after its record "
                f"(item {a}) and both must be among the {n} items; issue the record first"
            )
        preds.setdefault(b, []).append(a)
    stream_index = [index[s] for s in streams]
    position = [0] * n
    members: list[list[int]] = [[] for _ in ids]
    clocks: list[list[int]] = [[]] * n
    last: list[list[int]] = [[-1] * width for _ in ids]
    for i in range(n):
        s = stream_index[i]
        mine = members[s]
        c = last[s][:]  # stream order: everything before i on its stream
        for a in preds.get(i, ()):
            c = list(map(max, c, clocks[a]))  # event: everything up to the record
        c[s] = position[i] = len(mine)
        mine.append(i)
        clocks[i] = last[s] = c
    return VectorClocks(ids, stream_index, position, members, clocks)


def _sync_positions(graph: ComputeGraph) -> np.ndarray:
    """(record, wait) node-position pairs of a graph, ``(k, 2)`` int64 in node order: every
    wait and the record it names.

    The waits are picked by C-level passes (each node's kind compared by identity), so only
    they are read as Python objects: a loop over every node cost twice as much at 100k nodes.

    >>> from oxiwork.examples import quick_start
    >>> _sync_positions(quick_start()).shape
    (0, 2)
    """
    nodes = graph.nodes
    is_wait = map(operator.is_, map(_KIND, nodes), itertools.repeat(NodeKind.EventWait))
    waits = list(itertools.compress(range(len(nodes)), is_wait))
    pos = graph.dense().pos
    pairs = [
        (pos[e], w)
        for e, w in zip(map(_EVENT, map(nodes.__getitem__, waits)), waits, strict=True)
        if e is not None
    ]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


_KIND = operator.attrgetter("kind")
_EVENT = operator.attrgetter("event")
_STREAM = operator.attrgetter("stream")


def graph_clocks(
    graph: ComputeGraph, order: Sequence[NodeId] | None = None
) -> tuple[VectorClocks, tuple[NodeId, ...]]:
    """Vector clocks of a stream-assigned graph issued in ``order``.

    ``order`` defaults to ``graph.topological_order()``, which the stream pass makes
    consistent with every stream's order. Nodes without a stream count as stream 0.
    Returns the clocks (indexed by position in the order) and the order.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.alloc_buffer("x", 64)
    >>> _ = b.add_memset("a", 64, 0, dst=x)
    >>> _ = b.add_memset("b", 64, 1, dst=x)
    >>> vc, order = graph_clocks(b.build())
    >>> vc.happens_before(0, 1)
    True
    """
    streams, sync, order = _graph_schedule(graph, order)
    return vector_clocks(streams, sync), order


def graph_clock_arrays(
    graph: ComputeGraph, order: Sequence[NodeId] | None = None
) -> tuple[ClockArrays, tuple[NodeId, ...]]:
    """:func:`graph_clocks` as arrays only (:func:`clock_arrays`), for the memory pass.

    >>> from oxiwork.examples import quick_start
    >>> ca, order = graph_clock_arrays(quick_start())
    >>> ca.clocks.tolist() == graph_clocks(quick_start())[0].clocks
    True
    """
    streams, sync, order = _graph_schedule(graph, order)
    return clock_arrays(streams, sync), order


def _graph_schedule(
    graph: ComputeGraph, order: Sequence[NodeId] | None
) -> tuple[np.ndarray, np.ndarray, tuple[NodeId, ...]]:
    """Per item of ``order`` its stream, the (record, wait) item pairs, and the order."""
    order = tuple(graph.topological_order() if order is None else order)
    at = positions_of(graph, order)  # (shared with the liveness of the same order)
    n = graph.num_nodes
    if (
        at is None
        or len(order) != n
        or (n and int(np.count_nonzero(np.bincount(at, minlength=n))) != n)
    ):
        distinct = len(set(order)) if at is not None else "fewer"
        raise InvalidPlan(
            f"the order lists {distinct} distinct of {len(order)} entries for a graph of "
            f"{graph.num_nodes} nodes; pass every node exactly once"
        )
    stream_of = node_streams(graph)
    item = np.empty(len(order), dtype=np.int64)  # node position -> item
    item[at] = np.arange(len(order))
    return stream_of[at], item[_sync_positions(graph)], order


def node_streams(graph: ComputeGraph) -> np.ndarray:
    """Each node's stream by node position (0 for a node without one), read-only and cached
    per graph (the graph is immutable): the clocks and the memory pass's issue order both
    read it.

    >>> from oxiwork.examples import quick_start
    >>> node_streams(quick_start()).tolist()
    [0, 0, 0, 0]
    """
    stream_of = graph._cache.get("analysis.node_streams")
    if stream_of is None:
        # the attribute read by one C-level map; a node without a stream (None) is on 0
        streams = list(map(_STREAM, graph.nodes))
        if None in streams:
            streams = [0 if s is None else s for s in streams]
        stream_of = np.fromiter(streams, dtype=np.int64, count=len(streams))
        stream_of.setflags(write=False)
        graph._cache["analysis.node_streams"] = stream_of
    return stream_of


def plan_clocks(plan: ExecutionPlan) -> VectorClocks:
    """Vector clocks of a plan's steps (indexed by step index).

    Stream order is the order of ``plan.steps``; each EventWait step is paired with the
    EventRecord step carrying the same event index.

    Raises
    ------
    InvalidPlan
        A wait names an event no earlier step records.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.executor.plan import ExecutionPlan
    >>> vc = plan_clocks(ExecutionPlan.build(quick_start()))
    >>> vc.happens_before(0, 2), vc.streams
    (True, (0,))
    """
    records: dict[int, int] = {}
    sync: list[tuple[int, int]] = []
    for k, step in enumerate(plan.steps):
        if step.kind is NodeKind.EventRecord and step.event is not None:
            records[step.event] = k
        elif step.kind is NodeKind.EventWait:
            rec = records.get(step.event) if step.event is not None else None
            if rec is None:
                raise InvalidPlan(
                    f"step {k} ({step.name!r}, stream {int(step.stream)}) waits for event "
                    f"{step.event}, but no earlier step records it; record the event first"
                )
            sync.append((rec, k))
    return vector_clocks([int(s.stream) for s in plan.steps], sync)
