"""The graph's fast construction checks accept exactly what the full checks accept.

``ComputeGraph`` validates through a fast path (whole-graph set and array operations) that
only ever answers "valid"; anything else takes the full, message-giving checks. These
tests make random edits to random graphs, good and bad (unknown ends, self-loops, cycles,
repeated ids and names, unknown buffers and events, junk edge ends), and compare the
verdict, the error and the cached views with the fast path on and off
(``oxiwork.graph._FAST_VALIDATION``), for plain construction and for ``with_changes``
(whose ordering may be carried over from the graph it changes).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oxiwork.graph as graph_mod
from oxiwork.graph import ComputeGraph
from oxiwork.node import Buffer, BufferId, GraphNode, NodeId, NodeKind
from tests.strategies import any_dags, rich_graphs


def _node_ids(g: ComputeGraph) -> list[int]:
    return [int(n.id) for n in g.nodes]


EDITS = (
    "none",
    "drop_edge",
    "add_edge",
    "reverse_edge",
    "self_loop",
    "unknown_end",
    "junk_end",
    "dup_edge",
    "dup_node_id",
    "dup_buffer_name",
    "dup_buffer_id",
    "unknown_buffer",
    "drop_buffer",
    "new_node",
    "wait_bad_event",
    "drop_node",
    "renumber",
    "shuffle",
)


def _edit(g: ComputeGraph, kind: str, data: Any) -> tuple[list[Any], list[Any], list[Any]]:
    nodes, buffers, edges = list(g.nodes), list(g.buffers), list(g.edges)
    ids = _node_ids(g) or [0]
    pick = data.draw(st.sampled_from(ids), label="node")
    pick2 = data.draw(st.sampled_from(ids), label="node2")
    if kind == "drop_edge" and edges:
        edges.pop(data.draw(st.integers(0, len(edges) - 1)))
    elif kind == "add_edge":
        edges.append((NodeId(pick), NodeId(pick2)))
    elif kind == "reverse_edge" and edges:
        a, b = edges[data.draw(st.integers(0, len(edges) - 1))]
        edges.append((b, a))
    elif kind == "self_loop":
        edges.append((NodeId(pick), NodeId(pick)))
    elif kind == "unknown_end":
        edges.append((NodeId(pick), NodeId(max(ids) + 5)))
    elif kind == "junk_end":
        junk = data.draw(
            st.sampled_from([float(pick), pick + 0.5, True, -1, 2**40, 2**70, "a", None])
        )
        edges.append((junk, NodeId(pick2)) if data.draw(st.booleans()) else (NodeId(pick), junk))
    elif kind == "dup_edge" and edges:
        a, b = edges[0]
        edges.append((int(a), int(b)))  # equal to a NodeId pair
    elif kind == "dup_node_id" and nodes:
        nodes.append(nodes[0].replace(name="twin"))
    elif kind == "dup_buffer_name" and buffers:
        b = buffers[0]
        buffers.append(Buffer(BufferId(int(buffers[-1].id) + 1), b.name, 4, "float32"))
    elif kind == "dup_buffer_id" and buffers:
        buffers.append(Buffer(buffers[0].id, "other_name", 4, "float32"))
    elif kind == "unknown_buffer" and nodes:
        k = data.draw(st.integers(0, len(nodes) - 1))
        bad = BufferId(int(buffers[-1].id) + 9 if buffers else 9)
        nodes[k] = nodes[k].replace(outputs=(*nodes[k].outputs, bad))
    elif kind == "drop_buffer" and buffers:
        buffers.pop(data.draw(st.integers(0, len(buffers) - 1)))
    elif kind == "new_node":
        nid = NodeId(max(ids) + 1)
        nodes.append(GraphNode(nid, "extra", NodeKind.Barrier))
        edges.append((NodeId(pick), nid))
    elif kind == "wait_bad_event":
        nid = NodeId(max(ids) + 1)
        event = data.draw(st.sampled_from([None, NodeId(pick), NodeId(max(ids) + 7)]))
        nodes.append(GraphNode(nid, "w", NodeKind.EventWait, event=event))
    elif kind == "drop_node" and len(nodes) > 1:
        nodes.pop(data.draw(st.integers(0, len(nodes) - 1)))
    elif kind == "renumber" and nodes:
        k = data.draw(st.integers(0, len(nodes) - 1))
        nodes[k] = nodes[k].replace(id=NodeId(max(ids) + 3))
    elif kind == "shuffle":
        nodes = data.draw(st.permutations(nodes))
        edges = data.draw(st.permutations(edges))
    return nodes, buffers, edges


def _outcome(make: Any) -> Any:
    """What a construction gives: the error (type and message) or the graph's views."""
    try:
        g = make()
    except Exception as e:  # the verdict itself is compared
        return ("error", type(e), str(e))
    d = g.dense()
    return (
        "ok",
        g.nodes,
        g.buffers,
        g.edges,
        (d.ids, dict(d.pos), d.succ, d.pred, d.topo),
        dict(g._cache["node_index"]),
        dict(g._cache["buf_index"]),
        dict(g._cache["buf_names"]),
        g.topological_order(),
        # the edges' ends by id and position (cached at construction by the fast path,
        # with_changes reading only the edges it appends to the old ones)
        tuple(a.tolist() for a in graph_mod._edges_np(g)),
    )


