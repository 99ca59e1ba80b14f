"""Topological analysis: levels, ASAP/ALAP schedules, slack and the critical path.

Every function is pure and returns plain data keyed by :class:`~oxiwork.node.NodeId`.
The work is done on the graph's cached :meth:`~oxiwork.graph.ComputeGraph.dense` view
with lists of ints and floats (a 100k-node DAG takes a fraction of a second); the dicts
keyed by id are built once at the end.

The schedule model is the classic one of list scheduling on unbounded resources
(Y.-K. Kwok, I. Ahmad, "Static scheduling algorithms for allocating directed task graphs
to multiprocessors", ACM Computing Surveys 31(4), 1999, section 2): a node starts when all
its predecessors have finished, ASAP is its earliest start, ALAP its latest start that
does not lengthen the makespan, and ``slack = alap - asap``. Nodes of zero slack are
exactly the nodes lying on some longest (critical) path.

Example
-------
>>> from oxiwork import GraphBuilder
>>> from oxiwork.analysis import topo
>>> b = GraphBuilder()
>>> a, c, d = (b.add_barrier(n) for n in ("a", "c", "d"))
>>> b.chain([a, c]); b.dep(a, d)
>>> info = topo.analyze(b.build(), costs={c: 3.0})
>>> info.makespan, [int(n) for n in info.critical_path]
(4.0, [0, 1])
>>> info.slack[d]
2.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from oxiwork.analysis._util import paused_gc, positions_topological
from oxiwork.error import InvalidArgument
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId

__all__ = [
    "DenseTopo",
    "TopoInfo",
    "analyze",
    "analyze_positions",
    "critical_path",
    "level_positions",
    "levels",
    "node_costs",
]

# Slack below this fraction of the makespan is rounding noise from summing the same costs
# in a different order (forward for ASAP, backward for ALAP), so it is reported as 0.
_REL_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class TopoInfo:
    """The result of :func:`analyze`; every mapping is keyed by node id.

    Mappings are read-only (``types.MappingProxyType``) and sequences tuples, so one
    result can be handed to every consumer without a copy and none can change it.

    Attributes
    ----------
    order
        A deterministic topological order (the graph's own).
    cost
        The cost used for each node.
    asap, alap
        Earliest and latest start times; ``alap[n] + cost[n] <= makespan``.
    slack
        ``alap - asap`` (exactly ``0.0`` on critical nodes; values within ``1e-9 *
        makespan`` of zero are snapped to zero).
    level
        Length in edges of the longest path from a source (sources are level 0).
    level_widths
        ``level_widths[k]`` is the number of nodes at level ``k``.
    critical_path
        One longest path by cost, source to sink; its nodes all have zero slack.
    makespan
        Its total cost: the finish time of the ASAP schedule.
    priority
        Nodes sorted by ``(alap, level, id)``: the most urgent first. It is a
        topological order for non-negative costs (ALAP and level never decrease along an
        edge and level strictly increases), so a list scheduler can take it as is. Slack
        is deliberately not the second key: with zero-cost nodes it would put a
        successor before its predecessor.
    """

    order: tuple[NodeId, ...]
    cost: Mapping[NodeId, float]
    asap: Mapping[NodeId, float]
    alap: Mapping[NodeId, float]
    slack: Mapping[NodeId, float]
    level: Mapping[NodeId, int]
    level_widths: tuple[int, ...]
    critical_path: tuple[NodeId, ...]
    makespan: float
    priority: tuple[NodeId, ...]

    @property
    def critical_nodes(self) -> frozenset[NodeId]:
        """Every node with zero slack (the union of all critical paths)."""
        return frozenset(n for n, s in self.slack.items() if s == 0.0)


@dataclass(frozen=True, slots=True)
class DenseTopo:
    """:func:`analyze_positions`: what :class:`TopoInfo` holds, by dense position
    (``graph.dense()``), for passes that work on positions (no dicts keyed by id).

    ``cost``, ``asap``, ``alap``, ``slack`` and ``level`` are per position;
    ``critical_path`` and ``priority`` are positions; ``level_widths`` and ``makespan``
    as in :class:`TopoInfo`.
    """

    cost: tuple[float, ...]
    asap: tuple[float, ...]
    alap: tuple[float, ...]
    slack: tuple[float, ...]
    level: tuple[int, ...]
    level_widths: tuple[int, ...]
    critical_path: tuple[int, ...]
    makespan: float
    priority: tuple[int, ...]


def node_costs(graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None) -> list[float]:
    """Per-position costs: ``costs[id]`` if given, else ``node.cost or 1.0``.

    Raises :class:`~oxiwork.error.InvalidArgument` for a negative or non-finite cost, or a
    key that is not a node of ``graph``.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder(); n = b.add_barrier()
    >>> node_costs(b.build(), {n: 2.5})
    [2.5]
    """
    if costs is not None and not isinstance(costs, Mapping):
        raise InvalidArgument(
            f"costs must be a dict of node id -> cost, got {type(costs).__name__}"
        )
    out: list[float] | None = None
    if costs and len(costs) == len(graph.nodes):
        # The cost of every node, in id order (the cost model's): taken whole when the keys
        # are exactly the ids and the values plain numbers; anything else is checked one
        # by one below (which raises for what is wrong).
        keys, values = list(costs), list(costs.values())
        if (
            set(map(type, keys)) <= _ID_TYPES
            and set(map(type, values)) <= _NUMBER_TYPES
            and keys == list(graph.dense().ids)
        ):
            out = list(map(float, values))
    if out is None:
        out = [1.0 if n.cost is None else float(n.cost) for n in graph.nodes]
        if costs:
            pos = graph.dense().pos
            for nid, c in costs.items():
                p = pos.get(nid)
                if p is None:
                    raise InvalidArgument(
                        f"costs names node {nid!r}, which is not in this graph; "
                        "key costs by the graph's node ids"
                    )
                if isinstance(c, bool) or not isinstance(c, (int, float)):
                    raise InvalidArgument(
                        f"cost of {graph.nodes[p].name!r} must be a number: {c!r}"
                    )
                out[p] = float(c)
    if out and not (all(map(math.isfinite, out)) and min(out) >= 0.0):
        p = next(p for p, c in enumerate(out) if not (math.isfinite(c) and c >= 0.0))
        raise InvalidArgument(
            f"cost of node {graph.nodes[p].name!r} is {out[p]}; costs must be finite and >= 0"
        )
    return out


# What node_costs takes whole: ids as node ids or plain ints, costs as plain numbers (a
# bool is no cost, and numpy scalars take the checks one by one).
_ID_TYPES = frozenset({NodeId, int})
_NUMBER_TYPES = frozenset({float, int})


def level_positions(graph: ComputeGraph) -> tuple[int, ...]:
    """Level of every node by dense position: the length in edges of the longest path from
    a source (sources are level 0). The one computation of levels; cached per graph.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> a, c, d = (b.add_barrier(n) for n in "acd")
    >>> b.chain([a, c, d]); b.dep(a, d)
    >>> level_positions(b.build())
    (0, 1, 2)
    """
    level = graph._cache.get("analysis.levels")
    if level is None:
        d = graph.dense()
        pred = d.pred
        out = [0] * len(d.ids)
        # any topological order gives the same levels; memory order is faster when it is one
        for v in range(len(out)) if positions_topological(graph) else d.topo:
            pv = pred[v]
            if not pv:
                continue
            if len(pv) == 1:  # (most nodes: no list to build and take the max of)
                out[v] = out[pv[0]] + 1
            else:
                out[v] = max([out[u] for u in pv]) + 1
        level = graph._cache["analysis.levels"] = tuple(out)
    return level


def levels(graph: ComputeGraph) -> tuple[frozenset[NodeId], ...]:
    """Nodes grouped by level (longest path in edges from a source), level 0 first.

    Every edge goes from a lower to a strictly higher level, so each group can run in
    parallel (compare networkx's ``topological_generations``, which uses the shortest
    rather than the longest path).

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> a, c, d = (b.add_barrier(n) for n in "acd")
    >>> b.chain([a, c, d]); b.dep(a, d)
    >>> [sorted(int(n) for n in g) for g in levels(b.build())]
    [[0], [1], [2]]
    """
    level = level_positions(graph)
    groups: list[list[NodeId]] = [[] for _ in range(max(level, default=-1) + 1)]
    ids = graph.dense().ids
    for p, lv in enumerate(level):
        groups[lv].append(ids[p])
    return tuple(frozenset(g) for g in groups)


def critical_path(
    graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None
) -> tuple[tuple[NodeId, ...], float]:
    """One longest path by cost and its total cost (the makespan).

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder(); a, c = b.add_barrier("a"), b.add_barrier("c"); b.dep(a, c)
    >>> critical_path(b.build())
    ((NodeId(0), NodeId(1)), 2.0)
    """
    info = analyze(graph, costs)
    return info.critical_path, info.makespan


def analyze(graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None) -> TopoInfo:
    """ASAP/ALAP schedule, slack, levels and a critical path of ``graph``.

    Parameters
    ----------
    graph
        The DAG.
    costs
        Optional per-node costs overriding ``node.cost or 1.0`` (must be >= 0).

    Returns
    -------
    TopoInfo
        Plain data keyed by node id; see its attributes.

    Notes
    -----
    Two linear sweeps over the dense view: forward in topological order for ASAP and the
    best predecessor (which yields a critical path by walking back from the last
    node to finish), backward for ALAP. References: the longest-path method of CPM
    (J. E. Kelley, M. R. Walker, "Critical-path planning and scheduling", 1959) and
    Kwok & Ahmad 1999 for the ASAP/ALAP vocabulary of task-graph scheduling.

    Examples
    --------
    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> a, c = b.add_barrier("a"), b.add_barrier("c")
    >>> info = analyze(b.build(), costs={a: 2.0})
    >>> info.makespan, info.slack[c], info.level_widths
    (2.0, 1.0, (2,))
    """
    with paused_gc():
        return _analyze(graph, costs)


def analyze_positions(
    graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None
) -> DenseTopo:
    """:func:`analyze` by dense position (:class:`DenseTopo`): the same numbers, without
    the dicts keyed by id.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> a, c = b.add_barrier("a"), b.add_barrier("c")
    >>> g = b.build()
    >>> t = analyze_positions(g, costs={a: 2.0})
    >>> t.makespan, t.slack, t.priority
    (2.0, (0.0, 1.0), (0, 1))
    """
    with paused_gc():
        return _positions(graph, costs)


def _analyze(graph: ComputeGraph, costs: Mapping[NodeId, float] | None) -> TopoInfo:
    t = _positions(graph, costs)
    ids = graph.dense().ids
    order = graph.topological_order()
    return TopoInfo(
        order=order,
        cost=MappingProxyType(dict(zip(ids, t.cost, strict=True))),
        asap=MappingProxyType(dict(zip(ids, t.asap, strict=True))),
        alap=MappingProxyType(dict(zip(ids, t.alap, strict=True))),
        slack=MappingProxyType(dict(zip(ids, t.slack, strict=True))),
        level=MappingProxyType(dict(zip(ids, t.level, strict=True))),  # levels: level_positions
        level_widths=t.level_widths,
        critical_path=tuple([ids[p] for p in t.critical_path]),
        makespan=t.makespan,
        priority=tuple(map(ids.__getitem__, t.priority)),
    )


def _positions(graph: ComputeGraph, costs: Mapping[NodeId, float] | None) -> DenseTopo:
    d = graph.dense()
    ids, pred, succ, topo = d.ids, d.pred, d.succ, d.topo
    n = len(ids)
    cost = node_costs(graph, costs)
    # Any topological order gives the same ASAP/ALAP/levels; when positions already are
    # one, sweep them in memory order (sequential access instead of hopping through
    # 100k-element lists in Kahn's order, which costs cache misses on big graphs).
    sweep: range | list[int] = range(n) if positions_topological(graph) else topo

    asap = [0.0] * n
    finish = cost[:]  # asap + cost; sources start at 0
    level = level_positions(graph)
    best = [-1] * n  # predecessor finishing last: the critical path walks back through it
    for v in sweep:
        pv = pred[v]
        if not pv:
            continue
        if len(pv) == 1:
            u = pv[0]
            t = finish[u]
            best[v] = u
        else:
            # C-level max/index over small lists beats a Python loop per predecessor.
            ft = [finish[u] for u in pv]
            t = max(ft)
            best[v] = pv[ft.index(t)]
        asap[v] = t
        finish[v] = t + cost[v]

    finish_a = np.array(finish)
    makespan = float(finish_a.max()) if n else 0.0
    # End the critical path at a sink: with zero-cost nodes an inner node may finish at
    # the makespan too, but finish times never decrease along edges, so some sink does.
    # numpy finds the few candidates, instead of a Python scan from position 0 (a chain's
    # only sink is its last node).
    ends = np.flatnonzero(finish_a == makespan).tolist()
    last = next((p for p in ends if not succ[p]), -1)

    alap = [0.0] * n
    for v in reversed(sweep):
        sv = succ[v]
        if not sv:
            alap[v] = makespan - cost[v]
        elif len(sv) == 1:
            alap[v] = alap[sv[0]] - cost[v]
        else:
            alap[v] = min([alap[w] for w in sv]) - cost[v]

    path: list[int] = []
    v = last
    while v >= 0:
        path.append(v)
        v = best[v]
    path.reverse()

    # The rest is vectorised: besides being faster, ``tolist`` creates the result floats
    # contiguously, and filling the result dicts (which touches every value) then walks
    # memory in order instead of chasing floats scattered by the sweeps.
    asap_a = np.array(asap)
    raw_alap_a = np.array(alap)
    alap_a = raw_alap_a
    tol = _REL_TOL * makespan
    alap_a = np.where(alap_a - asap_a > tol, alap_a, asap_a)
    # The walk follows the predecessor that finished last, so every node on it has zero
    # slack in exact arithmetic; snap the rounding noise of long float sums as above.
    alap_a[path] = asap_a[path]
    slack_a = alap_a - asap_a
    level_a = np.array(level, dtype=np.int64)
    widths = np.bincount(level_a, minlength=1 if n else 0).tolist()  # levels: 0..max
    # lexsort is stable and sorts by its last key first: (alap, level, position). It sorts
    # the ALAP of the sweep, not the snapped one: in floats ``fl(m - c) <= m`` for c >= 0, so
    # the sweep's ALAP never decreases along an edge and, with level breaking ties, the
    # priority is a topological order; snapping a node to its ASAP can break that (a
    # predecessor left 1e-18 above a snapped successor).
    prio = np.lexsort((level_a, raw_alap_a)).tolist()

    return DenseTopo(
        cost=tuple(cost),
        asap=tuple(asap_a.tolist()),
        alap=tuple(alap_a.tolist()),
        slack=tuple(slack_a.tolist()),
        level=level,
        level_widths=tuple(widths),
        critical_path=tuple(path),
        makespan=makespan,
        priority=tuple(prio),
    )
