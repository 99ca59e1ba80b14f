"""Tests of oxiwork.executor.timeline: list scheduling invariants, launch modes, exports."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.cost import DeviceProfile, node_time
from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.timeline import timeline
from oxiwork.node import NodeKind

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


def test_raises_unknown_mode():
    with pytest.raises(InvalidArgument, match="unknown mode 'gpu'"):
        timeline(ExecutionPlan.build(quick_start()), mode="gpu")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    streams=st.integers(1, 8),
    mode=st.sampled_from(["graph", "stream"]),
)
def test_schedule_respects_streams_events_and_costs(seed, streams, mode):
    plan = ExecutionPlan.build(random_op_dag(seed, 16), max_streams=streams)
    p = DeviceProfile()
    tl = timeline(plan, p, mode=mode)
    assert [b.step for b in tl.bars] == list(range(len(plan.steps)))
    last_end: dict[int, float] = {}
    for b, s in zip(tl.bars, plan.steps, strict=True):
        assert b.stream == int(s.stream)
        assert b.launch <= b.start <= b.end
        assert b.end - b.start == pytest.approx(node_time(plan.graph, plan.graph.node(s.node), p))
        assert b.start >= last_end.get(b.stream, 0.0)  # one stream runs one step at a time
        last_end[b.stream] = b.end
    for a in tl.arrows:
        assert tl.bars[a.wait].start >= tl.bars[a.record].end == a.time
    assert len(tl.arrows) == sum(s.kind is NodeKind.EventWait for s in plan.steps)
    assert tl.makespan == max(b.end for b in tl.bars) == tl.totals[mode]


def test_launch_overheads_per_mode():
    p = DeviceProfile()
    plan = ExecutionPlan.build(quick_start())
    stream, graph = timeline(plan, p, "stream"), timeline(plan, p, "graph")
    # stream mode: every launch costs launch_overhead_stream on the host, in order
    assert stream.bars[0].launch == pytest.approx(p.launch_overhead_stream)
    assert graph.bars[0].start == pytest.approx(p.launch_overhead_stream + p.launch_overhead_graph)
    assert graph.totals == stream.totals
    assert graph.totals["graph"] < graph.totals["stream"]


def test_explicit_cost_wins():
    b = GraphBuilder()
    x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
    b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
    b.add_kernel("relu", 1, 16).cost(1e-3).inputs([x]).outputs([y]).finish()
    plan = ExecutionPlan.build(b.build(), fusion=False)
    bar = next(b for b in timeline(plan).bars if b.name == "relu")
    assert bar.end - bar.start == pytest.approx(1e-3)


def test_exports_are_json():
    plan = ExecutionPlan.build(random_op_dag(3, 20), max_streams=3)
    tl = timeline(plan, mode="stream")
    d = json.loads(json.dumps(tl.to_dict()))
    assert len(d["bars"]) == len(plan.steps) and len(d["arrows"]) == len(tl.arrows)
    assert sum(lane["steps"] for lane in d["lanes"]) == len(plan.steps)
