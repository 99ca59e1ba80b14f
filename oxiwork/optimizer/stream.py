"""Stream partitioning: put every node on a CUDA stream and add the fewest events.

Two nodes can only run concurrently on a GPU if they are on different streams; nodes on
one stream run in issue order; an ordering between streams costs an event record/wait
pair. The pass therefore

1. decomposes the DAG into chains (Nimble's scheme: a maximum bipartite matching of
   "u may directly precede v on a stream"), so that, without stream pins and under the
   ``max_streams`` cap, the number of streams equals the DAG's width (Dilworth's theorem:
   the fewest chains covering a partial order equals its largest antichain, so no
   assignment with fewer streams keeps every independent pair concurrent);
2. over the cap (or when pins force it), merges work onto ``max_streams`` streams. Two
   candidates share one issue order, the ALAP priority order (least slack first; ties by
   level and id), and the one with the shorter simulated makespan under the cost model
   wins (within 0.1%, the one needing fewer events):

   * list scheduling: each node, in priority order, goes to the stream on which it can
     start earliest, preferring the stream of its latest-finishing predecessor on ties
     (that edge then needs no event);
   * chain merging: whole chains, most urgent first (ALAP start of the head, then least
     slack), each to the stream on which it would finish earliest. It usually needs
     fewer events but gives a longer makespan (measured: 3-15% on the examples), so list
     scheduling usually wins;

3. inserts an EventWait before the consumer for exactly the cross-stream edges of the
   transitive reduction of "dependencies + stream order" that are not already an event
   of the input graph, and one EventRecord after each producer those waits name (shared
   by all its waits). Every other cross-stream dependency is implied by stream order plus
   these events, transitively; and none of these edges can be dropped (an edge of a
   transitive reduction has no other path), so the wait count is the minimum for the
   assignment (``min_event_count``, below) and the record count is the number of
   producers they wait for.

Both the matching and the reduction avoid materialising the transitive closure on big
graphs: the reduction is read off per-stream vector clocks (O(E x streams)); the exact
chain cover uses closure bitsets (Python ints) up to :data:`EXACT_CHAIN_LIMIT` nodes, and
above it a vector-clock greedy chain cover certified optimal when it meets the
level-antichain lower bound.

The pass also adds a stream-order edge between consecutive nodes of a stream wherever the
dependencies do not already order them, so that any topological order of the new graph
is a valid issue order (the memory pass and :class:`~oxiwork.executor.plan.ExecutionPlan`
rely on ``graph.topological_order()`` being consistent with every stream).

``min_event_count`` is defined as: the number of cross-stream edges ``(u, v)`` of the
transitive reduction of R = closure(dependencies + stream order), excluding edges that are
already a record -> wait pair of the input graph. It is the minimum number of event pairs
over all event sets that order every dependency and add no ordering outside R.

References
----------
* W. Kwon, G.-I. Yu, E. Jeong, B.-G. Chun, "Nimble: Lightweight and Parallel GPU Task
  Scheduling for Deep Learning", NeurIPS 2020 (stream assignment by minimum equivalent
  graph + maximum bipartite matching; minimal synchronisation).
* A. V. Aho, M. R. Garey, J. D. Ullman, "The Transitive Reduction of a Directed Graph",
  SIAM J. Computing 1(2), 1972.
* J. E. Hopcroft, R. M. Karp, "An n^{5/2} Algorithm for Maximum Matchings in Bipartite
  Graphs", SIAM J. Computing 2(4), 1973.
* R. P. Dilworth, "A Decomposition Theorem for Partially Ordered Sets", Annals of Math.
  51(1), 1950; D. R. Fulkerson, "Note on Dilworth's decomposition theorem", 1956
  (minimum chain cover = n - maximum matching on the comparability bipartite graph).
* R. L. Graham, "Bounds on Multiprocessing Timing Anomalies", SIAM J. Appl. Math. 17(2),
  1969 (list scheduling); Y.-K. Kwok, I. Ahmad, ACM Computing Surveys 31(4), 1999
  (ALAP priorities).

Example
-------
>>> from oxiwork import GraphBuilder
>>> b = GraphBuilder()
>>> a, x, y, z = (b.add_barrier(n) for n in "axyz")
>>> b.fan_out(a, [x, y]); b.fan_in([x, y], z)
>>> res = assign_streams(b.build())
>>> sa = res.artefacts["streams"]
>>> sa.num_streams, sa.width, sa.event_count, sa.min_event_count
(2, 2, 2, 2)
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from oxiwork import cost, validate
from oxiwork.analysis import paused_gc, topo
from oxiwork.analysis.happens_before import node_streams
from oxiwork.error import InvalidArgument
from oxiwork.graph import ComputeGraph, DenseGraph, _positional
from oxiwork.node import GraphNode, NodeId, NodeKind, StreamId
from oxiwork.ops.program import share_bound
from oxiwork.optimizer import PassResult
from oxiwork.verify import carry_node_rules

__all__ = [
    "EXACT_CHAIN_LIMIT",
    "StreamAssignment",
    "assign_streams",
    "issue_order",
    "issue_positions",
    "min_chain_cover",
    "round_robin_by_level",
]

EXACT_CHAIN_LIMIT = 20_000
"""Up to this many nodes the chain cover is exact (closure bitsets + Hopcroft–Karp): the
bitsets take at most n^2/16 bytes on average (25 MB at the limit; measured 0.06-0.17 s
CPU for 20k-node chain, layered and transformer graphs, and 5 ms for the fused 10k-node
transformer, whose matching needs the most augmentations)."""

# Above the limit a greedy chain cover runs only while it needs few chains: its cost is
# O(E x chains), and with many chains the graph is over any sensible cap anyway.
_GREEDY_CHAIN_SLACK = 16

_INF = 1 << 60


@dataclass(frozen=True, slots=True)
class StreamAssignment:
    """What the stream pass decided (artefact ``"streams"``).

    Attributes
    ----------
    stream_of : dict
        Node id -> stream, for every node of the new graph (events included).
    order : dict
        Stream -> its nodes in issue order.
    num_streams : int
        ``max(stream) + 1``: the streams an executor must create.
    events : tuple of (record, wait, producer, consumer)
        The synchronisations inserted: the record follows ``producer`` on its stream, the
        wait precedes ``consumer`` on its stream. A producer that several streams wait for
        has one record shared by its waits.
    event_count, min_event_count : int
        Waits inserted (cross-stream synchronisations), and the minimum for this
        assignment (module docstring); equal.
    record_count : int
        Event records inserted: one per producer some other stream waits for.
    width : int
        The DAG's width (largest antichain) if ``width_exact``, else a lower bound (the
        largest level).
    width_exact : bool
        Whether ``width`` is exact.
    chains : int
        Chains in the decomposition that was used or merged (0 for the baseline).
    method : str
        ``"chains"``, ``"list_schedule"``, ``"merged_chains"`` or ``"round_robin_by_level"``.
    makespan : float
        Finish time of the plan under the cost model: every stream runs in order, a wait
        holds its stream until its record completes, inserted events cost nothing.
    lower_bound : float
        ``max(critical_path, total_work / p)`` with ``p = min(max_streams, width)`` (width
        only when exact): no assignment with at most ``max_streams`` streams beats it.
    critical_path, total_work : float
        The two terms of the bound (seconds, or unit costs without a cost model).
    seconds : float
        Time the pass took.
    """

    stream_of: dict[NodeId, StreamId]
    order: dict[StreamId, tuple[NodeId, ...]]
    num_streams: int
    events: tuple[tuple[NodeId, NodeId, NodeId, NodeId], ...]
    event_count: int
    min_event_count: int
    record_count: int
    width: int
    width_exact: bool
    chains: int
    method: str
    makespan: float
    lower_bound: float
    critical_path: float
    total_work: float
    seconds: float

    @property
    def ratio(self) -> float:
        """``makespan / lower_bound`` (1.0 for an empty bound)."""
        return self.makespan / self.lower_bound if self.lower_bound > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for the widget)."""
        return {
            "num_streams": self.num_streams,
            "order": {str(int(s)): [int(n) for n in ns] for s, ns in self.order.items()},
            "events": [[int(x) for x in e] for e in self.events],
            "event_count": self.event_count,
            "min_event_count": self.min_event_count,
            "record_count": self.record_count,
            "width": self.width,
            "width_exact": self.width_exact,
            "chains": self.chains,
            "method": self.method,
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "ratio": self.ratio,
            "critical_path": self.critical_path,
            "total_work": self.total_work,
            "seconds": self.seconds,
        }


