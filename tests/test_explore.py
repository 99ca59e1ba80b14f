"""Tests for the settings sweep: the Pareto front, by definition, and the rows' plans."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import GraphError, InvalidArgument
from oxiwork.examples import quick_start, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.explore import pareto_front, sweep
from tests.strategies import any_dags


def dominated(p, q) -> bool:
    """``q`` dominates ``p``: no worse anywhere, better somewhere (all minimised)."""
    return all(b <= a for a, b in zip(p, q, strict=True)) and any(
        b < a for a, b in zip(p, q, strict=True)
    )


class TestParetoFront:
    @settings(max_examples=300, deadline=None)
    @given(
        st.integers(1, 4).flatmap(
            lambda d: st.lists(st.tuples(*[st.integers(0, 6)] * d), min_size=0, max_size=30)
        )
    )
    def test_front_is_exactly_the_undominated_points(self, points):
        marks = pareto_front(points)
        front = [p for p, m in zip(points, marks, strict=True) if m]
        for p, m in zip(points, marks, strict=True):
            if m:  # nothing dominates a front point
                assert not any(dominated(p, q) for q in points)
            else:  # and every other point is dominated, by a point of the front too
                assert any(dominated(p, q) for q in front)
        assert bool(points) == bool(front)


class TestSweep:
    def test_raises_bad_arguments(self):
        g = quick_start()
        with pytest.raises(InvalidArgument, match="at least one value"):
            sweep(g, max_streams=[])
        with pytest.raises(InvalidArgument, match="ints"):
            sweep(g, max_streams=["2"])
        with pytest.raises(InvalidArgument, match="True or False"):
            sweep(g, fusion=[1])
        with pytest.raises(InvalidArgument, match="objectives"):
            sweep(g, objectives=["speed"])
        with pytest.raises(InvalidArgument, match="ComputeGraph"):
            sweep("graph")  # type: ignore[arg-type]
        with pytest.raises(GraphError):
            sweep(g, max_streams=[0])

    def test_rows_are_the_plans_of_their_settings(self):
        g = transformer_block()
        table = sweep(g, max_streams=[1, 2, 4, 8], fusion=[True, False])
        assert [(r.max_streams, r.fusion) for r in table.rows] == [
            (s, f) for s in (1, 2, 4, 8) for f in (True, False)
        ]
        for r in table.rows:
            plan = ExecutionPlan.build(g, max_streams=r.max_streams, fusion=r.fusion,
                                       weigh_memory=False)  # fmt: skip
            assert (r.arena_bytes, r.event_count, r.kernel_count, r.num_streams) == (
                plan.pool_bytes, plan.event_count, plan.kernel_count_fused, plan.num_streams
            )  # fmt: skip
            assert r.makespan == plan.streams.makespan
            assert r.arena_bytes >= r.lower_bound
        # the front, by the definition
        pts = [(r.makespan, r.arena_bytes) for r in table.rows]
        for r, p in zip(table.rows, pts, strict=True):
            assert r.pareto == (not any(dominated(p, q) for q in pts))
        assert table.front and all(r.pareto for r in table.front)
        assert json.dumps(table.to_records())
        md = table.to_markdown().splitlines()
        assert len(md) == 2 + len(table.rows)
        assert sum(line.endswith("| * |") for line in md) == len(table.front)

    @settings(max_examples=25, deadline=None)
    @given(any_dags(max_nodes=25))
    def test_front_over_four_objectives(self, graph):
        objs = ("makespan", "arena_bytes", "event_count", "kernel_count")
        table = sweep(graph, max_streams=[1, 3], fusion=[True, False], objectives=objs)
        pts = [tuple(getattr(r, o) for o in objs) for r in table.rows]
        for r, p in zip(table.rows, pts, strict=True):
            assert r.pareto == (not any(dominated(p, q) for q in pts))
            assert r.num_streams <= r.max_streams
