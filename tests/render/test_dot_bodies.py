"""graph_dot draws the bodies of child graph and conditional nodes as graphviz clusters."""

from __future__ import annotations

import re
import warnings

import pytest
from strategies import build_control_graph

from oxiwork.render.dot import graph_dot, to_svg


def bodies(graph):
    """(body, its holder) for every body graph, nested ones included."""
    for n in graph.nodes:
        for b in n.bodies:
            yield b, n
            yield from bodies(b)


@pytest.mark.parametrize("seed", range(6))
def test_one_cluster_per_body_holding_its_nodes(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g, _ = build_control_graph(seed, 6)
    text = graph_dot(g, legend=False)
    found = list(bodies(g))
    assert len(re.findall(r"subgraph cluster_n", text)) == len(found)
    inner_nodes = sum(len(b.nodes) for b, _ in found)
    inner_edges = sum(len(b.edges) for b, _ in found)
    assert len(re.findall(r"^\s+n\d+(?:_b\d+_\d+)+ \[", text, re.M)) == inner_nodes
    assert len(re.findall(r"^\s+n[\d_b]+ -> n[\d_b]+;$", text, re.M)) == len(g.edges) + inner_edges
    # one dotted edge from each holder into each of its bodies
    assert text.count("style=dotted") == len(found)
    if found:
        assert "compound=true" in text
        assert "<svg" in to_svg(text)


def test_plain_graphs_have_no_clusters():
    from oxiwork.examples import quick_start

    text = graph_dot(quick_start(), legend=False)
    assert "cluster_n" not in text and "compound" not in text


def test_memory_chart_marks_alloc_and_free_nodes():
    from oxiwork import ExecutionPlan, GraphBuilder, MemcpyDir, NodeKind
    from oxiwork.render.figures import memory

    b = GraphBuilder()
    x = b.alloc_buffer("x", 4096)
    ids = [b.add_memcpy("up", MemcpyDir.HostToDevice, 4096, dst=x)]
    for i in range(3):
        t = b.alloc_buffer(f"t{i}", 4096)
        ids.append(b.add_mem_alloc(f"alloc t{i}", t))
        ids.append(b.add_kernel("tanh", 1, 256).inputs([x]).outputs([t]).finish())
        ids.append(b.add_kernel("add", 1, 256).inputs([x, t]).outputs([x]).finish())
        ids.append(b.add_mem_free(f"free t{i}", t))
    ids.append(b.add_memcpy("down", MemcpyDir.DeviceToHost, 4096, src=x))
    b.chain(ids)
    plan = ExecutionPlan.build(b.build())
    ax = memory(plan).axes[0]
    marks = {
        c.get_gid(): c.get_offsets()
        for c in ax.collections
        if c.get_gid() in ("mem_alloc", "mem_free")
    }
    allocs = [s.index for s in plan.steps if s.kind is NodeKind.MemAlloc]
    frees = [s.index + 1 for s in plan.steps if s.kind is NodeKind.MemFree]
    assert sorted(marks["mem_alloc"][:, 0].tolist()) == allocs
    assert sorted(marks["mem_free"][:, 0].tolist()) == frees
    # each buffer's rectangle spans from its alloc to just after its free
    rows = {r["id"]: r for r in plan.memory.to_dict()["buffers"]}
    for s in plan.steps:
        if s.kind is NodeKind.MemAlloc:
            assert rows[int(s.outputs[0].buffer)]["start"] <= s.index
        if s.kind is NodeKind.MemFree:
            assert rows[int(s.outputs[0].buffer)]["end"] >= s.index + 1


@pytest.mark.parametrize("seed", range(4))
def test_cuda_graph_dot_draws_the_lowered_bodies(seed):
    from oxiwork import ExecutionPlan
    from oxiwork.executor.lowering import lower
    from oxiwork.render.dot import cuda_graph_dot

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        desc = lower(ExecutionPlan.build(build_control_graph(seed, 6)[0]))

    def count(nodes):
        return sum(len(n.bodies) + sum(count(b.nodes) for b in n.bodies) for n in nodes)

    text = cuda_graph_dot(desc)
    assert text.count("subgraph cluster_g") == count(desc.nodes)
    assert "<svg" in to_svg(text)