# --------------------------------------------------------------------------------------------
# Chain decomposition
# --------------------------------------------------------------------------------------------


def _hopcroft_karp(n: int, adj: list[int], match_l: list[int], match_r: list[int]) -> None:
    """Maximum matching of left ``u`` to right ``v in bits(adj[u])``, improving in place.

    Hopcroft–Karp (1973): phases of a BFS layering from the free left vertices followed by
    vertex-disjoint shortest augmenting paths (iterative DFS). Adjacency rows are bitsets,
    so "unvisited neighbours" is one big-int operation and each right vertex is extracted
    at most once per BFS and once per DFS sweep.

    The DFS from a left vertex at depth ``d`` only tries the right vertices that can extend
    a shortest augmenting path: matched to a left vertex at depth ``d + 1`` (below the
    depth of the first free right vertex, ``limit``), or free when ``d == limit``. Those
    masks (``step``) are fixed for the phase: a right vertex still available has the match
    and its partner the depth they had when the phase began (augmenting and dead ends only
    touch vertices already taken off ``avail``). Masking them up front gives the same
    matching as testing each bit as it comes up, without rescanning the dense closure
    rows (tests compare both on random DAGs).
    """
    nbytes = (n + 7) // 8
    while True:
        dist = [_INF] * n
        queue = [u for u in range(n) if match_l[u] < 0]
        for u in queue:
            dist[u] = 0
        seen = 0
        limit = _INF
        head = 0
        while head < len(queue):
            u = queue[head]
            head += 1
            du = dist[u]
            if du >= limit:
                continue
            new = adj[u] & ~seen
            if not new:
                continue
            seen |= new
            while new:
                low = new & -new
                new ^= low
                w = match_r[low.bit_length() - 1]
                if w < 0:
                    limit = min(limit, du)
                elif dist[w] == _INF:
                    dist[w] = du + 1
                    queue.append(w)
        if limit == _INF:
            return
        # step[d]: right vertices a left vertex at depth d may take (built as bytes: one
        # big-int per depth instead of one big-int operation per vertex).
        layers = [bytearray(nbytes) for _ in range(limit + 1)]
        for v in range(n):
            w = match_r[v]
            dw = 0 if w < 0 else dist[w]
            if w < 0 or 0 < dw <= limit:  # free vertices go to layers[0] (used at limit)
                layers[dw][v >> 3] |= 1 << (v & 7)
        step = [int.from_bytes(b, "little") for b in (*layers[1:], layers[0])]
        avail = (1 << n) - 1
        for root in range(n):
            if match_l[root] >= 0 or dist[root] != 0:
                continue
            stack_u = [root]
            stack_c = [adj[root] & step[0]]
            path_v: list[int] = []
            while stack_u:
                u = stack_u[-1]
                c = stack_c[-1] & avail
                if not c:
                    dist[u] = _INF  # dead end for the rest of this phase
                    stack_u.pop()
                    stack_c.pop()
                    if path_v:
                        path_v.pop()
                    continue
                low = c & -c
                stack_c[-1] = c ^ low
                avail ^= low
                v = low.bit_length() - 1
                path_v.append(v)
                w = match_r[v]
                if w < 0:  # free: only reachable at depth limit, so a shortest path
                    for uu, vv in zip(stack_u, path_v, strict=True):
                        match_l[uu] = vv
                        match_r[vv] = uu
                    break
                stack_u.append(w)
                stack_c.append(adj[w] & step[dist[w]])


def _exact_chains(d: DenseGraph) -> list[list[int]]:
    """Minimum chain cover (positions, each chain in order), via closure bitsets + HK."""
    n = len(d.ids)
    bit = [1 << v for v in range(n)]
    reach = [0] * n
    for v in reversed(d.topo):
        r = 0
        for w in d.succ[v]:
            r |= reach[w] | bit[w]
        reach[v] = r
    match_l = [-1] * n
    match_r = [-1] * n
    # Greedy start along direct edges (a path cover): Hopcroft–Karp then only has to find
    # the few augmentations that skip over intermediate nodes.
    for u in d.topo:
        for w in d.succ[u]:
            if match_r[w] < 0:
                match_l[u], match_r[w] = w, u
                break
    _hopcroft_karp(n, reach, match_l, match_r)
    return _chains_from_matching(d, match_l, match_r)


def _chains_from_matching(d: DenseGraph, match_l: list[int], match_r: list[int]) -> list[list[int]]:
    chains = []
    for v in d.topo:
        if match_r[v] < 0:
            chain = [v]
            while match_l[chain[-1]] >= 0:
                chain.append(match_l[chain[-1]])
            chains.append(chain)
    return chains


