"""Dominator and post-dominator trees of a computation DAG.

``a`` dominates ``b`` when every path from the graph's entry to ``b`` passes through
``a``. A DAG may have many sources, so the entry is a virtual root connected to every
source (and, for post-dominators, a virtual exit reached from every sink). A node whose
immediate dominator is that virtual root has ``idom`` ``None``.

The fusion pass uses post-dominators to find the node that closes an element-wise
fan-out region; the workbench colours nodes by dominator subtree and draws both trees.

Algorithm: the iterative intersect of K. D. Cooper, T. J. Harvey, K. Kennedy, "A simple,
fast dominance algorithm", Software Practice and Experience 4, 2001, run once in a
topological order: on a DAG every predecessor of a vertex is final before the vertex, so
its immediate dominator is the nearest common ancestor of its predecessors in the tree
built so far, and no second iteration is needed. Everything is iterative (no recursion,
so 100k-node chains are fine) and works on lists of ints.

Example
-------
>>> from oxiwork import GraphBuilder
>>> from oxiwork.analysis import dominance
>>> b = GraphBuilder()
>>> top, left, right, bottom = (b.add_barrier(n) for n in ("top", "left", "right", "bottom"))
>>> b.fan_out(top, [left, right]); b.fan_in([left, right], bottom)
>>> tree = dominance.dominators(b.build())
>>> tree.idom[bottom], tree.idom[top]
(NodeId(0), None)
>>> dominance.post_dominators(b.build()).idom[top]
NodeId(3)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from oxiwork.analysis._util import paused_gc, positions_topological
from oxiwork.error import UnknownNode
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId

__all__ = ["DomTree", "dominators", "post_dominators"]

_EMPTY: tuple[NodeId, ...] = ()


@dataclass(frozen=True, slots=True)
class DomTree:
    """A dominator (or post-dominator) tree over a virtual root.

    ``idom`` is computed eagerly; ``children``, ``roots``, ``depth`` and the numbering
    behind :meth:`dominates` are derived from it on first use and cached (most callers
    only need ``idom``, and on 100k nodes the derived tables cost as much as the
    dominators themselves).

    Every mapping it hands out is read-only (``types.MappingProxyType``) and every sequence
    a tuple: a tree may be shared by several passes and views, and none may change it.

    Attributes
    ----------
    idom
        Immediate dominator of each node; ``None`` when it is the virtual root.
    post
        True for a post-dominator tree.
    """

    idom: Mapping[NodeId, NodeId | None]
    post: bool
    _ids: tuple[NodeId, ...] = field(repr=False)
    _pos: dict[NodeId, int] = field(repr=False)
    _parent: list[int] = field(repr=False)  # idom by position, -1 for the virtual root
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def _p(self, nid: NodeId) -> int:
        p = self._pos.get(nid)
        if p is None:
            raise UnknownNode(f"no node with id {nid!r} in this dominator tree's graph")
        return p

    def _numbering(self) -> dict[str, Any]:
        c = self._cache
        if "enter" not in c:
            with paused_gc():
                c.update(_number(self._parent))
        return c

    @property
    def children(self) -> Mapping[NodeId, tuple[NodeId, ...]]:
        """Nodes each node immediately dominates, ascending by id (every node is a key)."""
        c = self._numbering()
        if "children" not in c:
            ids, start, flat = self._ids, c["start"], c["flat"]
            with paused_gc():
                children = dict.fromkeys(ids, _EMPTY)
                for p in range(len(ids)):
                    a, b = start[p], start[p + 1]
                    if a < b:
                        children[ids[p]] = tuple([ids[k] for k in flat[a:b]])
            c["children"] = MappingProxyType(children)
        return c["children"]

    @property
    def roots(self) -> tuple[NodeId, ...]:
        """Children of the virtual root, ascending by id."""
        c = self._numbering()
        n = len(self._ids)
        return tuple([self._ids[r] for r in c["flat"][c["start"][n] : c["start"][n + 1]]])

    @property
    def depth(self) -> Mapping[NodeId, int]:
        """Depth in the tree; children of the virtual root have depth 0."""
        c = self._numbering()
        if "depth_map" not in c:
            c["depth_map"] = MappingProxyType(dict(zip(self._ids, c["depth"], strict=True)))
        return c["depth_map"]

    def dominates(self, a: NodeId, b: NodeId) -> bool:
        """True if ``a`` dominates ``b`` (every node dominates itself); O(1).

        Uses the entry/exit numbers of a depth-first walk of the tree: ``a`` is an
        ancestor of ``b`` iff its interval encloses ``b``'s.

        >>> from oxiwork import GraphBuilder
        >>> b = GraphBuilder(); x, y = b.add_barrier("x"), b.add_barrier("y"); b.dep(x, y)
        >>> t = dominators(b.build())
        >>> t.dominates(x, y), t.dominates(y, x), t.dominates(x, x)
        (True, False, True)
        """
        pa, pb = self._p(a), self._p(b)
        c = self._numbering()
        enter, exit_ = c["enter"], c["exit"]
        return enter[pa] <= enter[pb] and exit_[pb] <= exit_[pa]

    def strictly_dominates(self, a: NodeId, b: NodeId) -> bool:
        """True if ``a`` dominates ``b`` and ``a != b``."""
        return a != b and self.dominates(a, b)

    def lca(self, a: NodeId, b: NodeId) -> NodeId | None:
        """The nearest common dominator of ``a`` and ``b`` (``None``: the virtual root).

        Climbs from the deeper node; O(depth).

        >>> from oxiwork import GraphBuilder
        >>> b = GraphBuilder()
        >>> r, x, y = b.add_barrier("r"), b.add_barrier("x"), b.add_barrier("y")
        >>> b.fan_out(r, [x, y])
        >>> dominators(b.build()).lca(x, y)
        NodeId(0)
        """
        pa, pb = self._p(a), self._p(b)
        parent, depth = self._parent, self._numbering()["depth"]
        while depth[pa] > depth[pb]:
            pa = parent[pa]
        while depth[pb] > depth[pa]:
            pb = parent[pb]
        while pa != pb:
            pa, pb = parent[pa], parent[pb]
            if pa < 0:
                return None
        return self._ids[pa]


def _idom_forward(pred: list[list[int]]) -> list[int]:
    """Immediate dominators of a DAG whose vertices are numbered topologically.

    Every predecessor of ``v`` is smaller than ``v``; -1 is the virtual root before every
    source. Cooper-Harvey-Kennedy's intersect: in a topological order all predecessors
    of ``v`` are final before ``v``, so one pass suffices, and climbing the tree built so
    far from two vertices meets at their nearest common dominator (numbers decrease going
    up, so the larger one climbs).
    """
    idom = [-1] * len(pred)
    for v, pv in enumerate(pred):
        if not pv:
            continue  # a source: dominated by the virtual root only
        a = pv[0]
        if len(pv) > 1:
            for b in pv:
                while a != b:
                    while a > b:
                        a = idom[a]
                    while b > a:
                        b = idom[b]
        idom[v] = a
    return idom


def _idom_backward(succ: list[list[int]]) -> list[int]:
    """Immediate post-dominators when every successor of ``v`` is larger than ``v``.

    The mirror image of :func:`_idom_forward` (vertices in decreasing order, the virtual
    exit is ``n`` and numbers increase going up), so the reversed graph needs no
    relabelled copy of its adjacency.
    """
    n = len(succ)
    idom = [n] * n
    for v in range(n - 1, -1, -1):
        sv = succ[v]
        if not sv:
            continue
        a = sv[0]
        if len(sv) > 1:
            for b in sv:
                while a != b:
                    while a < b:
                        a = idom[a]
                    while b < a:
                        b = idom[b]
        idom[v] = a
    return [-1 if i == n else i for i in idom]


def _idom_positions(graph: ComputeGraph, post: bool) -> list[int]:
    """Immediate (post-)dominators by position, -1 for the virtual root."""
    d = graph.dense()
    if positions_topological(graph):
        # The common case (builders create producers before consumers): positions are
        # already a topological numbering, so the adjacency is used as is.
        return _idom_backward(d.succ) if post else _idom_forward(d.pred)
    # Otherwise number vertices by rank in a topological order (reversed for
    # post-dominators) and run the forward pass over ranks, then map back.
    order = d.topo[::-1] if post else d.topo
    return _idom_ranked(d.succ if post else d.pred, order)


def _idom_ranked(adj: list[list[int]], order: list[int]) -> list[int]:
    """:func:`_idom_forward` of the graph renumbered by rank in ``order``, by position.

    ``adj[p]`` are the positions entering ``p`` and ``order`` is a topological order of
    positions for those edges. Ranks are translated as each predecessor is read, instead
    of building a renumbered copy of the adjacency (n new lists on a 100k-node graph).
    """
    n = len(order)
    rank = [0] * n
    for r, p in enumerate(order):
        rank[p] = r
    idom = [-1] * n  # by rank; -1 is the virtual root
    for r, p in enumerate(order):
        pv = adj[p]
        if not pv:
            continue
        a = rank[pv[0]]
        if len(pv) > 1:
            for u in pv:
                b = rank[u]
                while a != b:
                    while a > b:
                        a = idom[a]
                    while b > a:
                        b = idom[b]
        idom[r] = a
    out = [-1] * n
    for r, p in enumerate(order):
        i = idom[r]
        if i >= 0:
            out[p] = order[i]
    return out


def _number(idom: list[int]) -> dict[str, Any]:
    """Children (CSR), depths and DFS entry/exit numbers of the tree given by ``idom``."""
    n = len(idom)
    # Children in CSR form (counting sort by parent): two flat int lists instead of n
    # small lists. Slot n stands for the virtual root.
    start = [0] * (n + 2)
    for i in idom:
        start[i + 1 if i >= 0 else n + 1] += 1
    for k in range(1, n + 2):
        start[k] += start[k - 1]
    fill = start[:]
    flat = [0] * n
    for p in range(n):  # ascending position, so children come out sorted by id
        i = idom[p]
        k = i if i >= 0 else n
        flat[fill[k]] = p
        fill[k] += 1
    # Iterative DFS over the tree: entry/exit numbers for O(1) ancestor tests, depths.
    enter = [0] * n
    exit_ = [0] * n
    depth = [0] * n
    clock = 0
    stack = flat[start[n] : start[n + 1]][::-1]
    while stack:
        v = stack.pop()
        if v >= 0:
            enter[v] = clock
            clock += 1
            stack.append(~v)
            a, b = start[v], start[v + 1]
            if a < b:
                dv = depth[v] + 1
                kv = flat[a:b]
                for c in kv:
                    depth[c] = dv
                stack.extend(kv)
        else:
            exit_[~v] = clock
            clock += 1
    return {"start": start, "flat": flat, "enter": enter, "exit": exit_, "depth": depth}


def _tree(graph: ComputeGraph, post: bool) -> DomTree:
    idom = _idom_positions(graph, post)
    d = graph.dense()
    ids = d.ids
    # Index -1 (the virtual root) of ``(*ids, None)`` is None: one C-level map.
    named = (*ids, None)
    return DomTree(
        idom=MappingProxyType(dict(zip(ids, map(named.__getitem__, idom), strict=True))),
        post=post,
        _ids=ids,
        _pos=d.pos,
        _parent=idom,
    )


def dominators(graph: ComputeGraph) -> DomTree:
    """The dominator tree of ``graph`` rooted at a virtual entry before every source.

    Parameters
    ----------
    graph
        The DAG.

    Returns
    -------
    DomTree

    Notes
    -----
    One pass of Cooper-Harvey-Kennedy's intersect (2001) over a topological order: each
    vertex with several predecessors climbs the tree built so far to their nearest common
    ancestor. That is O(V + E) plus the climbs, which are bounded by the tree depth (O(n^2)
    in the worst case, short on real graphs: on the synthetic 100k-node benchmarks it is
    5-17x faster than networkx's implementation of the same algorithm, and faster than the
    SEMI-NCA variant of Lengauer-Tarjan this module used before).

    Examples
    --------
    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder(); x, y = b.add_barrier("x"), b.add_barrier("y"); b.dep(x, y)
    >>> dict(dominators(b.build()).idom)
    {NodeId(0): None, NodeId(1): NodeId(0)}
    """
    with paused_gc():
        return _tree(graph, post=False)


def post_dominators(graph: ComputeGraph) -> DomTree:
    """The post-dominator tree: dominators of the reversed graph from a virtual exit.

    Examples
    --------
    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder(); x, y = b.add_barrier("x"), b.add_barrier("y"); b.dep(x, y)
    >>> dict(post_dominators(b.build()).idom)
    {NodeId(0): NodeId(1), NodeId(1): None}
    """
    with paused_gc():
        return _tree(graph, post=True)