def _both(make: Any) -> tuple[Any, Any]:
    fast = _outcome(make)
    graph_mod._FAST_VALIDATION = False
    try:
        full = _outcome(make)
    finally:
        graph_mod._FAST_VALIDATION = True
    return fast, full


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class TestFastValidation:
    @_SETTINGS
    @given(g=st.one_of(any_dags(max_nodes=20), rich_graphs()), data=st.data())
    def test_construction_same_verdict(self, g: ComputeGraph, data: Any) -> None:
        for kind in EDITS:  # every edit on every graph drawn
            nodes, buffers, edges = _edit(g, kind, data)
            parts = (tuple(nodes), tuple(buffers), tuple(edges))
            fast, full = _both(lambda parts=parts: ComputeGraph(*parts))
            assert fast == full, kind

    @_SETTINGS
    @given(g=any_dags(max_nodes=20), data=st.data())
    def test_with_changes_same_verdict(self, g: ComputeGraph, data: Any) -> None:
        g.check_ordering()  # with_changes may carry the ordering of a checked graph
        for kind in EDITS:
            nodes, buffers, edges = _edit(g, kind, data)
            parts = {
                "nodes": nodes if data.draw(st.booleans(), label="pass nodes") else None,
                "buffers": buffers if data.draw(st.booleans(), label="pass buffers") else None,
                "edges": edges if data.draw(st.booleans(), label="pass edges") else None,
            }
            # every node vouched for (the stream pass's call): the nodes' values are valid
            # in every edit, so only the structural checks decide, as from scratch
            vouch = parts["nodes"] is not None and data.draw(st.booleans(), label="vouch")
            extra = {"checked_nodes": parts["nodes"]} if vouch else {}
            fast = _outcome(lambda parts=parts, extra=extra: g.with_changes(**parts, **extra))

            def scratch(parts: dict[str, Any] = parts) -> ComputeGraph:  # every check anew
                new = ComputeGraph(
                    *(tuple(getattr(g, k) if v is None else v) for k, v in parts.items())
                )
                new.check_ordering()
                return new

            graph_mod._FAST_VALIDATION = False
            try:
                full = _outcome(scratch)
            finally:
                graph_mod._FAST_VALIDATION = True
            assert fast == full, kind

    @pytest.mark.parametrize("shape", ["layered", "transformer", "chain"])
    def test_passes_take_the_fast_path(self, shape: str, monkeypatch: Any) -> None:
        # The point of the fast path: pass outputs must not fall back to the full checks.
        from oxiwork.examples import synthetic
        from oxiwork.executor.plan import ExecutionPlan

        fell_back = []
        full = ComputeGraph._validate_full

        def spy(self: ComputeGraph, trusted: Any) -> None:
            fell_back.append(len(self.nodes))
            full(self, trusted)

        monkeypatch.setattr(ComputeGraph, "_validate_full", spy)
        ExecutionPlan.build(synthetic(300, shape), max_streams=4)
        assert fell_back == []