def _greedy_chains(d: DenseGraph, limit: int) -> list[list[int]] | None:
    """A chain cover built in topological order, or None if it needs more than ``limit``.

    Each node joins a chain whose tail precedes it (read off the node's vector clock over
    the chains built so far: O(chains) per edge), preferring the chain whose tail came
    last. Not always minimum, but the caller certifies it against an antichain.
    """
    n = len(d.ids)
    chain_of = [0] * n
    idx = [0] * n
    clocks: list[list[int]] = [[]] * n
    tails_len: list[int] = []
    tail_rank: list[int] = []
    chains: list[list[int]] = []
    for rank, v in enumerate(d.topo):
        c: list[int] = [-1] * len(chains)
        for u in d.pred[v]:
            cu = clocks[u]
            if len(cu) < len(c):
                cu = cu + [-1] * (len(c) - len(cu))
            c = list(map(max, c, cu))
        best = -1
        for k, ln in enumerate(tails_len):
            if c[k] == ln - 1 and (best < 0 or tail_rank[k] > tail_rank[best]):
                best = k
        if best < 0:
            if len(chains) >= limit:
                return None
            best = len(chains)
            chains.append([])
            tails_len.append(0)
            tail_rank.append(-1)
            c.append(-1)
        chains[best].append(v)
        chain_of[v] = best
        idx[v] = tails_len[best]
        c[best] = tails_len[best]
        tails_len[best] += 1
        tail_rank[best] = rank
        clocks[v] = c
    return chains


def min_chain_cover(graph: ComputeGraph) -> list[tuple[NodeId, ...]]:
    """A minimum set of chains covering the DAG's partial order (Dilworth/Fulkerson).

    Consecutive nodes of a chain are ordered by the dependencies (transitively, not
    necessarily by an edge). Exact: maximum matching (Hopcroft–Karp) on the bipartite
    graph "u reaches v", with reachability as bitsets, so the number of chains equals the
    width of the DAG. Meant for graphs up to a few thousand nodes (O(n^2) bits of memory).

    References
    ----------
    Dilworth 1950; Fulkerson 1956; Hopcroft & Karp 1973 (see the module docstring).

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> x1, x2, y, z1, z2 = (b.add_barrier(n) for n in ("x1", "x2", "y", "z1", "z2"))
    >>> b.fan_in([x1, x2], y); b.fan_out(y, [z1, z2])
    >>> len(min_chain_cover(b.build()))   # a path cover along edges would need 3
    2
    """
    d = graph.dense()
    return [tuple(d.ids[p] for p in ch) for ch in _exact_chains(d)]


# --------------------------------------------------------------------------------------------
# Placement strategies: each returns (stream per position, issue order of positions)
# --------------------------------------------------------------------------------------------


def _pins(graph: ComputeGraph, max_streams: int) -> dict[int, int]:
    pins: dict[int, int] = {}
    for p, node in enumerate(graph.nodes):
        if node.stream is not None:
            if node.stream >= max_streams:
                raise InvalidArgument(
                    f"node {node.name!r} (id {int(node.id)}) is pinned to stream "
                    f"{int(node.stream)}, but max_streams={max_streams}; raise max_streams "
                    f"above {int(node.stream)} or pin it to a lower stream"
                )
            pins[p] = int(node.stream)
    return pins


def _from_chains(
    chains: list[list[int]], pins: Mapping[int, int], max_streams: int, n: int
) -> list[int] | None:
    """Stream per position from chains, honouring pins; None if over the cap."""
    pinned_streams = set(pins.values())
    fresh = (s for s in range(max_streams + len(chains) + 1) if s not in pinned_streams)
    stream = [0] * n
    used = set(pinned_streams)
    for chain in chains:
        votes: dict[int, int] = {}
        for p in chain:
            if p in pins:
                votes[pins[p]] = votes.get(pins[p], 0) + 1
        # A chain holding pins follows its most common pin (lowest on ties); the others
        # get the lowest stream no pin uses.
        s = min(votes, key=lambda k: (-votes[k], k)) if votes else next(fresh)
        used.add(s)
        for p in chain:
            stream[p] = pins.get(p, s)
    if len(used) > max_streams or max(used, default=0) >= max_streams:
        return None
    return stream


def _list_schedule(
    d: DenseGraph, cost: Sequence[float], prio: Sequence[int], pins: Mapping[int, int], k: int
) -> tuple[list[int], float]:
    """Stream per position by list scheduling in ``prio`` order on ``k`` streams, and the
    makespan (what :func:`_simulate` gives for it: each node started at
    ``max(inputs ready, stream free)``, exactly as the simulation starts it).

    Each node goes to the stream minimising ``(max(ready, free[t]), t != pref, t)``, with
    ``pref`` the stream of its latest-finishing predecessor (the last of equals). That
    minimum is read off without building the keys: a stream already free by ``ready``
    starts the node at ``ready``, so ``pref`` wins if it is one, else the lowest such
    stream; if none is, the earliest-free stream (``pref`` first on ties).
    """
    n = len(d.ids)
    pred = d.pred
    stream = [0] * n
    finish = [0.0] * n
    free = [0.0] * k
    streams = range(k)
    end = 0.0
    for v in prio:
        ready = 0.0
        pref = -1
        for u in pred[v]:
            if finish[u] >= ready:
                ready = finish[u]
                pref = stream[u]
        if pins and v in pins:
            s = pins[v]
        elif pref >= 0 and free[pref] <= ready:
            s = pref
        else:
            m = min(free)
            if m <= ready:
                s = next(t for t in streams if free[t] <= ready)
            elif pref >= 0 and free[pref] == m:
                s = pref
            else:
                s = free.index(m)
        f = free[s]
        t = (ready if ready >= f else f) + cost[v]
        stream[v] = s
        finish[v] = free[s] = t
        if t > end:
            end = t
    return stream, end


