"""The passes build their graphs from parts they vouch for (``with_changes`` keeps the
source graph's checked parts and skips the value rules of ``checked_nodes``): the graphs
they return must be exactly what the fully checking constructor makes of the same parts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import UnknownBuffer
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.graph import ComputeGraph, check_node
from oxiwork.node import BufferId
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams
from oxiwork.verify import verify
from tests.strategies import any_dags, rich_graphs


def rebuilt_equal(g: ComputeGraph) -> None:
    """Every node passes the value rules, and the constructor, checking everything, makes
    the same graph (same ordering verdict, same dense view) from ``g``'s parts."""
    for n in g.nodes:
        check_node(n)
    fresh = ComputeGraph(list(g.nodes), list(g.buffers), list(g.edges))
    assert fresh == g
    assert fresh.dense() == g.dense()
    verify(fresh)
    verify(g)


def passes(g: ComputeGraph, cap: int) -> list[ComputeGraph]:
    pinned = [int(n.stream) for n in g.nodes if n.stream is not None]
    cap = max([cap, *(s + 1 for s in pinned)])  # a cap below a pin is refused
    fused = fuse(g).graph
    streamed = assign_streams(fused, max_streams=cap).graph
    return [fused, streamed, plan_memory(streamed).graph]


class TestPassesRebuildCheckedGraphs:
    def test_raises_checked_nodes_keep_the_structural_checks(self) -> None:
        g = quick_start()
        bad = g.nodes[1].replace(inputs=(BufferId(99),))
        with pytest.raises(UnknownBuffer):
            g.with_changes(nodes=[bad, *g.nodes[:1], *g.nodes[2:]], checked_nodes=[bad])

    @settings(max_examples=40, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(1, 8))
    def test_dags(self, graph: ComputeGraph, cap: int) -> None:
        for g in passes(graph, cap):
            rebuilt_equal(g)

    @settings(max_examples=20, deadline=None)
    @given(rich_graphs(), st.integers(1, 4))
    def test_rich_graphs(self, graph: ComputeGraph, cap: int) -> None:
        for g in passes(graph, cap):
            rebuilt_equal(g)

    @pytest.mark.parametrize("cap", [1, 2, 4])
    def test_models(self, cap: int) -> None:
        for graph in (transformer_block(2), random_op_dag(3, 80)):
            for g in passes(graph, cap):
                rebuilt_equal(g)