@_SETTINGS
@given(g=any_dags(max_nodes=20), data=st.data())
def test_appended_edges_are_with_changes(g: ComputeGraph, data: Any) -> None:
    # The stream pass's call: edges added by position give the graph (and the verdict:
    # cycles, self-loops, orderings) that with_changes gives for the same edge tuples.
    g.check_ordering()
    top = max(_node_ids(g), default=-1)
    new = [
        GraphNode(NodeId(top + 1 + k), f"e{k}", NodeKind.Barrier)
        for k in range(data.draw(st.integers(0, 3)))
    ]
    nodes = data.draw(st.permutations([*g.nodes, *new]))
    by_id = sorted(nodes, key=lambda x: x.id)
    at = st.integers(0, len(nodes) - 1)
    pairs = data.draw(st.lists(st.tuples(at, at), max_size=6))
    src, dst = [a for a, _ in pairs], [b for _, b in pairs]
    edges = [*g.edges, *((by_id[a].id, by_id[b].id) for a, b in pairs)]
    vouch = data.draw(st.booleans())
    checked = {"checked_nodes": nodes} if vouch else {}
    fast = _outcome(lambda: g._with_appended_edges(nodes, src, dst, **checked))
    assert fast == _outcome(lambda: g.with_changes(nodes=nodes, edges=edges, **checked))


def test_appended_edges_refuse_nodes_as_with_changes() -> None:
    # nodes in id order are taken as they are; repeated ids, descending ids and junk get
    # with_changes' verdict
    from oxiwork.examples import quick_start

    g = quick_start()
    first, *rest = g.nodes
    for nodes in ([*g.nodes, first], [first, first, *rest], [*rest, first], [*g.nodes, "x"]):
        fast = _outcome(lambda nodes=nodes: g._with_appended_edges(nodes, [], []))
        assert fast == _outcome(lambda nodes=nodes: g.with_changes(nodes=nodes, edges=g.edges))


def test_appended_edges_must_join_positions() -> None:
    from oxiwork.error import InvalidArgument
    from oxiwork.examples import quick_start

    g = quick_start()
    for src, dst in (([0], [4]), ([-1], [0]), ([0, 1], [2])):
        with pytest.raises(InvalidArgument, match=r"appended edges must join positions 0\.\.3"):
            g._with_appended_edges(g.nodes, src, dst)


def test_with_changes_leaves_no_constructor_note() -> None:
    # the note that the edges extend the old ones is read and dropped by with_changes (it
    # holds the old graph's edges)
    from oxiwork.examples import quick_start

    g = quick_start()
    extra = GraphNode(g.next_node_id(), "mark", NodeKind.Barrier)
    new = g.with_changes(nodes=[*g.nodes, extra], edges=[*g.edges, (g.nodes[0].id, extra.id)])
    assert graph_mod._EXTENDS not in new._cache and graph_mod._TRUSTED not in new._cache
    assert new._cache.get("ordered")
    # nor the note that every node accesses what it did (it holds the old node index)
    moved = g._with_appended_edges([*g.nodes, extra], [0], [4], checked_nodes=[*g.nodes, extra])
    assert graph_mod._SAME_ACCESSES not in moved._cache and moved._cache.get("ordered")


def test_ordering_kept_needs_every_old_edge() -> None:
    # The stream pass's shortcut: a graph that drops an edge ordering two accesses is
    # searched again, and refused.
    from oxiwork.error import UnorderedAccess
    from oxiwork.examples import quick_start

    g = quick_start()
    g.check_ordering()
    extra = GraphNode(g.next_node_id(), "mark", NodeKind.Barrier)
    kept = g.with_changes(nodes=[*g.nodes, extra], edges=[*g.edges, (g.nodes[0].id, extra.id)])
    assert kept._cache.get("ordered")
    with pytest.raises(UnorderedAccess):
        g.with_changes(
            nodes=[*g.nodes, extra],
            edges=[*[e for e in g.edges if e != (1, 2)], (g.nodes[0].id, extra.id)],
        )