def _merge_chains(
    chains: list[list[int]],
    asap: Sequence[float],
    alap: Sequence[float],
    cost: Sequence[float],
    pins: Mapping[int, int],
    k: int,
) -> list[int]:
    """Stream per position by merging whole chains onto ``k`` streams.

    Chains are taken most urgent first: by the ALAP start of their first node, then by
    their least slack, then by id. Each goes, whole, to the stream on which it would
    finish earliest if appended (its work after ``max(stream free, ASAP of its head)``),
    lowest stream on ties. A chain holding pins goes to its most common pin; pinned nodes
    stay on their own pin regardless.
    """
    n = len(cost)
    stream = [0] * n
    free = [0.0] * k
    slack = [a - b for a, b in zip(alap, asap, strict=True)]
    keys = [(alap[ch[0]], min(map(slack.__getitem__, ch)), ch[0]) for ch in chains]
    for i in sorted(range(len(chains)), key=keys.__getitem__):
        ch = chains[i]
        work = sum(map(cost.__getitem__, ch))
        head = asap[ch[0]]
        votes: dict[int, int] = {}
        if pins:
            for p in ch:
                if p in pins:
                    votes[pins[p]] = votes.get(pins[p], 0) + 1
        if votes:
            s = min(votes, key=lambda x: (-votes[x], x))
            free[s] = max(free[s], head) + work
            for p in ch:
                stream[p] = pins.get(p, s)
            continue
        # finish if appended to each stream; the first of the earliest (lowest on ties)
        ends = [(f if f >= head else head) + work for f in free]
        s = ends.index(min(ends))
        free[s] = ends[s]
        for p in ch:
            stream[p] = s
    return stream


def _simulate(
    d: DenseGraph, cost: Sequence[float], stream: Sequence[int], issue: Sequence[int]
) -> float:
    """Makespan when each stream runs in ``issue`` order and a node waits for its inputs.

    With the events the pass inserts, happens-before is exactly "dependencies + stream
    order", so this equals the makespan of the realised plan (events cost nothing).
    """
    free: dict[int, float] = {}
    finish = [0.0] * len(cost)
    end = 0.0
    for v in issue:
        s = stream[v]
        t = free.get(s, 0.0)
        for u in d.pred[v]:
            if finish[u] > t:
                t = finish[u]
        finish[v] = free[s] = t + cost[v]
        if finish[v] > end:
            end = finish[v]
    return end


def _path_cover(d: DenseGraph) -> list[list[int]]:
    """A cheap chain cover: each node continues the path of its first unmatched successor."""
    n = len(d.ids)
    match_l, match_r = [-1] * n, [-1] * n
    for u in d.topo:
        for w in d.succ[u]:
            if match_r[w] < 0:
                match_l[u], match_r[w] = w, u
                break
    return _chains_from_matching(d, match_l, match_r)


# --------------------------------------------------------------------------------------------
# Events: the cross-stream edges of the transitive reduction
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Realized:
    graph: ComputeGraph
    events: tuple[tuple[NodeId, NodeId, NodeId, NodeId], ...]
    order: dict[StreamId, tuple[NodeId, ...]]
    issue: list[int]  # positions of the new graph, in issue order
    streams: list[int]  # stream per position
    wait_of: list[int]  # per position: the record a wait waits for, else -1


@dataclass(frozen=True, slots=True)
class _Needs:
    """The events an assignment needs and where its stream-order edges go.

    ``edges``: the (producer, consumer) positions of :func:`_needed_events`. Per position
    ``v``: ``prev[v]``, the node before it on its stream in issue order (-1 if none);
    whether the new graph needs a stream-order edge into v's first item (its first wait,
    or v) from ``prev[v]`` itself (``from_node``, used when ``prev[v]`` gets no record) or
    from the record issued right after ``prev[v]`` (``from_record``).
    """

    edges: list[tuple[int, int]]
    prev: list[int]
    from_node: list[bool]
    from_record: list[bool]


def _join(prev: list[int], ps: Sequence[int], clock: list[list[int]]) -> list[int]:
    """A new clock: the elementwise max of ``prev`` and ``clock[u]`` for ``u`` in ``ps``."""
    if not ps:
        return prev[:]
    return list(map(max, prev, *[clock[u] for u in ps]))


def _join4(prev: list[int], ps: Sequence[int], clock: list[list[int]]) -> list[int]:
    """:func:`_join` of 4-entry clocks, unrolled (half the time of ``map(max, ...)``, whose
    calls of ``max`` dominate the needed-events walk; tests compare both)."""
    a0, a1, a2, a3 = prev
    for u in ps:
        b0, b1, b2, b3 = clock[u]
        if b0 > a0:
            a0 = b0
        if b1 > a1:
            a1 = b1
        if b2 > a2:
            a2 = b2
        if b3 > a3:
            a3 = b3
    return [a0, a1, a2, a3]


def _needed_events(
    d: DenseGraph, stream: Sequence[int], issue: Sequence[int], free: set[tuple[int, int]]
) -> _Needs:
    """Cross-stream edges of TR(closure(edges + stream order)) that are not free events,
    and the stream-order edges the realised graph needs (:class:`_Needs`).

    Per node v (in issue order) the clock ``c[a]`` is the last position on stream ``a``
    below v. The node ``top_a`` there is an immediate predecessor of v in the reduction
    unless the top of another stream already has it below (its own clock covers
    ``c[a]``): any node strictly between ``top_a`` and v lies on some stream ``b`` and so
    below ``top_b``. A top the previous node of v's stream has below (``c[b]`` equal to
    that node's clock) is no immediate predecessor, and covers nothing that node does not
    cover, so only the other tops and that node are compared.

    Stream-order edges: the realised graph orders its nodes exactly as R = closure(edges +
    stream order) does (the events are edges of R, the stream edges consecutive nodes of a
    stream), so whether an item is already ordered after the one before it on its stream
    is read off these clocks instead of clocks over the new graph. v's first item is its
    first wait (which follows only the record of ``u1``, the earliest-issued producer v
    waits for) or, without waits, v itself (which follows its predecessors ``X``). The item
    before it is ``p`` (the previous node of v's stream) or p's record. ``p`` is below the
    item iff some ``x`` in ``X`` (or ``u1``) has ``p`` below it in R; p's record is below
    it iff some consumer ``y`` of that record is below such an ``x``, i.e. for some stream
    ``b``, ``clock[x][b]`` reaches the first consumer of p on ``b`` (``first[p][b]``; later
    consumers were issued after v and cannot be below it). Consecutive waits of one node
    are never ordered otherwise (a wait is followed only by its node) and a node always
    follows its last wait by an edge, so neither needs a decision here.
    """
    ids_s = sorted(set(stream))
    sidx = {s: i for i, s in enumerate(ids_s)}
    # Up to 4 streams (the default cap), clocks have 4 entries, those of unused streams
    # -1 throughout (a stream with no node: never a top, never a consumer), and are
    # joined by the unrolled _join4.
    k = max(len(ids_s), 4)
    join = _join4 if k == 4 else _join
    n = len(stream)
    si = [sidx[s] for s in stream]
    members: list[list[int]] = [[] for _ in range(k)]
    clock: list[list[int]] = [[]] * n
    last: list[list[int]] = [[-1] * k for _ in range(k)]
    need: list[tuple[int, int]] = []
    pred = d.pred
    streams = range(k)
    prev_of = [-1] * n
    from_node = [True] * n
    from_record = [True] * n
    # first[p][b]: the position on stream b of p's first consumer there (none: n)
    first: dict[int, list[int]] = {}
    none = [n] * k
    rank_of = [0] * n
    for r, v in enumerate(issue):
        rank_of[v] = r
        s = si[v]
        prev = last[s]
        ps = pred[v]
        c = join(prev, ps, clock)
        here = len(members[s])  # v's position on its stream
        u1 = -1
        # Nothing new from another stream (the common case): every top is below the
        # previous node of v's stream, which covers it.
        if c != prev or prev[s] < 0:
            tops = [(b, clock[members[b][c[b]]]) for b in streams if c[b] > prev[b] and b != s]
            if prev[s] >= 0:
                tops.append((s, prev))
            for a, _ in tops:
                if a == s:
                    continue
                ca = c[a]
                for b, tc in tops:
                    if b != a and tc[a] >= ca:
                        break
                else:
                    top = members[a][ca]
                    if not free or (top, v) not in free:
                        need.append((top, v))
                        if u1 < 0 or rank_of[top] < rank_of[u1]:
                            u1 = top
                        f = first.get(top)
                        if f is None:
                            f = first[top] = none[:]
                        if f[s] == n:
                            f[s] = here
        pp = prev[s]
        if pp >= 0:
            p = members[s][pp]
            prev_of[v] = p
            xs = (u1,) if u1 >= 0 else ps
            for x in xs:
                if clock[x][s] >= pp:
                    from_node[v] = False
                    break
            f = first.get(p)
            if f is not None:
                for x in xs:
                    cx = clock[x]
                    if any(map(int.__ge__, cx, f)):
                        from_record[v] = False
                        break
        c[s] = here
        members[s].append(v)
        clock[v] = last[s] = c
    return _Needs(need, prev_of, from_node, from_record)


