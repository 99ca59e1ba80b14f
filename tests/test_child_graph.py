"""Child graph nodes: the builder, verify's rules for bodies, the JSON round trip and the
loader's refusals, the cost model."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir, NodeKind
from oxiwork.cost import node_time
from oxiwork.error import GraphError, InvalidArgument, MalformedFile
from oxiwork.reference import evaluate
from oxiwork.validate import MAX_BODY_DEPTH


def two_stage() -> tuple[GraphBuilder, list, object]:
    b = GraphBuilder()
    x, y, z = (b.alloc_buffer(n, 1024) for n in "xyz")
    b.add_memcpy("up", MemcpyDir.HostToDevice, 1024, dst=x)
    inner = b.body()
    inner.add_kernel("relu", 1, 256).inputs([x]).outputs([y]).finish()
    inner.add_kernel("neg", 1, 256).inputs([y]).outputs([z]).finish()
    return b, [x, y, z], inner


def nested(depth: int) -> ComputeGraph:
    b = GraphBuilder()
    x = b.alloc_buffer("x", 64)
    b.add_memset("set", 64, 1, dst=x)
    inner = b.body()
    inner.add_kernel("neg", 1, 16).inputs([x]).outputs([x]).finish()
    for level in range(depth - 1):
        outer = b.body()
        outer.add_child_graph(f"level{level}", inner)
        inner = outer
    b.add_child_graph("top", inner)
    return b.build()


class TestBuilder:
    def test_raises_body_of_another_builder(self):
        b, _, _ = two_stage()
        other = GraphBuilder()
        with pytest.raises(InvalidArgument, match="was not made by this builder's body"):
            b.add_child_graph("c", other.body())

    def test_raises_body_is_not_a_graph(self):
        b, _, _ = two_stage()
        with pytest.raises(InvalidArgument, match="must be a GraphBuilder from body"):
            b.add_child_graph("c", [1, 2])  # type: ignore[arg-type]

    def test_raises_graph_with_foreign_buffers(self):
        b, _, _ = two_stage()
        o = GraphBuilder()
        w = o.alloc_buffer("w", 64)
        o.add_memset("s", 64, 0, dst=w)
        with pytest.raises(InvalidArgument, match="'w', which is not a buffer of this builder"):
            b.add_child_graph("c", o.build())

    def test_node_declares_the_union_of_its_body(self):
        b, (_x, _y, z), inner = two_stage()
        child = b.add_child_graph("block", inner)
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 1024, src=z)
        g = b.build()
        node = g.node(child)
        body = node.bodies[0]
        assert node.kind is NodeKind.ChildGraph
        assert set(node.inputs) == {i for n in body.nodes for i in n.inputs}
        assert set(node.outputs) == {o for n in body.nodes for o in n.outputs}
        # the data edges follow from the declared accesses, as for any node
        assert {(g.node(a).name, g.node(c).name) for a, c in g.edges} == {
            ("up", "block"),
            ("block", "down"),
        }
        assert {bf.name for bf in body.buffers} == {"x", "y", "z"}

    def test_buffers_allocated_in_a_body_belong_to_the_outer_graph(self):
        b, (x, _, _), _ = two_stage()
        inner = b.body()
        tmp = inner.alloc_buffer("tmp", 1024)
        inner.add_kernel("relu", 1, 256).inputs([x]).outputs([tmp]).finish()
        b.add_child_graph("c", inner)
        g = b.build()
        assert g.buffer_by_name("tmp").id == tmp

    def test_values_equal_the_flat_graph(self):
        b, (_x, _y, _z), inner = two_stage()
        b.add_child_graph("block", inner)
        flat = GraphBuilder()
        fx, fy, fz = (flat.alloc_buffer(n, 1024) for n in "xyz")
        flat.add_memcpy("up", MemcpyDir.HostToDevice, 1024, dst=fx)
        flat.add_kernel("relu", 1, 256).inputs([fx]).outputs([fy]).finish()
        flat.add_kernel("neg", 1, 256).inputs([fy]).outputs([fz]).finish()
        data = {"x": np.random.default_rng(0).standard_normal(256).astype(np.float32)}
        got, want = evaluate(b.build(), data), evaluate(flat.build(), data)
        for name in "xyz":
            np.testing.assert_array_equal(got[name], want[name])


class TestVerify:
    def test_raises_event_node_in_body(self):
        b, (_x, _, _), _ = two_stage()
        inner = b.body()
        inner.add_event_record("rec")
        with pytest.raises(InvalidArgument, match="holds the event record 'rec'"):
            b.add_child_graph("c", inner)
            b.build()

    def test_raises_host_copy_in_body(self):
        b, (x, _, _), _ = two_stage()
        inner = b.body()
        inner.add_memcpy("up2", MemcpyDir.HostToDevice, 1024, dst=x)
        b.add_child_graph("c", inner)
        with pytest.raises(InvalidArgument, match="holds the host copy 'up2'"):
            b.build()

    def test_raises_declared_accesses_differ_from_the_body(self):
        b, (_x, y, z), inner = two_stage()
        child = b.add_child_graph("block", inner)
        g = b.build()
        node = g.node(child)
        bad = [n.replace(outputs=(y,)) if n.id == child else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="its bodies read 'x', 'y' and write 'y', 'z'"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()
        assert node.outputs == (y, z)

    def test_raises_body_buffer_not_the_outer_one(self):
        b, (x, _y, _z), inner = two_stage()
        child = b.add_child_graph("block", inner)
        g = b.build()
        body = g.node(child).bodies[0]
        renamed = body.with_changes(
            buffers=[
                bf if bf.id != x else bf.__class__(bf.id, "other", 1024) for bf in body.buffers
            ]
        )
        bad = [n.replace(bodies=(renamed,)) if n.id == child else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="does not hold as the same buffer"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()

    def test_raises_two_bodies(self):
        b, _, inner = two_stage()
        child = b.add_child_graph("block", inner)
        g = b.build()
        body = g.node(child).bodies[0]
        bad = [n.replace(bodies=(body, body)) if n.id == child else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="holds one body graph, not 2"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()

    def test_raises_nesting_too_deep(self):
        nested(MAX_BODY_DEPTH)  # the deepest allowed
        with pytest.raises(InvalidArgument, match=f"nest more than {MAX_BODY_DEPTH} deep"):
            nested(MAX_BODY_DEPTH + 1)

    def test_raises_bodies_on_a_plain_node(self):
        b, _, inner = two_stage()
        child = b.add_child_graph("block", inner)
        g = b.build()
        body = g.node(child).bodies[0]
        bad = [n.replace(bodies=(body,)) if n.name == "up" else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="only child graphs and conditionals"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()


class TestJson:
    def test_round_trip_nested(self):
        for depth in (1, 3, MAX_BODY_DEPTH):
            g = nested(depth)
            again = ComputeGraph.from_json(g.to_json())
            assert again == g
            assert again.to_json() == g.to_json()

    def test_plain_graphs_write_no_body_fields(self):
        b, (x, y, _z), _ = two_stage()
        b.add_kernel("relu", 1, 256).inputs([x]).outputs([y]).finish()
        node = json.loads(b.build().to_json())["nodes"][1]
        assert "bodies" not in node and "cond_kind" not in node

    def test_raises_body_nesting_too_deep_in_a_file(self):
        data = nested(MAX_BODY_DEPTH).to_dict()
        # one more level: wrap the top body in another child graph node
        top = next(n for n in data["nodes"] if n["kind"] == "child_graph")
        top["bodies"] = [
            {"buffers": top["bodies"][0]["buffers"], "nodes": [dict(top)], "edges": []}
        ]
        with pytest.raises(MalformedFile, match="nest"):
            ComputeGraph.from_json(json.dumps(data))

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("bodies", "nope", r"bodies: expected list"),
            ("bodies", [17], r"bodies\[0\]: expected an object"),
            ("bodies", [{"buffers": [], "nodes": []}], r"bodies\[0\]: missing field 'edges'"),
            ("cond_kind", "maybe", r"cond_kind: unknown value 'maybe'"),
            ("max_iterations", -3, r"max_iterations of 'top' must be >= 1"),
            ("condition", "x", r"condition of 'top': buffer id must be an int, got 'x'"),
        ],
    )
    def test_raises_malformed_body_fields(self, field, value, message):
        data = nested(1).to_dict()
        top = next(n for n in data["nodes"] if n["kind"] == "child_graph")
        top[field] = value
        with pytest.raises(MalformedFile, match=message):
            ComputeGraph.from_json(json.dumps(data))

    def test_raises_bad_node_inside_a_body(self):
        data = nested(2).to_dict()
        top = next(n for n in data["nodes"] if n["kind"] == "child_graph")
        top["bodies"][0]["nodes"][0]["bodies"][0]["nodes"][0]["name"] = ""
        with pytest.raises(
            MalformedFile, match=r"bodies\[0\]\.nodes\[0\]\.bodies\[0\]\.nodes\[0\]"
        ):
            ComputeGraph.from_json(json.dumps(data))

    def test_raises_body_edge_to_nowhere(self):
        data = nested(1).to_dict()
        top = next(n for n in data["nodes"] if n["kind"] == "child_graph")
        top["bodies"][0]["edges"] = [[0, 9]]
        with pytest.raises(GraphError, match="names node id 9"):
            ComputeGraph.from_json(json.dumps(data))


def test_cost_is_the_bodys_critical_path():
    b, (_x, _y, _z), inner = two_stage()
    child = b.add_child_graph("block", inner)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = b.build()
    body = g.node(child).bodies[0]
    parts = sum(node_time(body, n) for n in body.nodes)  # a chain: the path is every node
    assert node_time(g, g.node(child)) == pytest.approx(parts)