@_SETTINGS
@given(g=st.one_of(any_dags(max_nodes=20), rich_graphs()), data=st.data())
def test_contracted_is_with_changes(g: ComputeGraph, data: Any) -> None:
    # The fusion pass's call: groups of nodes replaced by one node each, the edges mapped
    # by position and the ordering carried when the fused nodes' accesses are covered by
    # their members'. The graph and the verdict (cycles from groups a path leaves and
    # re-enters, unknown buffers, unordered accesses) are those of with_changes given the
    # edges mapped one by one, and of the full checks from scratch.
    if data.draw(st.booleans(), label="ordering checked"):
        g.check_ordering()
    ids = _node_ids(g)
    top = max(ids, default=-1)
    shuffled = data.draw(st.permutations(ids), label="order")
    groups: list[list[NodeId]] = []
    while shuffled and len(groups) < 4 and data.draw(st.booleans(), label="another group"):
        size = data.draw(st.integers(1, min(4, len(shuffled))), label="size")
        groups.append([NodeId(x) for x in shuffled[:size]])
        shuffled = shuffled[size:]
    junk = data.draw(st.sampled_from(["none", "unknown member", "overlap", "short"]))
    if junk == "unknown member" and groups:
        groups[0].append(NodeId(top + 50))
    elif junk == "overlap" and len(groups) > 1:
        groups[1].append(groups[0][0])
    by_id = {n.id: n for n in g.nodes}
    fused = []
    for k, group in enumerate(groups):
        members = [by_id[m] for m in group if m in by_id]
        outs = sorted({b for m in members for b in m.outputs})
        ins = sorted({b for m in members for b in (*m.inputs, *m.outputs)})
        outs = data.draw(st.lists(st.sampled_from(outs), unique=True), label="outs") if outs else []
        ins = data.draw(st.lists(st.sampled_from(ins), unique=True), label="ins") if ins else []
        if g.buffers and data.draw(st.booleans(), label="uncovered access"):
            ins.append(data.draw(st.sampled_from(g.buffers), label="extra").id)
        fused.append(
            GraphNode(NodeId(top + 1 + k), f"f{k}", NodeKind.Barrier, inputs=tuple(ins),
                      outputs=tuple(outs))
        )  # fmt: skip
    if junk == "short" and fused:
        fused.pop()
    # (fusion drops the buffers internal to a group; dropping one still used is refused)
    drop = {data.draw(st.sampled_from(g.buffers), label="drop").id} if g.buffers and (
        data.draw(st.integers(0, 3), label="drop one") == 3
    ) else set()  # fmt: skip
    buffers = [b for b in g.buffers if b.id not in drop]

    def contracted() -> ComputeGraph:
        new = g._with_contracted(groups, fused, buffers)
        assert new._cache.get("ordered")  # checked or carried over
        return new

    def mapped() -> ComputeGraph:
        nodes, bufs, edges = graph_mod._contracted_parts(g, groups, fused, buffers)
        return g.with_changes(nodes=nodes, buffers=bufs, edges=edges, checked_nodes=fused)

    fast = _outcome(contracted)
    assert fast == _outcome(mapped)
    graph_mod._FAST_VALIDATION = False
    try:
        nodes, bufs, edges = graph_mod._contracted_parts(g, groups, fused, buffers)
        scratch = ComputeGraph(tuple(nodes), tuple(bufs), tuple(edges))
        scratch.check_ordering()
        full = _outcome(lambda: scratch)
    except Exception as e:  # the verdict itself is compared
        full = ("error", type(e), str(e))
    finally:
        graph_mod._FAST_VALIDATION = True
    assert fast == full
