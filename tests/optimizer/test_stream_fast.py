"""The fast stream pass (issue 14) decides as the pass did before it.

``tests/optimizer/stream_before.py`` keeps the functions the speed-up re-implemented as
they were; on random graphs (with pins, existing events, costs and every path of the pass:
chains, list scheduling, merged chains, the greedy cover above the exact limit) both must
give the same graph, streams, events, issue order and makespan.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder
from oxiwork.cost import node_costs
from oxiwork.examples import random_op_dag, synthetic
from oxiwork.graph import ComputeGraph
from oxiwork.node import GraphNode, NodeId, NodeKind, StreamId
from oxiwork.optimizer import stream
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.stream import assign_streams, issue_order
from tests.optimizer import stream_before
from tests.strategies import any_dags, costs_for, rich_graphs


def fresh(g: ComputeGraph) -> ComputeGraph:
    return ComputeGraph(list(g.nodes), list(g.buffers), list(g.edges))


def assert_same_pass(graph: ComputeGraph, cap: int, costs: dict | None = None) -> None:
    pinned = [int(n.stream) for n in graph.nodes if n.stream is not None]
    cap = max([cap, *(s + 1 for s in pinned)])  # a cap below a pin is refused
    new = assign_streams(graph, max_streams=cap, costs=costs)
    old = stream_before.assign_streams(fresh(graph), max_streams=cap, costs=costs)
    assert new.graph == old.graph
    a, b = new.artefacts["streams"], old.artefacts["streams"]
    assert a.to_dict() | {"seconds": 0} == b.to_dict() | {"seconds": 0}
    assert a.stream_of == b.stream_of
    assert list(a.stream_of) == list(b.stream_of)  # in the same (id) order
    assert (a.events, a.order, a.method, a.makespan) == (b.events, b.order, b.method, b.makespan)
    assert issue_order(new.graph) == stream_before.issue_order(fresh(new.graph))
    # with the default costs, that order was remembered by the pass (not walked again)
    assert (stream._ISSUE_POSITIONS in new.graph._cache) == (costs is None)
    # costs handed on to the new graph, and the next pass's issue order, as before
    assert node_costs(new.graph) == node_costs(old.graph)


@settings(max_examples=60, deadline=None)
@given(any_dags(max_nodes=50), st.integers(1, 7))  # over 4: the general clock join
def test_random_dags(graph: ComputeGraph, cap: int) -> None:
    assert_same_pass(graph, cap)


@settings(max_examples=30, deadline=None)
@given(any_dags(max_nodes=40).flatmap(lambda g: st.tuples(st.just(g), costs_for(g))))
def test_random_dags_with_costs(graph_costs: tuple) -> None:
    graph, costs = graph_costs
    for cap in (1, 2, 3):
        assert_same_pass(graph, cap, costs)


@settings(max_examples=40, deadline=None)
@given(rich_graphs(), st.integers(1, 4))
def test_pins_and_existing_events(graph: ComputeGraph, cap: int) -> None:
    assert_same_pass(graph, cap)
    # a second run sees the first's events and streams as pins
    again = assign_streams(graph, max_streams=max(cap, 4)).graph
    assert_same_pass(again, 4)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1_000_000), st.integers(2, 80), st.integers(1, 4))
def test_fused_op_dags(seed: int, n: int, cap: int) -> None:
    assert_same_pass(fuse(random_op_dag(seed, n)).graph, cap)


@settings(max_examples=20, deadline=None)
@given(any_dags(max_nodes=60), st.integers(1, 4))
def test_greedy_cover_above_the_exact_limit(graph: ComputeGraph, cap: int) -> None:
    old = stream.EXACT_CHAIN_LIMIT
    stream.EXACT_CHAIN_LIMIT = 0  # the path taken by graphs over 20k nodes
    try:
        assert_same_pass(graph, cap)
    finally:
        stream.EXACT_CHAIN_LIMIT = old


@settings(max_examples=40, deadline=None)
@given(rich_graphs(), st.integers(1, 4))
def test_remembered_issue_positions_are_the_walk(graph: ComputeGraph, cap: int) -> None:
    # pins and existing events included; the remembered order is handed out as a copy
    cap = max([cap, *(int(n.stream) + 1 for n in graph.nodes if n.stream is not None)])
    h = assign_streams(graph, max_streams=cap).graph
    kept = h._cache.pop(stream._ISSUE_POSITIONS)
    assert not kept.flags.writeable
    walked = stream.issue_positions(h)
    assert walked.tolist() == kept.tolist()
    h._cache[stream._ISSUE_POSITIONS] = kept
    got = stream.issue_positions(h)
    assert got.tolist() == kept.tolist() and got is not kept and got.flags.writeable


def test_issue_positions_not_remembered_for_a_wait_without_its_edge() -> None:
    # an unverified input whose wait has lost the edge from its record: the pass's walk
    # would order the wait after the record, the predecessors' walk need not
    b = GraphBuilder()
    x, r = b.add_barrier("x"), b.add_event_record("r")
    w = b.add_event_wait("w", r)
    b.dep(x, r)
    g = b.build()
    g = g.with_changes(edges=[e for e in g.edges if e != (r, w)])
    h = assign_streams(g).graph
    assert stream._ISSUE_POSITIONS not in h._cache
    assert sorted(stream.issue_positions(h).tolist()) == list(range(len(h.nodes)))


@pytest.mark.parametrize("shape", ["chain", "layered", "transformer"])
def test_synthetic_3k(shape: str) -> None:
    g = fuse(synthetic(3000, shape)).graph
    assert_same_pass(g, 4)
    assert_same_pass(g, 2)


@settings(max_examples=30, deadline=None)
@given(rich_graphs(), st.integers(0, 3))
def test_restreamed_nodes_are_replaces(graph: ComputeGraph, s: int) -> None:
    # every field of every node (fn, which equality skips, included) as replace sets it
    sid = StreamId(s)
    new = stream._copy_nodes(list(graph.nodes), {"stream": [sid] * len(graph.nodes)})
    for n, m in zip(graph.nodes, new, strict=True):
        ref = n.replace(stream=sid)
        assert type(m) is GraphNode and m == ref
        assert all(getattr(m, f.name) is getattr(ref, f.name) for f in dataclasses.fields(ref))


def test_copied_nodes_are_replaces_with_two_fields() -> None:
    # fused and plain nodes, two fields varying per node
    nodes = list(fuse(synthetic(3000, "transformer")).graph.nodes)
    sids = [StreamId(p % 3) for p in range(len(nodes))]
    names = [f"n{p}" for p in range(len(nodes))]
    new = stream._copy_nodes(nodes, {"stream": sids, "name": names})
    assert len(new) == len(nodes)
    for n, m, sid, name in zip(nodes, new, sids, names, strict=True):
        ref = n.replace(stream=sid, name=name)
        assert type(m) is GraphNode and m == ref
        assert all(getattr(m, f.name) is getattr(ref, f.name) for f in dataclasses.fields(ref))


def test_copied_events_are_replaces_of_the_template() -> None:
    # the inserted events: five fields set on the one template node, and the copier reused
    ids = [NodeId(10 + k) for k in range(4)]
    changes = {
        "id": ids,
        "name": [f"e{k}" for k in range(4)],
        "kind": [NodeKind.EventRecord, NodeKind.EventWait] * 2,
        "stream": [StreamId(k % 2) for k in range(4)],
        "event": [None, ids[0], None, ids[2]],
    }
    for _ in range(2):
        new = stream._copy_nodes([stream._EVENT] * 4, changes)
        for k, m in enumerate(new):
            ref = stream._EVENT.replace(**{f: v[k] for f, v in changes.items()})
            assert type(m) is GraphNode and m == ref
            assert all(getattr(m, f.name) is getattr(ref, f.name) for f in dataclasses.fields(ref))
    with pytest.raises(ValueError, match="no field"):
        stream._copy_nodes([stream._EVENT], {"colour": ["red"]})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 50), min_size=4, max_size=4), min_size=1, max_size=6))
def test_unrolled_clock_join_is_the_join(clocks: list[list[int]]) -> None:
    prev, *rest = clocks
    for ps in ([], list(range(len(rest))), list(range(len(rest)))[::-1][:2]):
        got = stream._join4(prev, ps, rest)
        want = [max(x) for x in zip(prev, *(rest[u] for u in ps), strict=True)]
        assert got == stream._join(prev, ps, rest) == want
        assert got is not prev  # a new clock, never the previous one
