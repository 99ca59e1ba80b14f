"""ComputeGraph: validation, queries, JSON round trip, networkx and DOT export."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir, NodeId, NodeKind
from oxiwork.error import (
    CycleError,
    GraphError,
    InvalidArgument,
    MalformedFile,
    UnknownBuffer,
    UnknownNode,
    UnorderedAccess,
)
from oxiwork.node import Buffer, BufferId, GraphNode
from oxiwork.verify import verify
from tests.strategies import any_dags, build_dag, dag_edges, rich_graphs


def _small() -> ComputeGraph:
    b = GraphBuilder()
    x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
    k = b.add_kernel("relu", 1, 16).inputs([x]).outputs([y]).params(alpha=0.5).finish()
    down = b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=y)
    b.chain([up, k, down])
    return b.build()


def _dict() -> dict:
    return _small().to_dict()


class TestValidation:
    def test_raises_cycle_names_it(self) -> None:
        nodes = [GraphNode(NodeId(i), f"n{i}", NodeKind.Barrier) for i in range(3)]
        edges = [(NodeId(0), NodeId(1)), (NodeId(1), NodeId(2)), (NodeId(2), NodeId(1))]
        with pytest.raises(CycleError, match=r"cycle: 'n1' -> 'n2' -> 'n1'") as e:
            ComputeGraph(tuple(nodes), (), tuple(edges))
        assert e.value.cycle == ("n1", "n2")

    def test_raises_cycle_upstream_of_a_sink(self) -> None:
        # Kahn's algorithm leaves a sink fed by a cycle unreleased too; the cycle search
        # started at the lowest unreleased node and walked forwards, so a sink there
        # crashed it with StopIteration (found by the mutation test below: an edge 5 -> 6
        # of a file edited into 5 -> 0).
        nodes = [GraphNode(NodeId(i), f"n{i}", NodeKind.Barrier) for i in range(4)]
        edges = [(1, 2), (2, 3), (3, 1), (3, 0)]  # node 0 is the sink
        with pytest.raises(CycleError, match=r"cycle: 'n1' -> 'n2' -> 'n3' -> 'n1'"):
            ComputeGraph(tuple(nodes), (), tuple((NodeId(a), NodeId(b)) for a, b in edges))

    def test_raises_self_loop(self) -> None:
        n = GraphNode(NodeId(0), "solo", NodeKind.Barrier)
        with pytest.raises(CycleError, match=r"'solo' depends on itself"):
            ComputeGraph((n,), (), ((NodeId(0), NodeId(0)),))

    def test_raises_unknown_edge_end(self) -> None:
        n = GraphNode(NodeId(0), "a", NodeKind.Barrier)
        with pytest.raises(UnknownNode, match=r"names node id 5, which is not in this graph"):
            ComputeGraph((n,), (), ((NodeId(0), NodeId(5)),))

    def test_raises_unknown_buffer(self) -> None:
        n = GraphNode(NodeId(0), "k", NodeKind.Memset, outputs=(BufferId(3),), size_bytes=4)
        with pytest.raises(UnknownBuffer, match=r"uses buffer id 3, which is not in this graph"):
            ComputeGraph((n,), (), ())

    def test_raises_duplicate_node_id(self) -> None:
        a, b = (GraphNode(NodeId(0), s, NodeKind.Barrier) for s in "ab")
        with pytest.raises(InvalidArgument, match=r"node id 0 is used twice"):
            ComputeGraph((a, b), (), ())

    def test_raises_duplicate_buffer_names(self) -> None:
        bufs = (Buffer(BufferId(0), "x", 4), Buffer(BufferId(1), "x", 4))
        with pytest.raises(InvalidArgument, match=r"two buffers are named 'x'"):
            ComputeGraph((), bufs, ())

    def test_raises_unknown_queries(self) -> None:
        g = _small()
        with pytest.raises(UnknownNode, match=r"no node with id NodeId\(42\)"):
            g.node(NodeId(42))
        with pytest.raises(UnknownBuffer, match=r"no buffer with id BufferId\(9\)"):
            g.buffer(BufferId(9))
        with pytest.raises(UnknownBuffer, match=r"no buffer named 'nope'; buffers are: 'x', 'y'"):
            g.buffer_by_name("nope")


class TestQueries:
    def test_small(self) -> None:
        g = _small()
        up, k, down = g.node_ids
        assert g.sources() == (up,) and g.sinks() == (down,)
        assert g.successors(up) == (k,) and g.predecessors(down) == (k,)
        assert g.readers(BufferId(0)) == (k,) and g.writers(BufferId(1)) == (k,)
        assert g.topological_order() == (up, k, down)
        assert g.next_node_id() == NodeId(3) and g.next_buffer_id() == BufferId(2)
        assert [n.name for n in g.kernels()] == ["relu"]

    @settings(max_examples=100, deadline=None)
    @given(g=any_dags(max_nodes=40))
    def test_dense_matches_edges(self, g: ComputeGraph) -> None:
        d = g.dense()
        assert d.ids == g.node_ids == tuple(n.id for n in g.nodes)
        assert sorted((d.ids[a], d.ids[b]) for a, s in enumerate(d.succ) for b in s) == list(
            g.edges
        )
        rank = {p: i for i, p in enumerate(d.topo)}
        assert sorted(rank) == list(range(len(d.ids)))
        assert all(rank[d.pos[a]] < rank[d.pos[b]] for a, b in g.edges)

    def test_dense_view_is_read_only(self) -> None:
        # The view is cached and shared: nobody may change what the next caller sees.
        g = _small()
        d = g.dense()
        with pytest.raises(AttributeError):
            d.succ[0].clear()  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            d.pos[d.ids[0]] = 5  # type: ignore[index]
        with pytest.raises(AttributeError):
            d.topo.reverse()  # type: ignore[attr-defined]
        assert isinstance(d.pred, tuple) and all(isinstance(p, tuple) for p in d.pred)
        assert g.successors(g.node_ids[0]) == (g.node_ids[1],)
        assert g.dense() is d

    def test_pickle_and_copy_rebuild_the_graph(self) -> None:
        import copy
        import pickle

        g = _small()
        g.check_ordering()
        for back in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g), copy.copy(g)):
            assert back == g and back is not g
            assert back.dense() is not g.dense() and back.dense() == g.dense()


class TestEdgePolicy:
    """Edges are the dependency relation: a graph whose edges leave two accesses of a
    buffer unordered is refused when loaded or edited, never silently run."""

    def test_raises_json_without_edges(self) -> None:
        from oxiwork.examples import quick_start

        data = quick_start().to_dict()
        data["edges"] = []
        with pytest.raises(UnorderedAccess) as e:
            ComputeGraph.from_dict(data)
        assert str(e.value).startswith(
            "buffer 'input' is written by 'upload' (node 0) and read by 'relu' (node 1), but "
            "no path of edges leads from one to the other"
        )
        assert "add the edge 'upload' -> 'relu' ((0, 1) in edges" in str(e.value)
        assert (e.value.buffer, e.value.first_name, e.value.second_name) == (
            "input",
            "upload",
            "relu",
        )
        with pytest.raises(UnorderedAccess, match="GraphBuilder, which adds every data edge"):
            ComputeGraph.from_json(json.dumps(data))

    def test_raises_with_changes_dropping_a_data_edge(self) -> None:
        from oxiwork.examples import quick_start

        g = quick_start()
        relu, scale = (next(n.id for n in g.nodes if n.name == x) for x in ("relu", "scale"))
        with pytest.raises(UnorderedAccess) as e:
            g.with_changes(edges=[x for x in g.edges if x != (relu, scale)])
        assert str(e.value).startswith(
            "buffer 'mid' is written by 'relu' (node 1) and read by 'scale' (node 2), but no "
            "path of edges leads from one to the other"
        )
        assert e.value.missing == "edge 'relu' -> 'scale'" and not e.value.in_plan

    def test_a_path_is_enough(self) -> None:
        # relu -> scale replaced by relu -> barrier -> scale: still ordered.
        b = GraphBuilder()
        x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
        up = b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        k = b.add_kernel("relu", 1, 16).inputs([x]).outputs([y]).finish()
        bar = b.add_barrier("bar")
        down = b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=y)
        b.chain([up, k, bar, down])
        g = b.build()
        edges = [e for e in g.edges if e != (k, down)]
        assert (k, down) in g.edges and (k, bar) in g.edges
        g.with_changes(edges=edges).check_ordering()

    def test_write_write_and_read_write_need_an_order(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64)
        s0 = b.add_memset("s0", 64, 0, dst=x)
        k = b.add_kernel("relu", 1, 16).inputs([x]).outputs([b.alloc_buffer("y", 64)]).finish()
        s1 = b.add_memset("s1", 64, 1, dst=x)
        g = b.build()
        assert {(s0, k), (k, s1), (s0, s1)} <= set(g.edges)
        with pytest.raises(UnorderedAccess, match=r"read by 'relu' .* and written by 's1'"):
            g.with_changes(edges=[e for e in g.edges if e != (k, s1)])
        # Without the read in between (nor its edges), the two writes need their own edge.
        nodes = [n.replace(inputs=()) if n.id == k else n for n in g.nodes]
        edges = [e for e in g.edges if k not in e]
        assert g.with_changes(nodes=nodes, edges=edges).check_ordering() is None
        with pytest.raises(UnorderedAccess, match=r"written by 's0' .* and written by 's1'"):
            g.with_changes(nodes=nodes, edges=[e for e in edges if e != (s0, s1)])

    @settings(max_examples=100, deadline=None)
    @given(g=rich_graphs())
    def test_built_graphs_are_ordered(self, g: ComputeGraph) -> None:
        g.check_ordering()
        assert ComputeGraph(g.nodes, g.buffers, g.edges).with_changes() == g


class TestJson:
    @settings(max_examples=300, deadline=None)
    @given(g=rich_graphs())
    def test_round_trip_rich(self, g: ComputeGraph) -> None:
        text = g.to_json()
        back = ComputeGraph.from_json(text)
        assert back == g
        assert back.to_json() == text

    @settings(max_examples=100, deadline=None)
    @given(g=any_dags(max_nodes=40))
    def test_round_trip_shapes(self, g: ComputeGraph) -> None:
        assert ComputeGraph.from_json(g.to_json(indent=1)) == g

    def test_raises_not_json(self) -> None:
        with pytest.raises(MalformedFile, match=r"not valid JSON"):
            ComputeGraph.from_json("{nodes: [")

    def test_raises_not_an_object(self) -> None:
        with pytest.raises(MalformedFile, match=r"graph: expected an object, got list"):
            ComputeGraph.from_json("[]")

    def test_raises_wrong_format(self) -> None:
        d = _dict() | {"format": "other"}
        with pytest.raises(MalformedFile, match=r"graph.format is 'other'"):
            ComputeGraph.from_dict(d)

    def test_raises_wrong_version(self) -> None:
        d = _dict() | {"version": 99}
        with pytest.raises(
            MalformedFile, match=r"graph.version is 99; this oxiwork reads version 1"
        ):
            ComputeGraph.from_json(json.dumps(d))

    def test_raises_missing_field(self) -> None:
        d = _dict()
        del d["nodes"][1]["kind"]
        with pytest.raises(MalformedFile, match=r"graph.nodes\[1\]: missing field 'kind'"):
            ComputeGraph.from_dict(d)

    def test_raises_wrong_type(self) -> None:
        d = _dict()
        d["buffers"][0]["size_bytes"] = "64"
        with pytest.raises(
            MalformedFile, match=r"graph.buffers\[0\]: size of buffer 'x' must be an int, got '64'"
        ):
            ComputeGraph.from_dict(d)

    def test_raises_bool_for_int(self) -> None:
        d = _dict()
        d["nodes"][0]["size_bytes"] = True
        with pytest.raises(
            MalformedFile, match=r"graph.nodes\[0\]: size of memcpy 'up' must be an int, got True"
        ):
            ComputeGraph.from_dict(d)

    def test_raises_unknown_kind(self) -> None:
        d = _dict()
        d["nodes"][1]["kind"] = "teleport"
        with pytest.raises(MalformedFile, match=r"graph.nodes\[1\].kind: unknown value 'teleport'"):
            ComputeGraph.from_dict(d)

    def test_raises_unknown_memcpy_dir(self) -> None:
        d = _dict()
        d["nodes"][0]["memcpy_dir"] = "sideways"
        with pytest.raises(MalformedFile, match=r"unknown value 'sideways'; expected one of 'h2d'"):
            ComputeGraph.from_dict(d)

    def test_raises_unknown_dtype(self) -> None:
        d = _dict()
        d["buffers"][0]["dtype"] = "complex7"
        with pytest.raises(MalformedFile, match=r"unknown dtype 'complex7'"):
            ComputeGraph.from_dict(d)

    def test_raises_bad_edge(self) -> None:
        d = _dict()
        d["edges"].append([0, "1"])
        with pytest.raises(
            MalformedFile, match=r"graph.edges\[2\]: node id must be an int, got '1'"
        ):
            ComputeGraph.from_dict(d)

    def test_raises_bad_config(self) -> None:
        d = _dict()
        d["nodes"][1]["config"]["block"] = [2048, 1, 1]
        with pytest.raises(MalformedFile, match=r"block.x is 2048; CUDA allows at most 1024"):
            ComputeGraph.from_dict(d)

    def test_raises_zero_size(self) -> None:
        d = _dict()
        d["buffers"][1]["size_bytes"] = 0
        with pytest.raises(
            MalformedFile, match=r"graph.buffers\[1\]: size of buffer 'y' must be > 0, got 0"
        ):
            ComputeGraph.from_dict(d)

    def test_raises_bad_param(self) -> None:
        d = _dict()
        d["nodes"][1]["params"] = {"alpha": [1, 2]}
        with pytest.raises(
            MalformedFile, match=r"parameter 'alpha' of 'relu' must be a number, str or bool"
        ):
            ComputeGraph.from_dict(d)

    def test_cycle_in_file_is_rejected(self) -> None:
        d = _dict()
        d["edges"].append([2, 0])
        with pytest.raises(CycleError, match=r"cycle"):
            ComputeGraph.from_dict(d)


class TestExport:
    def test_to_networkx(self) -> None:
        g = build_dag(*dag_edges("diamond", 9, seed=4), seed=4)
        h = g.to_networkx()
        assert isinstance(h, nx.DiGraph) and nx.is_directed_acyclic_graph(h)
        assert sorted(h.nodes) == list(g.node_ids) and sorted(h.edges) == list(g.edges)
        for n in g.nodes:
            assert h.nodes[n.id]["name"] == n.name and h.nodes[n.id]["node"] is n
            assert h.nodes[n.id]["kind"] == n.kind.value

    def test_to_dot_is_the_renderers_dot(self) -> None:
        # One DOT writer: hostile names are tested in tests/render/test_dot.py.
        from oxiwork.examples import quick_start
        from oxiwork.render.dot import graph_dot

        g = quick_start()
        assert g.to_dot() == graph_dot(g) and g.to_dot("level") == graph_dot(g, color="level")


# ---------------------------------------------------------------------------------------
# Malformed files: any mutation of a valid file loads into a valid graph or is refused
# with a GraphError; it never raises anything else (a KeyError, TypeError... would crash
# a notebook cell with no hint of what is wrong in the file).
_JUNK = [None, True, False, 0, -1, 1.5, 2**70, float("nan"), "", "x", "kernel", [], [1], {}]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _mutate(doc, path, how, junk):
    import copy

    doc = copy.deepcopy(doc)
    if not path:
        return junk
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "replace":
        parent[last] = junk
    elif how == "delete":
        del parent[last]
    else:  # duplicate a list element / add an unknown key
        if isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        else:
            parent[f"{last}_extra"] = junk
    return doc


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    how=st.sampled_from(["replace", "delete", "duplicate"]),
    junk=st.sampled_from(_JUNK),
)
def test_mutated_files_load_or_are_refused_cleanly(data, how, junk) -> None:
    doc = rich_example_dict()
    paths = list(_paths(doc))
    path = data.draw(st.sampled_from(paths))
    if how == "delete" and not path:
        how = "replace"
    bad = _mutate(doc, path, how, junk)
    try:
        text = json.dumps(bad, allow_nan=True)
    except (TypeError, ValueError):
        return
    try:
        g = ComputeGraph.from_json(text)
    except GraphError:
        return
    verify(g)  # whatever loads must be a valid graph


def rich_example_dict() -> dict:
    from oxiwork.examples import transformer_block

    return transformer_block(1, tokens=2, d_model=4, d_ff=8).to_dict()
