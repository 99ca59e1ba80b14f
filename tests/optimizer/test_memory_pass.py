"""Tests for the graph-level memory pass: safety under happens-before, checked by brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.happens_before import graph_clocks
from oxiwork.graph import ComputeGraph
from oxiwork.optimizer import memory_pass
from oxiwork.optimizer.memory_pass import MemoryReport, buffer_intervals, plan_memory
from oxiwork.optimizer.stream import assign_streams, issue_order
from tests.strategies import any_dags


def check_safe(graph: ComputeGraph) -> None:
    """Brute force: buffers sharing bytes have every access pair ordered by happens-before."""
    order = issue_order(graph)
    vc, _ = graph_clocks(graph, order)
    where = {nid: i for i, nid in enumerate(order)}
    acc: dict = {}
    for n in graph.nodes:
        for b in (*n.inputs, *n.outputs):
            acc.setdefault(b, set()).add(where[n.id])
    placed = [b for b in graph.buffers if not b.external and b.id in acc]
    for i, a in enumerate(placed):
        for b in placed[i + 1 :]:
            if a.offset < b.offset + b.size_bytes and b.offset < a.offset + a.size_bytes:
                xs, ys = acc[a.id], acc[b.id]
                fwd = all(vc.happens_before(x, y) for x in xs for y in ys)
                bwd = all(vc.happens_before(y, x) for x in xs for y in ys)
                assert fwd or bwd, (a.name, b.name)


class TestPlanMemory:
    def test_raises_bad_mode(self):
        with pytest.raises(InvalidArgument, match="mode"):
            plan_memory(quick_start(), mode="magic")

    def test_quick_start(self):
        res = plan_memory(quick_start())
        rep = res.artefacts["memory"]
        assert isinstance(rep, MemoryReport)
        assert [b.offset for b in res.graph.buffers] == [0, 4096, 0]
        assert rep.arena_bytes == rep.lower_bound == rep.interval_lower_bound == 8192
        assert rep.to_dict()["arena_bytes"] == 8192

    @settings(max_examples=120, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(1, 4))
    def test_never_overlaps_concurrent_buffers(self, graph, cap):
        g = assign_streams(graph, max_streams=cap).graph
        res = plan_memory(g)
        out, rep = res.graph, res.artefacts["memory"]
        check_safe(out)
        for b in out.buffers:
            if b.external:
                assert b.offset is None
            else:
                assert b.offset is not None and b.offset % b.alignment == 0
                if b.id in rep.intervals:
                    assert b.offset + b.size_bytes <= rep.arena_bytes
        assert rep.arena_bytes >= rep.lower_bound
        assert rep.interval_lower_bound >= rep.lower_bound
        assert rep.arena_bytes <= rep.plan.arena_bytes  # never worse than the interval plan
        assert rep.to_dict()["arena_bytes"] == rep.arena_bytes

    @settings(max_examples=60, deadline=None)
    @given(st.integers(0, 10_000), st.integers(2, 4))
    def test_op_dags_are_safe(self, seed, cap):
        g = assign_streams(random_op_dag(seed, 30), max_streams=cap).graph
        check_safe(plan_memory(g).graph)

    @settings(max_examples=80, deadline=None)
    @given(any_dags(max_nodes=40))
    def test_one_stream_is_plain_liveness(self, graph):
        g = assign_streams(graph, max_streams=1).graph
        safe, live, _ = buffer_intervals(g)
        assert safe == live

    @settings(max_examples=60, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(1, 4))
    def test_safe_intervals_contain_the_accesses(self, graph, cap):
        g = assign_streams(graph, max_streams=cap).graph
        safe, live, order = buffer_intervals(g)
        assert safe.keys() == live.keys()
        for b, (first, end) in safe.items():
            assert live[b][0] == first and live[b][1] <= end <= len(order)

    def test_exact_mode_and_capacity(self):
        g = assign_streams(transformer_block(), max_streams=2).graph
        rep = plan_memory(g, mode="exact", time_limit=2.0).artefacts["memory"]
        assert rep.arena_bytes >= rep.lower_bound
        small = plan_memory(g, capacity=256).artefacts["memory"]
        assert small.fits is False and "capacity" in small.message
        check_safe(plan_memory(g, mode="exact", time_limit=2.0).graph)

    @settings(max_examples=60, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(2, 4))
    def test_interval_plan_alone_is_safe(self, graph, cap):
        g = assign_streams(graph, max_streams=cap).graph
        old = memory_pass.MAX_CONFLICT_PAIRS
        memory_pass.MAX_CONFLICT_PAIRS = -1
        try:
            res = plan_memory(g)
        finally:
            memory_pass.MAX_CONFLICT_PAIRS = old
        rep = res.artefacts["memory"]
        assert rep.conflict_pairs is None and rep.arena_bytes == rep.plan.arena_bytes
        check_safe(res.graph)

    def test_conflict_placement_beats_intervals_on_a_transformer(self):
        g = assign_streams(transformer_block(), max_streams=4).graph
        rep = plan_memory(g).artefacts["memory"]
        assert rep.strategy.startswith("conflict_best_fit")
        assert rep.lower_bound <= rep.arena_bytes < rep.plan.arena_bytes
