"""Topological analysis: ASAP/ALAP, slack, levels, critical path, priority."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, NodeId
from oxiwork.analysis import topo
from oxiwork.error import InvalidArgument
from tests.strategies import SHAPES, any_dags, build_dag, costs_for, dag_edges, sparse_ids


def _graph_and_costs(integral: bool = True) -> st.SearchStrategy:
    return any_dags(max_nodes=60).flatmap(
        lambda g: st.tuples(st.just(g), costs_for(g, integral=integral))
    )


def _longest_from_sources(g: ComputeGraph, cost: dict[NodeId, float]) -> dict[NodeId, float]:
    """Earliest start by the definition: the longest path ending just before v."""
    nxg = g.to_networkx()
    out: dict[NodeId, float] = {}
    for v in nx.topological_sort(nxg):
        out[v] = max((out[u] + cost[u] for u in nxg.predecessors(v)), default=0.0)
    return out


class TestAnalyze:
    def test_raises_negative_cost(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match=r"cost of node 'k0' is -1\.0"):
            topo.analyze(g, {NodeId(0): -1.0})

    def test_raises_nan_cost(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match="finite"):
            topo.analyze(g, {NodeId(1): math.nan})

    def test_raises_unknown_cost_key(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match=r"costs names node NodeId\(7\)"):
            topo.analyze(g, {NodeId(7): 1.0})

    def test_raises_non_number_cost(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match="must be a number"):
            topo.analyze(g, {NodeId(0): "fast"})  # type: ignore[dict-item]

    def test_default_cost_is_node_cost_or_one(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 4)
        k = b.add_kernel("k", 1, 1).outputs([x]).cost(0.25).finish()
        m = b.add_barrier("m")
        b.dep(k, m)
        info = topo.analyze(b.build())
        assert info.cost == {k: 0.25, m: 1.0}
        assert info.makespan == 1.25 and info.asap[m] == 0.25

    @pytest.mark.parametrize("shape", SHAPES)
    def test_families(self, shape: str) -> None:
        g = build_dag(*dag_edges(shape, 50, seed=3), seed=3)
        info = topo.analyze(g)
        # unit costs: the makespan counts the nodes of the longest path
        assert info.makespan == nx.dag_longest_path_length(g.to_networkx()) + 1
        assert len(info.critical_path) == info.makespan
        assert len(info.level_widths) == info.makespan

    def test_chain(self) -> None:
        g = build_dag(*dag_edges("chain", 5), data=False)
        info = topo.analyze(g)
        assert [info.asap[n] for n in g.node_ids] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert set(info.slack.values()) == {0.0}
        assert info.critical_path == g.node_ids and info.level_widths == (1,) * 5

    def test_fan_slack(self) -> None:
        b = GraphBuilder()
        s, fast, slow, t = (b.add_barrier(n) for n in ("s", "fast", "slow", "t"))
        b.fan_out(s, [fast, slow])
        b.fan_in([fast, slow], t)
        info = topo.analyze(b.build(), {slow: 5.0})
        assert info.slack == {s: 0.0, fast: 4.0, slow: 0.0, t: 0.0}
        assert info.critical_path == (s, slow, t) and info.makespan == 7.0
        assert info.critical_nodes == {s, slow, t}
        assert info.priority == (s, slow, fast, t)

    @settings(max_examples=300, deadline=None)
    @given(gc=_graph_and_costs())
    def test_schedule_invariants(self, gc: tuple[ComputeGraph, dict[NodeId, float]]) -> None:
        g, cost = gc
        info = topo.analyze(g, cost)
        assert info.asap == _longest_from_sources(g, cost)
        assert info.makespan == max(info.asap[v] + cost[v] for v in g.node_ids)
        for v in g.node_ids:
            assert info.asap[v] <= info.alap[v]
            assert info.alap[v] + cost[v] <= info.makespan
            assert info.slack[v] == info.alap[v] - info.asap[v] >= 0.0
        for a, b in g.edges:
            assert info.asap[a] + cost[a] <= info.asap[b]
            assert info.alap[a] + cost[a] <= info.alap[b]
            assert info.level[a] < info.level[b]

    @settings(max_examples=300, deadline=None)
    @given(gc=_graph_and_costs())
    def test_zero_slack_exactly_on_critical_paths(
        self, gc: tuple[ComputeGraph, dict[NodeId, float]]
    ) -> None:
        g, cost = gc
        info = topo.analyze(g, cost)
        nxg = g.to_networkx()
        # longest path ending at v (inclusive) and starting at v (inclusive)
        head = {v: info.asap[v] + cost[v] for v in g.node_ids}
        tail: dict[NodeId, float] = {}
        for v in reversed(list(nx.topological_sort(nxg))):
            tail[v] = cost[v] + max((tail[w] for w in nxg.successors(v)), default=0.0)
        for v in g.node_ids:
            on_longest = head[v] + tail[v] - cost[v] == info.makespan
            assert (info.slack[v] == 0.0) == on_longest, v
        path = info.critical_path
        assert all(info.slack[v] == 0.0 for v in path)
        assert sum(cost[v] for v in path) == info.makespan
        assert not g.predecessors(path[0]) and not g.successors(path[-1])
        assert all((a, b) in set(g.edges) for a, b in itertools.pairwise(path))

    @settings(max_examples=200, deadline=None)
    @given(gc=_graph_and_costs(integral=False))
    def test_float_costs_critical_path(self, gc: tuple[ComputeGraph, dict[NodeId, float]]) -> None:
        g, cost = gc
        info = topo.analyze(g, cost)
        assert math.isclose(
            sum(cost[v] for v in info.critical_path), info.makespan, rel_tol=1e-9, abs_tol=1e-9
        )
        assert all(info.slack[v] == 0.0 for v in info.critical_path)
        assert all(s >= 0.0 for s in info.slack.values())

    @settings(max_examples=200, deadline=None)
    @given(gc=_graph_and_costs())
    def test_priority_is_topological(self, gc: tuple[ComputeGraph, dict[NodeId, float]]) -> None:
        g, cost = gc
        info = topo.analyze(g, cost)
        rank = {v: i for i, v in enumerate(info.priority)}
        assert sorted(rank) == list(g.node_ids)
        assert all(rank[a] < rank[b] for a, b in g.edges)
        keys = [(info.alap[v], info.level[v], v) for v in info.priority]
        assert keys == sorted(keys)


class TestLevels:
    @settings(max_examples=200, deadline=None)
    @given(g=any_dags(max_nodes=60))
    def test_levels_respect_edges_and_are_longest(self, g: ComputeGraph) -> None:
        groups = topo.levels(g)
        level = {v: k for k, grp in enumerate(groups) for v in grp}
        assert sorted(level) == list(g.node_ids)
        assert all(groups)
        for a, b in g.edges:
            assert level[a] < level[b]
        for v in g.node_ids:  # longest path: some predecessor sits one level below
            preds = g.predecessors(v)
            assert level[v] == (max(level[u] for u in preds) + 1 if preds else 0)
        info = topo.analyze(g)
        assert info.level == level
        assert info.level_widths == tuple(len(grp) for grp in groups)

    def test_critical_path_function(self) -> None:
        g = build_dag(*dag_edges("diamond", 7, seed=2), data=False)
        path, total = topo.critical_path(g)
        assert total == len(path) == topo.analyze(g).makespan


@settings(max_examples=100, deadline=None)
@given(g=any_dags(max_nodes=40))
def test_sparse_ids(g: ComputeGraph) -> None:
    a, b = topo.analyze(g), topo.analyze(sparse_ids(g))

    def f(v: NodeId) -> NodeId:
        return NodeId(3 * v + 7)

    assert b.asap == {f(v): t for v, t in a.asap.items()}
    assert b.slack == {f(v): t for v, t in a.slack.items()}
    assert b.critical_path == tuple(map(f, a.critical_path)) and b.makespan == a.makespan


def test_priority_is_topological_when_snapping_rounds_alap() -> None:
    # Found by hypothesis: a zero-cost predecessor of a long node whose ALAP is snapped to
    # its ASAP came out 2.9e-17 later than it, so (alap, level) put it after its successor.
    b = GraphBuilder()
    zero, short, long_ = b.add_barrier("zero"), b.add_barrier("short"), b.add_barrier("long")
    b.fan_in([zero, short], long_)
    g = b.build()
    info = topo.analyze(g, costs={zero: 0.0, short: 1e-6, long_: 0.5})
    rank = {nid: i for i, nid in enumerate(info.priority)}
    assert all(rank[u] < rank[v] for u, v in g.edges)
    assert info.slack[long_] == 0.0


class TestReadOnly:
    """A TopoInfo is shared by every consumer: none may change it."""

    @pytest.mark.parametrize("field", ["cost", "asap", "alap", "slack", "level"])
    def test_mappings_refuse_writes(self, field):
        g = build_dag(*dag_edges("diamond", 12, seed=3), seed=3)
        info = topo.analyze(g)
        m = getattr(info, field)
        nid = next(iter(m))
        with pytest.raises(TypeError):
            m[nid] = 0  # type: ignore[index]
        with pytest.raises(AttributeError):
            m.pop(nid)  # type: ignore[attr-defined]
        assert topo.analyze(g) == info

    def test_sequences_are_tuples(self):
        g = build_dag(*dag_edges("layered", 20, seed=1), seed=1)
        info = topo.analyze(g)
        for seq in (info.order, info.level_widths, info.critical_path, info.priority):
            assert isinstance(seq, tuple)
        assert isinstance(topo.levels(g), tuple)
        with pytest.raises(TypeError):
            topo.level_positions(g)[0] = 5  # type: ignore[index]

    def test_levels_are_one_computation(self):
        g = build_dag(*dag_edges("random", 40, seed=2), seed=2)
        info = topo.analyze(g)
        by_pos = topo.level_positions(g)
        ids = g.dense().ids
        assert dict(info.level) == {ids[p]: lv for p, lv in enumerate(by_pos)}
        assert [sorted(s) for s in topo.levels(g)] == [
            sorted(n for n, lv in info.level.items() if lv == k)
            for k in range(len(info.level_widths))
        ]


@settings(max_examples=60, deadline=None)
@given(_graph_and_costs(integral=False))
def test_positions_are_the_analysis_by_position(g_costs) -> None:
    g, costs = g_costs
    info, t = topo.analyze(g, costs), topo.analyze_positions(g, costs)
    ids = g.dense().ids
    for field in ("cost", "asap", "alap", "slack", "level"):
        assert getattr(t, field) == tuple(getattr(info, field)[v] for v in ids)
    assert tuple(ids[p] for p in t.priority) == info.priority
    assert tuple(ids[p] for p in t.critical_path) == info.critical_path
    assert (t.makespan, t.level_widths) == (info.makespan, info.level_widths)


@settings(max_examples=60, deadline=None)
@given(_graph_and_costs(integral=False), st.booleans())
def test_costs_of_every_node_taken_whole_as_one_by_one(g_costs, as_int) -> None:
    # in id order the costs are taken whole; in any other order they are checked one by one
    g, costs = g_costs
    if as_int:
        costs = {nid: int(c) for nid, c in costs.items()}
    shuffled = dict(reversed(costs.items()))
    assert topo.node_costs(g, costs) == topo.node_costs(g, shuffled)
    assert all(type(c) is float for c in topo.node_costs(g, costs))


@pytest.mark.parametrize("bad", [True, math.nan, -1.0, "1.0"])
def test_costs_of_every_node_are_checked(bad) -> None:
    g = build_dag(*dag_edges("chain", 3), data=False)
    costs = {nid: 1.0 for nid in g.node_ids}
    costs[g.node_ids[1]] = bad
    with pytest.raises(InvalidArgument, match=r"must be a number|finite and >= 0"):
        topo.node_costs(g, costs)