def _short(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


# GraphNode's fields in constructor order, and a positional constructor of it
# (oxiwork.graph._positional: plain stores into the same slots).
_NODE_FIELDS = tuple(f.name for f in fields(GraphNode))
_MAKE_NODE = _positional(GraphNode)


def _copy_nodes(nodes: list[GraphNode], changes: Mapping[str, Sequence[Any]]) -> list[GraphNode]:
    """``[n.replace(**{f: changes[f][i] for f in changes}) for i, n in enumerate(nodes)]``,
    each node made by one positional call (:func:`oxiwork.graph._positional`) whose
    arguments are read straight off the node, or taken from ``changes``, by code generated
    once per set of changed fields (:func:`_copier`): ``replace`` runs the generated
    ``__init__``, 22 frozen setattrs per node (0.4 s for the 66k nodes of the 100k-node
    layered example), and setting the fields by slot descriptors, one ``map`` per field,
    touches each new object 22 times. GraphNode has no ``__post_init__`` and no default
    factories, so these are the objects ``__init__`` would build;
    tests/optimizer/test_stream_fast.py compares them with ``replace``'s, field by field.

    >>> from oxiwork.node import NodeId
    >>> k = GraphNode(NodeId(0), "k", NodeKind.KernelLaunch)
    >>> _copy_nodes([k], {"stream": [StreamId(2)]})[0].stream
    StreamId(2)
    """
    return _copier(tuple(changes))(nodes, *changes.values())


_COPIERS: dict[tuple[str, ...], Any] = {}


def _copier(names: tuple[str, ...]) -> Any:
    """``copy(nodes, *columns)``: the nodes with field ``names[k]`` of the i-th set to
    ``columns[k][i]``, as one list comprehension calling the positional constructor with
    ``n.<field>`` for every other field (generated and cached per ``names``). Reading the
    fields by name and passing them on is a quarter faster than reading them all into a
    tuple (``attrgetter``), copying it into a list to set the changed ones and unpacking
    it into the call (measured on the 66k restreamed nodes of the layered example)."""
    copy = _COPIERS.get(names)
    if copy is None:
        for name in names:
            if name not in _NODE_FIELDS:
                raise ValueError(f"GraphNode has no field {name!r}")
        cols = [f"c{k}" for k in range(len(names))]
        vals = [f"x{k}" for k in range(len(names))]
        args = ", ".join(vals[names.index(f)] if f in names else f"n.{f}" for f in _NODE_FIELDS)
        scope: dict[str, Any] = {"make": _MAKE_NODE}
        # (code made from GraphNode's own field names only)
        exec(
            f"def copy(nodes, {', '.join(cols)}):\n"
            f"    return [make({args}) for n, {', '.join(vals)} in "
            f"zip(nodes, {', '.join(cols)}, strict=True)]\n",
            scope,
        )
        copy = _COPIERS[names] = scope["copy"]
    return copy


_STREAM = operator.attrgetter("stream")
_KIND = operator.attrgetter("kind")

# What an inserted event is before _realize gives it its id, name, kind, stream and record.
_EVENT = GraphNode(NodeId(0), "", NodeKind.EventRecord)
_RECORD, _WAIT = NodeKind.EventRecord, NodeKind.EventWait


def _realize(
    graph: ComputeGraph,
    stream: Sequence[int],
    issue: Sequence[int],
    needs: _Needs | None = None,
) -> _Realized:
    """The new graph: streams set, events inserted, stream-order edges added where needed
    (``needs``: :func:`_needed_events` of ``stream`` and ``issue``, when known).

    Everything is indexed by position in the new graph: the input's nodes keep theirs and
    the inserted events follow in id order (the new graph's node order), so per-node data
    are lists, not dicts keyed by id.
    """
    d = graph.dense()
    ids = d.ids
    nodes = graph.nodes
    n = len(ids)
    if needs is None:
        free = {
            (d.pos[x.event], d.pos[x.id])
            for x in nodes
            if x.kind is NodeKind.EventWait and x.event is not None
        }
        needs = _needed_events(d, stream, issue, free)
    rank = [0] * n
    for r, v in enumerate(issue):
        rank[v] = r
    # by (rank of producer, rank of consumer): one int key, since ranks are below n
    need = sorted(needs.edges, key=lambda e: rank[e[0]] * n + rank[e[1]])

    sid = {s: StreamId(s) for s in set(stream)}
    # Streams come from 0..max_streams-1 and the (checked) pins; the graph need not check
    # the nodes' other fields again when every one is a valid stream id (events likewise:
    # a stream and a name made from a checked one, at most 48 characters).
    # (which nodes change stream: a C-level pass over the old streams)
    moved = list(itertools.compress(range(n), map(operator.ne, map(_STREAM, nodes), stream)))
    new_nodes = list(nodes)
    restreamed = _copy_nodes([nodes[p] for p in moved], {"stream": [sid[stream[p]] for p in moved]})
    for p, x in zip(moved, restreamed, strict=True):
        new_nodes[p] = x
    vouch = all(0 <= s <= validate.MAX_STREAM for s in sid)
    new_ids = list(ids)
    streams = list(stream)  # stream per new position
    wait_of = [-1] * n  # the record position each wait waits for
    waits_at = map(operator.is_, map(_KIND, nodes), itertools.repeat(NodeKind.EventWait))
    for p in itertools.compress(range(n), waits_at):
        x = nodes[p]
        if x.event is not None:
            wait_of[p] = d.pos[x.event]
    after = [-1] * n  # position -> the record issued right after it
    before: list[list[int] | None] = [None] * n  # position -> waits issued right before it
    # The added edges by position (the graph makes their tuples: _with_appended_edges).
    src: list[int] = []
    dst: list[int] = []
    events = []
    next_id = int(graph.next_node_id())
    # One record per producer, however many streams wait for it: a CUDA event recorded
    # once can be waited on by any number of streams (cuStreamWaitEvent), so a record per
    # wait would add launches that order nothing more.
    names: list[str] = []  # of the inserted events, in id order
    for u, v in need:
        label = _short(nodes[u].name)
        rec = after[u]
        if rec < 0:
            rec = after[u] = len(new_ids)
            rid = NodeId(next_id)
            next_id += 1
            names.append(f"record({label})")
            new_ids.append(rid)
            streams.append(stream[u])
            wait_of.append(-1)
            src.append(u)
            dst.append(rec)
        rid = new_ids[rec]
        wid = NodeId(next_id)
        next_id += 1
        names.append(f"wait({label})")
        w = len(new_ids)
        new_ids.append(wid)
        streams.append(stream[v])
        wait_of.append(rec)
        ws = before[v]
        if ws is None:
            before[v] = [w]
        else:
            ws.append(w)  # positions grow with ids: the waits stay in id order
        src += (rec, w)
        dst += (w, v)
        events.append((rid, wid, ids[u], ids[v]))
    # The event nodes, built at once (as _copy_nodes builds the restreamed ones).
    waits = wait_of[n:]
    new_nodes += _copy_nodes(
        [_EVENT] * len(names),
        {
            "id": new_ids[n:],
            "name": names,
            "kind": [_RECORD if w < 0 else _WAIT for w in waits],
            "stream": [sid[s] for s in streams[n:]],
            "event": [None if w < 0 else new_ids[w] for w in waits],
        },
    )

    # Stream-order edges (see _needed_events): into each node's first item from the item
    # before it on its stream, where the edges do not order them already, and between
    # consecutive waits of one node.
    prev_of, from_node, from_record = needs.prev, needs.from_node, needs.from_record
    for v in range(n):
        ws = before[v]
        p = prev_of[v]
        if p >= 0:
            rec = after[p]
            if from_record[v] if rec >= 0 else from_node[v]:
                src.append(p if rec < 0 else rec)
                dst.append(v if ws is None else ws[0])
        if ws is not None and len(ws) > 1:
            src += ws[:-1]
            dst += ws[1:]

    # Issue order of the new graph (positions): each node's waits, it, its record.
    ids_s = sorted(sid)
    sidx = {s: i for i, s in enumerate(ids_s)}
    si = [sidx[s] for s in streams]
    order: list[list[NodeId]] = [[] for _ in ids_s]
    full: list[int] = []
    for v in issue:
        ws = before[v]
        if ws is not None:
            full += ws
        full.append(v)
        if after[v] >= 0:
            full.append(after[v])
    for x in full:
        order[si[x]].append(new_ids[x])

    new_graph = graph._with_appended_edges(
        new_nodes, src, dst, checked_nodes=new_nodes if vouch else ()
    )
    share_bound(graph, new_graph)  # only streams changed: kernels bind as before
    cost.restreamed_costs(graph, new_graph)  # and cost as before (events are new)
    carry_node_rules(graph, new_graph)  # and pass the node rules as before
    return _Realized(
        new_graph,
        tuple(events),
        {sid[s]: tuple(o) for s, o in zip(ids_s, order, strict=True)},
        full,
        streams,
        wait_of,
    )


def _makespan(real: _Realized, cost: Sequence[float]) -> float:
    """Finish time when streams run in order and waits hold their stream (zero-cost events).

    Over ``real``'s issue order by position: ``cost`` of the input's positions, 0 for the
    inserted events; a wait starts no earlier than its record finishes.
    """
    c = list(cost)
    c += [0.0] * (len(real.streams) - len(c))
    return max(_walk(real, c)[1], default=0.0)


def _walk(real: _Realized, cost: list[float]) -> tuple[list[float], list[float]]:
    """Start and finish time of each position of ``real.graph`` (``cost`` by position)
    when each stream runs its nodes in ``real.issue`` order and a wait starts no earlier
    than its record finishes."""
    free: dict[int, float] = {}
    start = [0.0] * len(cost)
    finish = [0.0] * len(cost)
    streams, wait_of = real.streams, real.wait_of
    for x in real.issue:
        s = streams[x]
        t = free.get(s, 0.0)
        e = wait_of[x]
        if e >= 0 and finish[e] > t:
            t = finish[e]
        start[x] = t
        finish[x] = free[s] = t + cost[x]
    return start, finish


def issue_order(
    graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None
) -> tuple[NodeId, ...]:
    """The order a plan issues the nodes in: by simulated start time, then topologically.

    Each stream runs in order, a node starts when its stream is free and its dependencies
    (edges, and the record of a wait) have finished; nodes are sorted by that start time,
    ties broken by ``graph.topological_order()``. Since a node never starts before a
    predecessor or an earlier node of its stream, this is a topological order consistent
    with every stream; sorting by time keeps the streams abreast, which keeps the memory
    pass's happens-before-safe lifetimes short.

    >>> from oxiwork.examples import quick_start
    >>> [quick_start().node(n).name for n in issue_order(quick_start())]
    ['upload', 'relu', 'scale', 'download']
    """
    ids = graph.dense().ids
    return tuple(map(ids.__getitem__, issue_positions(graph, costs).tolist()))


def issue_positions(graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None) -> np.ndarray:
    """:func:`issue_order` as node positions (``graph.dense()``), for the memory pass,
    which works on positions (it would otherwise look every id up again).

    >>> from oxiwork.examples import quick_start
    >>> issue_positions(quick_start()).tolist()
    [0, 1, 2, 3]
    """
    if costs is None:
        known = graph._cache.get(_ISSUE_POSITIONS)
        if known is not None:  # the stream pass's graph: its schedule, walked once there
            return known.copy()
    cost = _costs(graph, costs)
    d = graph.dense()
    ids, pred = d.ids, d.pred
    streams = node_streams(graph).tolist()  # (cached: the memory pass's clocks read it too)
    costs_p = [float(cost.get(nid, 0.0)) for nid in ids]
    free: dict[int, float] = {}
    finish = [0.0] * len(ids)
    start = []  # by topological rank
    for p in d.topo:
        s = streams[p]
        t = free.get(s, 0.0)
        for u in pred[p]:
            if finish[u] > t:
                t = finish[u]
        start.append(t)
        finish[p] = free[s] = t + costs_p[p]
    return _by_start(d.topo, np.array(start, dtype=np.float64))


def _by_start(topo: Sequence[int], start: np.ndarray) -> np.ndarray:
    """The positions ``topo`` (a topological order) sorted by (``start``, rank in
    ``topo``): a stable sort of the ranks by start (``start[k]``: of ``topo[k]``)."""
    return np.asarray(topo, dtype=np.int64)[np.argsort(start, kind="stable")]


# graph._cache key: issue_positions(graph) of a graph the stream pass made (see below)
_ISSUE_POSITIONS = "stream.issue_positions"


def _remember_issue_positions(real: _Realized) -> None:
    """Cache :func:`issue_positions` of ``real.graph`` (default costs) on it, for the memory
    pass, from the walk of ``real.issue`` instead of every node's predecessors.

    The new graph orders its nodes exactly as stream order plus its record -> wait edges
    do (every dependency is implied by them: the module docstring), and each stream is a
    chain of it, so every topological order visits a stream's nodes in issue order. With
    costs >= 0, finish times never decrease along those orders, so the latest predecessor
    finish that :func:`issue_positions` takes per node is the later of its stream's previous
    finish and, for a wait, its record's: the same maxima of the same floats, so the same
    start times, and the same stable sort of them by ``graph.dense().topo``. Only with the
    default costs already cached (``cost.restreamed_costs``) and every wait joined to its
    record by an edge (the pass's own are; verification demands it of the input's):
    otherwise nothing is kept.
    tests/optimizer/test_stream_fast.py compares it with the walk over predecessors.
    """
    graph = real.graph
    costs = cost.cached_costs(graph)
    if costs is None:
        return
    d = graph.dense()
    c = list(map(costs.__getitem__, d.ids))
    if not all(x >= 0.0 for x in c):
        return  # (no model cost is negative; an explicit one would break the argument)
    wait_of, pred = real.wait_of, d.pred
    if not all(wait_of[w] in pred[w] for w in range(len(c)) if wait_of[w] >= 0):
        return  # a wait its record is no predecessor of (an unverified input's): walk it
    start = np.array(_walk(real, c)[0], dtype=np.float64)
    out = _by_start(d.topo, start[np.asarray(d.topo, dtype=np.int64)])
    out.setflags(write=False)
    graph._cache[_ISSUE_POSITIONS] = out


# --------------------------------------------------------------------------------------------
# The passes
# --------------------------------------------------------------------------------------------


def _check_cap(max_streams: Any) -> int:
    if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
        raise InvalidArgument(f"max_streams must be an int >= 1, got {max_streams!r}")
    return max_streams


def _costs(graph: ComputeGraph, costs: Mapping[NodeId, float] | None) -> Mapping[NodeId, float]:
    return cost.node_costs(graph) if costs is None else costs


def _finish(
    graph: ComputeGraph,
    stream: list[int],
    issue: list[int],
    info: topo.DenseTopo,
    *,
    max_streams: int,
    width: int,
    width_exact: bool,
    chains: int,
    method: str,
    t0: float,
    need: _Needs | None = None,
) -> PassResult:
    real = _realize(graph, stream, issue, need)
    total = sum(info.cost)
    p = min(max_streams, width) if width_exact else max_streams
    lower = max(info.makespan, total / max(p, 1))
    makespan = _makespan(real, info.cost)
    _remember_issue_positions(real)
    sid = {s: StreamId(s) for s in set(real.streams)}
    stream_of = dict(zip(real.graph.dense().ids, map(sid.__getitem__, real.streams), strict=True))
    sa = StreamAssignment(
        stream_of=stream_of,
        order=real.order,
        num_streams=max((int(s) for s in real.order), default=0) + 1,
        events=real.events,
        event_count=len(real.events),
        min_event_count=len(real.events),
        record_count=len({e[0] for e in real.events}),
        width=width,
        width_exact=width_exact,
        chains=chains,
        method=method,
        makespan=makespan,
        lower_bound=lower,
        critical_path=info.makespan,
        total_work=total,
        seconds=time.perf_counter() - t0,
    )
    return PassResult(real.graph, {"streams": sa})


def assign_streams(
    graph: ComputeGraph,
    *,
    max_streams: int = 4,
    costs: Mapping[NodeId, float] | None = None,
) -> PassResult:
    """Put every node on a stream and insert the fewest events (see the module docstring).

    Parameters
    ----------
    graph : ComputeGraph
        The graph; nodes already carrying a ``stream`` (``.on_stream`` pins, or a previous
        run) keep it, and its existing record -> wait pairs count as synchronisation.
    max_streams : int
        The most streams to use (>= 1).
    costs : mapping, optional
        Seconds per node for the list scheduler and the makespan; default
        ``oxiwork.cost.node_costs(graph)``.

    Returns
    -------
    PassResult
        The new graph and artefact ``"streams"``: a :class:`StreamAssignment`.

    Raises
    ------
    InvalidArgument
        ``max_streams`` is not an int >= 1, or a node is pinned to a stream >= it.

    References
    ----------
    Nimble (Kwon et al., NeurIPS 2020); Aho, Garey & Ullman 1972; Hopcroft & Karp 1973;
    Dilworth 1950; Graham 1969 (see the module docstring).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> sa = assign_streams(quick_start()).artefacts["streams"]
    >>> sa.num_streams, sa.event_count, sa.method
    (1, 0, 'chains')
    """
    with paused_gc():  # many acyclic allocations: a GC pass would rescan them all
        return _assign_streams(graph, max_streams, costs)


def _assign_streams(
    graph: ComputeGraph, max_streams: int, costs: Mapping[NodeId, float] | None
) -> PassResult:
    t0 = time.perf_counter()
    max_streams = _check_cap(max_streams)
    pins = _pins(graph, max_streams)
    cost_map = _costs(graph, costs)
    info = topo.analyze_positions(graph, cost_map)
    d = graph.dense()
    n = len(d.ids)
    lb_width = max(info.level_widths, default=0)
    chains: list[list[int]] | None = None
    width, exact = lb_width, False
    if n <= EXACT_CHAIN_LIMIT:
        chains = _exact_chains(d)
        width, exact = len(chains), True
    elif lb_width <= max_streams:
        chains = _greedy_chains(d, max_streams + _GREEDY_CHAIN_SLACK)
        if chains is not None and len(chains) == lb_width:
            exact = True  # a chain cover meeting an antichain is optimal (Dilworth)
    if chains is not None and len(chains) <= max_streams:
        stream = _from_chains(chains, pins, max_streams, n)
        if stream is not None:
            return _finish(
                graph,
                stream,
                list(d.topo),
                info,
                max_streams=max_streams,
                width=width,
                width_exact=exact,
                chains=len(chains),
                method="chains",
                t0=t0,
            )
    # Over the cap: two candidates on the same issue order (ALAP priority), the one with
    # the shorter simulated makespan wins; within 0.1% the one needing fewer events.
    pos = d.pos
    prio, cost, asap, alap = info.priority, info.cost, info.asap, info.alap
    merged_from = chains if chains is not None else _path_cover(d)
    free = {
        (pos[x.event], pos[x.id])
        for x in graph.nodes
        if x.kind is NodeKind.EventWait and x.event is not None
    }
    listed, listed_makespan = _list_schedule(d, cost, prio, pins, max_streams)
    merged = _merge_chains(merged_from, asap, alap, cost, pins, max_streams)
    candidates = [
        (listed_makespan, "list_schedule", listed),
        (_simulate(d, cost, merged, prio), "merged_chains", merged),
    ]
    best = min(candidates, key=lambda c: c[0])
    # Only the candidates within 0.1% of the best makespan compete on events, so only
    # theirs are counted (an O(E x streams) walk each).
    close = [
        (makespan, len(need.edges), method, stream, need)
        for makespan, method, stream in candidates
        if makespan <= best[0] * 1.001
        for need in (_needed_events(d, stream, prio, free),)
    ]
    _, _, method, stream, need = min(close, key=lambda c: (c[1], c[0]))
    return _finish(
        graph,
        stream,
        prio,
        info,
        need=need,
        max_streams=max_streams,
        width=width,
        width_exact=exact,
        chains=len(merged_from),
        method=method,
        t0=t0,
    )


def round_robin_by_level(
    graph: ComputeGraph,
    *,
    max_streams: int = 4,
    costs: Mapping[NodeId, float] | None = None,
) -> PassResult:
    """Baseline: the i-th node of each level (by id) goes to stream ``i % max_streams``.

    Levels are longest-path levels; nodes are issued level by level. Pins are kept. Events
    are inserted exactly as by :func:`assign_streams`, so only the placement differs.

    >>> from oxiwork.examples import synthetic
    >>> sa = round_robin_by_level(synthetic(50, "layered")).artefacts["streams"]
    >>> sa.method, sa.num_streams <= 4
    ('round_robin_by_level', True)
    """
    with paused_gc():
        return _round_robin_by_level(graph, max_streams, costs)


def _round_robin_by_level(
    graph: ComputeGraph, max_streams: int, costs: Mapping[NodeId, float] | None
) -> PassResult:
    t0 = time.perf_counter()
    max_streams = _check_cap(max_streams)
    pins = _pins(graph, max_streams)
    info = topo.analyze_positions(graph, _costs(graph, costs))
    d = graph.dense()
    level = info.level
    issue = sorted(range(len(d.ids)), key=lambda p: (level[p], p))
    stream = [0] * len(d.ids)
    count: dict[int, int] = {}
    for p in issue:
        i = count.get(level[p], 0)
        count[level[p]] = i + 1
        stream[p] = pins.get(p, i % max_streams)
    return _finish(
        graph,
        stream,
        issue,
        info,
        max_streams=max_streams,
        width=max(info.level_widths, default=0),
        width_exact=False,
        chains=0,
        method="round_robin_by_level",
        t0=t0,
    )


# --------------------------------------------------------------------------------------------
# Weighing streams against memory
# --------------------------------------------------------------------------------------------

STREAM_MEMORY_SLACK = 1.05
"""A plan on several streams may need up to this many times the one-stream arena for free."""

STREAM_MIN_SPEEDUP = 0.10
"""Beyond :data:`STREAM_MEMORY_SLACK`, extra streams must shorten the modelled makespan by at
least this fraction of the one-stream makespan to be kept."""


def streams_pay(
    arena: int,
    makespan: float,
    one_stream_arena: int,
    one_stream_makespan: float,
    *,
    memory_budget: int | None = None,
) -> bool:
    """Does a plan on several streams pay for the memory it takes? (the default rule)

    Extra streams let unordered work run at once, so more buffers are live at once and the
    arena grows (ResNet-50: 1.42x on 2 streams for a 5% shorter makespan). With a
    ``memory_budget`` (bytes) the rule is that budget: the plan is kept iff its arena fits.
    Without one, it is kept iff its arena is at most :data:`STREAM_MEMORY_SLACK` times the
    one-stream arena, or its modelled makespan is at least :data:`STREAM_MIN_SPEEDUP`
    shorter than the one-stream makespan. :meth:`oxiwork.executor.plan.ExecutionPlan.build`
    compares against the peak of live bytes of the fused graph in program order (what one
    stream needs at least, and in practice gets) and the total work (the one-stream
    makespan under the cost model), so it needs no one-stream plan to decide.

    >>> streams_pay(1040, 9.5, 1000, 10.0)   # 4% more memory: kept whatever the speed-up
    True
    >>> streams_pay(1420, 9.5, 1000, 10.0)   # 42% more for a 5% shorter makespan: not kept
    False
    >>> streams_pay(1420, 8.0, 1000, 10.0), streams_pay(1420, 8.0, 1000, 10.0, memory_budget=1400)
    (True, False)
    """
    if memory_budget is not None:
        return arena <= memory_budget
    if arena <= STREAM_MEMORY_SLACK * one_stream_arena:
        return True
    return makespan <= (1.0 - STREAM_MIN_SPEEDUP) * one_stream_makespan
