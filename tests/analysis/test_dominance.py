"""Dominator and post-dominator trees against networkx and a brute-force definition."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings

from oxiwork import ComputeGraph, GraphBuilder, NodeId
from oxiwork.analysis import dominance
from oxiwork.analysis._util import positions_topological
from oxiwork.error import UnknownNode
from tests.strategies import SHAPES, any_dags, build_dag, dag_edges, small_dags, sparse_ids

ROOT = "virtual-root"


def _with_root(graph: ComputeGraph, *, reverse: bool) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node(ROOT)
    g.add_nodes_from(graph.node_ids)
    for a, b in graph.edges:
        g.add_edge(b, a) if reverse else g.add_edge(a, b)
    for s in graph.sinks() if reverse else graph.sources():
        g.add_edge(ROOT, s)
    return g


def _nx_idom(graph: ComputeGraph, *, reverse: bool) -> dict[NodeId, NodeId | None]:
    doms = nx.immediate_dominators(_with_root(graph, reverse=reverse), ROOT)
    return {n: (None if d == ROOT else d) for n, d in doms.items() if n != ROOT}


def _brute_dominators(graph: ComputeGraph, *, reverse: bool) -> dict[NodeId, set[NodeId]]:
    """dom(v) = {u : removing u makes v unreachable from the root} plus v itself."""
    g = _with_root(graph, reverse=reverse)
    out: dict[NodeId, set[NodeId]] = {v: {v} for v in graph.node_ids}
    for u in graph.node_ids:
        h = g.copy()
        h.remove_node(u)
        reach = nx.descendants(h, ROOT)
        for v in graph.node_ids:
            if v != u and v not in reach:
                out[v].add(u)
    return out


def _idom_from_sets(doms: dict[NodeId, set[NodeId]]) -> dict[NodeId, NodeId | None]:
    # The immediate dominator is the strict dominator with the most dominators itself.
    out: dict[NodeId, NodeId | None] = {}
    for v, ds in doms.items():
        strict = ds - {v}
        out[v] = max(strict, key=lambda u: len(doms[u])) if strict else None
    return out


def _tree(graph: ComputeGraph, post: bool) -> dominance.DomTree:
    return dominance.post_dominators(graph) if post else dominance.dominators(graph)


class TestDomTree:
    def test_raises_unknown_node(self) -> None:
        g = build_dag(*dag_edges("chain", 3))
        with pytest.raises(UnknownNode, match=r"no node with id NodeId\(99\)"):
            dominance.dominators(g).dominates(NodeId(0), NodeId(99))

    @pytest.mark.parametrize("post", [False, True])
    @pytest.mark.parametrize("shape", SHAPES)
    def test_families_match_networkx(self, shape: str, post: bool) -> None:
        for n in (1, 2, 3, 17, 120):
            g = build_dag(*dag_edges(shape, n, seed=n), seed=n, data=False)
            assert _tree(g, post).idom == _nx_idom(g, reverse=post)

    def test_diamond(self) -> None:
        b = GraphBuilder()
        top, left, right, bottom = (b.add_barrier(n) for n in ("top", "l", "r", "bottom"))
        b.fan_out(top, [left, right])
        b.fan_in([left, right], bottom)
        g = b.build()
        dom, pdom = dominance.dominators(g), dominance.post_dominators(g)
        assert dom.idom == {top: None, left: top, right: top, bottom: top}
        assert pdom.idom == {top: bottom, left: bottom, right: bottom, bottom: None}
        assert dom.children[top] == (left, right, bottom)
        assert dom.roots == (top,) and pdom.roots == (bottom,)
        assert dom.depth == {top: 0, left: 1, right: 1, bottom: 1}
        assert dom.lca(left, right) == top and dom.lca(left, bottom) == top
        assert pdom.post and not dom.post

    def test_two_sources_meet_at_virtual_root(self) -> None:
        b = GraphBuilder()
        a, c, j = b.add_barrier("a"), b.add_barrier("c"), b.add_barrier("join")
        b.fan_in([a, c], j)
        t = dominance.dominators(b.build())
        assert t.idom[j] is None
        assert t.lca(a, c) is None
        assert not t.dominates(a, j)

    def test_long_chain_is_iterative(self) -> None:
        n = 20_000  # deeper than any recursion limit
        g = build_dag(*dag_edges("chain", n), data=False)
        ids = g.node_ids
        dom, pdom = dominance.dominators(g), dominance.post_dominators(g)
        assert dom.idom[ids[-1]] == ids[-2] and pdom.idom[ids[0]] == ids[1]
        assert dom.depth[ids[-1]] == n - 1
        assert dom.dominates(ids[0], ids[-1]) and not dom.dominates(ids[-1], ids[0])
        assert dom.lca(ids[-1], ids[n // 2]) == ids[n // 2]

    @pytest.mark.parametrize("post", [False, True])
    @settings(max_examples=300, deadline=None)
    @given(graph=any_dags(max_nodes=80))
    def test_idom_equals_networkx(self, graph: ComputeGraph, post: bool) -> None:
        assert _tree(graph, post).idom == _nx_idom(graph, reverse=post)

    @pytest.mark.parametrize("post", [False, True])
    @settings(max_examples=200, deadline=None)
    @given(graph=small_dags(max_nodes=9))
    def test_matches_brute_force(self, graph: ComputeGraph, post: bool) -> None:
        doms = _brute_dominators(graph, reverse=post)
        tree = _tree(graph, post)
        assert tree.idom == _idom_from_sets(doms)
        for a in graph.node_ids:
            for b in graph.node_ids:
                assert tree.dominates(a, b) == (a in doms[b])
                assert tree.strictly_dominates(a, b) == (a != b and a in doms[b])

    @settings(max_examples=200, deadline=None)
    @given(graph=any_dags(max_nodes=40))
    def test_tree_invariants(self, graph: ComputeGraph) -> None:
        for post in (False, True):
            t = _tree(graph, post)
            ends = graph.sinks() if post else graph.sources()
            assert set(ends) <= set(t.roots) and t.roots == tuple(sorted(t.roots))
            for v, d in t.idom.items():
                assert (d is None) == (v in t.roots)
                assert t.depth[v] == (0 if d is None else t.depth[d] + 1)
                if d is not None:
                    assert v in t.children[d]
                    assert t.lca(v, d) == d
            assert sum(len(c) for c in t.children.values()) + len(t.roots) == graph.num_nodes
            ids = graph.node_ids
            for a in ids[:8]:
                for b in ids[-8:]:
                    c = t.lca(a, b)
                    if c is not None:
                        assert t.dominates(c, a) and t.dominates(c, b)


@settings(max_examples=100, deadline=None)
@given(graph=any_dags(max_nodes=40))
def test_sparse_ids(graph: ComputeGraph) -> None:
    sparse = sparse_ids(graph)
    for post in (False, True):
        dense_idom = _tree(graph, post).idom
        expected = {
            NodeId(3 * v + 7): None if d is None else NodeId(3 * d + 7)
            for v, d in dense_idom.items()
        }
        assert _tree(sparse, post).idom == expected == _nx_idom(sparse, reverse=post)


@settings(max_examples=150, deadline=None)
@given(graph=any_dags(max_nodes=60))
def test_reversed_ids_take_the_ranked_path(graph: ComputeGraph) -> None:
    # Ids descending along every edge: positions are then no topological numbering, so
    # the trees come from the rank-translating pass rather than the position-based one.
    flipped = sparse_ids(graph, scale=-1, shift=10**6)
    assert not graph.edges or not positions_topological(flipped)
    for post in (False, True):
        expected = {
            NodeId(10**6 - v): None if d is None else NodeId(10**6 - d)
            for v, d in _tree(graph, post).idom.items()
        }
        assert _tree(flipped, post).idom == expected == _nx_idom(flipped, reverse=post)


class TestReadOnly:
    """A DomTree may be shared by passes and views: none may change it."""

    @pytest.mark.parametrize("post", [False, True])
    @pytest.mark.parametrize("field", ["idom", "children", "depth"])
    def test_mappings_refuse_writes(self, post, field):
        g = build_dag(*dag_edges("diamond", 12, seed=3), seed=3)
        tree = dominance.post_dominators(g) if post else dominance.dominators(g)
        m = getattr(tree, field)
        nid = next(iter(m))
        with pytest.raises(TypeError):
            m[nid] = None  # type: ignore[index]
        with pytest.raises(AttributeError):
            m.update({})  # type: ignore[attr-defined]
        assert isinstance(tree.roots, tuple)
        assert all(isinstance(c, tuple) for c in tree.children.values())
