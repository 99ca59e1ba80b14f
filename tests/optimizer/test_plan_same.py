"""The speed-ups of the stream and memory passes and of the plan lowering (issue 14) change
no plan: what a pass hands on through a graph's caches (costs, bound programs, checked
parts) is what a graph built from scratch from the same parts computes, and the plans made
from it are the same: the same streams, events, offsets and arena."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.cost import node_costs
from oxiwork.error import InvalidArgument, InvalidPlan
from oxiwork.examples import quick_start, synthetic
from oxiwork.executor.plan import (
    BufferArg,
    ExecutionPlan,
    PlanStep,
    _find_structure_error,
    _structure_holds,
)
from oxiwork.graph import ComputeGraph, check_buffer
from oxiwork.node import GraphNode, NodeKind, StreamId
from oxiwork.ops.program import _BOUND, bind, share_bound
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams
from oxiwork.verify import carry_node_rules, verify_graph
from tests.strategies import any_dags


def fresh(g: ComputeGraph) -> ComputeGraph:
    """The same graph with nothing cached: every analysis starts from its parts."""
    return ComputeGraph(list(g.nodes), list(g.buffers), list(g.edges))


def same_plans(g: ComputeGraph, cap: int) -> None:
    pinned = [int(n.stream) for n in g.nodes if n.stream is not None]
    cap = max([cap, *(s + 1 for s in pinned)])  # a cap below a pin is refused
    fused = fuse(g).graph
    node_costs(fused)  # what the stream pass computes (and now hands on)
    res = assign_streams(fused, max_streams=cap)
    streamed = res.graph
    # costs carried into the streamed graph: what costing it from scratch gives
    assert node_costs(streamed) == node_costs(fresh(streamed))
    # the stream pass on a graph without caches decides the same
    again = assign_streams(fresh(fused), max_streams=cap)
    assert again.graph == streamed
    a, b = res.artefacts["streams"], again.artefacts["streams"]
    assert (a.stream_of, a.events, a.order) == (b.stream_of, b.events, b.order)
    # the memory pass with the carried caches places every buffer where it does without
    mem = plan_memory(streamed)
    ref = plan_memory(fresh(streamed))
    assert mem.graph == ref.graph
    ra, rb = mem.artefacts["memory"], ref.artefacts["memory"]
    assert (ra.offsets, ra.arena_bytes, ra.lower_bound) == (
        rb.offsets,
        rb.arena_bytes,
        rb.lower_bound,
    )
    for buf in mem.graph.buffers:  # the buffers the pass vouched for pass the value rules
        check_buffer(buf)
    assert mem.graph == fresh(mem.graph)


@settings(max_examples=25, deadline=None)
@given(any_dags(max_nodes=40), st.sampled_from([1, 2, 4]))
def test_random_graphs_plan_the_same(g: ComputeGraph, cap: int) -> None:
    same_plans(g, cap)


@pytest.mark.parametrize("shape", ["chain", "layered", "transformer"])
def test_synthetic_2k_plans_the_same(shape: str) -> None:
    same_plans(synthetic(2000, shape), 4)


def test_share_bound_offsets_only_moves_what_the_check_moves() -> None:
    g = assign_streams(fuse(synthetic(300, "transformer")).graph).graph
    for n in g.kernels():
        bind(g, n)
    planned = plan_memory(g).graph
    checked, vouched = fresh(planned), fresh(planned)
    object.__setattr__(checked, "nodes", planned.nodes)  # the same node objects as g
    object.__setattr__(vouched, "nodes", planned.nodes)
    share_bound(g, checked)
    share_bound(g, vouched, offsets_only=True)
    assert checked._cache[_BOUND].keys() == vouched._cache[_BOUND].keys()
    assert len(vouched._cache[_BOUND]) == len(g.kernels())
    for nid, entry in checked._cache[_BOUND].items():
        assert vouched._cache[_BOUND][nid][1] is entry[1]


def reference_steps(plan: ExecutionPlan) -> list[PlanStep]:
    """The steps as the plain lowering makes them: one PlanStep per node of the memory
    pass's issue order, by keyword, everything looked up through the graph's public API."""
    g = plan.graph
    order = plan.memory.order
    index = {nid: i for i, nid in enumerate(order)}
    args = {}
    for b in g.buffers:
        args[b.id] = BufferArg(
            b.id, b.name, b.offset, b.size_bytes, b.dtype, b.array_shape, b.external
        )
    for b in g.buffers:
        if b.base is not None:
            args[b.id] = BufferArg(
                b.id, b.name, b.offset, b.size_bytes, b.dtype, b.array_shape, b.external,
                base=args[b.base], view_offset=b.view_offset, strides=b.strides,
            )  # fmt: skip
    records = [nid for nid in order if g.node(nid).kind is NodeKind.EventRecord]
    event_of = {nid: k for k, nid in enumerate(records)}
    count: dict[int, int] = {}
    steps = []
    for i, nid in enumerate(order):
        n = g.node(nid)
        s = int(n.stream or 0)
        event = event_of.get(nid) if n.kind is NodeKind.EventRecord else None
        if n.kind is NodeKind.EventWait:
            event = event_of[n.event]
        steps.append(
            PlanStep(
                index=i,
                kind=n.kind,
                node=nid,
                name=n.name,
                stream=StreamId(s),
                position=count.get(s, 0),
                fused_nodes=n.fused_from or (nid,),
                function_name=n.function_name if n.is_kernel else None,
                config=n.config,
                inputs=tuple(args[b] for b in n.inputs),
                outputs=tuple(args[b] for b in n.outputs),
                size_bytes=n.size_bytes,
                memcpy_dir=n.memcpy_dir,
                memset_value=n.memset_value,
                event=event,
                label=n.label,
                depends_on=tuple(sorted(index[p] for p in g.predecessors(nid))),
            )
        )
        count[s] = count.get(s, 0) + 1
    return steps


@settings(max_examples=20, deadline=None)
@given(any_dags(max_nodes=40), st.sampled_from([1, 2, 4]))
def test_lowering_gives_the_plain_steps(g: ComputeGraph, cap: int) -> None:
    pinned = [int(n.stream) for n in g.nodes if n.stream is not None]
    plan = ExecutionPlan.build(g, max_streams=max([cap, *(s + 1 for s in pinned)]))
    assert list(plan.steps) == reference_steps(plan)


@pytest.mark.parametrize("shape", ["layered", "transformer"])
def test_lowering_2k_gives_the_plain_steps(shape: str) -> None:
    plan = ExecutionPlan.build(synthetic(2000, shape), max_streams=4)
    assert plan.event_count > 0
    assert list(plan.steps) == reference_steps(plan)


def test_carried_node_rules_still_check_new_nodes() -> None:
    g = quick_start()
    verify_graph(g)
    bad = GraphNode(g.next_node_id(), "bad", NodeKind.KernelLaunch)  # no launch config
    h = g.with_changes(nodes=[*g.nodes, bad])
    carry_node_rules(g, h)
    with pytest.raises(InvalidArgument, match="needs a KernelConfig"):
        verify_graph(h)


@settings(max_examples=15, deadline=None)
@given(any_dags(max_nodes=40), st.sampled_from([2, 4]))
def test_streamed_graph_verifies_as_if_checked_from_scratch(g: ComputeGraph, cap: int) -> None:
    pinned = [int(n.stream) for n in g.nodes if n.stream is not None]
    fused = fuse(g).graph
    verify_graph(fused)
    streamed = assign_streams(fused, max_streams=max([cap, *(s + 1 for s in pinned)])).graph
    assert streamed._cache.get("node_rules_of")  # the carried verdict is used
    verify_graph(streamed)
    verify_graph(fresh(streamed))  # every rule checked on every node: the same verdict


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["layered", "transformer"]),
    st.integers(0, 10**6),
    st.sampled_from(["index", "stream", "position", "event", "drop", "swap", "node", "none"]),
)
def test_structure_sweep_agrees_with_the_walk(shape: str, seed: int, how: str) -> None:
    """The vectorised structure check accepts exactly the plans the step-by-step walk
    accepts (the walk names the first broken step, so it runs only on a rejection)."""
    plan = ExecutionPlan.build(synthetic(120, shape, seed=seed % 7), max_streams=4)
    steps = list(plan.steps)
    k = seed % len(steps)
    st_ = steps[k]
    if how == "index":
        steps[k] = dataclasses.replace(st_, index=st_.index + 1)
    elif how == "stream":
        steps[k] = dataclasses.replace(st_, stream=StreamId((int(st_.stream) + 1) % 5))
    elif how == "position":
        steps[k] = dataclasses.replace(st_, position=st_.position + 1)
    elif how == "event":
        evs = [i for i, s in enumerate(steps) if s.event is not None]
        if evs:
            i = evs[seed % len(evs)]
            steps[i] = dataclasses.replace(
                steps[i], event=(steps[i].event + 1) % (plan.event_count + 1)
            )
    elif how == "drop":
        steps = [dataclasses.replace(s, index=i) for i, s in enumerate(steps[:k] + steps[k + 1 :])]
    elif how == "swap" and k + 1 < len(steps):
        a, b = steps[k], steps[k + 1]
        steps[k], steps[k + 1] = (
            dataclasses.replace(b, index=k),
            dataclasses.replace(a, index=k + 1),
        )
    elif how == "node":
        steps[k] = dataclasses.replace(st_, node=steps[(k + 1) % len(steps)].node)
    bad = dataclasses.replace(plan, steps=tuple(steps))
    try:
        _find_structure_error(bad)
        walk_ok = True
    except InvalidPlan:
        walk_ok = False
    assert _structure_holds(bad) == walk_ok
