"""The speed-ups of the stream and memory passes and of the plan lowering (issue 14) change
no plan: what a pass hands on through a graph's caches (costs, bound programs, checked
parts) is what a graph built from scratch from the same parts computes, and the plans made
from it are the same: the same streams, events, offsets and arena."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.cost import node_costs
from oxiwork.examples import synthetic
from oxiwork.graph import ComputeGraph, check_buffer
from oxiwork.ops.program import _BOUND, bind, share_bound
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams
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
